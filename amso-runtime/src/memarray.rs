//! `MemArray<T, N>`: an N-dimensional array of `T` with host storage, a residence (where the
//! current data lives), a device id, a lock and a read-only flag.

use std::sync::Arc;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::indexer::ArrayIndexer;
use crate::lock::{check_access, LockGuard, LockId};
use crate::shape::{self, checked_shape};
use crate::MAX_NDIM;

/// DLPack device types amso handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DeviceType {
    /// Host memory (`kDLCPU`).
    Cpu = 1,
    /// CUDA device memory (`kDLCUDA`).
    Cuda = 2,
    /// Pinned host memory registered with CUDA (`kDLCUDAHost`); only as an export target.
    CudaHost = 3,
}

impl DeviceType {
    /// The device type for a DLPack code; other codes are `UnsupportedDevice`.
    pub fn from_dlpack(code: i32) -> Result<DeviceType> {
        match code {
            1 => Ok(DeviceType::Cpu),
            2 => Ok(DeviceType::Cuda),
            3 => Ok(DeviceType::CudaHost),
            other => Err(Error::UnsupportedDevice(other)),
        }
    }
}

/// A DLPack device: type and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    /// Host or CUDA.
    pub device_type: DeviceType,
    /// Device ordinal (0 for the host).
    pub id: i32,
}

impl Device {
    /// The host.
    pub const CPU: Device = Device { device_type: DeviceType::Cpu, id: 0 };

    /// CUDA device `id`.
    pub const fn cuda(id: i32) -> Device {
        Device { device_type: DeviceType::Cuda, id }
    }
}

/// Where an array's current data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residence {
    /// In the host buffer.
    Host,
    /// In the device buffer of the array's device id.
    Device,
}

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
    device: crate::device::DeviceSide,
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
    pub(crate) fn adopt_device(&mut self, device_id: i32, device: crate::device::DeviceSide) {
        self.device_id = device_id;
        self.device = device;
    }

    /// A host array of `shape` holding a copy of `values` (C order).
    pub fn from_slice(shape: [usize; N], values: &[T]) -> Result<Self> {
        let mut array = Self::new(shape)?;
        array.copy_from_slice(values, None)?;
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
            copy.device = crate::device::DeviceSide::with_memory(memory);
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

    /// Whether the host buffer is page-locked.
    pub fn pinned(&self) -> bool {
        self.host.is_pinned()
    }

    /// The id of the context holding the array, if any.
    pub fn lock_id(&self) -> Option<LockId> {
        self.lock
    }

    /// Lock the array for the lifetime of the returned guard; the borrow checker refuses any
    /// other use of the array meanwhile.
    pub fn lock(&mut self) -> Result<LockGuard<'_, T, N>> {
        LockGuard::new(self)
    }

    /// Lock with `id` (a Python context's `__enter__`); fails if already locked.
    pub fn enter(&mut self, id: LockId) -> Result<()> {
        match self.lock {
            None => {
                self.lock = Some(id);
                Ok(())
            }
            Some(holder) => Err(Error::Locked { holder: holder.get() }),
        }
    }

    /// Unlock `id` (a context's `__exit__`); fails if `id` does not hold the array.
    pub fn exit(&mut self, id: LockId) -> Result<()> {
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

    /// Read the element at `index` (bounds- and lock-checked). On the device this is a
    /// synchronous single-element copy.
    pub fn get(&self, index: [usize; N], lock: Option<LockId>) -> Result<T> {
        check_access(self.lock, lock)?;
        let offset = shape::linear_offset(&self.shape, &index)?;
        self.element_at(offset * size_of::<T>(), lock)
    }

    /// Write `value` at `index` (bounds-, lock- and read-only-checked). On the device this
    /// is a synchronous single-element copy.
    pub fn write(&mut self, index: [usize; N], value: T, lock: Option<LockId>) -> Result<()> {
        check_access(self.lock, lock)?;
        if self.readonly {
            return Err(Error::ReadOnly);
        }
        let offset = shape::linear_offset(&self.shape, &index)?;
        self.set_element_at(offset * size_of::<T>(), value, lock)
    }

    /// The contents in C order.
    pub fn to_vec(&self, lock: Option<LockId>) -> Result<Vec<T>> {
        self.check_host_access(lock)?;
        // SAFETY: the buffer holds `len` initialised elements.
        Ok(unsafe { std::slice::from_raw_parts(self.host.as_ptr(), self.host.len()) }.to_vec())
    }

    /// Overwrite the contents with `values` (C order, exactly `size()` of them).
    pub fn copy_from_slice(&mut self, values: &[T], lock: Option<LockId>) -> Result<()> {
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

    /// An indexer over the host data for kernels and tight loops; it borrows the array, so
    /// the array cannot be used or dropped while the indexer lives.
    pub fn indexer(&mut self, lock: Option<LockId>) -> Result<ArrayIndexer<'_, T, N>> {
        self.check_host_access(lock)?;
        // SAFETY: pointer and shape describe this array's live buffer, which the returned
        // indexer's lifetime keeps borrowed.
        Ok(unsafe { ArrayIndexer::new(self.host.as_ptr(), self.shape) })
    }

    /// Raw pointer to the host data, for callers that manage aliasing themselves.
    pub fn as_ptr(&self, lock: Option<LockId>) -> Result<*const T> {
        self.check_host_access(lock)?;
        Ok(self.host.as_ptr())
    }

    /// Raw mutable pointer to the host data (refused for read-only arrays).
    pub fn as_mut_ptr(&mut self, lock: Option<LockId>) -> Result<*mut T> {
        self.check_writable(lock)?;
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
    pub fn move_memory(&mut self, target: Device, stream: i64, async_copy: bool, lock: Option<LockId>) -> Result<()> {
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
                self.device.change_device(self.device_id, target.id, self.nbytes(), stream, !async_copy)?;
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
    pub fn add_index_tuple(&mut self, stream: i64, lock: Option<LockId>) -> Result<()> {
        check_access(self.lock, lock)?;
        if self.readonly {
            return Err(Error::ReadOnly);
        }
        self.move_memory(Device::cuda(self.device_id), stream, true, lock)?;
        let device_id = self.device_id;
        let stream = self.device.begin(device_id, stream)?;
        let data = self.device.memory().expect("moved to the device above").ptr();
        // SAFETY: the indexer describes this array's live device memory; it is read by the
        // kernel launch (by value) before this function returns.
        let indexer = unsafe { ArrayIndexer::<T, N>::new(data as usize as *mut T, self.shape) };
        // SAFETY: see above; `size()` elements of T::DTYPE live at `data` on `device_id`.
        unsafe {
            crate::cuda::kernels::launch_add_index(
                &T::DTYPE,
                N,
                (&indexer as *const ArrayIndexer<T, N>).cast(),
                self.size(),
                device_id,
                stream,
            )
        }?;
        self.device.end(device_id, stream, false)
    }

    /// The device side (memory and stream), for exports.
    #[cfg(feature = "cuda")]
    pub(crate) fn device_side(&self) -> &crate::device::DeviceSide {
        &self.device
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
            .field("locked", &self.lock.is_some())
            .field("readonly", &self.readonly)
            .finish()
    }
}

#[cfg(test)]
mod tests;
