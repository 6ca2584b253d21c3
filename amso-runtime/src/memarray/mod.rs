//! `MemArray<T, N>`: an N-dimensional array of `T` with host storage, a residence (where the
//! current data lives), a device id, a lock and a read-only flag. The state and every
//! operation that does not need `T` at compile time live once in `ArrayCore` (`core`), of
//! which `MemArray<T, N>` is a typed view; the rest of this module's files hold element access
//! over a type-erased view (`access`), DLPack exports (`export`), arrays over foreign memory
//! (`foreign`), construction options (`options`), the checks of what a buffer-protocol exporter claims (`buffer_claim`) and of
//! a pickle's rebuild arguments (`rebuild`), and, with CUDA, the device side.
//!
//! The public methods act on an unlocked array; a locked array is reached only through its
//! `LockGuard` (Rust) or its Python context, which present the lock id to the `*_with`
//! variants here.

pub(crate) mod access;
pub(crate) mod buffer_claim;
pub(crate) mod core;
#[cfg_attr(not(feature = "cuda"), path = "no_device.rs")]
pub(crate) mod device_side;
pub(crate) mod export;
pub(crate) mod foreign;
mod guard;
pub(crate) mod options;
mod owned;
#[cfg(feature = "python")]
pub(crate) use owned::{planes_shape, rows_shape, write_rows};
pub(crate) mod rebuild;

use std::marker::PhantomData;

use self::core::ArrayCore;
use crate::device::{Device, DeviceId, Residence};
use crate::element::{read_element, read_elements, Element, ElementOps};
use crate::error::{Error, Result};
use crate::indexer::{HostIndexer, HostIndexerMut};
use crate::lock::{check_access, LockId};
use crate::shape;
use crate::shape::MAX_NDIM;
use crate::stream::Stream;

pub use foreign::ForeignMemory;
pub use guard::LockGuard;
pub use options::ArrayOptions;

/// An N-dimensional array of `T` in C (row-major) order: a typed view of an `ArrayCore` whose
/// element type is `T` and whose rank is `N` (checked wherever a core becomes a `MemArray`).
#[repr(transparent)]
pub struct MemArray<T: Element, const N: usize> {
    core: ArrayCore,
    _element: PhantomData<T>,
}

impl<T: Element, const N: usize> MemArray<T, N> {
    const NDIM_IS_SUPPORTED: () = assert!(N >= 1 && N <= MAX_NDIM, "amso arrays have 1..=MAX_NDIM (8) dimensions");

    fn from_core(core: ArrayCore) -> Self {
        let () = Self::NDIM_IS_SUPPORTED;
        debug_assert!(Self::holds(&core));
        MemArray { core, _element: PhantomData }
    }

    /// Whether `core` holds `T` elements in `N` dimensions (what makes it a `MemArray<T, N>`).
    fn holds(core: &ArrayCore) -> bool {
        core.ops().describes::<T>() && core.ndim() == N
    }

    /// `core` as a `MemArray<T, N>`, if it holds `T` elements in `N` dimensions.
    #[cfg(any(feature = "python", test))]
    pub(crate) fn view(core: &ArrayCore) -> Option<&Self> {
        let () = Self::NDIM_IS_SUPPORTED;
        // SAFETY: `MemArray` is a transparent wrapper of `ArrayCore` (PhantomData is zero-sized),
        // and the core's element type and rank are `T` and `N` (checked).
        Self::holds(core).then(|| unsafe { &*(core as *const ArrayCore).cast::<Self>() })
    }

    /// `core` as a mutable `MemArray<T, N>`, if it holds `T` elements in `N` dimensions.
    #[cfg(any(feature = "python", test))]
    pub(crate) fn view_mut(core: &mut ArrayCore) -> Option<&mut Self> {
        let () = Self::NDIM_IS_SUPPORTED;
        // SAFETY: as `view`.
        Self::holds(core).then(|| unsafe { &mut *(core as *mut ArrayCore).cast::<Self>() })
    }

    /// The untyped array.
    pub(crate) fn core(&self) -> &ArrayCore {
        &self.core
    }

    /// The untyped array, mutable.
    pub(crate) fn core_mut(&mut self) -> &mut ArrayCore {
        &mut self.core
    }

