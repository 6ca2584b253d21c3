//! The header behind the C getters: a `#[repr(C)]` description of one array inside its Python
//! object, so a C getter is one field read. generated/amso.h publishes the layout.
//!
//! Most fields never change after construction (dtype, shape, strides, the read-only and
//! pinned flags). The placement (data address, device, on-device flag, lock) changes on
//! moves and locks; those fields are atomics, written by `publish` only while the GIL is held.
//! C readers hold the GIL too (the C API's contract), so a reader sees the header from before
//! a change or after it, never a mix.
//!
//! `FLAG_CHANGING` (version 2) is set, with the GIL held, before any change of the array
//! begins (a move or a copy in that then runs with the GIL released), and cleared, with the
//! GIL held, after the change ended and the placement was republished (`python/base/array.rs`).
//! A reader holding the GIL that finds it clear knows the placement is current and stays so
//! while it keeps the GIL: typed arguments of every runtime copy read host data in place then.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::memarray::access::RawView;
use crate::shape::MAX_NDIM;

/// Marks a valid header ("AMSO" in ASCII).
pub(crate) const HEADER_MAGIC: u32 = 0x414d_534f;
/// Layout version of `Header`; bumped on any change.
pub(crate) const HEADER_VERSION: u32 = 2;

/// Flag bit: writes are refused.
pub(crate) const FLAG_READONLY: u32 = 1;
/// Flag bit: the data is in device memory.
pub(crate) const FLAG_ON_DEVICE: u32 = 2;
/// Flag bit: the host buffer is pinned.
pub(crate) const FLAG_PINNED: u32 = 4;
/// Flag bit (since version 2): a change of the array is under way; the placement describes it
/// from before, and the data may be changing. Readers that read in place fall back meanwhile.
pub(crate) const FLAG_CHANGING: u32 = 8;

/// The C view of one array.
#[repr(C)]
#[derive(Debug)]
pub struct Header {
    pub(crate) magic: u32,
    pub(crate) version: u32,
    pub(crate) data: AtomicUsize,
    pub(crate) ndim: i32,
    pub(crate) device_type: AtomicI32,
    pub(crate) device_id: AtomicI32,
    pub(crate) code: u8,
    pub(crate) bits: u8,
    pub(crate) lanes: u16,
    pub(crate) itemsize: i64,
    pub(crate) flags: AtomicU32,
    pub(crate) reserved: u32,
    pub(crate) lock_id: AtomicU64,
    pub(crate) shape: [i64; MAX_NDIM],
    pub(crate) strides: [i64; MAX_NDIM],
}

// The layout generated/amso.h publishes (amso-codegen's C header checks the same size).
const _: () = assert!(size_of::<Header>() == 184);
const _: () = assert!(std::mem::offset_of!(Header, data) == 8 && std::mem::offset_of!(Header, shape) == 56);
const _: () = assert!(std::mem::offset_of!(Header, flags) == 40 && std::mem::offset_of!(Header, lock_id) == 48);

/// A consistent reading of the placement fields, as the C API reports them (DLPack codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) data: usize,
    pub(crate) device_type: i32,
    pub(crate) device_id: i32,
    pub(crate) flags: u32,
    pub(crate) lock_id: u64,
}

impl Placement {
    /// Whether the data is in device memory (CUDA's own or managed).
    pub(crate) fn on_device(&self) -> bool {
        self.flags & FLAG_ON_DEVICE != 0
    }

    /// Where the data is, as `a.device` and the repr spell it: `'cpu'` (pinned memory too) or
    /// `'cuda:N'` (managed memory too).
    pub(crate) fn device_name(&self) -> String {
        match self.on_device() {
            true => format!("cuda:{}", self.device_id),
            false => "cpu".to_string(),
        }
    }
}

impl Header {
    /// The header describing `array` now.
    pub(crate) fn of(array: &RawView<'_>) -> Header {
        let dtype = array.dtype();
        let shape = array.shape();
        let (dims, strides) = crate::shape::c_layout(shape);
        let header = Header {
            magic: HEADER_MAGIC,
            version: HEADER_VERSION,
            data: AtomicUsize::new(0),
            ndim: shape.len() as i32,
            device_type: AtomicI32::new(0),
            device_id: AtomicI32::new(0),
            code: dtype.code,
            bits: dtype.bits,
            lanes: dtype.lanes,
            itemsize: dtype.itemsize() as i64,
            flags: AtomicU32::new(0),
            reserved: 0,
            lock_id: AtomicU64::new(0),
            shape: dims,
            strides,
        };
        header.store(Self::placement_of(array));
        header
    }

