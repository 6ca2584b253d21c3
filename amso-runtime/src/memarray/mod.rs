//! `MemArray<T, N>`: an N-dimensional array of `T` with host storage, a residence (where the
//! current data lives), a device id, a lock and a read-only flag. Its methods live in this
//! module's files: element access over a type-erased view (`access`), DLPack exports
//! (`export`), arrays over foreign memory (`foreign`) and, with CUDA, the device side.
//!
//! The public methods act on an unlocked array; a locked array is reached only through its
//! `LockGuard` (Rust) or its Python context, which present the lock id to the `*_with`
//! variants here.

pub(crate) mod access;
#[cfg(feature = "cuda")]
pub(crate) mod device_side;
pub(crate) mod export;
pub(crate) mod foreign;

use std::sync::Arc;

use crate::device::{Device, DeviceType, Residence};
use crate::element::{read_elements, Element};
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::indexer::{HostIndexer, HostIndexerMut};
use crate::lock::{check_access, LockGuard, LockId};
use crate::shape::{self, checked_shape};
use crate::MAX_NDIM;

pub use foreign::ForeignMemory;

/// Construction options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrayOptions {
    /// The CUDA device the array moves to (0 by default).
    pub device_id: i32,
    /// Refuse writes (and export with DLPack's READ_ONLY flag).
    pub readonly: bool,
    /// Allocate the host buffer in page-locked memory (fast, asynchronous transfers).
    pub pinned: bool,
    /// Start on the device (device memory of `device_id`) instead of the host.
    pub on_device: bool,
    /// Leave new device memory uninitialised (`amso.empty`); host memory is always zeroed.
    pub uninitialized: bool,
}

impl ArrayOptions {
    /// Refuse options no array can have (written once, not per instantiation).
    pub(crate) fn check(&self) -> Result<()> {
        if self.device_id < 0 {
            return Err(Error::InvalidArgument(format!("device_id must be >= 0, got {}", self.device_id)));
        }
        #[cfg(feature = "cuda")]
        if crate::cuda::is_available() {
            crate::cuda::driver::check_device(self.device_id)?;
        }
        #[cfg(not(feature = "cuda"))]
        if self.pinned || self.on_device {
            return Err(Error::Unavailable(format!(
                "{} needs amso's CUDA layer, which this build does not include",
                if self.pinned { "pinned memory" } else { "on_device=True" }
            )));
        }
        Ok(())
    }
}

/// An N-dimensional array of `T` in C (row-major) order.
pub struct MemArray<T: Element, const N: usize> {
    shape: [usize; N],
    host: Arc<HostBuffer<T>>,
    residence: Residence,
    device_id: i32,
    lock: Option<LockId>,
    readonly: bool,
    #[cfg(feature = "cuda")]
    device: device_side::DeviceSide,
}

impl<T: Element, const N: usize> MemArray<T, N> {
    const NDIM_IS_SUPPORTED: () = assert!(N >= 1 && N <= MAX_NDIM, "amso arrays have 1..=MAX_NDIM (8) dimensions");

    /// A zero-filled host array of `shape` for device 0.
    pub fn new(shape: [usize; N]) -> Result<Self> {
        Self::with_options(shape, ArrayOptions::default())
    }

