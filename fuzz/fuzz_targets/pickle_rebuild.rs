//! A pickle's `_amso_rebuild` arguments from the input: dtype name, dims, the readonly,
//! pinned and device flags, the number of CUDA devices, and the data buffer (its length,
//! alignment, read-only flag and contiguity), through `plan_rebuild`, the checks the Python
//! rebuild runs. Any input gives a plan or an error, never a panic; the plan is given exactly
//! when an independent reference (NumPy's size rule in 128-bit integers, the class table
//! below) says the arguments describe an array; an accepted plan's bytes are the buffer's
//! length, and its memory choice follows the flags. Host plans are then carried out as the
//! Python rebuild does, over a buffer of exactly the claimed length: the array reads each
//! of its elements (an adopted buffer) or the whole buffer is read (a copy).
#![no_main]

mod input;

use amso_runtime::__private::{plan_rebuild, ElementOps, Pickled, PickledData, RebuildMemory};
use amso_runtime::dtypes::{bfloat16, complex128, float8_e4m3fn};
use amso_runtime::{Device, Element, Error, ForeignMemory, MemArray, MAX_NDIM};
use input::{numpy_bytes, Input};
use libfuzzer_sys::fuzz_target;

/// A class this "module" compiles: its dtype name and ndim, its element table, and the
/// reference's own facts of the Rust type (size and alignment).
struct Class {
    dtype: &'static str,
    ndim: usize,
    ops: &'static ElementOps,
    itemsize: usize,
    align: usize,
}

const fn class<T: Element>(dtype: &'static str, ndim: usize) -> Class {
    Class { dtype, ndim, ops: ElementOps::of::<T>(), itemsize: size_of::<T>(), align: align_of::<T>() }
}

const CLASSES: [Class; 8] = [
    class::<f64>("float64", 2),
    class::<f32>("float32", 1),
    class::<i32>("int32", 3),
    class::<u8>("uint8", 2),
    class::<bool>("bool", 1),
    class::<complex128>("complex128", 1),
    class::<bfloat16>("bfloat16", 4),
    class::<float8_e4m3fn>("float8_e4m3fn", 8),
];

