//! Host <-> device copies on a stream. Pinned host memory goes straight to the copy engines
//! (asynchronous). Pageable memory larger than one chunk is pipelined through pinned staging
//! chunks: the CPU fills (or drains) one chunk, in parallel threads, while the copy engine
//! moves the previous one. Pageable copies return once the host memory may be reused.

use std::sync::Mutex;

use cudarc::driver::sys;

use super::context::Current;
use super::driver::cuda_error;
use super::memory::PinnedMemory;
use super::stream::StreamHandle;
use crate::error::Result;

/// Bytes per staging chunk.
pub const CHUNK: usize = 8 << 20;
/// Staging chunks in flight per pageable copy.
const DEPTH: usize = 3;
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
    for (index, offset) in (0..bytes).step_by(CHUNK).enumerate() {
        let len = CHUNK.min(bytes - offset);
        let slot = index % DEPTH;
        if index >= DEPTH {
            staging.wait(slot)?;
        }
        let chunk = staging.slots[slot].as_ptr();
        // SAFETY: the chunk holds CHUNK >= len bytes and its previous copy is done (waited);
        // `src + offset` holds `len` bytes.
        unsafe {
            parallel_copy(chunk, src.add(offset), len);
            sys::cuMemcpyHtoDAsync_v2(dst + offset as u64, chunk.cast(), len, stream.raw()).result().map_err(cuda_error)?;
        }
        staging.record(slot, stream)?;
    }
    Ok(())
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
    let chunks: Vec<(usize, usize)> = (0..bytes).step_by(CHUNK).map(|o| (o, CHUNK.min(bytes - o))).collect();
    let issue = |index: usize| -> Result<()> {
        let (offset, len) = chunks[index];
        let slot = index % DEPTH;
        // SAFETY: the chunk holds CHUNK >= len bytes and is not being drained (see loop).
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(staging.slots[slot].as_ptr().cast(), src + offset as u64, len, stream.raw())
                .result()
                .map_err(cuda_error)?;
        }
        staging.record(slot, stream)
    };
    for index in 0..chunks.len().min(DEPTH) {
        issue(index)?;
    }
    for (index, &(offset, len)) in chunks.iter().enumerate() {
        let slot = index % DEPTH;
        staging.wait(slot)?;
        // SAFETY: the chunk's copy is complete; `dst + offset` holds `len` bytes.
        unsafe { parallel_copy(dst.add(offset), staging.slots[slot].as_ptr(), len) };
        if index + DEPTH < chunks.len() {
            issue(index + DEPTH)?;
        }
    }
    Ok(())
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

/// memcpy split over a few threads: one core cannot saturate host memory bandwidth.
///
/// # Safety
/// `dst` and `src` hold `len` bytes and do not overlap.
unsafe fn parallel_copy(dst: *mut u8, src: *const u8, len: usize) {
    const PIECES: usize = 4;
    if len < (1 << 20) {
        // SAFETY: the caller guarantees both ranges.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let piece = len.div_ceil(PIECES);
    let (dst, src) = (dst as usize, src as usize);
    std::thread::scope(|scope| {
        for start in (0..len).step_by(piece) {
            let n = piece.min(len - start);
            scope.spawn(move || {
                // SAFETY: disjoint sub-ranges of the caller's ranges.
                unsafe { std::ptr::copy_nonoverlapping((src + start) as *const u8, (dst + start) as *mut u8, n) };
            });
        }
    });
}
