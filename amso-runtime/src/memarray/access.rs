//! Element access and whole-array copies written once for every instantiation: an
//! `ArrayCore` lends a `RawView` (its facts, borrowed) and the logic here reads and writes
//! bytes.

use super::core::ArrayCore;
use crate::device::{Device, DeviceId, Residence};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::lock::{check_access, LockId};

/// One array's facts, without its element type.
pub struct RawView<'a> {
    pub(crate) shape: &'a [usize],
    pub(crate) dtype: &'static DType,
    pub(crate) nbytes: usize,
    pub(crate) host: *mut u8,
    pub(crate) holder: Option<LockId>,
    pub(crate) residence: Residence,
    pub(crate) readonly: bool,
    pub(crate) pinned: bool,
    pub(crate) device_id: DeviceId,
    #[cfg(feature = "cuda")]
    pub(crate) device: &'a super::device_side::DeviceSide,
}

impl ArrayCore {
    /// This array as a `RawView`.
    #[inline]
    pub(crate) fn raw_view(&self) -> RawView<'_> {
        RawView {
            shape: self.shape(),
            dtype: self.dtype(),
            nbytes: self.nbytes(),
            host: self.host_ptr(),
            holder: self.lock_id(),
            residence: self.residence(),
            readonly: self.readonly(),
            pinned: self.pinned(),
            device_id: self.device_id(),
            #[cfg(feature = "cuda")]
            device: self.device_side(),
        }
    }
}

impl RawView<'_> {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> &'static DType {
        self.dtype
    }

    /// Bytes of element data.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Where the current data lives.
    pub fn residence(&self) -> Residence {
        self.residence
    }

    /// The device of the current data.
    pub fn device(&self) -> Device {
        self.residence.device(self.device_id)
    }

    /// Whether the data is in CUDA managed memory (exported as kDLCUDAManaged).
    pub(crate) fn managed(&self) -> bool {
        #[cfg(feature = "cuda")]
        if self.residence == Residence::Device {
            return self.device.managed();
        }
        false
    }

    /// The CUDA device the array moves to.
    pub fn device_id(&self) -> DeviceId {
        self.device_id
    }

    /// Whether writes are refused.
    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// Whether the host buffer is page-locked.
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// The number of the lock holding the array, 0 when unlocked.
    pub fn lock_number(&self) -> u64 {
        self.holder.map_or(0, LockId::get)
    }

    /// Note that the device data is being handed out (the interface dict): its eventual free
    /// waits for the whole device.
    pub fn share_device_memory(&self) {
        #[cfg(feature = "cuda")]
        self.device.share();
    }

    /// Byte offset of the element at a Python-style `index` (negative counts from the end).
    pub(crate) fn offset(&self, index: &[i64]) -> Result<usize> {
        Ok(crate::shape::python_offset(self.shape, index)? * self.dtype.itemsize())
    }

    /// Copy `len` bytes at byte `offset` of the current data to or from host memory `host`.
    ///
    /// # Safety
    /// `offset + len` is within the array; `host` is valid for `len` bytes (for writes into
    /// it when `!write`, and then it does not alias the array).
    unsafe fn transfer(&self, offset: usize, host: *mut u8, len: usize, write: bool) -> Result<()> {
        #[cfg(feature = "cuda")]
        if self.residence == Residence::Device {
            // SAFETY: forwarded from the caller.
            return unsafe { self.device.access(self.device_id, offset, host, len, write) };
        }
        self.residence.host_only()?;
        // SAFETY: the caller guarantees both ranges; the host buffer is live.
        unsafe {
            if write {
                // `copy`, not `copy_nonoverlapping`: the source may be a view of this array.
                std::ptr::copy(host.cast_const(), self.host.add(offset), len)
            } else {
                std::ptr::copy_nonoverlapping(self.host.add(offset), host, len)
            }
        }
        Ok(())
    }

    /// Copy the bytes of the element at `byte_offset` into `out` (not yet a valid `T`: see
    /// `element::read_element`).
    ///
    /// # Safety
    /// `byte_offset` is an element of the array; `out` is valid for writes of one element.
    pub(crate) unsafe fn read_at(&self, byte_offset: usize, lock: Option<LockId>, out: *mut u8) -> Result<()> {
        check_access(self.holder, lock)?;
        // SAFETY: forwarded from the caller.
        unsafe { self.transfer(byte_offset, out, self.dtype.itemsize(), false) }
    }

    /// Write one element's bytes from `value` at `byte_offset` (the caller holds the array
    /// mutably).
    ///
    /// # Safety
    /// `byte_offset` is an element of the array; `value` is valid for reads of one element.
    pub(crate) unsafe fn write_at(&self, byte_offset: usize, lock: Option<LockId>, value: *const u8) -> Result<()> {
        self.check_writable(lock)?;
        // SAFETY: forwarded from the caller.
        unsafe { self.transfer(byte_offset, value.cast_mut(), self.dtype.itemsize(), true) }
    }

    fn check_writable(&self, lock: Option<LockId>) -> Result<()> {
        check_access(self.holder, lock)?;
        if self.readonly {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    #[cfg(feature = "python")]
    fn check_nbytes(&self, given: usize) -> Result<()> {
        if given == self.nbytes {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!("expected {} bytes of element data, got {given}", self.nbytes)))
        }
    }

    /// Copy the whole current data into host memory `dst` of `nbytes` bytes.
    ///
    /// # Safety
    /// `dst` is valid for writes of `nbytes` bytes and does not alias the array.
    #[cfg(feature = "python")]
    pub(crate) unsafe fn copy_to(&self, dst: *mut u8, nbytes: usize, lock: Option<LockId>) -> Result<()> {
        self.check_nbytes(nbytes)?;
        check_access(self.holder, lock)?;
        // SAFETY: the whole array; the caller vouches for `dst`.
        unsafe { self.transfer(0, dst, nbytes, false) }
    }

    /// Overwrite the whole current data from host memory `src` of `nbytes` bytes (the caller
    /// holds the array mutably).
    ///
    /// # Safety
    /// `src` is valid for reads of `nbytes` bytes (it may be a view of the array itself).
    #[cfg(feature = "python")]
    pub(crate) unsafe fn copy_from(&self, src: *const u8, nbytes: usize, lock: Option<LockId>) -> Result<()> {
        self.check_nbytes(nbytes)?;
        self.check_writable(lock)?;
        // SAFETY: the whole array; the caller vouches for `src`.
        unsafe { self.transfer(0, src.cast_mut(), nbytes, true) }
    }

    /// Address of the current data (host or device).
    #[cfg(feature = "python")]
    pub(crate) fn data_address(&self, lock: Option<LockId>) -> Result<usize> {
        check_access(self.holder, lock)?;
        Ok(self.current_address())
    }

    /// Address of the current data whoever holds the lock (descriptions only, never access).
    #[cfg(feature = "python")]
    pub(crate) fn current_address(&self) -> usize {
        #[cfg(feature = "cuda")]
        if self.residence == Residence::Device {
            return self.device.memory().map_or(0, |m| m.ptr() as usize);
        }
        self.host as usize
    }
}
