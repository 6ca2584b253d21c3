//! Host <-> device copies on a stream. Pinned host memory goes straight to the copy engines
//! (asynchronous). Pageable memory of two chunks or more is pipelined through pinned staging
//! chunks: a crew of host threads (`staging/crew.rs`) fills (or drains) the next chunks while the copy
//! engine moves the previous ones. Pageable copies return once the host memory may be reused.
//!
//! The drain writes the caller's memory with non-temporal stores, which skip reading it into
//! the cache first; the fill uses ordinary stores, which leave the chunk in the cache for the
//! copy engine to read (`staging/streaming_copy.rs`).

use std::cell::Cell;
use std::sync::Mutex;

use cudarc::driver::{result, sys};

use super::context::{context, Current};
use super::device_memory::PinnedMemory;
use super::driver::cuda_error;
use super::stream::StreamHandle;
use crate::device::DeviceId;
use crate::error::Result;
use crate::host::HostEnd;
use crate::staging::crew;
use crate::staging::streaming_copy::copy_streaming;

/// Bytes per staging chunk. 16 MiB chunks, 4 in flight (`DEPTH`), keep the copy engine busy
/// while the host crew fills or drains the next chunk: on an H100 host a pageable copy reaches
/// over 0.8 of the pinned bandwidth this way, and smaller or fewer chunks leave the engine
/// waiting. Copies below `PIPELINE_MIN` (32 MiB) use the driver's own staging. The staging
/// memory is kept for reuse: DEPTH * CHUNK = 64 MiB of pinned memory per pageable copy running
/// at the same time.
pub(crate) const CHUNK: usize = 16 << 20;
/// Staging chunks in flight per pageable copy.
const DEPTH: usize = 4;
/// Most host threads copying one transfer (fewer when the machine has fewer cores).
const MAX_WORKERS: usize = 12;
/// Below this, a pageable copy goes through the driver's own staging.
const PIPELINE_MIN: usize = 2 * CHUNK;
/// Bytes a worker copies at a time: a chunk is 16 pieces, shared out among the workers as they
/// come free.
const PIECE: usize = 1 << 20;

// The schedules in `staging/crew.rs` take chunk i's slot as i % DEPTH, and need two slots at least.
const _: () = assert!(DEPTH >= 2);

static STAGING: Mutex<Vec<PinnedMemory>> = Mutex::new(Vec::new());

/// One pageable copy's staging ring: DEPTH pinned slots (from the pool, returned to it) and an
/// event per slot for the engine's last copy through it, all on one stream.
///
/// The events are raw: cudarc's `CudaEvent` rebinds the context on every call, and its `Drop`
/// keeps a failed destroy as the context's error for the next unrelated cudarc call, while
/// this ring handles its own failures (`failed`, and its `Drop`).
struct Staging {
    slots: Vec<PinnedMemory>,
    events: Vec<sys::CUevent>,
    stream: StreamHandle,
    /// Set when the transfer failed: a copy may then be in flight that no event covers.
    failed: Cell<bool>,
}

impl Staging {
    fn take(stream: StreamHandle) -> Result<Staging> {
        let slots = {
            let mut pool = STAGING.lock().unwrap_or_else(|e| e.into_inner());
            let keep = pool.len().saturating_sub(DEPTH);
            pool.split_off(keep)
        };
        let mut staging = Staging { slots, events: Vec::with_capacity(DEPTH), stream, failed: Cell::new(false) };
        while staging.slots.len() < DEPTH {
            staging.slots.push(PinnedMemory::alloc_zeroed(CHUNK)?);
        }
        for _ in 0..DEPTH {
            // The caller made a context current.
            staging.events.push(
                result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                    .map_err(cuda_error("cuEventCreate"))?,
            );
        }
        Ok(staging)
    }

    fn slot(&self, index: usize) -> *mut u8 {
        self.slots[index % DEPTH].as_ptr()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Every staged copy must be done before its slot is reused by another transfer.
        let mut done = !self.failed.get();
        for &event in &self.events {
            // SAFETY: live events created in `take`, destroyed once here.
            unsafe {
                done &= result::event::synchronize(event).is_ok();
                let _ = result::event::destroy(event);
            }
        }
        if !done {
            // A failed call may have left a copy that no event covers: wait for the stream.
            // SAFETY: the transfer's stream, checked by its caller.
            done = unsafe { result::stream::synchronize(self.stream.raw()) }.is_ok();
        }
        if done {
            STAGING.lock().unwrap_or_else(|e| e.into_inner()).append(&mut self.slots);
        } else {
            // The engine may still write these slots: they are never freed nor reused.
            std::mem::forget(std::mem::take(&mut self.slots));
        }
    }
}

