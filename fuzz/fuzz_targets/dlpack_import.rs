//! DLPack import of arbitrary `DLManagedTensorVersioned` fields: version, ndim, dtype, device,
//! shape, strides, data pointer and byte offset come from the input. amso's checks
//! (`check_major_version`, `claim`, `MemArray::from_foreign`) must refuse what they cannot
//! wrap with an error, never a panic; what they accept (and the fuzzer can back with real
//! memory) is read element by element, exported again through DLPack and dropped, and the
//! producer's owner must be released exactly once either way.
#![no_main]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use amso_runtime::__private::{
    check_major_version, claim, plan_export, unravel, ArrayObject, DlpackRequest, ManagedTensor,
};
use amso_runtime::{Element, ForeignMemory, MemArray};
use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLTensor};
use libfuzzer_sys::fuzz_target;

const BUFFER: usize = 4096;

/// Reads fields from the input, zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn bytes<const K: usize>(&mut self) -> [u8; K] {
        let mut out = [0u8; K];
        let n = K.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    /// Mostly small values (the interesting ones), sometimes any 64-bit value.
    fn dim(&mut self) -> i64 {
        match self.u8() % 8 {
            0 => i64::from_le_bytes(self.bytes::<8>()),
            1 => -(self.u8() as i64),
            _ => (self.u8() % 9) as i64,
        }
    }
}

/// Counts drops of the producer's owner.
struct Owner(Arc<AtomicUsize>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let major = (input.u8() % 3) as u32;
    let ndim = match input.u8() {
        b @ 0..=200 => (b % 10) as i32,
        b => i32::from_le_bytes([b, input.u8(), input.u8(), input.u8()]),
    };
    let dtype = DLDataType { code: DLDataTypeCode(input.u8() % 8), bits: input.u8(), lanes: (input.u8() % 3) as u16 };
    let device = DLDevice { device_type: DLDeviceType((input.u8() % 16) as u32), device_id: (input.u8() as i8) as i32 };
    let mut shape = [0i64; 8];
    for d in &mut shape {
        *d = input.dim();
    }
    let with_strides = input.u8() % 2 == 1;
    let mut strides = [0i64; 8];
    for s in &mut strides {
        *s = input.dim();
    }
    let byte_offset = match input.u8() % 4 {
        0 => u64::from_le_bytes(input.bytes::<8>()),
        _ => (input.u8() % 32) as u64,
    };
    let mut buffer = vec![0u128; BUFFER / 16];
    for (i, word) in buffer.iter_mut().enumerate() {
        *word = (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
    }
    let base = buffer.as_mut_ptr().cast::<u8>();
    let data_ptr = match input.u8() % 4 {
        0 => std::ptr::null_mut(),
        _ => base.cast(),
    };
    let t = DLTensor {
        data: data_ptr,
        device,
        ndim,
        dtype,
        shape: shape.as_mut_ptr(),
        strides: if with_strides { strides.as_mut_ptr() } else { std::ptr::null_mut() },
        byte_offset,
    };
    if check_major_version(major).is_err() {
        return;
    }
    // SAFETY: shape and strides hold 8 entries, covering every ndim claim accepts.
    let Ok((dims, address, device)) = (unsafe { claim(&t) }) else { return };
    assert!((1..=8).contains(&dims.len()) && dims.iter().all(|&d| d >= 0));
    let itemsize = dtype.bits as usize * dtype.lanes as usize / 8;
    // Only claims the fuzzer's buffer can back are wrapped; a real producer vouches for its own.
    let Some(bytes) = dims.iter().try_fold(itemsize, |acc, &d| acc.checked_mul(d as usize)) else { return };
    let start = address.wrapping_sub(base as usize);
    if !dims.contains(&0) && (address < base as usize || start.saturating_add(bytes) > BUFFER) {
        return;
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let memory = ForeignMemory { address, device, owner: Box::new(Owner(Arc::clone(&drops))) };
    let code = dtype.code.0;
    match (code, dtype.bits, dtype.lanes, dims.len()) {
        (2, 32, 1, 1) => exercise::<f32, 1>(&dims, memory),
        (2, 64, 1, 2) => exercise::<f64, 2>(&dims, memory),
        (0, 32, 1, 3) => exercise::<i32, 3>(&dims, memory),
        (1, 8, 1, 2) => exercise::<u8, 2>(&dims, memory),
        (6, 8, 1, 1) => exercise::<bool, 1>(&dims, memory),
        (5, 128, 1, 1) => exercise::<amso_runtime::dtypes::complex128, 1>(&dims, memory),
        (4, 16, 1, 4) => exercise::<amso_runtime::dtypes::bfloat16, 4>(&dims, memory),
        _ => drop(memory),
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the producer's owner must be released exactly once");
});

fn exercise<T: Element, const N: usize>(dims: &[i64], memory: ForeignMemory) {
    // SAFETY: the fuzzer checked that the claimed elements lie inside its live buffer.
    let array = match unsafe { MemArray::<T, N>::from_foreign(dims, memory, false) } {
        Ok(array) => array,
        Err(_) => return,
    };
    for linear in 0..array.size().min(4096) {
        let index = unravel(array.shape(), linear).map(|i| i as i64);
        let scalar = array.get_scalar(&index, None).expect("in-bounds read of an accepted tensor");
        let _ = format!("{scalar:?}");
    }
    let request = DlpackRequest { max_version: Some((1, 3)), ..Default::default() };
    let plan = plan_export(array.device(), array.pinned(), &request).expect("a host export");
    let source = array.export_source(&plan, None).expect("exporting an accepted tensor");
    drop(ManagedTensor::new(source, plan.format));
}
