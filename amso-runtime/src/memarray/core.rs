//! `ArrayCore`: an array's state and every operation on it that does not need the element type
//! at compile time: shape, host storage, residence, device side, lock and read-only flag.
//! `MemArray<T, N>` is a typed view of one core; the Python classes and the C ABI hold cores.
//! Written once, so each instantiation adds no code here.

use std::sync::Arc;

use crate::device::{Device, DeviceId, DeviceType, Residence};

use crate::element::{DType, ElementOps, Scalar};
use crate::error::{Error, Result};
use crate::host::{HostBuffer, HostEnd};
use crate::lock::{check_access, LockId};
use crate::memarray::device_side::DeviceSide;
use crate::memarray::options::ArrayOptions;
use crate::shape;
use crate::shape::MAX_NDIM;
use crate::stream::Stream;

/// An array of any element type and rank, in C (row-major) order.
pub(crate) struct ArrayCore {
    ops: &'static ElementOps,
    ndim: usize,
    /// The first `ndim` entries are the shape.
    shape: [usize; MAX_NDIM],
    host: Arc<HostBuffer>,
    residence: Residence,
    device_id: DeviceId,
    lock: Option<LockId>,
    readonly: bool,
    /// Device memory and stream (`device_side.rs`; `no_device.rs` without the CUDA layer).
    device: DeviceSide,
}

impl ArrayCore {
    /// A zero-filled array of `ndim` dimensions `dims` (checked: count, sign, byte size) of the
    /// element type `ops` describes.
    pub(crate) fn from_dims(
        dims: &[i64],
        ndim: usize,
        ops: &'static ElementOps,
        options: ArrayOptions,
    ) -> Result<Self> {
        options.check()?;
        let (shape, bytes) = shape::checked_shape(dims, ndim, ops.itemsize())?;
        let host = HostBuffer::zeroed_for(bytes, options.pinned)?;
        let mut array = Self::assemble(&shape[..ndim], ops, Arc::new(host), options, Residence::Host);
        array.residence = array.device.start(&options, array.nbytes())?;
        Ok(array)
    }

    /// An array from its parts (`shape` checked by the caller), unlocked, with no device memory
    /// yet.
    pub(crate) fn assemble(
        shape: &[usize],
        ops: &'static ElementOps,
        host: Arc<HostBuffer>,
        options: ArrayOptions,
        residence: Residence,
    ) -> Self {
        let mut full = [0; MAX_NDIM];
        full[..shape.len()].copy_from_slice(shape);
        ArrayCore {
            ops,
            ndim: shape.len(),
            shape: full,
            host,
            residence,
            device_id: options.device_id,
            lock: None,
            readonly: options.readonly,
            #[allow(clippy::default_constructed_unit_structs)] // a unit struct without the CUDA layer
            device: DeviceSide::default(),
        }
    }

    /// Take `device` as this array's device side on `device_id`.
    #[cfg(feature = "cuda")]
    pub(crate) fn adopt_device(&mut self, device_id: DeviceId, device: DeviceSide) {
        self.device_id = device_id;
        self.device = device;
    }

    /// A deep copy: new storage with the same contents, unlocked.
    pub(crate) fn try_clone(&self) -> Result<Self> {
        let options = ArrayOptions { device_id: self.device_id, readonly: self.readonly, ..Default::default() };
        let mut copy =
            Self::assemble(self.shape(), self.ops, Arc::new(self.host.try_clone()?), options, Residence::Host);
        if self.residence == Residence::Device {
            copy.device = self.device.duplicate(self.device_id)?;
            copy.residence = Residence::Device;
        }
        Ok(copy)
    }