/// The copy engine's side of a pageable copy: chunk i between slot i % DEPTH and the device
/// memory at `device + offset`.
struct Copies<'a> {
    staging: &'a Staging,
    chunks: &'a [(usize, usize)],
    device: sys::CUdeviceptr,
    to_device: bool,
}

impl crew::Engine for Copies<'_> {
    fn queue(&self, index: usize) -> Result<()> {
        let (offset, len) = self.chunks[index];
        let (slot, device, stream) = (self.staging.slot(index), self.device + offset as u64, self.staging.stream.raw());
        // SAFETY: the slot holds CHUNK >= len bytes and `device` holds the chunk's `len` bytes
        // (the callers' ranges); the schedule queues a slot only when the crew is done with it.
        let queued = unsafe {
            if self.to_device {
                sys::cuMemcpyHtoDAsync_v2(device, slot.cast_const().cast(), len, stream)
            } else {
                sys::cuMemcpyDtoHAsync_v2(slot.cast(), device, len, stream)
            }
        };
        queued.result().map_err(cuda_error("cuMemcpyAsync"))?;
        // SAFETY: a live event of `take`; the stream was checked by the caller.
        unsafe { result::event::record(self.staging.events[index % DEPTH], stream) }
            .map_err(cuda_error("cuEventRecord"))
    }

    fn wait(&self, slot: usize) -> Result<()> {
        // SAFETY: a live event of `take`.
        unsafe { result::event::synchronize(self.staging.events[slot]) }.map_err(cuda_error("cuEventSynchronize"))
    }
}

/// Copy `bytes` between `host` and `device` on `stream`, in the direction `host` says. A copy
/// into pageable host memory is complete when this returns; a pinned one runs in order on
/// the stream.
///
/// # Safety
/// `host` holds `bytes` bytes, readable or writable as its direction needs (kept alive until
/// the copy completes when `pinned`); `device` holds `bytes` on `device_id`.
pub(crate) unsafe fn copy(
    device_id: DeviceId,
    host: HostEnd,
    device: sys::CUdeviceptr,
    bytes: usize,
    pinned: bool,
    stream: StreamHandle,
) -> Result<()> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        match host {
            // SAFETY: the caller guarantees both ranges; the context is current.
            _ if !pinned && bytes >= PIPELINE_MIN => unsafe { staged(device, host, bytes, stream) },
            HostEnd::ToDevice(src) => {
                // SAFETY: the caller guarantees both ranges.
                unsafe { sys::cuMemcpyHtoDAsync_v2(device, src as *const std::ffi::c_void, bytes, stream.raw()) }
                    .result()
                    .map_err(cuda_error("cuMemcpyHtoDAsync"))
            }
            HostEnd::FromDevice(dst) => {
                // SAFETY: the caller guarantees both ranges.
                unsafe { sys::cuMemcpyDtoHAsync_v2(dst as *mut std::ffi::c_void, device, bytes, stream.raw()) }
                    .result()
                    .map_err(cuda_error("cuMemcpyDtoHAsync"))?;
                if !pinned {
                    // A pageable destination is only written once the copy has run.
                    // SAFETY: the stream was checked by the caller.
                    unsafe { result::stream::synchronize(stream.raw()) }.map_err(cuda_error("cuStreamSynchronize"))?;
                }
                Ok(())
            }
        }
    })
}