    /// A zero-filled host array of `shape` with `options`.
    pub fn with_options(shape: [usize; N], options: ArrayOptions) -> Result<Self> {
        let () = Self::NDIM_IS_SUPPORTED;
        let dims: Vec<i64> = shape.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)).collect();
        Self::from_dims(&dims, options)
    }

    /// A zero-filled array from dimensions as Python or C give them (checked: count, sign,
    /// byte size).
    pub fn from_dims(dims: &[i64], options: ArrayOptions) -> Result<Self> {
        let () = Self::NDIM_IS_SUPPORTED;
        options.check()?;
        let shape = checked_shape::<N>(dims, size_of::<T>())?;
        let host = HostBuffer::for_options(shape::element_count(&shape), &options)?;
        #[allow(unused_mut)] // only changed with the CUDA layer
        let mut array = Self::assemble(shape, Arc::new(host), options, Residence::Host);
        #[cfg(feature = "cuda")]
        {
            array.residence = array.device.start(&options, array.nbytes())?;
        }
        Ok(array)
    }

    /// An array from its parts, unlocked, with no device memory yet.
    pub(crate) fn assemble(
        shape: [usize; N],
        host: Arc<HostBuffer<T>>,
        options: ArrayOptions,
        residence: Residence,
    ) -> Self {
        let () = Self::NDIM_IS_SUPPORTED;
        MemArray {
            shape,
            host,
            residence,
            device_id: options.device_id,
            lock: None,
            readonly: options.readonly,
            #[cfg(feature = "cuda")]
            device: Default::default(),
        }
    }

    /// Take `device` as this array's device side on `device_id`.
    #[cfg(feature = "cuda")]
    pub(crate) fn adopt_device(&mut self, device_id: i32, device: device_side::DeviceSide) {
        self.device_id = device_id;
        self.device = device;
    }

    /// A host array of `shape` holding a copy of `values` (C order).
    pub fn from_slice(shape: [usize; N], values: &[T]) -> Result<Self> {
        let mut array = Self::new(shape)?;
        array.copy_from_slice(values)?;
        Ok(array)
    }

    /// A deep copy: new storage with the same contents, unlocked.
    pub fn try_clone(&self) -> Result<Self> {
        #[allow(unused_mut)] // only mutated with the CUDA layer
        let mut copy = MemArray {
            shape: self.shape,
            host: Arc::new(self.host.try_clone()?),
            residence: Residence::Host,
            device_id: self.device_id,
            lock: None,
            readonly: self.readonly,
            #[cfg(feature = "cuda")]
            device: Default::default(),
        };
        #[cfg(feature = "cuda")]
        if self.residence == Residence::Device {
            let memory = self.device.duplicate(self.device_id)?;
            copy.device = device_side::DeviceSide::with_memory(memory);
            copy.residence = Residence::Device;
        }
        Ok(copy)
    }

    /// The shape.
    pub fn shape(&self) -> &[usize; N] {
        &self.shape
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.host.len()
    }

    /// Bytes of element data.
    pub fn nbytes(&self) -> usize {
        self.host.len() * size_of::<T>()
    }

    /// The CUDA device this array moves to.
    pub fn device_id(&self) -> i32 {
        self.device_id
    }

    /// Where the current data lives.
    pub fn residence(&self) -> Residence {
        self.residence
    }

    /// Whether the current data is in device memory.
    pub fn on_device(&self) -> bool {
        self.residence == Residence::Device
    }

    /// The device of the current data.
    pub fn device(&self) -> Device {
        match self.residence {
            Residence::Host => Device::CPU,
            Residence::Device => Device { device_type: DeviceType::Cuda, id: self.device_id },
        }
    }

    /// Whether writes are refused.
    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// Refuse writes from now on, as NumPy's `setflags(write=False)` (exports made before
    /// keep the access they were given).
    pub fn make_readonly(&mut self) {
        self.readonly = true;
    }

    /// Whether the host buffer is page-locked.
    pub fn pinned(&self) -> bool {
        self.host.is_pinned()
    }

    /// Whether a lock (a `LockGuard`, or a Python `get_dlpack()` context) holds the array.
    pub fn is_locked(&self) -> bool {
        self.lock.is_some()
    }

    /// The number of the lock holding the array (0 when unlocked), for messages and the C
    /// header; it cannot be turned back into a lock.
    pub fn lock_number(&self) -> u64 {
        self.lock.map_or(0, LockId::get)
    }

    pub(crate) fn lock_id(&self) -> Option<LockId> {
        self.lock
    }

    /// Lock the array for the lifetime of the returned guard; the borrow checker refuses any
    /// other use of the array meanwhile, and other holders (Python contexts) see it locked.
    pub fn lock(&mut self) -> Result<LockGuard<'_, T, N>> {
        LockGuard::new(self)
    }

    /// Lock with `id` (a context's `__enter__`); fails if already locked.
    pub(crate) fn enter(&mut self, id: LockId) -> Result<()> {
        match self.lock {
            None => {
                self.lock = Some(id);
                Ok(())
            }
            Some(holder) => Err(Error::Locked { holder: holder.get() }),
        }
    }

    /// Unlock `id` (a context's `__exit__`); fails if `id` does not hold the array.
    pub(crate) fn exit(&mut self, id: LockId) -> Result<()> {
        check_access(self.lock, Some(id))?;
        self.lock = None;
        Ok(())
    }

    /// Check that `lock` may access the data, and that the data is in host memory.
    fn check_host_access(&self, lock: Option<LockId>) -> Result<()> {
        check_access(self.lock, lock)?;
        match self.residence {
            Residence::Host => Ok(()),
            Residence::Device => Err(Error::Unavailable(
                "the data is in device memory; move_memory(kDLCPU) first to touch it from the host".into(),
            )),
        }
    }

    fn check_writable(&self, lock: Option<LockId>) -> Result<()> {
        self.check_host_access(lock)?;
        if self.readonly {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    /// Read the element at `index` (bounds-checked). On the device this is a synchronous
    /// single-element copy.
    pub fn get(&self, index: [usize; N]) -> Result<T> {
        self.get_with(index, None)
    }

    pub(crate) fn get_with(&self, index: [usize; N], lock: Option<LockId>) -> Result<T> {
        check_access(self.lock, lock)?;
        let offset = shape::linear_offset(&self.shape, &index)?;
        self.element_at(offset * size_of::<T>(), lock)
    }

    /// Write `value` at `index` (bounds- and read-only-checked). On the device this is a
    /// synchronous single-element copy.
    pub fn write(&mut self, index: [usize; N], value: T) -> Result<()> {
        self.write_with(index, value, None)
    }

    pub(crate) fn write_with(&mut self, index: [usize; N], value: T, lock: Option<LockId>) -> Result<()> {
        check_access(self.lock, lock)?;
        if self.readonly {
            return Err(Error::ReadOnly);
        }
        let offset = shape::linear_offset(&self.shape, &index)?;
        self.set_element_at(offset * size_of::<T>(), value, lock)
    }

    /// The contents in C order (host data only).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.to_vec_with(None)
    }

    pub(crate) fn to_vec_with(&self, lock: Option<LockId>) -> Result<Vec<T>> {
        self.check_host_access(lock)?;
        // SAFETY: the buffer holds `len` initialised elements; `read_elements` makes each a
        // valid `T` whatever bytes a foreign producer left there.
        Ok(unsafe { read_elements(self.host.as_ptr(), self.host.len()) })
    }

    /// Overwrite the contents with `values` (C order, exactly `size()` of them).
    pub fn copy_from_slice(&mut self, values: &[T]) -> Result<()> {
        self.copy_from_slice_with(values, None)
    }

    pub(crate) fn copy_from_slice_with(&mut self, values: &[T], lock: Option<LockId>) -> Result<()> {
        self.check_writable(lock)?;
        if values.len() != self.size() {
            return Err(Error::InvalidArgument(format!(
                "expected {} values for shape {:?}, got {}",
                self.size(),
                self.shape,
                values.len()
            )));
        }
        // SAFETY: both runs hold `len` elements; `values` is a Rust slice, so it cannot alias
        // the host buffer, which no Rust reference ever points into.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.host.as_ptr(), values.len()) };
        Ok(())
    }

    /// A read-only indexer over the host data for tight loops; it borrows the array, so the
    /// array cannot change or be dropped while the indexer lives.
    pub fn indexer(&self) -> Result<HostIndexer<'_, T, N>> {
        self.indexer_with(None)
    }

    pub(crate) fn indexer_with(&self, lock: Option<LockId>) -> Result<HostIndexer<'_, T, N>> {
        self.check_host_access(lock)?;
        // SAFETY: pointer and shape describe this array's live buffer, which the returned
        // indexer's lifetime keeps borrowed.
        Ok(unsafe { HostIndexer::new(self.host.as_ptr(), self.shape) })
    }

    /// A writable indexer over the host data (refused for read-only arrays); it borrows the
    /// array exclusively.
    pub fn indexer_mut(&mut self) -> Result<HostIndexerMut<'_, T, N>> {
        self.indexer_mut_with(None)
    }

    pub(crate) fn indexer_mut_with(&mut self, lock: Option<LockId>) -> Result<HostIndexerMut<'_, T, N>> {
        self.check_writable(lock)?;
        // SAFETY: as above, borrowed exclusively.
        Ok(unsafe { HostIndexerMut::new(self.host.as_ptr(), self.shape) })
    }

    /// Raw pointer to the host data, for callers that manage aliasing themselves.
    pub fn as_ptr(&self) -> Result<*const T> {
        self.check_host_access(None)?;
        Ok(self.host.as_ptr())
    }

    /// Raw mutable pointer to the host data (refused for read-only arrays).
    pub fn as_mut_ptr(&mut self) -> Result<*mut T> {
        self.check_writable(None)?;
        Ok(self.host.as_ptr())
    }

    /// How many exports (DLPack tensors and the views made from them) still hold the host
    /// memory; they keep it alive after the array is dropped.
    pub fn export_count(&self) -> usize {
        let host = Arc::strong_count(&self.host) - 1;
        #[cfg(feature = "cuda")]
        return host + self.device.memory().map_or(0, |m| Arc::strong_count(m) - 1);
        #[cfg(not(feature = "cuda"))]
        host
    }

    /// The shared host allocation, kept alive by exports.
    pub(crate) fn host_buffer(&self) -> &Arc<HostBuffer<T>> {
        &self.host
    }

    /// Move the current data to `target`, copying on `stream` (0 or 1: legacy default
    /// stream, 2: per-thread default stream, else a stream handle). Returns at once when the
    /// data is already there; with `async_copy` it returns once the copy is queued (pinned
    /// host memory) instead of done. Device memory is kept after moving back to the host, and
    /// exports keep whatever memory they describe alive.
    pub fn move_memory(&mut self, target: Device, stream: i64, async_copy: bool) -> Result<()> {
        self.move_memory_with(target, stream, async_copy, None)
    }

    pub(crate) fn move_memory_with(
        &mut self,
        target: Device,
        stream: i64,
        async_copy: bool,
        lock: Option<LockId>,
    ) -> Result<()> {
        check_access(self.lock, lock)?;
        match (target.device_type, self.residence) {
            (DeviceType::Cpu, Residence::Host) => Ok(()),
            (DeviceType::Cuda, Residence::Device) if target.id == self.device_id => Ok(()),
            (DeviceType::CudaHost, _) => Err(Error::InvalidArgument(
                "move_memory targets kDLCPU or kDLCUDA; pinned host memory is chosen at construction (pinned=True)"
                    .into(),
            )),
            #[cfg(feature = "cuda")]
            (DeviceType::Cuda, Residence::Host) => {
                let (src, bytes, pinned) = (self.host.as_ptr().cast::<u8>(), self.nbytes(), self.host.is_pinned());
                // SAFETY: the host buffer holds `bytes` and lives as long as the array (and a
                // pinned asynchronous copy is ordered before any later use of it).
                unsafe { self.device.upload(target.id, src, bytes, pinned, stream, !async_copy) }?;
                self.device_id = target.id;
                self.residence = Residence::Device;
                Ok(())
            }
            #[cfg(feature = "cuda")]
            (DeviceType::Cuda, Residence::Device) => {
                self.device.change_device(self.device_id, target.id, self.nbytes(), stream)?;
                self.device_id = target.id;
                Ok(())
            }
            #[cfg(feature = "cuda")]
            (DeviceType::Cpu, Residence::Device) => {
                let (dst, bytes, pinned) = (self.host.as_ptr().cast::<u8>(), self.nbytes(), self.host.is_pinned());
                // SAFETY: the host buffer holds `bytes`; see above for asynchronous copies.
                unsafe { self.device.download(self.device_id, dst, bytes, pinned, stream, !async_copy) }?;
                self.residence = Residence::Host;
                Ok(())
            }
            #[cfg(not(feature = "cuda"))]
            _ => {
                let _ = (stream, async_copy);
                Err(Error::Unavailable(
                    "moving to kDLCUDA needs amso's CUDA layer, which this build does not include".into(),
                ))
            }
        }
    }

    /// The MemArray design's kernel: add the sum of each element's indices to it, on the
    /// device (moving the data there first, on `stream`). Returns once the kernel is queued.
    #[cfg(feature = "cuda")]
    pub fn add_index_tuple(&mut self, stream: i64) -> Result<()> {
        self.add_index_tuple_with(stream, None)
    }

    #[cfg(feature = "cuda")]
    pub(crate) fn add_index_tuple_with(&mut self, stream: i64, lock: Option<LockId>) -> Result<()> {
        check_access(self.lock, lock)?;
        if self.readonly {
            return Err(Error::ReadOnly);
        }
        self.move_memory_with(Device::cuda(self.device_id), stream, true, lock)?;
        let device_id = self.device_id;
        let stream = self.device.begin(device_id, stream)?;
        let indexer = self.device_indexer_unchecked();
        let mut any_rank =
            crate::cuda::kernels::AnyRankIndexer { data: indexer.device_address(), shape: [0; MAX_NDIM] };
        any_rank.shape[..N].copy_from_slice(&indexer.shape().map(|d| d as u64));
        // SAFETY: the indexer describes this array's live device memory of T::DTYPE on
        // `device_id`; the launch copies it by value before returning.
        unsafe { crate::cuda::kernels::launch_add_index(&T::DTYPE, N, &any_rank, device_id, stream.handle) }?;
        self.device.end(device_id, stream, false)
    }

    /// The device side (memory and stream), for exports.
    #[cfg(feature = "cuda")]
    pub(crate) fn device_side(&self) -> &device_side::DeviceSide {
        &self.device
    }

    /// What a kernel receives for this array's device data: its device address and shape.
    /// The data stays on the device, and the array stays borrowed while the indexer lives.
    #[cfg(feature = "cuda")]
    pub fn device_indexer(&mut self) -> Result<crate::indexer::DeviceIndexer<'_, T, N>> {
        check_access(self.lock, None)?;
        if self.residence != Residence::Device {
            return Err(Error::Unavailable(
                "the data is in host memory; move_memory(Device::cuda(id)) first to launch kernels on it".into(),
            ));
        }
        Ok(self.device_indexer_unchecked())
    }

    /// The device indexer for a kernel launched on `stream` (a protocol value), which is first
    /// ordered after amso's pending work on the array. Call `record_work(stream)` after the
    /// launch so that amso's later work on the array waits for the kernel.
    ///
    /// # Safety
    /// `stream` is 0, 1, 2 or a live stream of the array's device (the driver dereferences
    /// handles).
    #[cfg(feature = "cuda")]
    pub unsafe fn device_indexer_on(&mut self, stream: i64) -> Result<crate::indexer::DeviceIndexer<'_, T, N>> {
        check_access(self.lock, None)?;
        if self.residence != Residence::Device {
            return Err(Error::Unavailable(
                "the data is in host memory; move_memory(Device::cuda(id)) first to launch kernels on it".into(),
            ));
        }
        self.device.begin(self.device_id, stream)?;
        Ok(self.device_indexer_unchecked())
    }

    /// Note work queued on `stream` (a kernel over `device_indexer_on(stream)`): amso's later
    /// work on the array, and its consumers, wait for it.
    ///
    /// # Safety
    /// As `device_indexer_on`.
    #[cfg(feature = "cuda")]
    pub unsafe fn record_work(&mut self, stream: i64) -> Result<()> {
        let handle = crate::cuda::stream::StreamHandle::from_int(stream)?.check(self.device_id)?;
        self.device.end(self.device_id, handle, false)
    }

    #[cfg(feature = "cuda")]
    fn device_indexer_unchecked(&self) -> crate::indexer::DeviceIndexer<'static, T, N> {
        let data = self.device.memory().map_or(0, |memory| memory.ptr());
        crate::indexer::DeviceIndexer::new(data, self.shape)
    }

    /// The stream a consumer of the device data must order after (1: legacy default,
    /// 2: per-thread default, else a stream amso keeps alive); `None` on the host.
    pub fn stream(&self) -> Option<i64> {
        #[cfg(feature = "cuda")]
        if self.residence == Residence::Device {
            return Some(self.device.stream().as_int());
        }
        None
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
        f.debug_struct("MemArray")
            .field("dtype", &T::DTYPE.name)
            .field("shape", &self.shape)
            .field("residence", &self.residence)
            .field("device_id", &self.device_id)
            .field("locked", &self.is_locked())
            .field("readonly", &self.readonly)
            .finish()
    }
}

#[cfg(test)]
mod tests;