    /// The untyped array, by value.
    #[cfg(feature = "python")]
    pub(crate) fn into_core(self) -> ArrayCore {
        self.core
    }

    /// A zero-filled host array of `shape` for device 0.
    pub fn new(shape: [usize; N]) -> Result<Self> {
        Self::with_options(shape, ArrayOptions::default())
    }

    /// A zero-filled host array of `shape` with `options`.
    pub fn with_options(shape: [usize; N], options: ArrayOptions) -> Result<Self> {
        let dims: [i64; N] = shape.map(|d| i64::try_from(d).unwrap_or(i64::MAX));
        Self::from_dims(&dims, options)
    }

    /// A zero-filled array from dimensions as Python or C give them (checked: count, sign,
    /// byte size).
    pub fn from_dims(dims: &[i64], options: ArrayOptions) -> Result<Self> {
        let () = Self::NDIM_IS_SUPPORTED;
        ArrayCore::from_dims(dims, N, ElementOps::of::<T>(), options).map(Self::from_core)
    }

    /// A host array of `shape` holding a copy of `values` (C order).
    pub fn from_slice(shape: [usize; N], values: &[T]) -> Result<Self> {
        let mut array = Self::new(shape)?;
        array.copy_from_slice(values)?;
        Ok(array)
    }

    /// A deep copy: new storage with the same contents, unlocked.
    pub fn try_clone(&self) -> Result<Self> {
        self.core.try_clone().map(Self::from_core)
    }

    /// The shape.
    pub fn shape(&self) -> &[usize; N] {
        self.core.shape().try_into().expect("a MemArray's core has N dimensions")
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.core.size()
    }

    /// Bytes of element data.
    pub fn nbytes(&self) -> usize {
        self.core.nbytes()
    }

    /// The CUDA device the array belongs to: where its device data is, and where a move to
    /// the device without another id puts it. [`device`](Self::device) is where the current
    /// data is (the host, or this device).
    pub fn cuda_device_id(&self) -> DeviceId {
        self.core.device_id()
    }

    /// Where the current data lives.
    pub fn residence(&self) -> Residence {
        self.core.residence()
    }

    /// Whether the current data is in device memory.
    pub fn on_device(&self) -> bool {
        self.core.residence() == Residence::Device
    }

    /// The device of the current data.
    pub fn device(&self) -> Device {
        self.core.device()
    }

    /// Whether writes are refused.
    pub fn readonly(&self) -> bool {
        self.core.readonly()
    }

    /// Refuse writes from now on, as NumPy's `setflags(write=False)` (exports made before
    /// keep the access they were given).
    pub fn make_readonly(&mut self) {
        self.core.make_readonly();
    }

    /// Whether the host buffer is page-locked.
    pub fn pinned(&self) -> bool {
        self.core.pinned()
    }

    /// Whether a lock (a `LockGuard`, or a Python `get_dlpack()` context) holds the array.
    pub fn is_locked(&self) -> bool {
        self.core.lock_id().is_some()
    }

    /// The number of the lock holding the array (0 when unlocked), for messages and the C
    /// header; it cannot be turned back into a lock.
    pub fn lock_number(&self) -> u64 {
        self.core.lock_id().map_or(0, LockId::get)
    }

