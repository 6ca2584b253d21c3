//! Streams: the integer handles the protocols use, amso's own stream per device, and
//! ordering between streams with events (no host blocking). Streams of other libraries are
//! borrowed through cudarc (`wrap_borrowed_stream`) for the duration of one call.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{sys, CudaStream};

use super::capture::{self, Capture};
use super::context::{context, Current};
use super::driver::cuda_error;
use crate::device::DeviceId;
use crate::error::{Error, Result};
use crate::stream::Stream;

/// A CUDA stream as a raw handle value; `LEGACY` also stands for the null stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StreamHandle(usize);

// The driver's special handles (cuda.h: CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
const LEGACY_HANDLE: usize = 0x1;
const PER_THREAD_HANDLE: usize = 0x2;

impl StreamHandle {
    /// The legacy default stream.
    pub(crate) const LEGACY: StreamHandle = StreamHandle(LEGACY_HANDLE);
    /// The per-thread default stream.
    pub(crate) const PER_THREAD: StreamHandle = StreamHandle(PER_THREAD_HANDLE);

    /// The driver's handle of `stream` (`move_memory(stream=...)`, `__dlpack__`,
    /// `__cuda_array_interface__`): 0 and 1 the legacy default stream, 2 the per-thread
    /// default stream, anything larger a `cudaStream_t` / `CUstream` handle.
    pub(crate) fn of(stream: Stream) -> Result<StreamHandle> {
        StreamHandle::of_value(stream).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "stream {} is not a CUDA stream; pass 0 or 1 (legacy default), 2 (per-thread default) or a stream handle",
                stream.protocol_value()
            ))
        })
    }

    /// `of` without the error (the pool's give-backs, which fall back to the loan's stream).
    #[inline]
    pub(crate) fn of_value(stream: Stream) -> Option<StreamHandle> {
        match stream.protocol_value() {
            0 | 1 => Some(StreamHandle::LEGACY),
            2 => Some(StreamHandle::PER_THREAD),
            v if v > 2 => Some(StreamHandle(v as usize)),
            _ => None,
        }
    }

    /// The stream of a raw handle amso's pool keeps (one it was given earlier).
    pub(crate) const fn of_raw(raw: u64) -> StreamHandle {
        StreamHandle(raw as usize)
    }

    /// The raw handle for driver calls.
    pub(crate) fn raw(self) -> sys::CUstream {
        self.0 as sys::CUstream
    }

    /// The stream as cudarc's `CudaStream` of `device_id`'s context, borrowed: dropping it
    /// leaves the stream alone.
    pub(crate) fn borrow(self, device_id: DeviceId) -> Result<Arc<CudaStream>> {
        // SAFETY: a special handle, amso's own stream or a caller's stream handle (asked of the
        // driver by `check` where it came from a caller), alive for this call.
        Ok(unsafe { context(device_id)?.wrap_borrowed_stream(self.raw()) })
    }

    /// The stream to publish in protocols (1 legacy, 2 per-thread, else the handle).
    pub(crate) fn stream(self) -> Stream {
        Stream::reported(self.0 as i64)
    }

    /// Whether a handle's stream is capturing a CUDA graph (`capture.rs`), asked of the driver,
    /// which refuses a destroyed handle it can tell; a capturing stream is noted for deferred
    /// frees. The driver answers for the stream's own context: a stream of another device than
    /// `device_id` is not told apart.
    #[inline]
    pub(crate) fn check(self, device_id: DeviceId) -> Result<Checked> {
        if self == StreamHandle::LEGACY {
            return Ok(Checked { handle: self, capture: Capture::Idle });
        }
        self.check_capture(device_id)
    }

    /// `check` of a stream the driver is asked about.
    fn check_capture(self, device_id: DeviceId) -> Result<Checked> {
        // The query never blocks (a capture allows it), so it runs as the caller is: holding
        // the GIL where CuPy's allocator holds it, with no release and retake per lend. A
        // stream handle names its own context, and the driver answers for it whatever context
        // is current, or none (tested: test_pool_streams.py); the per-thread default stream
        // is the current context's.
        let capture = {
            let _current = (self == StreamHandle::PER_THREAD).then(|| Current::enter(device_id)).transpose()?;
            // The driver dereferences handles: a made-up number is undefined behaviour here, as
            // in every CUDA library; destroyed or foreign handles are reported.
            capture::state(self).map_err(|code| capture::state_error(self, device_id, code))?
        };
        if let Capture::Active(id) = capture {
            // Noting a capture takes a lock and may create a stream: with the GIL released.
            crate::gil::released(|| {
                let _ctx = Current::enter(device_id)?;
                capture::note(device_id, self, id)
            })?;
        }
        Ok(Checked { handle: self, capture })
    }
}

