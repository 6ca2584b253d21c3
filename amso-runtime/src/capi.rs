//! The type-erased header behind the C getters: a `#[repr(C)]` snapshot of an array's
//! description, kept inside each Python array object and refreshed after every change, so a
//! C getter is one field read. Its layout is private to amso: C sees an opaque handle.

use crate::memarray::Residence;
use crate::object::ArrayObject;
use crate::MAX_NDIM;

/// Marks a valid header ("AMSO" in ASCII).
pub const HEADER_MAGIC: u32 = 0x414d_534f;
/// Layout version of `Header`; bumped on any change.
pub const HEADER_VERSION: u32 = 1;

/// Flag bit: writes are refused.
pub const FLAG_READONLY: u32 = 1;
/// Flag bit: the data is in device memory.
pub const FLAG_ON_DEVICE: u32 = 2;
/// Flag bit: the host buffer is pinned.
pub const FLAG_PINNED: u32 = 4;

/// The C view of one array.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Header {
    /// `HEADER_MAGIC`.
    pub magic: u32,
    /// `HEADER_VERSION`.
    pub version: u32,
    /// Address of the first element of the current data (host or device).
    pub data: usize,
    /// Number of dimensions.
    pub ndim: i32,
    /// DLPack device type of the current data.
    pub device_type: i32,
    /// Device ordinal of the current data (0 on the host).
    pub device_id: i32,
    /// DLPack type code.
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes.
    pub lanes: u16,
    /// Bytes per element.
    pub itemsize: i64,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Lock holder's id, 0 when unlocked.
    pub lock_id: u64,
    /// Dimensions (first `ndim` used).
    pub shape: [i64; MAX_NDIM],
    /// C-order strides in elements (first `ndim` used).
    pub strides: [i64; MAX_NDIM],
}

// The layout generated/amso.h publishes (amso-codegen's C header checks the same size).
const _: () = assert!(size_of::<Header>() == 184);
const _: () = assert!(std::mem::offset_of!(Header, data) == 8 && std::mem::offset_of!(Header, shape) == 56);

impl Header {
    /// The header describing `array` now.
    pub fn of(array: &dyn ArrayObject) -> Header {
        let dtype = array.dtype();
        let device = array.device();
        let shape = array.shape();
        let mut header = Header {
            magic: HEADER_MAGIC,
            version: HEADER_VERSION,
            // A locked array's address is still described: the handle reports, it never grants.
            data: array.data_address(array.lock_id()).unwrap_or(0),
            ndim: shape.len() as i32,
            device_type: device.device_type as i32,
            device_id: device.id,
            code: dtype.code,
            bits: dtype.bits,
            lanes: dtype.lanes,
            itemsize: dtype.itemsize() as i64,
            flags: 0,
            reserved: 0,
            lock_id: array.lock_id().map_or(0, |id| id.get()),
            shape: [0; MAX_NDIM],
            strides: [0; MAX_NDIM],
        };
        let mut stride = 1i64;
        for axis in (0..shape.len()).rev() {
            header.shape[axis] = shape[axis] as i64;
            header.strides[axis] = stride;
            stride = stride.saturating_mul(shape[axis].max(1) as i64);
        }
        if array.readonly() {
            header.flags |= FLAG_READONLY;
        }
        if array.residence() == Residence::Device {
            header.flags |= FLAG_ON_DEVICE;
        }
        if array.pinned() {
            header.flags |= FLAG_PINNED;
        }
        header
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::LockId;
    use crate::MemArray;

    #[test]
    fn header_describes_the_array() {
        let mut array = MemArray::<i16, 3>::new([2, 3, 4]).unwrap();
        let header = Header::of(&array);
        assert_eq!((header.magic, header.ndim, header.device_type, header.device_id), (HEADER_MAGIC, 3, 1, 0));
        assert_eq!((header.code, header.bits, header.lanes, header.itemsize), (0, 16, 1, 2));
        assert_eq!(&header.shape[..3], &[2, 3, 4]);
        assert_eq!(&header.strides[..3], &[12, 4, 1]);
        assert_eq!(header.data, array.as_ptr(None).unwrap() as usize);
        assert_eq!((header.flags, header.lock_id), (0, 0));
        let id = LockId::next();
        array.enter(id).unwrap();
        let locked = Header::of(&array);
        assert_eq!(locked.lock_id, id.get());
        assert_eq!(locked.data, header.data);
    }
}
