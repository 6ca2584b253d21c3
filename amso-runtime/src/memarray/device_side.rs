//! The device side of a `MemArray`: its device memory (kept across moves, shared with
//! exports through `Arc`) and the stream of the last work on it. Work on a new stream is
//! ordered after that stream with an event; work on a caller's stream is handed over to
//! amso's own stream, so the stream amso publishes is one it keeps alive. Each operation
//! here makes its driver calls with the GIL released (`gil.rs`), once for the whole operation.

use std::sync::Arc;

use crate::cuda::capture;
use crate::cuda::context::Current;
use crate::cuda::device_memory::DeviceMemory;
use crate::cuda::request::Request;
use crate::cuda::stream::{self, Checked, StreamHandle};
use crate::cuda::transfer;
use crate::device::{DeviceId, Residence};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::host::HostEnd;
use crate::shape::MAX_NDIM;
use crate::stream::Stream;

/// Device memory and stream state of one array.
#[derive(Debug)]
pub(crate) struct DeviceSide {
    memory: Option<Arc<DeviceMemory>>,
    last: StreamHandle,
}

impl Default for DeviceSide {
    fn default() -> Self {
        DeviceSide { memory: None, last: StreamHandle::LEGACY }
    }
}

impl DeviceSide {
    /// A device side holding `memory`, with no pending work.
    pub(crate) fn with_memory(memory: Arc<DeviceMemory>) -> Self {
        DeviceSide { memory: Some(memory), last: StreamHandle::LEGACY }
    }

    /// The device memory, if any was allocated.
    pub(crate) fn memory(&self) -> Option<&Arc<DeviceMemory>> {
        self.memory.as_ref()
    }

    /// The stream the last work on the array was ordered on.
    pub(crate) fn stream(&self) -> StreamHandle {
        self.last
    }

    /// That stream as amso publishes it (`MemArray::stream`).
    pub(crate) fn last_stream(&self) -> Stream {
        self.last.stream()
    }

    /// How many exports still hold the device memory.
    pub(crate) fn export_holders(&self) -> usize {
        self.memory.as_ref().map_or(0, |memory| Arc::strong_count(memory) - 1)
    }

    /// Note work the caller queued on `stream` over the device data (`MemArray::record_work`).
    pub(crate) fn record_work(&mut self, device_id: DeviceId, stream: Stream) -> Result<()> {
        let handle = StreamHandle::of(stream)?.check(device_id)?;
        self.end(device_id, handle, false)
    }

    /// The MemArray design's kernel over the device data of `dtype` and `shape`, on `stream`.
    pub(crate) fn add_index(
        &mut self,
        device_id: DeviceId,
        dtype: &DType,
        shape: &[usize],
        stream: Stream,
    ) -> Result<()> {
        let stream = self.begin(device_id, stream)?;
        let data = self.memory.as_ref().map_or(0, |memory| memory.ptr());
        let mut any_rank = crate::cuda::add_index::AnyRankIndexer { data, shape: [0; MAX_NDIM] };
        for (slot, &dim) in any_rank.shape.iter_mut().zip(shape) {
            *slot = dim as u64;
        }
        // SAFETY: the indexer describes this array's live device memory of its dtype on
        // `device_id`; the launch copies it by value before returning.
        unsafe { crate::cuda::add_index::launch_add_index(dtype, shape.len(), &any_rank, device_id, stream.handle) }?;
        self.end(device_id, stream, false)
    }

    /// Resolve the caller's stream value for work on `device_id`, ordered after earlier work
    /// (under capture: earlier work completed first, see `cuda/capture.rs`).
    pub(crate) fn begin(&mut self, device_id: DeviceId, stream: Stream) -> Result<Checked> {
        crate::gil::released(|| {
            let stream = checked(device_id, stream)?;
            stream::order(device_id, self.last, stream)?;
            Ok(stream)
        })
    }

    /// Record that work was queued on `stream`; a caller's own stream is handed over to
    /// amso's stream so later consumers are given a stream that stays alive. Captured work
    /// has not run, so nothing is recorded for it.
    pub(crate) fn end(&mut self, device_id: DeviceId, stream: Checked, synchronize: bool) -> Result<()> {
        if stream.capturing() {
            return Ok(());
        }
        crate::gil::released(|| self.end_now(device_id, stream.handle, synchronize))
    }

    fn end_now(&mut self, device_id: DeviceId, stream: StreamHandle, synchronize: bool) -> Result<()> {
        self.last = if stream == StreamHandle::LEGACY || stream == StreamHandle::PER_THREAD {
            stream
        } else {
            let own = stream::amso_stream(device_id)?;
            if stream != own {
                stream::order(device_id, stream, own.check(device_id)?)?;
            }
            own
        };
        if let Some(memory) = &self.memory {
            memory.used_on(self.last);
        }
        if synchronize {
            stream::synchronize(device_id, stream)?;
        }
        Ok(())
    }

