//! Element access and whole-array copies written once for every instantiation: a
//! `MemArray<T, N>` lends a `RawView` (its facts without the element type) and the logic
//! here reads and writes bytes. Each instantiation keeps only the conversion of one `T`.

use std::mem::MaybeUninit;

use crate::element::{DType, Element};
use crate::error::{Error, Result};
use crate::lock::{check_access, LockId};
use crate::memarray::{MemArray, Residence};

/// One array's facts, without its element type.
pub(crate) struct RawView<'a> {
    pub(crate) shape: &'a [usize],
    pub(crate) dtype: &'static DType,
    pub(crate) nbytes: usize,
    pub(crate) host: *mut u8,
    pub(crate) holder: Option<LockId>,
    pub(crate) residence: Residence,
    pub(crate) readonly: bool,
    #[cfg(feature = "cuda")]
    pub(crate) device_id: i32,
    #[cfg(feature = "cuda")]
    pub(crate) device: &'a crate::device::DeviceSide,
}

impl<T: Element, const N: usize> MemArray<T, N> {
    /// This array as a `RawView`.
    pub(crate) fn raw_view(&self) -> RawView<'_> {
        RawView {
            shape: self.shape(),
            dtype: &T::DTYPE,
            nbytes: self.nbytes(),
            host: self.host_buffer().as_ptr().cast(),
            holder: self.lock_id(),
            residence: self.residence(),
            readonly: self.readonly(),
            #[cfg(feature = "cuda")]
            device_id: self.device_id(),
            #[cfg(feature = "cuda")]
            device: self.device_side(),
        }
    }

    /// The element at `byte_offset` (in bounds: the caller checked), presenting `lock`.
    pub(crate) fn element_at(&self, byte_offset: usize, lock: Option<LockId>) -> Result<T> {
        let mut value = MaybeUninit::<T>::uninit();
        // SAFETY: `value` holds one element.
        unsafe { self.raw_view().read_at(byte_offset, lock, value.as_mut_ptr().cast()) }?;
        // SAFETY: fully written by `read_at`, which makes a bool byte 0 or 1; every bit pattern
        // is a valid value of the other element kinds (integers, IEEE and bfloat floats, complex).
        Ok(unsafe { value.assume_init() })
    }

    /// Write `value` at `byte_offset` (in bounds: the caller checked), presenting `lock`.
    pub(crate) fn set_element_at(&mut self, byte_offset: usize, value: T, lock: Option<LockId>) -> Result<()> {
        // SAFETY: `value` holds one element; `self` is borrowed mutably.
        unsafe { self.raw_view().write_at(byte_offset, lock, (&value as *const T).cast()) }
    }
}

impl RawView<'_> {
    /// Byte offset of the element at a Python-style `index` (negative counts from the end).
    pub(crate) fn offset(&self, index: &[i64]) -> Result<usize> {
        Ok(crate::shape::python_offset(self.shape, index)? * self.dtype.itemsize())
    }

    fn host_only(&self) -> Result<()> {
        match self.residence {
            Residence::Host => Ok(()),
            Residence::Device => Err(Error::Unavailable(
                "the data is in device memory; move_memory(kDLCPU) first to touch it from the host".into(),
            )),
        }
    }

    /// Copy `len` bytes at byte `offset` of the current data to or from host memory `host`.
    ///
    /// # Safety
    /// `offset + len` is within the array; `host` is valid for `len` bytes (for writes into
    /// it when `!write`) and does not alias the array.
    unsafe fn transfer(&self, offset: usize, host: *mut u8, len: usize, write: bool) -> Result<()> {
        #[cfg(feature = "cuda")]
        if self.residence == Residence::Device {
            // SAFETY: forwarded from the caller.
            return unsafe { self.device.access(self.device_id, offset, host, len, write) };
        }
        self.host_only()?;
        // SAFETY: the caller guarantees both ranges; the host buffer is live.
        unsafe {
            if write {
                std::ptr::copy_nonoverlapping(host.cast_const(), self.host.add(offset), len)
            } else {
                std::ptr::copy_nonoverlapping(self.host.add(offset), host, len)
            }
        }
        Ok(())
    }

    /// Read the element at `byte_offset` into `out`. Foreign memory may hold any byte in a
    /// kDLBool element; only 0 and 1 are a Rust bool, so nonzero reads as 1 (as NumPy reads it).
    ///
    /// # Safety
    /// `byte_offset` is an element of the array; `out` is valid for writes of one element.
    unsafe fn read_at(&self, byte_offset: usize, lock: Option<LockId>, out: *mut u8) -> Result<()> {
        check_access(self.holder, lock)?;
        // SAFETY: forwarded from the caller.
        unsafe { self.transfer(byte_offset, out, self.dtype.itemsize(), false) }?;
        if self.dtype.code == dlpark::ffi::DLDataTypeCode::BOOL.0 {
            // SAFETY: the one byte just written (bool elements are one byte, checked by build.rs).
            unsafe { *out = u8::from(*out != 0) };
        }
        Ok(())
    }

    /// Write one element's bytes from `value` at `byte_offset` (the caller holds the array
    /// mutably).
    ///
    /// # Safety
    /// `byte_offset` is an element of the array; `value` is valid for reads of one element.
    unsafe fn write_at(&self, byte_offset: usize, lock: Option<LockId>, value: *const u8) -> Result<()> {
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
    /// `src` is valid for reads of `nbytes` bytes and does not alias the array.
    pub(crate) unsafe fn copy_from(&self, src: *const u8, nbytes: usize, lock: Option<LockId>) -> Result<()> {
        self.check_nbytes(nbytes)?;
        self.check_writable(lock)?;
        // SAFETY: the whole array; the caller vouches for `src`.
        unsafe { self.transfer(0, src.cast_mut(), nbytes, true) }
    }

    /// Address of the current data (host or device).
    pub(crate) fn data_address(&self, lock: Option<LockId>) -> Result<usize> {
        check_access(self.holder, lock)?;
        #[cfg(feature = "cuda")]
        if self.residence == Residence::Device {
            return Ok(self.device.memory().map_or(0, |m| m.ptr() as usize));
        }
        Ok(self.host as usize)
    }
}
