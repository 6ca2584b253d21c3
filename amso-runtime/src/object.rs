//! `ArrayObject`: every `MemArray<T, N>` behind one object-safe trait, so the Python base
//! class and the C ABI carry each method once instead of once per instantiation. It holds
//! only what needs the element type: the facts come as a type-erased `RawView`.

use std::any::Any;

use crate::device::Device;
use crate::dlpack::{ExportPlan, ExportSource};
use crate::element::{DType, Element, Scalar};
use crate::error::Result;
use crate::lock::LockId;
use crate::memarray::access::RawView;
use crate::memarray::{ArrayOptions, ForeignMemory, MemArray};

/// A type-erased amso array.
pub trait ArrayObject: Send + Sync + 'static {
    /// The array's facts (shape, dtype, residence, lock...) and raw access to them.
    fn raw_view(&self) -> RawView<'_>;
    /// How many exports (DLPack tensors, views) still hold the array's memory.
    fn export_count(&self) -> usize;
    /// The stream consumers of the device data order after (`None` on the host).
    fn stream(&self) -> Option<i64>;
    /// Lock with `id`.
    fn enter(&mut self, id: LockId) -> Result<()>;
    /// Unlock `id`.
    fn exit(&mut self, id: LockId) -> Result<()>;
    /// Read one element (Python-style index: negative counts from the end).
    fn get_scalar(&self, index: &[i64], lock: Option<LockId>) -> Result<Scalar>;
    /// Write one element.
    fn set_scalar(&mut self, index: &[i64], value: Scalar, lock: Option<LockId>) -> Result<()>;
    /// Describe the data for the DLPack export `plan`.
    fn export_source(&self, plan: &ExportPlan, lock: Option<LockId>) -> Result<ExportSource<'_>>;
    /// Overwrite the current data from host memory `src` holding `nbytes` bytes.
    ///
    /// # Safety
    /// `src` is valid for reads of `nbytes` bytes.
    unsafe fn copy_from(&mut self, src: *const u8, nbytes: usize, lock: Option<LockId>) -> Result<()>;
    /// Move the current data to `target` on `stream` (see `MemArray::move_memory`).
    fn move_memory(&mut self, target: Device, stream: i64, async_copy: bool, lock: Option<LockId>) -> Result<()>;
    /// Run the add-index kernel on the device (see `MemArray::add_index_tuple`).
    fn add_index_tuple(&mut self, stream: i64, lock: Option<LockId>) -> Result<()>;
    /// Note work queued on `stream` over the device data: amso's later work waits for it.
    ///
    /// # Safety
    /// As `MemArray::record_work`.
    unsafe fn record_work(&mut self, stream: i64) -> Result<()>;
    /// An independent copy on the same device (see `MemArray::try_clone`), presenting `lock`.
    fn duplicate(&self, lock: Option<LockId>) -> Result<Box<dyn ArrayObject>>;
    /// Refuse writes from now on (a new array being restored, such as an unpickled one).
    fn make_readonly(&mut self);
    /// The concrete `MemArray<T, N>`, for typed fast paths (`downcast_ref`).
    fn as_any(&self) -> &dyn Any;
    /// The concrete `MemArray<T, N>`, mutable.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Element, const N: usize> ArrayObject for MemArray<T, N> {
    fn raw_view(&self) -> RawView<'_> {
        MemArray::raw_view(self)
    }
    fn export_count(&self) -> usize {
        MemArray::export_count(self)
    }
    fn stream(&self) -> Option<i64> {
        MemArray::stream(self)
    }
    fn enter(&mut self, id: LockId) -> Result<()> {
        MemArray::enter(self, id)
    }
    fn exit(&mut self, id: LockId) -> Result<()> {
        MemArray::exit(self, id)
    }
    fn get_scalar(&self, index: &[i64], lock: Option<LockId>) -> Result<Scalar> {
        let offset = self.raw_view().offset(index)?;
        Ok(self.element_at(offset, lock)?.to_scalar())
    }
    fn set_scalar(&mut self, index: &[i64], value: Scalar, lock: Option<LockId>) -> Result<()> {
        let value = T::from_scalar(value)?;
        let offset = self.raw_view().offset(index)?;
        self.set_element_at(offset, value, lock)
    }
    fn export_source(&self, plan: &ExportPlan, lock: Option<LockId>) -> Result<ExportSource<'_>> {
        MemArray::export_source(self, plan, lock)
    }
    unsafe fn copy_from(&mut self, src: *const u8, nbytes: usize, lock: Option<LockId>) -> Result<()> {
        // SAFETY: forwarded from the caller; `self` is borrowed mutably.
        unsafe { self.raw_view().copy_from(src, nbytes, lock) }
    }
    fn move_memory(&mut self, target: Device, stream: i64, async_copy: bool, lock: Option<LockId>) -> Result<()> {
        MemArray::move_memory_with(self, target, stream, async_copy, lock)
    }
    fn add_index_tuple(&mut self, stream: i64, lock: Option<LockId>) -> Result<()> {
        #[cfg(feature = "cuda")]
        return MemArray::add_index_tuple_with(self, stream, lock);
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (stream, lock);
            Err(crate::Error::Unavailable("add_index_tuple runs on CUDA, which this build does not include".into()))
        }
    }
    unsafe fn record_work(&mut self, stream: i64) -> Result<()> {
        #[cfg(feature = "cuda")]
        if self.on_device() {
            // SAFETY: forwarded from the caller.
            return unsafe { MemArray::record_work(self, stream) };
        }
        let _ = stream;
        Ok(())
    }
    fn duplicate(&self, lock: Option<LockId>) -> Result<Box<dyn ArrayObject>> {
        crate::lock::check_access(self.lock_id(), lock)?;
        Ok(Box::new(self.try_clone()?))
    }
    fn make_readonly(&mut self) {
        MemArray::make_readonly(self);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A concrete array type that generic code (the Python glue, the C ABI) can construct: every
/// `MemArray<T, N>`. Generated code names it; it adds no code of its own.
pub trait ArrayType: ArrayObject + Sized {
    /// Element type facts.
    const DTYPE: &'static DType;
    /// Number of dimensions.
    const NDIM: usize;
    /// A zero-filled array with `dims` (checked) and `options`.
    fn create(dims: &[i64], options: ArrayOptions) -> Result<Self>;
    /// An array over foreign memory (see `MemArray::from_foreign`).
    ///
    /// # Safety
    /// As `MemArray::from_foreign`.
    unsafe fn wrap(dims: &[i64], memory: ForeignMemory, readonly: bool) -> Result<Self>;
}

impl<T: Element, const N: usize> ArrayType for MemArray<T, N> {
    const DTYPE: &'static DType = &T::DTYPE;
    const NDIM: usize = N;
    fn create(dims: &[i64], options: ArrayOptions) -> Result<Self> {
        MemArray::from_dims(dims, options)
    }
    unsafe fn wrap(dims: &[i64], memory: ForeignMemory, readonly: bool) -> Result<Self> {
        // SAFETY: forwarded from the caller.
        unsafe { MemArray::from_foreign(dims, memory, readonly) }
    }
}