/// A stream checked by `StreamHandle::check`, with its capture state at that moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    pub(crate) handle: StreamHandle,
    pub(crate) capture: Capture,
}

impl Checked {
    /// Whether work queued on it is captured rather than run.
    pub(crate) fn capturing(self) -> bool {
        self.capture != Capture::Idle
    }
}

/// amso's stream of each device, made on first use.
static AMSO_STREAMS: OnceLock<Vec<OnceLock<StreamHandle>>> = OnceLock::new();

/// amso's own non-blocking stream on `device_id`, created once and never destroyed, so the
/// handle it publishes (in `__cuda_array_interface__`) stays valid. After the first call per
/// device, a lock-free read.
pub(crate) fn amso_stream(device_id: DeviceId) -> Result<StreamHandle> {
    let slots = AMSO_STREAMS.get_or_init(|| {
        let count = crate::cuda::driver::device_count().unwrap_or(0);
        (0..count).map(|_| OnceLock::new()).collect()
    });
    let slot = crate::cuda::driver::per_device(slots, device_id)?;
    if let Some(&stream) = slot.get() {
        return Ok(stream);
    }
    // The driver call, and the lock that makes it once, with the GIL released: no thread waits
    // for this lock holding the GIL.
    static CREATING: Mutex<()> = Mutex::new(());
    crate::gil::released(|| {
        let _creating = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&stream) = slot.get() {
            return Ok(stream);
        }
        let _ctx = Current::enter(device_id)?;
        let stream = context(device_id)?.new_stream().map_err(cuda_error("cuStreamCreate"))?;
        let handle = StreamHandle(stream.cu_stream() as usize);
        std::mem::forget(stream); // kept for the process: its handle is published
        let _ = slot.set(handle);
        Ok(handle)
    })
}

/// amso's own stream of `device_id` if it has been made (never makes one).
pub(crate) fn existing_amso_stream(device_id: DeviceId) -> Option<StreamHandle> {
    AMSO_STREAMS.get()?.get(device_id.index())?.get().copied()
}

/// Whether `stream` is amso's own stream of some device (never destroyed).
pub(crate) fn is_amso_stream(stream: StreamHandle) -> bool {
    AMSO_STREAMS.get().is_some_and(|slots| slots.iter().any(|slot| slot.get() == Some(&stream)))
}

/// Make work submitted later to `later` wait for all work submitted so far to `earlier`,
/// without blocking the host, except under capture (`capture.rs`): when `later` is capturing
/// and `earlier` is not, `earlier`'s work is completed on the host first; when `earlier` is
/// capturing and `later` is not, there is nothing to wait for (captured work has not run);
/// two streams of one capture are ordered with a captured event.
pub(crate) fn order(device_id: DeviceId, earlier: StreamHandle, later: Checked) -> Result<()> {
    if earlier == later.handle {
        return Ok(());
    }
    crate::gil::released(|| order_now(device_id, earlier, later))
}

fn order_now(device_id: DeviceId, earlier: StreamHandle, later: Checked) -> Result<()> {
    let _ctx = Current::enter(device_id)?;
    match (earlier.check(device_id)?.capture, later.capture) {
        (Capture::Active(_), Capture::Idle) => Ok(()),
        (Capture::Idle, Capture::Active(_)) => {
            let _relaxed = capture::Relaxed::enter();
            earlier.borrow(device_id)?.synchronize().map_err(cuda_error("cuStreamSynchronize"))
        }
        (Capture::Active(a), Capture::Active(b)) if a != b => Err(Error::Capture {
            stream: earlier.stream(),
            problem: crate::error::CaptureProblem::TwoGraphs { other: later.handle.stream() },
        }),
        _ => {
            // The event is destroyed (dropped) after being waited on, which the driver allows.
            let event = earlier.borrow(device_id)?.record_event(None).map_err(cuda_error("cuEventRecord"))?;
            later.handle.borrow(device_id)?.wait(&event).map_err(cuda_error("cuStreamWaitEvent"))
        }
    }
}

/// Block the host until `stream`'s work is done. A capturing stream cannot be waited for
/// (its work has not run); the wait itself runs in the relaxed capture mode, so that it does
/// not invalidate a capture on another stream.
pub(crate) fn synchronize(device_id: DeviceId, stream: StreamHandle) -> Result<()> {
    let checked = stream.check(device_id)?;
    if checked.capturing() {
        return Err(capture::refused(
            "waiting on the host for a capturing stream",
            stream,
            "wait after the capture ends, or pass async_copy=True / a stream that is not capturing",
        ));
    }
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        let _relaxed = capture::Relaxed::enter();
        stream.borrow(device_id)?.synchronize().map_err(cuda_error("cuStreamSynchronize"))
    })
}
