//! CUDA graph capture (`torch.cuda.graph`, `cuStreamBeginCapture`): what amso does when a
//! stream it is given is capturing.
//!
//! - A capturing stream is recognised with `cuStreamIsCapturing`, which capture allows; amso
//!   never queries (`cuStreamQuery`) or synchronises a capturing stream.
//! - Work amso queues on a capturing stream (copies, kernels, memsets) is captured: it runs
//!   when the graph is launched, once per launch, and not at capture time.
//! - amso's pending work on an array (on a stream that is not capturing) is completed before
//!   the captured operation is recorded: amso waits for it on the host, once, at capture
//!   time, so every launch of the graph finds it done. Between captured operations the order
//!   is the capturing stream's (and the events recorded within the same capture).
//! - Captured work is not recorded as pending on the array: it has not run. Order amso's
//!   later work after a launch yourself (launch on the stream you pass amso, or synchronise).
//! - Memory an array needs is allocated outside the capture, on amso's own stream, so it
//!   belongs to the array and not to the graph.
//! - What cannot be captured is refused before anything is queued, so the capture stays
//!   valid: moves of pageable host memory (staged on the host), synchronous moves, moves
//!   between devices, and host waits for a capturing stream. Host waits for other streams
//!   (element access, copies) run, relaxed, and see the data as it is: captured work has not
//!   run.
//! - Deferred frees do not run while a capture amso has seen is still going on; they run at
//!   the first flush after it ends. amso tells by asking a stream of its own that joined the
//!   capture (`note`), never the caller's stream, which may be gone once its capture ends.
//!
//! amso's own driver calls that the capture mode would forbid (a host wait for its own
//! stream, its allocations and frees) run in the relaxed mode (`Relaxed`), as PyTorch's
//! allocator does: they never touch the capturing stream.

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use cudarc::driver::sys;

use super::stream::StreamHandle;
use crate::device::DeviceId;
use crate::error::{CaptureProblem, Error};
use crate::stream::Stream;

/// Whether a stream is capturing work into a CUDA graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Capture {
    /// Work queued on it runs.
    Idle,
    /// Work queued on it is captured (capture `id`).
    Active(u64),
}

/// The capture state of `stream`, for a context of its device that is current. The legacy
/// default stream cannot capture; a blocking stream capturing makes its use an error, which
/// is reported as such.
pub(crate) fn state(stream: StreamHandle) -> std::result::Result<Capture, sys::CUresult> {
    if stream == StreamHandle::LEGACY {
        return Ok(Capture::Idle);
    }
    // Every lend on a stream asks: the common answer comes from the lighter query (on the H200,
    // 15 ns against 18 to 33 for the one that also gives the capture's id).
    // SAFETY: the handle is the caller's stream (see `StreamHandle::check`).
    match unsafe { cudarc::driver::result::stream::is_capturing(stream.raw()) } {
        Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE) => return Ok(Capture::Idle),
        Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE) => {}
        Ok(_) => return Err(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        Err(error) => return Err(error.0),
    }
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: sys::cuuint64_t = 0;
    // Raw: cudarc's `capture_status` needs a borrowed `CudaStream` (an allocation and a
    // context bind) and gives no capture id; this is on every protocol call's path.
    // SAFETY: valid out-pointers; the handle is the caller's stream (see `StreamHandle::check`);
    // the graph and dependency outputs are not asked for.
    let code = unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream.raw(),
            &mut status,
            &mut id,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    match (code, status) {
        (sys::CUresult::CUDA_SUCCESS, sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE) => Ok(Capture::Idle),
        (sys::CUresult::CUDA_SUCCESS, sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE) => {
            Ok(Capture::Active(id))
        }
        (sys::CUresult::CUDA_SUCCESS, _) => Err(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        (code, _) => Err(code),
    }
}

/// The error for a stream whose state could not be used.
pub(crate) fn state_error(stream: StreamHandle, device_id: DeviceId, code: sys::CUresult) -> Error {
    match code {
        sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => {
            Error::Capture { stream: stream.stream(), problem: CaptureProblem::Invalidated }
        }
        sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => {
            Error::Capture { stream: stream.stream(), problem: CaptureProblem::LegacyStream }
        }
        code => Error::InvalidArgument(format!(
            "stream 0x{:x} is not a live CUDA stream of device {device_id} ({code:?})",
            stream.stream()
        )),
    }
}

/// While alive, this thread's capture mode is relaxed: amso's own calls on streams that are
/// not capturing (a host wait for amso's stream, an allocation, a free) do not invalidate a
/// capture in progress elsewhere. Restores the previous mode on drop.
pub(crate) struct Relaxed {
    previous: sys::CUstreamCaptureMode,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Relaxed {
    pub(crate) fn enter() -> Relaxed {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // Raw: cudarc does not wrap the thread's capture mode. SAFETY: valid in/out pointer;
        // the call only swaps a thread-local setting.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
        Relaxed { previous: mode, _not_send: std::marker::PhantomData }
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        // SAFETY: as in `enter`, on the same thread (the guard is !Send).
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut self.previous) };
    }
}

