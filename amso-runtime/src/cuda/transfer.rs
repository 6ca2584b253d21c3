//! Host <-> device copies on a stream. Pinned host memory goes straight to the copy engines
//! (asynchronous). Pageable memory larger than one chunk is pipelined through pinned staging
//! chunks: the CPU fills (or drains) one chunk, in parallel threads, while the copy engine
//! moves the previous one. Pageable copies return once the host memory may be reused.

use std::sync::Mutex;

use cudarc::driver::sys;

use super::context::{context, Current};
use super::driver::cuda_error;
use super::memory::PinnedMemory;
use super::stream::StreamHandle;
use crate::error::Result;

/// Bytes per staging chunk. With `DEPTH` and `MAX_WORKERS`, chosen by a sweep on the H100
/// machine (16 cores, 256 MiB copies; `benchmarks/results/2026-11-22-h100-issue15-levers/
/// staging_sweep.md`): 8 MiB chunks, 3 in flight and 8 threads reached 0.61-0.68 of pinned
/// bandwidth; 16 MiB, 4 and 12 reached 0.69-0.83 (process-to-process noise is large); 64 MiB
/// chunks or 16 threads were slower. Copies below `PIPELINE_MIN` (32 MiB) use the driver's own
/// staging. The staging memory is kept for reuse: DEPTH * CHUNK = 64 MiB of pinned memory per
/// pageable copy running at the same time.
pub const CHUNK: usize = 16 << 20;
/// Staging chunks in flight per pageable copy.
const DEPTH: usize = 4;
/// Most host threads copying one chunk (fewer when the machine has fewer cores).
const MAX_WORKERS: usize = 12;
/// Below this, a pageable copy goes through the driver's own staging.
const PIPELINE_MIN: usize = 2 * CHUNK;

static STAGING: Mutex<Vec<PinnedMemory>> = Mutex::new(Vec::new());

struct Staging {
    slots: Vec<PinnedMemory>,
    events: Vec<sys::CUevent>,
}

impl Staging {
    fn take() -> Result<Staging> {
        let mut slots = {
            let mut pool = STAGING.lock().unwrap_or_else(|e| e.into_inner());
            let keep = pool.len().saturating_sub(DEPTH);
            pool.split_off(keep)
        };
        while slots.len() < DEPTH {
            slots.push(PinnedMemory::alloc_zeroed(CHUNK)?);
        }
        let mut events = Vec::with_capacity(DEPTH);
        for _ in 0..DEPTH {
            let mut event: sys::CUevent = std::ptr::null_mut();
            // SAFETY: valid out-pointer; the caller made a context current.
            unsafe { sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) }
                .result()
                .map_err(cuda_error)?;
            events.push(event);
        }
        Ok(Staging { slots, events })
    }

    fn wait(&self, slot: usize) -> Result<()> {
        // SAFETY: the event was created in `take` and is live.
        unsafe { sys::cuEventSynchronize(self.events[slot]) }.result().map_err(cuda_error)
    }

    fn record(&self, slot: usize, stream: StreamHandle) -> Result<()> {
        // SAFETY: live event; the stream was checked by the caller.
        unsafe { sys::cuEventRecord(self.events[slot], stream.raw()) }.result().map_err(cuda_error)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        for &event in &self.events {
            // Every staged copy must be done before its chunk is reused by another transfer.
            // SAFETY: live events created in `take`, destroyed once here.
            unsafe {
                let _ = sys::cuEventSynchronize(event);
                let _ = sys::cuEventDestroy_v2(event);
            }
        }
        STAGING.lock().unwrap_or_else(|e| e.into_inner()).append(&mut self.slots);
    }
}