    /// Lock the array for the lifetime of the returned guard; the borrow checker refuses any
    /// other use of the array meanwhile, and other holders (Python contexts) see it locked.
    pub fn lock(&mut self) -> Result<LockGuard<'_, T, N>> {
        LockGuard::new(self)
    }

    /// Lock with `id`; fails if already locked.
    pub(crate) fn enter(&mut self, id: LockId) -> Result<()> {
        self.core.enter(id)
    }

    /// Unlock `id`; fails if `id` does not hold the array.
    pub(crate) fn exit(&mut self, id: LockId) -> Result<()> {
        self.core.exit(id)
    }

    /// Read the element at `index` (bounds-checked). On the device this is a synchronous
    /// single-element copy.
    pub fn get(&self, index: [usize; N]) -> Result<T> {
        self.get_with(index, None)
    }

    pub(crate) fn get_with(&self, index: [usize; N], lock: Option<LockId>) -> Result<T> {
        check_access(self.core.lock_id(), lock)?;
        let offset = shape::linear_offset(self.shape(), &index)?;
        let mut value = std::mem::MaybeUninit::<T>::uninit();
        // SAFETY: an element of the array; `value` holds one.
        unsafe { self.core.raw_view().read_at(offset * size_of::<T>(), lock, value.as_mut_ptr().cast()) }?;
        // SAFETY: `read_at` filled all of `value`'s bytes; `read_element` makes them a valid `T`.
        Ok(unsafe { read_element(value.as_ptr()) })
    }

    /// Write `value` at `index` (bounds- and read-only-checked). On the device this is a
    /// synchronous single-element copy.
    pub fn write(&mut self, index: [usize; N], value: T) -> Result<()> {
        self.write_with(index, value, None)
    }

    pub(crate) fn write_with(&mut self, index: [usize; N], value: T, lock: Option<LockId>) -> Result<()> {
        check_access(self.core.lock_id(), lock)?;
        if self.core.readonly() {
            return Err(Error::ReadOnly);
        }
        let offset = shape::linear_offset(self.shape(), &index)?;
        // SAFETY: an element of the array; `value` holds one; `self` is borrowed mutably.
        unsafe { self.core.raw_view().write_at(offset * size_of::<T>(), lock, (&value as *const T).cast()) }
    }

    /// The contents in C order (host data only).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.to_vec_with(None)
    }

    pub(crate) fn to_vec_with(&self, lock: Option<LockId>) -> Result<Vec<T>> {
        self.core.check_host_access(lock)?;
        // SAFETY: the buffer holds `size` initialised elements; `read_elements` makes each a
        // valid `T` whatever bytes a foreign producer left there.
        Ok(unsafe { read_elements(self.data_ptr(), self.size()) })
    }

    /// Overwrite the contents with `values` (C order, exactly `size()` of them).
    pub fn copy_from_slice(&mut self, values: &[T]) -> Result<()> {
        self.copy_from_slice_with(values, None)
    }

    pub(crate) fn copy_from_slice_with(&mut self, values: &[T], lock: Option<LockId>) -> Result<()> {
        self.core.check_writable(lock)?;
        if values.len() != self.size() {
            return Err(Error::InvalidArgument(format!(
                "expected {} values for shape {:?}, got {}",
                self.size(),
                self.shape(),
                values.len()
            )));
        }
        // SAFETY: both runs hold `len` elements; `values` is a Rust slice, so it cannot alias
        // the host buffer, which no Rust reference ever points into.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.data_ptr(), values.len()) };
        Ok(())
    }

    /// The host buffer as `T`s (aligned: `MAX_ALIGN` or the foreign producer's, checked).
    fn data_ptr(&self) -> *mut T {
        self.core.host_ptr().cast()
    }

    /// A read-only indexer over the host data for tight loops; it borrows the array, so the
    /// array cannot change or be dropped while the indexer lives.
    pub fn indexer(&self) -> Result<HostIndexer<'_, T, N>> {
        self.indexer_with(None)
    }

    pub(crate) fn indexer_with(&self, lock: Option<LockId>) -> Result<HostIndexer<'_, T, N>> {
        self.core.check_host_access(lock)?;
        // SAFETY: pointer and shape describe this array's live buffer, which the returned
        // indexer's lifetime keeps borrowed.
        Ok(unsafe { HostIndexer::new(self.data_ptr(), *self.shape()) })
    }

    /// A writable indexer over the host data (refused for read-only arrays); it borrows the
    /// array exclusively.
    pub fn indexer_mut(&mut self) -> Result<HostIndexerMut<'_, T, N>> {
        self.indexer_mut_with(None)
    }

    pub(crate) fn indexer_mut_with(&mut self, lock: Option<LockId>) -> Result<HostIndexerMut<'_, T, N>> {
        self.core.check_writable(lock)?;
        // SAFETY: as above, borrowed exclusively.
        Ok(unsafe { HostIndexerMut::new(self.data_ptr(), *self.shape()) })
    }

    /// The address of the data where it is now: host memory, or CUDA device memory after a
    /// move to the device. For comparisons and logs; reads go through the typed accessors.
    pub fn data_address(&self) -> usize {
        #[cfg(feature = "cuda")]
        if self.core.residence() == crate::device::Residence::Device {
            return self.core.device_address() as usize;
        }
        self.core.host_ptr() as usize
    }

    /// Raw pointer to the host data, for callers that manage aliasing themselves.
    pub fn as_ptr(&self) -> Result<*const T> {
        self.core.check_host_access(None)?;
        Ok(self.data_ptr())
    }

    /// Raw mutable pointer to the host data (refused for read-only arrays).
    pub fn as_mut_ptr(&mut self) -> Result<*mut T> {
        self.core.check_writable(None)?;
        Ok(self.data_ptr())
    }

    /// How many exports (DLPack tensors and the views made from them) still hold the host
    /// memory; they keep it alive after the array is dropped.
    pub fn export_count(&self) -> usize {
        self.core.export_count()
    }

    /// Move the current data to `target`, copying on `stream`. Returns at once when the
    /// data is already there; with `async_copy` it returns once the copy is queued (pinned
    /// host memory) instead of done. Device memory is kept after moving back to the host, and
    /// exports keep whatever memory they describe alive.
    pub fn move_memory(&mut self, target: Device, stream: Stream, async_copy: bool) -> Result<()> {
        self.core.move_memory(target, stream, async_copy, None)
    }

    /// The MemArray design's kernel: add the sum of each element's indices to it, on the
    /// device (moving the data there first, on `stream`). Returns once the kernel is queued.
    #[cfg(feature = "cuda")]
    pub fn add_index_tuple(&mut self, stream: Stream) -> Result<()> {
        self.core.add_index_tuple(stream, None)
    }

    /// What a kernel receives for this array's device data: its device address and shape.
    /// The data stays on the device, and the array stays borrowed while the indexer lives.
    #[cfg(feature = "cuda")]
    pub fn device_indexer(&mut self) -> Result<crate::indexer::DeviceIndexer<'_, T, N>> {
        self.core.check_on_device()?;
        Ok(self.device_indexer_unchecked())
    }

    /// The device indexer for a kernel launched on `stream`, which is first
    /// ordered after amso's pending work on the array. Call `record_work(stream)` after the
    /// launch so that amso's later work on the array waits for the kernel.
    ///
    /// # Safety
    /// `stream` is a default stream or a live stream of the array's device (the driver
    /// dereferences handles).
    #[cfg(feature = "cuda")]
    pub unsafe fn device_indexer_on(&mut self, stream: Stream) -> Result<crate::indexer::DeviceIndexer<'_, T, N>> {
        self.core.check_on_device()?;
        // SAFETY: forwarded from the caller.
        unsafe { self.core.begin_on(stream) }?;
        Ok(self.device_indexer_unchecked())
    }

    /// Note work queued on `stream` (a kernel over `device_indexer_on(stream)`): amso's later
    /// work on the array, and its consumers, wait for it. Nothing to note (and `stream` is not
    /// looked at) while the data is on the host.
    ///
    /// # Safety
    /// As `device_indexer_on`.
    #[cfg(feature = "cuda")]
    pub unsafe fn record_work(&mut self, stream: Stream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.core.record_work(stream) }
    }

    #[cfg(feature = "cuda")]
    fn device_indexer_unchecked(&self) -> crate::indexer::DeviceIndexer<'static, T, N> {
        crate::indexer::DeviceIndexer::new(self.core.device_address(), *self.shape())
    }

    /// The stream a consumer of the device data must order after (a default stream, or a
    /// stream amso keeps alive); `None` on the host.
    pub fn stream(&self) -> Option<Stream> {
        self.core.stream()
    }
}

impl<T: Element, const N: usize> Clone for MemArray<T, N> {
    /// Deep copy. Panics only if the host allocation fails, as `Vec::clone` does; use
    /// `try_clone` to handle that.
    fn clone(&self) -> Self {
        self.try_clone().expect("allocation of the cloned MemArray failed")
    }
}

impl<T: Element, const N: usize> std::fmt::Debug for MemArray<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.core.fmt(f)
    }
}

#[cfg(test)]
mod tests;