    /// The element type's table.
    pub(crate) fn ops(&self) -> &'static ElementOps {
        self.ops
    }

    /// The element type.
    pub(crate) fn dtype(&self) -> &'static DType {
        self.ops.dtype
    }

    /// The number of dimensions.
    pub(crate) fn ndim(&self) -> usize {
        self.ndim
    }

    /// The shape.
    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape[..self.ndim]
    }

    /// Number of elements.
    pub(crate) fn size(&self) -> usize {
        shape::element_count(self.shape())
    }

    /// Bytes of element data.
    pub(crate) fn nbytes(&self) -> usize {
        self.host.nbytes()
    }

    pub(crate) fn device_id(&self) -> DeviceId {
        self.device_id
    }

    pub(crate) fn residence(&self) -> Residence {
        self.residence
    }

    /// The device of the current data.
    pub(crate) fn device(&self) -> Device {
        self.residence.device(self.device_id)
    }

    pub(crate) fn readonly(&self) -> bool {
        self.readonly
    }

    pub(crate) fn make_readonly(&mut self) {
        self.readonly = true;
    }

    pub(crate) fn pinned(&self) -> bool {
        self.host.is_pinned()
    }

    pub(crate) fn lock_id(&self) -> Option<LockId> {
        self.lock
    }

    /// Lock with `id` (a context's `__enter__`, a `LockGuard`); fails if already locked.
    pub(crate) fn enter(&mut self, id: LockId) -> Result<()> {
        match self.lock {
            None => {
                self.lock = Some(id);
                Ok(())
            }
            Some(holder) => Err(Error::Locked { holder: holder.get() }),
        }
    }

    /// Unlock `id`; fails if `id` does not hold the array.
    pub(crate) fn exit(&mut self, id: LockId) -> Result<()> {
        check_access(self.lock, Some(id))?;
        self.lock = None;
        Ok(())
    }

    /// Check that `lock` may access the data, and that the data is in host memory.
    pub(crate) fn check_host_access(&self, lock: Option<LockId>) -> Result<()> {
        check_access(self.lock, lock)?;
        self.residence.host_only()
    }

    /// As `check_host_access`, and refuse read-only arrays.
    pub(crate) fn check_writable(&self, lock: Option<LockId>) -> Result<()> {
        self.check_host_access(lock)?;
        if self.readonly {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    /// The host buffer's first byte (checked access is the caller's).
    pub(crate) fn host_ptr(&self) -> *mut u8 {
        self.host.as_ptr()
    }

    /// The shared host allocation, kept alive by exports.
    pub(crate) fn host_buffer(&self) -> &Arc<HostBuffer> {
        &self.host
    }

    /// How many exports still hold the array's memory (see `MemArray::export_count`).
    pub(crate) fn export_count(&self) -> usize {
        Arc::strong_count(&self.host) - 1 + self.device.export_holders()
    }

    /// Read the element at a Python-style `index` (negative counts from the end).
    pub(crate) fn get_scalar(&self, index: &[i64], lock: Option<LockId>) -> Result<Scalar> {
        let view = self.raw_view();
        let mut slot = Slot::new(self.ops)?;
        // SAFETY: an element of the array (`offset` checks the index); `slot` holds one.
        unsafe { view.read_at(view.offset(index)?, lock, slot.as_mut_ptr()) }?;
        // SAFETY: `slot` holds the element's bytes.
        unsafe { self.ops.read(slot.as_mut_ptr()) }
    }

    /// Write `value` (converted as NumPy's item assignment does) at a Python-style `index`.
    pub(crate) fn set_scalar(&mut self, index: &[i64], value: Scalar, lock: Option<LockId>) -> Result<()> {
        let mut slot = Slot::new(self.ops)?;
        // SAFETY: `slot` has room for one element.
        unsafe { self.ops.write(value, slot.as_mut_ptr()) }?;
        let view = self.raw_view();
        // SAFETY: an element of the array; `slot` holds one; `self` is borrowed mutably.
        unsafe { view.write_at(view.offset(index)?, lock, slot.as_mut_ptr()) }
    }

    /// Move the current data to `target` (see `MemArray::move_memory`), presenting `lock`.
    pub(crate) fn move_memory(
        &mut self,
        target: Device,
        stream: Stream,
        async_copy: bool,
        lock: Option<LockId>,
    ) -> Result<()> {
        check_access(self.lock, lock)?;
        match (target.device_type, self.residence) {
            (DeviceType::Cpu, Residence::Host) => Ok(()),
            (DeviceType::Cuda, Residence::Device) if target.id == self.device_id => Ok(()),
            (DeviceType::CudaManaged, _) => Err(Error::InvalidArgument(
                "move_memory targets kDLCPU or kDLCUDA; managed memory is chosen at construction (managed=True)".into(),
            )),
            (DeviceType::CudaHost, _) => Err(Error::InvalidArgument(
                "move_memory targets kDLCPU or kDLCUDA; pinned host memory is chosen at construction (pinned=True)"
                    .into(),
            )),
            (DeviceType::Cuda, Residence::Host) => {
                let (src, bytes, pinned) = (self.host.as_ptr().cast_const(), self.nbytes(), self.host.is_pinned());
                // SAFETY: the host buffer holds `bytes` and lives as long as the array (and a
                // pinned asynchronous copy is ordered before any later use of it).
                unsafe { self.device.copy(target.id, HostEnd::to_device(src), bytes, pinned, stream, !async_copy) }?;
                self.device_id = target.id;
                self.residence = Residence::Device;
                Ok(())
            }
            (DeviceType::Cuda, Residence::Device) => {
                self.device.change_device(self.device_id, target.id, self.nbytes(), stream)?;
                self.device_id = target.id;
                Ok(())
            }
            (DeviceType::Cpu, Residence::Device) => {
                let (dst, bytes, pinned) = (self.host.as_ptr(), self.nbytes(), self.host.is_pinned());
                // SAFETY: the host buffer holds `bytes`; see above for asynchronous copies.
                unsafe {
                    self.device.copy(self.device_id, HostEnd::from_device(dst), bytes, pinned, stream, !async_copy)
                }?;
                self.residence = Residence::Host;
                Ok(())
            }
        }
    }

    /// The MemArray design's kernel (see `MemArray::add_index_tuple`), presenting `lock`.
    #[cfg(any(feature = "python", feature = "cuda"))]
    pub(crate) fn add_index_tuple(&mut self, stream: Stream, lock: Option<LockId>) -> Result<()> {
        check_access(self.lock, lock)?;
        if self.readonly {
            return Err(Error::ReadOnly);
        }
        self.move_memory(Device::cuda(self.device_id), stream, true, lock)?;
        let shape = &self.shape[..self.ndim];
        self.device.add_index(self.device_id, self.ops.dtype, shape, stream)
    }

    /// The device side (memory and stream), for exports.
    #[cfg(feature = "cuda")]
    pub(crate) fn device_side(&self) -> &DeviceSide {
        &self.device
    }

    /// Fail unless the current data is on the device (for kernels' indexers).
    #[cfg(feature = "cuda")]
    pub(crate) fn check_on_device(&self) -> Result<()> {
        check_access(self.lock, None)?;
        if self.residence != Residence::Device {
            return Err(Error::Unavailable(
                "the data is in host memory; move_memory(Device::cuda(id)) first to launch kernels on it".into(),
            ));
        }
        Ok(())
    }

    /// Order a kernel about to run on `stream` after amso's pending work on the data.
    ///
    /// # Safety
    /// `stream` is 0, 1, 2 or a live stream of the array's device.
    #[cfg(feature = "cuda")]
    pub(crate) unsafe fn begin_on(&mut self, stream: Stream) -> Result<()> {
        self.device.begin(self.device_id, stream).map(drop)
    }

    /// Note work queued on `stream` over the device data (see `MemArray::record_work`); nothing
    /// to note while the data is on the host.
    ///
    /// # Safety
    /// As `begin_on`.
    #[cfg(any(feature = "python", feature = "cuda"))]
    pub(crate) unsafe fn record_work(&mut self, stream: Stream) -> Result<()> {
        match self.residence {
            Residence::Device => self.device.record_work(self.device_id, stream),
            Residence::Host => Ok(()),
        }
    }

    /// Overwrite the whole current data from host memory `src` of `nbytes` bytes.
    ///
    /// # Safety
    /// `src` is valid for reads of `nbytes` bytes (it may be a view of the array itself).
    #[cfg(feature = "python")]
    pub(crate) unsafe fn copy_from(&mut self, src: *const u8, nbytes: usize, lock: Option<LockId>) -> Result<()> {
        // SAFETY: forwarded from the caller; `self` is borrowed mutably.
        unsafe { self.raw_view().copy_from(src, nbytes, lock) }
    }

    /// Overwrite the device data from host memory `src` of `nbytes` bytes, queued on `stream`
    /// through the staging pipeline (pageable memory): `src` has been read when this returns,
    /// the copy to the device completes in order on the stream. On the host, a plain copy.
    ///
    /// # Safety
    /// `src` is valid for reads of `nbytes` bytes and does not alias the array.
    #[cfg(feature = "python")]
    pub(crate) unsafe fn upload_from(&mut self, src: *const u8, nbytes: usize, stream: Stream) -> Result<()> {
        if self.residence == Residence::Device {
            if nbytes != self.nbytes() {
                return Err(Error::InvalidArgument(format!("{nbytes} bytes for an array of {}", self.nbytes())));
            }
            check_access(self.lock, None)?;
            // SAFETY: forwarded from the caller; the device memory is this array's.
            return unsafe { self.device.copy(self.device_id, HostEnd::to_device(src), nbytes, false, stream, false) };
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.copy_from(src, nbytes, None) }
    }

    /// An independent copy on the same device, presenting `lock`.
    #[cfg(feature = "python")]
    pub(crate) fn duplicate(&self, lock: Option<LockId>) -> Result<ArrayCore> {
        check_access(self.lock, lock)?;
        self.try_clone()
    }

    /// The device address of the data (0 before the first move).
    #[cfg(feature = "cuda")]
    pub(crate) fn device_address(&self) -> u64 {
        self.device.memory().map_or(0, |memory| memory.ptr())
    }

    /// The stream a consumer of the device data must order after; `None` on the host.
    pub(crate) fn stream(&self) -> Option<Stream> {
        (self.residence == Residence::Device).then(|| self.device.last_stream())
    }
}

impl std::fmt::Debug for ArrayCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemArray")
            .field("dtype", &self.dtype().name)
            .field("shape", &self.shape())
            .field("residence", &self.residence)
            .field("device_id", &self.device_id)
            .field("locked", &self.lock.is_some())
            .field("readonly", &self.readonly)
            .finish()
    }
}

/// Room for one element of any type, aligned for all of them.
#[repr(C, align(16))]
struct Slot([u8; 32]);

impl Slot {
    fn new(ops: &ElementOps) -> Result<Slot> {
        if ops.itemsize() > size_of::<Slot>() {
            return Err(Error::Unavailable(format!(
                "{}-byte elements ({}) are too wide for element access; read the array through DLPack",
                ops.itemsize(),
                ops.dtype.name
            )));
        }
        Ok(Slot([0; 32]))
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr()
    }
}