    /// Device memory of `bytes` on `device_id`, allocated on first use or when the array
    /// changes device; the old memory stays alive while exports hold it.
    pub(crate) fn ensure(&mut self, device_id: DeviceId, bytes: usize, stream: Checked) -> Result<&Arc<DeviceMemory>> {
        let fits = self.memory.as_ref().is_some_and(|m| m.device_id() == device_id && m.bytes() == bytes);
        if !fits {
            self.memory = Some(Arc::new(DeviceMemory::alloc_for(device_id, bytes, stream)?));
        }
        Ok(self.memory.as_ref().expect("just ensured"))
    }

    /// Whether the device memory is CUDA managed memory.
    pub(crate) fn managed(&self) -> bool {
        self.memory.as_ref().is_some_and(|memory| memory.managed())
    }

    /// A new array's start: device memory of `bytes` (zeroed unless `options.uninitialized`)
    /// when `options.on_device`. Returns where the data lives.
    pub(crate) fn start(
        &mut self,
        options: &crate::memarray::options::ArrayOptions,
        bytes: usize,
    ) -> Result<Residence> {
        if options.managed && options.shareable {
            return Err(Error::InvalidArgument(
                "an array is managed=True or shareable=True, not both: CUDA IPC maps cuMemAlloc memory only".into(),
            ));
        }
        if options.managed || options.shareable {
            let stream = crate::current_stream::resolve(None);
            crate::gil::released(|| -> Result<()> {
                let stream = self.begin(options.device_id, stream)?;
                let request = if options.managed { Request::Managed } else { Request::Shareable };
                let memory = DeviceMemory::alloc_from(request, options.device_id, bytes, stream.handle)?;
                if !options.uninitialized {
                    // SAFETY: the new allocation holds `bytes`; the memset is queued on `stream`.
                    unsafe { transfer::zero(options.device_id, memory.ptr(), bytes, stream.handle) }?;
                }
                self.memory = Some(Arc::new(memory));
                self.end(options.device_id, stream, false)
            })?;
            return Ok(Residence::Device);
        }
        if !options.on_device {
            return Ok(Residence::Host);
        }
        let stream = crate::current_stream::resolve(None);
        self.allocate(options.device_id, bytes, stream, !options.uninitialized)?;
        Ok(Residence::Device)
    }

    /// Fresh device memory of `bytes` on `device_id`, zeroed in order on `stream` if `zeroed`.
    pub(crate) fn allocate(&mut self, device_id: DeviceId, bytes: usize, stream: Stream, zeroed: bool) -> Result<()> {
        crate::gil::released(|| self.allocate_now(device_id, bytes, stream, zeroed))
    }

    fn allocate_now(&mut self, device_id: DeviceId, bytes: usize, stream: Stream, zeroed: bool) -> Result<()> {
        let stream = self.begin(device_id, stream)?;
        let memory = self.ensure(device_id, bytes, stream)?;
        if zeroed {
            // SAFETY: the new allocation holds `bytes`; the memset is queued on `stream`.
            unsafe { transfer::zero(device_id, memory.ptr(), bytes, stream.handle) }?;
        }
        self.end(device_id, stream, false)
    }

    /// Copy between host memory and the device memory on `stream` (the caller's), in the
    /// direction `host` says; a copy to the device allocates the memory on first use.
    ///
    /// # Safety
    /// `host` holds `bytes` bytes, readable or writable as its direction needs, alive until the
    /// copy completes when `pinned` and asynchronous.
    pub(crate) unsafe fn copy(
        &mut self,
        device_id: DeviceId,
        host: HostEnd,
        bytes: usize,
        pinned: bool,
        stream: Stream,
        synchronize: bool,
    ) -> Result<()> {
        crate::gil::released(|| {
            let stream = self.begin(device_id, stream)?;
            refuse_uncapturable(stream, pinned, synchronize)?;
            let device = match host {
                HostEnd::ToDevice(_) => self.ensure(device_id, bytes, stream)?.ptr(),
                HostEnd::FromDevice(_) => self.memory.as_ref().ok_or_else(no_device_memory)?.ptr(),
            };
            // SAFETY: the device memory holds `bytes` (ensured, or the array's own); the caller
            // vouches for the host end.
            unsafe { transfer::copy(device_id, host, device, bytes, pinned, stream.handle) }?;
            self.end(device_id, stream, synchronize)
        })
    }

    /// Move the device data to `target` device (a peer copy, complete when this returns).
    pub(crate) fn change_device(
        &mut self,
        from: DeviceId,
        target: DeviceId,
        bytes: usize,
        stream: Stream,
    ) -> Result<()> {
        crate::gil::released(|| self.change_device_now(from, target, bytes, stream))
    }

    fn change_device_now(&mut self, from: DeviceId, target: DeviceId, bytes: usize, stream: Stream) -> Result<()> {
        let source = self.memory.clone().ok_or_else(no_device_memory)?;
        let stream = checked(target, stream)?;
        if stream.capturing() {
            return Err(capture::refused(
                "a move between devices (complete when it returns)",
                stream.handle,
                "move the array before the capture begins",
            ));
        }
        stream::synchronize(from, self.last)?;
        self.last = StreamHandle::LEGACY;
        stream::order(target, self.last, stream)?;
        let dst = Arc::new(DeviceMemory::alloc_on(target, bytes, stream.handle)?);
        // SAFETY: both allocations hold `bytes`; the source's earlier work is complete.
        unsafe { transfer::device_to_peer(target, dst.ptr(), from, source.ptr(), bytes, stream.handle) }?;
        self.memory = Some(dst);
        // The source is freed (stream-ordered, on its own device) once `source` drops below;
        // nothing on that device is ordered after this copy, so a move between devices
        // completes before returning, `async_copy` or not.
        self.end(target, stream, true)
    }

