//! Device memory and pinned host memory, each freed when dropped. Exports hold them through
//! `Arc`, so a free is deferred until the last consumer lets go.

use cudarc::driver::{result, sys};

use super::context::Current;
use super::driver::map_error;
use crate::device::DeviceId;
use crate::error::Result;
use crate::stream::Stream;

/// An allocation in one device's global memory.
pub(crate) struct DeviceMemory {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    device_id: DeviceId,
    /// Keeps foreign device memory alive; dropping it releases that memory.
    foreign: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// The process pool's grant (None for foreign memory and zero bytes).
    grant: Option<super::pool::Grant>,
    /// What was asked of the pool.
    #[cfg_attr(not(feature = "python"), allow(dead_code))] // read by `shareable`
    request: super::request::Request,
    /// The stream of the last work on it (a protocol value), which its free is ordered after.
    last_stream: std::sync::atomic::AtomicI64,
    /// Set once handed to a consumer (DLPack, the interface dict): its free then waits for
    /// the whole device, since the consumer's streams are unknown.
    shared: std::sync::atomic::AtomicBool,
    /// CUDA managed memory (kDLCUDAManaged): the host may read it in place once the device's
    /// work on it is done.
    managed: bool,
}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("ptr", &format_args!("0x{:x}", self.ptr))
            .field("bytes", &self.bytes)
            .field("device_id", &self.device_id)
            .field("foreign", &self.foreign.is_some())
            .finish()
    }
}

impl DeviceMemory {
    /// Allocate `bytes` on `device_id` from the current allocator, in order on amso's stream
    /// (zero bytes allocate nothing and have address 0).
    pub(crate) fn alloc(device_id: DeviceId, bytes: usize) -> Result<DeviceMemory> {
        Self::alloc_on(device_id, bytes, super::stream::amso_stream(device_id)?)
    }

    /// Allocate `bytes` on `device_id`, usable in order on `stream`.
    pub(crate) fn alloc_on(
        device_id: DeviceId,
        bytes: usize,
        stream: super::stream::StreamHandle,
    ) -> Result<DeviceMemory> {
        Self::alloc_from(super::request::Request::Current, device_id, bytes, stream)
    }

    /// Whether other processes can map this memory (`Request::Shareable`).
    #[cfg(feature = "python")]
    pub(crate) fn shareable(&self) -> bool {
        self.grant.is_some() && self.request == super::request::Request::Shareable
    }

    /// Allocate `bytes` on `device_id` from the process's pool for `request` (`Managed`: CUDA
    /// managed memory, within the device's free memory; `Shareable`: memory other processes
    /// can map), usable in order on `stream`.
    pub(crate) fn alloc_from(
        request: super::request::Request,
        device_id: DeviceId,
        bytes: usize,
        stream: super::stream::StreamHandle,
    ) -> Result<DeviceMemory> {
        let managed = request == super::request::Request::Managed;
        let grant = if bytes > 0 {
            Some(super::pool::allocate(request, device_id, bytes, stream, super::request::Client::Amso)?)
        } else {
            None
        };
        Ok(DeviceMemory {
            ptr: grant.as_ref().map_or(0, |g| g.ptr),
            bytes,
            device_id,
            foreign: None,
            grant,
            request,
            last_stream: std::sync::atomic::AtomicI64::new(stream.stream().protocol_value()),
            shared: std::sync::atomic::AtomicBool::new(false),
            managed,
        })
    }

    /// Allocate `bytes` on `device_id` for work on `stream`. For a capturing stream the memory
    /// is allocated outside the capture, on amso's own stream, and ready before this returns,
    /// so that it belongs to the array rather than to the graph (`capture.rs`).
    pub(crate) fn alloc_for(device_id: DeviceId, bytes: usize, stream: super::stream::Checked) -> Result<DeviceMemory> {
        if !stream.capturing() {
            return Self::alloc_on(device_id, bytes, stream.handle);
        }
        let own = super::stream::amso_stream(device_id)?;
        let memory = Self::alloc_on(device_id, bytes, own)?;
        super::stream::synchronize(device_id, own)?;
        Ok(memory)
    }