/// A stream of amso's own that has joined a capture amso saw, so that amso can tell when that
/// capture ends by asking its own stream (alive for the process) instead of the caller's
/// (which the caller may destroy once the capture ends).
struct Sentinel {
    device_id: DeviceId,
    stream: StreamHandle,
    /// The capture it joined; 0 once seen ended (free for the next capture).
    capture: u64,
}

static SENTINELS: Mutex<Vec<Sentinel>> = Mutex::new(Vec::new());

fn sentinels() -> std::sync::MutexGuard<'static, Vec<Sentinel>> {
    SENTINELS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Note that `stream` of `device_id` is capturing (capture `id`): the first time a capture is
/// seen, one of amso's streams joins it with an empty fork and join (two event nodes in the
/// graph), which makes that stream capturing exactly as long as the capture lasts. Called
/// with the device's context current.
pub(crate) fn note(device_id: DeviceId, stream: StreamHandle, id: u64) -> crate::error::Result<()> {
    let mut sentinels = sentinels();
    if sentinels.iter().any(|s| s.capture == id && s.device_id == device_id) {
        return Ok(());
    }
    let _relaxed = Relaxed::enter();
    let free = sentinels
        .iter()
        .position(|s| s.device_id == device_id && (s.capture == 0 || matches!(state(s.stream), Ok(Capture::Idle))));
    let slot = match free {
        Some(slot) => slot,
        None => {
            let created = super::context::context(device_id)?
                .new_stream()
                .map_err(super::driver::cuda_error("cuStreamCreate"))?;
            let handle = StreamHandle::of(Stream::reported(created.cu_stream() as i64))?;
            std::mem::forget(created); // kept for the process: `in_progress` asks it later
            sentinels.push(Sentinel { device_id, stream: handle, capture: 0 });
            sentinels.len() - 1
        }
    };
    let sentinel = sentinels[slot].stream;
    let (capturing, watcher) = (stream.borrow(device_id)?, sentinel.borrow(device_id)?);
    let fork = capturing.record_event(None).map_err(super::driver::cuda_error("cuEventRecord"))?;
    watcher.wait(&fork).map_err(super::driver::cuda_error("cuStreamWaitEvent"))?;
    let join = watcher.record_event(None).map_err(super::driver::cuda_error("cuEventRecord"))?;
    capturing.wait(&join).map_err(super::driver::cuda_error("cuStreamWaitEvent"))?;
    if sentinels[slot].capture == 0 {
        super::switches::SWITCHES.watch(1);
    }
    sentinels[slot].capture = id;
    Ok(())
}

/// Whether a capture amso saw on `device_id` (any device: None) is still in progress: every
/// free asks, and with no capture seen the answer is one read.
#[inline]
pub(crate) fn in_progress(device_id: Option<DeviceId>) -> bool {
    watching() && still_in_progress(device_id)
}

/// Whether a capture this copy saw, or (when its pool is the process's) one that a copy which
/// joined it saw, may still be in progress.
#[inline]
pub(crate) fn watching() -> bool {
    super::switches::SWITCHES.watching.load(Ordering::Acquire) != 0
}

/// `in_progress` once a capture was seen: asked of the driver.
#[cold]
fn still_in_progress(device_id: Option<DeviceId>) -> bool {
    // The sentinels' lock is held across driver calls here and in `note`: it is only ever
    // taken with the GIL released, so no Python thread waits for it holding the GIL.
    crate::gil::released(|| {
        let mut found = false;
        for sentinel in sentinels().iter_mut().filter(|s| s.capture != 0) {
            let Ok(_ctx) = super::context::Current::enter(sentinel.device_id) else { continue };
            if matches!(state(sentinel.stream), Ok(Capture::Active(_))) {
                found |= device_id.is_none_or(|d| d == sentinel.device_id);
            } else {
                sentinel.capture = 0;
                super::switches::SWITCHES.watch(-1);
            }
        }
        found
    })
}

/// Count the captures this copy saw, and every later one, in `home` too: the `watching` of the
/// pool this copy joins (`pool::join`). Under the sentinels' lock, which every change of the
/// count takes, and so with the GIL released.
#[cfg(feature = "python")]
pub(crate) fn share_watching(home: &'static std::sync::atomic::AtomicUsize) {
    crate::gil::released(|| {
        let sentinels = sentinels();
        let seen = sentinels.iter().filter(|s| s.capture != 0).count();
        super::switches::SWITCHES.join_watching(home, seen);
    });
}

/// The error for `what`, refused on capturing `stream` before anything was queued.
pub(crate) fn refused(operation: &'static str, stream: StreamHandle, remedy: &'static str) -> Error {
    Error::Capture { stream: stream.stream(), problem: CaptureProblem::Uncapturable { operation, remedy } }
}