    /// A device side over a copy of the device memory (`duplicate_memory`).
    pub(crate) fn duplicate(&self, device_id: DeviceId) -> Result<DeviceSide> {
        self.duplicate_memory(device_id).map(DeviceSide::with_memory)
    }

    /// A copy of the device memory (on the same device), complete when this returns.
    pub(crate) fn duplicate_memory(&self, device_id: DeviceId) -> Result<Arc<DeviceMemory>> {
        crate::gil::released(|| {
            let source = self.memory.as_ref().ok_or_else(no_device_memory)?;
            let copy = Arc::new(DeviceMemory::alloc_on(device_id, source.bytes(), self.last)?);
            // SAFETY: both hold `bytes`; ordered after the last work and synchronised below.
            unsafe { transfer::device_to_device(device_id, copy.ptr(), source.ptr(), source.bytes(), self.last) }?;
            stream::synchronize(device_id, self.last)?;
            Ok(copy)
        })
    }

    /// Read or write `len` bytes at `offset` of the device memory from or to host memory,
    /// synchronously (single-element access from Python).
    ///
    /// # Safety
    /// `host` holds `len` bytes; `offset + len` is within the device memory.
    pub(crate) unsafe fn access(
        &self,
        device_id: DeviceId,
        offset: usize,
        host: *mut u8,
        len: usize,
        write: bool,
    ) -> Result<()> {
        let memory = self.memory.as_ref().ok_or_else(no_device_memory)?;
        let (address, host) = (memory.ptr() + offset as u64, host as usize);
        if memory.managed() {
            // DLPack's rule for managed memory: once the work on it is done, read it in place.
            return crate::gil::released(|| {
                let _ctx = Current::enter(device_id)?;
                stream::synchronize(device_id, self.last)?;
                // SAFETY: managed memory is addressable from the host at its device address;
                // the caller guarantees both ranges, and the device's work on it is done.
                unsafe {
                    if write {
                        std::ptr::copy(host as *const u8, address as usize as *mut u8, len);
                    } else {
                        std::ptr::copy_nonoverlapping(address as usize as *const u8, host as *mut u8, len);
                    }
                }
                Ok(())
            });
        }
        crate::gil::released(|| {
            let _ctx = Current::enter(device_id)?;
            // Synchronous copies on the legacy stream: relaxed, so that a capture in progress on
            // another stream stays valid (they see the data as it is, see `cuda/capture.rs`).
            let _relaxed = capture::Relaxed::enter();
            stream::synchronize(device_id, self.last)?;
            let host = if write { HostEnd::ToDevice(host) } else { HostEnd::FromDevice(host) };
            // SAFETY: the caller guarantees both ranges; the copies are synchronous.
            unsafe { transfer::copy(device_id, host, address, len, false, StreamHandle::LEGACY) }?;
            stream::synchronize(device_id, StreamHandle::LEGACY)
        })
    }

    /// Note that the device memory is being handed to a consumer (DLPack, the interface dict).
    pub(crate) fn share(&self) {
        if let Some(memory) = &self.memory {
            memory.mark_shared();
        }
    }

    /// Make `consumer` wait for the array's pending work (DLPack's stream handshake).
    pub(crate) fn hand_to(&self, device_id: DeviceId, consumer: StreamHandle) -> Result<()> {
        if consumer == self.last {
            return Ok(());
        }
        crate::gil::released(|| stream::order(device_id, self.last, consumer.check(device_id)?))
    }
}

/// The caller's stream value for work on `device_id`, checked (with the device).
fn checked(device_id: DeviceId, stream: Stream) -> Result<Checked> {
    crate::cuda::driver::require()?;
    StreamHandle::of(stream)?.check(device_id)
}

/// Refuse, before anything is queued, a host <-> device copy that a capture on `stream`
/// cannot hold: pageable host memory is staged on the host, and a synchronous copy would
/// wait for work that has not run.
fn refuse_uncapturable(stream: Checked, pinned: bool, synchronize: bool) -> Result<()> {
    if !stream.capturing() {
        Ok(())
    } else if !pinned {
        Err(capture::refused(
            "a move between pageable host memory and the device (amso stages it through pinned buffers on the host)",
            stream.handle,
            "create the array with pinned=True, or move it before the capture begins",
        ))
    } else if synchronize {
        Err(capture::refused(
            "a synchronous move (complete when it returns)",
            stream.handle,
            "pass async_copy=True: the copy then runs at each launch of the graph",
        ))
    } else {
        Ok(())
    }
}

/// The error of a device copy of an array whose device memory is gone (an internal fault).
fn no_device_memory() -> Error {
    Error::Cuda { call: "a device copy", code: None, message: "the array has no device memory".into() }
}