/// A pageable copy of `bytes` between the caller's host memory at `host` and `device`, through
/// a staging ring: the crew fills the slots and the engine sends them (`HostEnd::ToDevice`), or the
/// engine fills them and the crew drains them into the caller's memory with non-temporal
/// stores (`staging/streaming_copy.rs`). Returns once the caller's memory may be reused.
///
/// # Safety
/// `host` holds `bytes` bytes, readable when sending and writable when receiving; `device`
/// holds `bytes` on the device whose context is current.
unsafe fn staged(device: sys::CUdeviceptr, host: HostEnd, bytes: usize, stream: StreamHandle) -> Result<()> {
    let (to_device, host) = match host {
        HostEnd::ToDevice(address) => (true, address),
        HostEnd::FromDevice(address) => (false, address),
    };
    let staging = Staging::take(stream)?;
    let chunks = chunks(bytes);
    let engine = Copies { staging: &staging, chunks: &chunks, device, to_device };
    // Addresses cross into the worker threads as integers.
    let slots: Vec<usize> = (0..DEPTH).map(|slot| staging.slot(slot) as usize).collect();
    crew::run(
        &chunks,
        workers(),
        PIECE,
        |index, offset, len| {
            let (start, slot) = (chunks[index].0 + offset, slots[index % DEPTH] as *mut u8);
            // SAFETY: the chunk is released, so the engine is done with its slot (sending) or has
            // filled it (receiving); the piece lies inside both the chunk's slot and the caller's
            // range.
            unsafe {
                let (user, slot) = ((host as *mut u8).add(start), slot.add(offset));
                if to_device {
                    std::ptr::copy_nonoverlapping(user.cast_const(), slot, len)
                } else {
                    copy_streaming(user, slot.cast_const(), len)
                }
            }
        },
        |crew| {
            let driven = if to_device { crew::send(crew, DEPTH, &engine) } else { crew::receive(crew, DEPTH, &engine) };
            // A failed schedule may leave a copy in flight that no event covers (`Staging`'s drop).
            staging.failed.set(driven.is_err());
            driven
        },
    )
}

/// Copy `bytes` between device allocations (same or different devices, through unified
/// addressing: peer-to-peer where the devices allow it, staged by the driver otherwise).
///
/// # Safety
/// Both ranges hold `bytes` bytes.
pub(crate) unsafe fn device_to_device(
    device_id: DeviceId,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: StreamHandle,
) -> Result<()> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        // SAFETY: the caller guarantees both ranges.
        unsafe { sys::cuMemcpyAsync(dst, src, bytes, stream.raw()) }.result().map_err(cuda_error("cuMemcpyAsync"))
    })
}

/// Copy `bytes` from device memory of `src_device` to device memory of `dst_device`, queued on
/// `stream` of `dst_device`. Between devices this names both contexts (`cuMemcpyPeerAsync`):
/// memory from a stream-ordered pool is not addressable from another device, so a plain copy
/// through unified addressing is refused (CUDA_ERROR_INVALID_VALUE); the peer copy works with
/// or without peer access.
///
/// # Safety
/// Both ranges hold `bytes` bytes of their devices' memory.
pub(crate) unsafe fn device_to_peer(
    dst_device: DeviceId,
    dst: sys::CUdeviceptr,
    src_device: DeviceId,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: StreamHandle,
) -> Result<()> {
    if dst_device == src_device {
        // SAFETY: forwarded from the caller.
        return unsafe { device_to_device(dst_device, dst, src, bytes, stream) };
    }
    crate::gil::released(|| {
        let _ctx = Current::enter(dst_device)?;
        let (dst_context, src_context) =
            (context(dst_device)?.cu_ctx() as usize, context(src_device)?.cu_ctx() as usize);
        // SAFETY: the caller guarantees both ranges; both contexts are retained for the process.
        unsafe { result::memcpy_peer_async(dst_context as _, dst, src_context as _, src, bytes, stream.raw()) }
            .map_err(cuda_error("cuMemcpyPeerAsync"))
    })
}

fn chunks(bytes: usize) -> Vec<(usize, usize)> {
    (0..bytes).step_by(CHUNK).map(|offset| (offset, CHUNK.min(bytes - offset))).collect()
}

/// Host threads for one pageable copy: one core cannot saturate the host's memory bandwidth,
/// and more than `MAX_WORKERS` measure slower.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(2, MAX_WORKERS)
}

/// Zero `bytes` of device memory at `dst`, queued on `stream`.
///
/// # Safety
/// `dst` holds `bytes` bytes of device memory of `device_id`, not in use by other work.
pub(crate) unsafe fn zero(device_id: DeviceId, dst: u64, bytes: usize, stream: StreamHandle) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        // SAFETY: forwarded from the caller; the memset is queued on `stream`.
        unsafe { result::memset_d8_async(dst, 0, bytes, stream.raw()) }.map_err(cuda_error("cuMemsetD8Async"))
    })
}