/// Copy `bytes` from host `src` to device `dst` on `stream`.
///
/// # Safety
/// `src` holds `bytes` readable bytes (kept alive until the copy completes when `pinned`),
/// `dst` holds `bytes` on `device_id`.
pub unsafe fn host_to_device(
    device_id: i32,
    dst: sys::CUdeviceptr,
    src: *const u8,
    bytes: usize,
    pinned: bool,
    stream: StreamHandle,
) -> Result<()> {
    let _ctx = Current::enter(device_id)?;
    if pinned || bytes < PIPELINE_MIN {
        // SAFETY: the caller guarantees both ranges.
        return unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, stream.raw()) }.result().map_err(cuda_error);
    }
    let staging = Staging::take()?;
    let chunks = chunks(bytes);
    let slots: Vec<usize> = staging.slots.iter().map(|m| m.as_ptr() as usize).collect();
    // Addresses cross into the worker threads as integers. Workers fill chunk i's staging
    // slot while the copy engine moves chunk i - 1.
    let source = src as usize;
    with_workers(
        &chunks,
        |index| {
            if index >= DEPTH {
                staging.wait(index % DEPTH)?;
            }
            Ok(())
        },
        |index, piece_offset, piece_len| {
            let (offset, _) = chunks[index];
            let slot = slots[index % DEPTH] as *mut u8;
            // SAFETY: the slot's previous copy is complete (waited before the workers start);
            // the piece lies inside both the chunk and `src`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (source as *const u8).add(offset + piece_offset),
                    slot.add(piece_offset),
                    piece_len,
                )
            };
        },
        |index| {
            let (offset, len) = chunks[index];
            let slot = slots[index % DEPTH] as *const u8;
            // SAFETY: the slot holds the chunk's bytes; `dst + offset` holds `len` bytes.
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst + offset as u64, slot.cast(), len, stream.raw()) }
                .result()
                .map_err(cuda_error)?;
            staging.record(index % DEPTH, stream)
        },
    )
}

/// Copy `bytes` from device `src` to host `dst` on `stream`.
///
/// # Safety
/// `dst` holds `bytes` writable bytes (kept alive until the copy completes when `pinned`),
/// `src` holds `bytes` on `device_id`.
pub unsafe fn device_to_host(
    device_id: i32,
    dst: *mut u8,
    src: sys::CUdeviceptr,
    bytes: usize,
    pinned: bool,
    stream: StreamHandle,
) -> Result<()> {
    let _ctx = Current::enter(device_id)?;
    if pinned || bytes < PIPELINE_MIN {
        // SAFETY: the caller guarantees both ranges.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, bytes, stream.raw()) }.result().map_err(cuda_error)?;
        if !pinned {
            // A pageable destination is only written once the copy has run.
            // SAFETY: the stream was checked by the caller.
            unsafe { sys::cuStreamSynchronize(stream.raw()) }.result().map_err(cuda_error)?;
        }
        return Ok(());
    }
    let staging = Staging::take()?;
    let chunks = chunks(bytes);
    let slots: Vec<usize> = staging.slots.iter().map(|m| m.as_ptr() as usize).collect();
    let issue = |index: usize| -> Result<()> {
        let (offset, len) = chunks[index];
        let slot = slots[index % DEPTH] as *mut u8;
        // SAFETY: the slot holds CHUNK >= len bytes and is not being drained (see below).
        unsafe { sys::cuMemcpyDtoHAsync_v2(slot.cast(), src + offset as u64, len, stream.raw()) }
            .result()
            .map_err(cuda_error)?;
        staging.record(index % DEPTH, stream)
    };
    for index in 0..chunks.len().min(DEPTH) {
        issue(index)?;
    }
    // Addresses cross into the worker threads as integers. Workers drain chunk i's slot
    // while the copy engine fills the next ones.
    let destination = dst as usize;
    with_workers(
        &chunks,
        |index| staging.wait(index % DEPTH),
        |index, piece_offset, piece_len| {
            let (offset, _) = chunks[index];
            let slot = slots[index % DEPTH] as *const u8;
            // SAFETY: the chunk's copy is complete (waited); the piece lies inside both ranges.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    slot.add(piece_offset),
                    (destination as *mut u8).add(offset + piece_offset),
                    piece_len,
                )
            };
        },
        |index| if index + DEPTH < chunks.len() { issue(index + DEPTH) } else { Ok(()) },
    )
}