    /// Record the stream of the latest work on this memory.
    pub(crate) fn used_on(&self, stream: super::stream::StreamHandle) {
        self.last_stream.store(stream.stream().protocol_value(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Mark the memory as handed to a consumer.
    pub(crate) fn mark_shared(&self) {
        self.shared.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Foreign device memory (another library's export), kept alive by `owner`; `managed`
    /// if the producer says it is CUDA managed memory (kDLCUDAManaged).
    ///
    /// # Safety
    /// `ptr` addresses `bytes` bytes on `device_id` (managed memory if `managed`), valid until
    /// `owner` is dropped.
    pub(crate) unsafe fn foreign(
        device_id: DeviceId,
        ptr: sys::CUdeviceptr,
        bytes: usize,
        owner: Box<dyn std::any::Any + Send + Sync>,
        managed: bool,
    ) -> DeviceMemory {
        DeviceMemory {
            ptr,
            bytes,
            device_id,
            foreign: Some(owner),
            grant: None,
            request: super::request::Request::Current,
            last_stream: std::sync::atomic::AtomicI64::new(1),
            shared: std::sync::atomic::AtomicBool::new(true),
            managed,
        }
    }

    /// Whether this is CUDA managed memory.
    pub(crate) fn managed(&self) -> bool {
        self.managed
    }

    /// Device address of the first byte.
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The device holding it.
    pub(crate) fn device_id(&self) -> DeviceId {
        self.device_id
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let Some(grant) = self.grant.take() else {
            return; // nothing allocated, or the foreign owner releases the memory
        };
        let stream = super::stream::StreamHandle::of(Stream::reported(
            self.last_stream.load(std::sync::atomic::Ordering::Relaxed),
        ))
        .unwrap_or(super::stream::StreamHandle::LEGACY);
        // A consumer may still have work queued on streams amso does not know: the free then
        // waits for the whole device (when the deferred queue runs it, never during a capture).
        let after = if self.shared.load(std::sync::atomic::Ordering::Relaxed) {
            super::alloc::After::Device
        } else {
            super::alloc::After::Stream(stream)
        };
        super::pool::release(grant, self.device_id, self.bytes, after, super::request::Client::Amso);
    }
}

/// Page-locked host memory, reachable by the GPU's copy engines at full bandwidth.
#[derive(Debug)]
pub(crate) struct PinnedMemory {
    ptr: *mut u8,
}

// SAFETY: plain host memory; access is synchronised by its owners.
unsafe impl Send for PinnedMemory {}
// SAFETY: as above; `&PinnedMemory` only hands out the raw pointer.
unsafe impl Sync for PinnedMemory {}

impl PinnedMemory {
    /// Allocate `bytes` of zeroed pinned memory, usable from every context.
    pub(crate) fn alloc_zeroed(bytes: usize) -> Result<PinnedMemory> {
        let ptr = crate::gil::released(|| -> Result<usize> {
            let _ctx = Current::enter(DeviceId::ZERO)?;
            let _relaxed = super::capture::Relaxed::enter(); // see `capture.rs`
            if bytes == 0 {
                return Ok(0);
            }
            // SAFETY: a context is current; PORTABLE makes it pinned for all contexts.
            let ptr = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }
                .map_err(|e| map_error("cuMemHostAlloc", e, bytes, "pinned host"))?;
            // SAFETY: the allocation holds `bytes` bytes.
            unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
            Ok(ptr as usize)
        })?;
        Ok(PinnedMemory { ptr: ptr as *mut u8 })
    }

    /// Allocate `bytes` of pinned memory for another library (`python/allocators.rs`), not
    /// zeroed: usable from every context, mapped into the device's address space with
    /// `mapped`, write-combined with `write_combined`.
    #[cfg(feature = "python")]
    pub(crate) fn alloc_for_loan(bytes: usize, mapped: bool, write_combined: bool) -> Result<PinnedMemory> {
        let ptr = crate::gil::released(|| -> Result<usize> {
            let _ctx = Current::enter(DeviceId::ZERO)?;
            let _relaxed = super::capture::Relaxed::enter(); // see `capture.rs`
            if bytes == 0 {
                return Ok(0);
            }
            let mut flags = sys::CU_MEMHOSTALLOC_PORTABLE;
            if mapped {
                flags |= sys::CU_MEMHOSTALLOC_DEVICEMAP;
            }
            if write_combined {
                flags |= sys::CU_MEMHOSTALLOC_WRITECOMBINED;
            }
            // SAFETY: a context is current; the caller's library writes before it reads.
            let ptr = unsafe { result::malloc_host(bytes, flags) }
                .map_err(|e| map_error("cuMemHostAlloc", e, bytes, "pinned host"))?;
            Ok(ptr as usize)
        })?;
        Ok(PinnedMemory { ptr: ptr as *mut u8 })
    }

    /// First byte.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for PinnedMemory {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            super::alloc::release_pinned(self.ptr);
        }
    }
}