    fn placement_of(array: &RawView<'_>) -> Placement {
        let device = array.device();
        let mut flags = 0;
        if array.readonly() {
            flags |= FLAG_READONLY;
        }
        if device.device_type == crate::device::DeviceType::Cuda {
            flags |= FLAG_ON_DEVICE;
        }
        if array.pinned() {
            flags |= FLAG_PINNED;
        }
        // Managed memory says so (kDLCUDAManaged), as its DLPack exports do.
        let device_type = if device.device_type == crate::device::DeviceType::Cuda && array.managed() {
            crate::device::DeviceType::CudaManaged
        } else {
            device.device_type
        };
        Placement {
            // A locked array's address is still described: the handle reports, it never grants.
            data: array.current_address(),
            device_type: device_type as i32,
            device_id: device.id.ordinal(),
            flags,
            lock_id: array.lock_number(),
        }
    }

    fn store(&self, placement: Placement) {
        self.data.store(placement.data, Ordering::Relaxed);
        self.device_type.store(placement.device_type, Ordering::Relaxed);
        self.device_id.store(placement.device_id, Ordering::Relaxed);
        // The changing bit is the writers' to set and clear (`set_changing`), not the placement's.
        let changing = self.flags.load(Ordering::Relaxed) & FLAG_CHANGING;
        self.flags.store(placement.flags | changing, Ordering::Relaxed);
        self.lock_id.store(placement.lock_id, Ordering::Release);
    }

    /// Set or clear `FLAG_CHANGING`. The GIL must be held: every writer of `flags` holds it, so
    /// a load and a store lose no update.
    #[cfg(feature = "python")]
    pub(crate) fn set_changing(&self, _attached: pyo3::Python<'_>, changing: bool) {
        let flags = self.flags.load(Ordering::Relaxed) & !FLAG_CHANGING;
        self.flags.store(if changing { flags | FLAG_CHANGING } else { flags }, Ordering::Relaxed);
    }

    /// Rewrite the placement fields from `array`. The GIL must be held (see the module docs);
    /// the `Python` token of the caller says so.
    #[cfg(feature = "python")]
    pub(crate) fn publish(&self, _attached: pyo3::Python<'_>, array: &RawView<'_>) {
        self.store(Self::placement_of(array));
    }

    /// The placement fields. With the GIL held, no `publish` runs meanwhile.
    pub(crate) fn placement(&self) -> Placement {
        Placement {
            lock_id: self.lock_id.load(Ordering::Acquire),
            data: self.data.load(Ordering::Relaxed),
            device_type: self.device_type.load(Ordering::Relaxed),
            device_id: self.device_id.load(Ordering::Relaxed),
            flags: self.flags.load(Ordering::Relaxed),
        }
    }

    /// The dimensions.
    pub(crate) fn dims(&self) -> &[i64] {
        &self.shape[..self.ndim as usize]
    }
}

#[cfg(test)]
mod tests {
    use crate::memarray::MemArray;
    use crate::object::ArrayObject;
    use crate::python::base::header::*;

    #[test]
    fn header_describes_the_array() {
        let mut array = MemArray::<i16, 3>::new([2, 3, 4]).unwrap();
        let header = Header::of(&array.raw_view());
        let placement = header.placement();
        assert_eq!((header.magic, header.ndim, placement.device_type, placement.device_id), (HEADER_MAGIC, 3, 1, 0));
        assert_eq!((header.code, header.bits, header.lanes, header.itemsize), (0, 16, 1, 2));
        assert_eq!(header.dims(), &[2, 3, 4]);
        assert_eq!(&header.strides[..3], &[12, 4, 1]);
        assert_eq!(placement.data, array.as_ptr().unwrap() as usize);
        assert_eq!((placement.flags, placement.lock_id), (0, 0));
        let guard = array.lock().unwrap();
        let locked = Header::of(&guard.array().raw_view()).placement();
        assert_eq!(locked.lock_id, guard.array().lock_number());
        assert_ne!(locked.lock_id, 0);
        assert_eq!(locked.data, placement.data);
    }
}