/// The largest data buffer the fuzzer backs with memory.
const MAX_DATA: usize = 4096;

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let name_choice = input.u8();
    let random_name: Vec<u8> = (0..input.u8() % 16).map(|_| input.u8()).collect();
    let dtype = match CLASSES.get(usize::from(name_choice % 10)) {
        Some(class) => class.dtype.to_string(),
        None => String::from_utf8_lossy(&random_name).into_owned(),
    };
    let ndim = match input.u8() {
        n @ 0..=250 => usize::from(n % 11),
        _ => usize::from(input.u8()) * 64, // a long shape, as a damaged pickle may carry
    };
    let dims: Vec<i64> = (0..ndim).map(|_| input.dim()).collect();
    let (readonly, pinned) = (input.flag(), input.flag());
    let device = match input.u8() % 4 {
        0 => Some(i32::from_le_bytes(input.bytes::<4>())),
        1 => Some(i32::from(input.u8() % 4)),
        _ => None,
    };
    let cuda_devices = i32::from(input.u8() % 4) - 1; // -1: a broken count, 0: no driver
    let class = CLASSES.iter().position(|c| c.dtype == dtype && c.ndim == ndim);
    let reference = class.and_then(|index| numpy_bytes(&dims, CLASSES[index].itemsize));
    let len = match input.u8() % 4 {
        0 | 1 => reference.unwrap_or(0).min(MAX_DATA), // the length the shape needs, if backed
        2 => usize::from(u16::from_le_bytes(input.bytes::<2>())) % (MAX_DATA + 1),
        _ => reference.unwrap_or(0).saturating_add(usize::from(input.u8() % 3)).saturating_sub(1) % (MAX_DATA + 1),
    };
    let offset = usize::from(input.u8() % 16);
    let (data_readonly, c_contiguous) = (input.flag(), input.u8() % 8 != 0);
    // Exactly `len` bytes after the offset: a read past them leaves the allocation.
    let memory: Vec<u8> = (0..offset + len).map(|i| (i as u8).wrapping_mul(151)).collect();
    let address = memory.as_ptr() as usize + offset;
    let data = PickledData { address, len, readonly: data_readonly, c_contiguous };
    let pickled = Pickled { dtype: &dtype, dims: &dims, readonly, pinned, device, data };
    let find = |ndim| {
        CLASSES
            .iter()
            .position(|c| c.dtype == dtype && c.ndim == ndim)
            .map(|index| (index, CLASSES[index].ops))
            .ok_or_else(|| Error::WrongValueType(format!("no {dtype} class with ndim {ndim}")))
    };
    let plan = plan_rebuild(&pickled, find, cuda_devices);

    let valid = (1..=MAX_NDIM).contains(&dims.len()) && reference == Some(len) && c_contiguous;
    assert_eq!(plan.is_ok(), valid, "{pickled:?} with {cuda_devices} devices: {plan:?}");
    let Ok(plan) = plan else { return };
    assert_eq!((Some(plan.class), plan.bytes), (class, len));
    let on_device = device.filter(|id| (0..cuda_devices).contains(id));
    let pinned_here = pinned && cuda_devices > 0;
    let adopt = on_device.is_none()
        && !pinned_here
        && (readonly || !data_readonly)
        && address.is_multiple_of(CLASSES[plan.class].align);
    match (plan.memory, on_device) {
        (RebuildMemory::Upload { device_id }, Some(id)) => assert_eq!(device_id.ordinal(), id),
        (memory, None) if adopt => assert_eq!(memory, RebuildMemory::Adopt),
        (memory, None) => assert_eq!(memory, RebuildMemory::Copy { pinned: pinned_here }),
        (memory, Some(id)) => panic!("expected an upload to device {id}, planned {memory:?}"),
    }
    let lost_device = device.is_some() && on_device.is_none();
    assert_eq!(plan.notes.len(), usize::from(lost_device) + usize::from(pinned && cuda_devices <= 0));

    match plan.memory {
        RebuildMemory::Adopt => {
            let memory = ForeignMemory { address, device: Device::CPU, owner: Box::new(memory) };
            match plan.class {
                0 => adopt_and_read::<f64, 2>(&dims, memory, readonly),
                1 => adopt_and_read::<f32, 1>(&dims, memory, readonly),
                2 => adopt_and_read::<i32, 3>(&dims, memory, readonly),
                3 => adopt_and_read::<u8, 2>(&dims, memory, readonly),
                4 => adopt_and_read::<bool, 1>(&dims, memory, readonly),
                5 => adopt_and_read::<complex128, 1>(&dims, memory, readonly),
                6 => adopt_and_read::<bfloat16, 4>(&dims, memory, readonly),
                _ => adopt_and_read::<float8_e4m3fn, 8>(&dims, memory, readonly),
            }
        }
        // A copy or an upload reads the plan's bytes from the buffer.
        _ => {
            // SAFETY: `memory` holds `offset + len` bytes, and the plan's bytes are `len`.
            let copied = unsafe { std::slice::from_raw_parts(address as *const u8, plan.bytes) };
            assert_eq!(copied, &memory[offset..]);
        }
    }
});

/// The rebuild's adoption of the buffer, then a read of every element through the array.
fn adopt_and_read<T: Element, const N: usize>(dims: &[i64], memory: ForeignMemory, readonly: bool) {
    // SAFETY: the plan checked that the buffer holds exactly the array's bytes, aligned for
    // `T`; `memory`'s owner keeps them alive.
    let array = unsafe { MemArray::<T, N>::from_foreign(dims, memory, readonly) }.expect("a planned adoption");
    assert_eq!(array.readonly(), readonly);
    let values = array.to_vec().expect("reading an adopted array");
    assert_eq!(values.len(), array.size());
}
