//! `ArrayObject`: every `MemArray<T, N>` behind one object-safe trait, so the Python base
//! class (and the C ABI) carry each method once instead of once per instantiation.

use std::any::Any;
use std::sync::Arc;

use crate::dlpack::ExportSource;
use crate::element::{DType, Element, Scalar};
use crate::error::Result;
use crate::lock::LockId;
use crate::memarray::{Device, MemArray, Residence};
use crate::shape;
use crate::MAX_NDIM;

/// A type-erased amso array.
pub trait ArrayObject: Send + Sync + 'static {
    /// Element type.
    fn dtype(&self) -> &'static DType;
    /// Shape.
    fn shape(&self) -> &[usize];
    /// Device of the current data.
    fn device(&self) -> Device;
    /// The CUDA device the array moves to.
    fn device_id(&self) -> i32;
    /// Where the current data lives.
    fn residence(&self) -> Residence;
    /// Whether writes are refused.
    fn readonly(&self) -> bool;
    /// The holder of the lock, if any.
    fn lock_id(&self) -> Option<LockId>;
    /// How many exports (DLPack tensors, views) still hold the array's memory.
    fn export_count(&self) -> usize;
    /// Lock with `id`.
    fn enter(&mut self, id: LockId) -> Result<()>;
    /// Unlock `id`.
    fn exit(&mut self, id: LockId) -> Result<()>;
    /// Read one element (Python-style index: negative counts from the end).
    fn get_scalar(&self, index: &[i64], lock: Option<LockId>) -> Result<Scalar>;
    /// Write one element.
    fn set_scalar(&mut self, index: &[i64], value: Scalar, lock: Option<LockId>) -> Result<()>;
    /// Describe the data for a DLPack export (a private copy when `copy`).
    fn export_source(&self, copy: bool, lock: Option<LockId>) -> Result<ExportSource>;
    /// Copy the host data into `dst`, which holds `nbytes` bytes.
    ///
    /// # Safety
    /// `dst` is valid for writes of `nbytes` bytes and does not alias the array.
    unsafe fn copy_to(&self, dst: *mut u8, nbytes: usize, lock: Option<LockId>) -> Result<()>;
    /// Overwrite the host data from `src`, which holds `nbytes` bytes of this element type.
    ///
    /// # Safety
    /// `src` is valid for reads of `nbytes` bytes and does not alias the array.
    unsafe fn copy_from(&mut self, src: *const u8, nbytes: usize, lock: Option<LockId>) -> Result<()>;
    /// Move the current data to `target`.
    fn move_memory(&mut self, target: Device, lock: Option<LockId>) -> Result<()>;
    /// The concrete `MemArray<T, N>`, for typed fast paths (`downcast_ref`).
    fn as_any(&self) -> &dyn Any;
    /// The concrete `MemArray<T, N>`, mutable.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Element, const N: usize> ArrayObject for MemArray<T, N> {
    fn dtype(&self) -> &'static DType {
        &T::DTYPE
    }
    fn shape(&self) -> &[usize] {
        MemArray::shape(self)
    }
    fn device(&self) -> Device {
        MemArray::device(self)
    }
    fn device_id(&self) -> i32 {
        MemArray::device_id(self)
    }
    fn residence(&self) -> Residence {
        MemArray::residence(self)
    }
    fn readonly(&self) -> bool {
        MemArray::readonly(self)
    }
    fn lock_id(&self) -> Option<LockId> {
        MemArray::lock_id(self)
    }
    fn export_count(&self) -> usize {
        MemArray::export_count(self)
    }
    fn enter(&mut self, id: LockId) -> Result<()> {
        MemArray::enter(self, id)
    }
    fn exit(&mut self, id: LockId) -> Result<()> {
        MemArray::exit(self, id)
    }
    fn get_scalar(&self, index: &[i64], lock: Option<LockId>) -> Result<Scalar> {
        let index = shape::normalize_index(self.shape(), index)?;
        Ok(self.get(index, lock)?.to_scalar())
    }
    fn set_scalar(&mut self, index: &[i64], value: Scalar, lock: Option<LockId>) -> Result<()> {
        let index = shape::normalize_index(MemArray::shape(self), index)?;
        self.write(index, T::from_scalar(value)?, lock)
    }
    fn export_source(&self, copy: bool, lock: Option<LockId>) -> Result<ExportSource> {
        let source = if copy { Arc::new(self.host_buffer().try_clone()?) } else { Arc::clone(self.host_buffer()) };
        let data = self.as_ptr(lock)?;
        let data = if copy { source.as_ptr() } else { data.cast_mut() };
        let mut dims = [0i64; MAX_NDIM];
        for (slot, &d) in dims.iter_mut().zip(MemArray::shape(self)) {
            *slot = d as i64;
        }
        Ok(ExportSource {
            data: data.cast(),
            device: MemArray::device(self),
            dtype: T::DTYPE.dl_data_type(),
            ndim: N,
            shape: dims,
            owner: source,
            readonly: MemArray::readonly(self) && !copy,
            copied: copy,
        })
    }
    unsafe fn copy_to(&self, dst: *mut u8, nbytes: usize, lock: Option<LockId>) -> Result<()> {
        let src = self.as_ptr(lock)?;
        check_nbytes(nbytes, self.nbytes())?;
        // SAFETY: `src` holds nbytes (checked); the caller vouches for `dst`.
        unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst, nbytes) };
        Ok(())
    }
    unsafe fn copy_from(&mut self, src: *const u8, nbytes: usize, lock: Option<LockId>) -> Result<()> {
        let dst = self.as_mut_ptr(lock)?;
        check_nbytes(nbytes, self.nbytes())?;
        // SAFETY: `dst` holds nbytes (checked); the caller vouches for `src`.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.cast::<u8>(), nbytes) };
        Ok(())
    }
    fn move_memory(&mut self, target: Device, lock: Option<LockId>) -> Result<()> {
        MemArray::move_memory(self, target, lock)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

fn check_nbytes(given: usize, expected: usize) -> Result<()> {
    if given == expected {
        Ok(())
    } else {
        Err(crate::Error::InvalidArgument(format!("expected {expected} bytes of element data, got {given}")))
    }
}