/// Copy `bytes` between device allocations (same or different devices, through unified
/// addressing: peer-to-peer where the devices allow it, staged by the driver otherwise).
///
/// # Safety
/// Both ranges hold `bytes` bytes.
pub unsafe fn device_to_device(
    device_id: i32,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: StreamHandle,
) -> Result<()> {
    let _ctx = Current::enter(device_id)?;
    // SAFETY: the caller guarantees both ranges.
    unsafe { sys::cuMemcpyAsync(dst, src, bytes, stream.raw()) }.result().map_err(cuda_error)
}

/// Copy `bytes` from device memory of `src_device` to device memory of `dst_device`, queued on
/// `stream` of `dst_device`. Between devices this names both contexts (`cuMemcpyPeerAsync`):
/// memory from a stream-ordered pool is not addressable from another device, so a plain copy
/// through unified addressing is refused (CUDA_ERROR_INVALID_VALUE); the peer copy works with
/// or without peer access.
///
/// # Safety
/// Both ranges hold `bytes` bytes of their devices' memory.
pub unsafe fn device_to_peer(
    dst_device: i32,
    dst: sys::CUdeviceptr,
    src_device: i32,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: StreamHandle,
) -> Result<()> {
    if dst_device == src_device {
        // SAFETY: forwarded from the caller.
        return unsafe { device_to_device(dst_device, dst, src, bytes, stream) };
    }
    let _ctx = Current::enter(dst_device)?;
    let (dst_context, src_context) = (context(dst_device)?.cu_ctx(), context(src_device)?.cu_ctx());
    // SAFETY: the caller guarantees both ranges; both contexts are retained for the process.
    unsafe { sys::cuMemcpyPeerAsync(dst, dst_context, src, src_context, bytes, stream.raw()) }
        .result()
        .map_err(cuda_error)
}

fn chunks(bytes: usize) -> Vec<(usize, usize)> {
    (0..bytes).step_by(CHUNK).map(|offset| (offset, CHUNK.min(bytes - offset))).collect()
}

/// Run the staged pipeline with a few host threads, started once per transfer: for each chunk,
/// `before` runs on the calling thread, then every worker copies its piece (`copy(index,
/// piece offset, piece length)`), then `after` runs on the calling thread. One core cannot
/// saturate host memory bandwidth; a thread per chunk would cost more than it saves.
fn with_workers(
    chunks: &[(usize, usize)],
    before: impl Fn(usize) -> Result<()>,
    copy: impl Fn(usize, usize, usize) + Sync,
    after: impl Fn(usize) -> Result<()>,
) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Barrier;
    let workers = std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(2, MAX_WORKERS);
    let start = Barrier::new(workers + 1);
    let done = Barrier::new(workers + 1);
    let stop = AtomicBool::new(false);
    let piece = |index: usize, worker: usize| {
        let len = chunks[index].1;
        let size = len.div_ceil(workers);
        let begin = (worker * size).min(len);
        (begin, size.min(len - begin))
    };
    std::thread::scope(|scope| {
        for worker in 0..workers {
            let (start, done, stop, copy, piece) = (&start, &done, &stop, &copy, &piece);
            scope.spawn(move || {
                for index in 0..chunks.len() {
                    start.wait();
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let (offset, len) = piece(index, worker);
                    if len > 0 {
                        copy(index, offset, len);
                    }
                    done.wait();
                }
            });
        }
        let mut outcome = Ok(());
        for index in 0..chunks.len() {
            if let Err(error) = before(index) {
                outcome = Err(error);
                stop.store(true, Ordering::Release);
                start.wait();
                break;
            }
            start.wait();
            done.wait();
            if let Err(error) = after(index) {
                outcome = Err(error);
                if index + 1 < chunks.len() {
                    stop.store(true, Ordering::Release);
                    start.wait();
                }
                break;
            }
        }
        outcome
    })
}

/// Zero `bytes` of device memory at `dst`, queued on `stream`.
///
/// # Safety
/// `dst` holds `bytes` bytes of device memory of `device_id`, not in use by other work.
pub unsafe fn zero(device_id: i32, dst: u64, bytes: usize, stream: StreamHandle) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let _ctx = Current::enter(device_id)?;
    // SAFETY: forwarded from the caller; the memset is queued on `stream`.
    unsafe { sys::cuMemsetD8Async(dst, 0, bytes, stream.raw()) }.result().map_err(cuda_error)
}
