//! Primary contexts, one `cudarc::driver::CudaContext` per device, created once and kept for
//! the life of the process. Each amso call makes the device's context current (pushed, unless
//! it already is) and pops it afterwards, so the caller's current context (PyTorch's, CuPy's)
//! is left as it was.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{result, sys, CudaContext};

use super::driver::{cuda_error, per_device};
use crate::device::DeviceId;
use crate::error::Result;

/// Each device's primary context, made on first use.
static CONTEXTS: OnceLock<Vec<OnceLock<&'static Arc<CudaContext>>>> = OnceLock::new();

/// The primary context of `device_id` (after the first call per device, a lock-free read).
pub(crate) fn context(device_id: DeviceId) -> Result<&'static Arc<CudaContext>> {
    let slots =
        CONTEXTS.get_or_init(|| (0..super::driver::device_count().unwrap_or(0)).map(|_| OnceLock::new()).collect());
    let slot = per_device(slots, device_id)?;
    if let Some(&context) = slot.get() {
        return Ok(context);
    }
    // Made once, with the GIL released (a primary context takes a long while): no thread waits
    // for this lock holding the GIL.
    static CREATING: Mutex<()> = Mutex::new(());
    crate::gil::released(|| {
        let _creating = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&context) = slot.get() {
            return Ok(context);
        }
        // `CudaContext::new` makes the context current (cuCtxSetCurrent); put the caller's back.
        let previous = result::ctx::get_current().map_err(cuda_error("cuCtxGetCurrent"))?;
        let created = CudaContext::new(device_id.index());
        // SAFETY: `previous` was current on this thread a moment ago (or there was none).
        unsafe { result::ctx::set_current(previous.unwrap_or(std::ptr::null_mut())) }
            .map_err(cuda_error("cuCtxSetCurrent"))?;
        let created = created.map_err(cuda_error("cuDevicePrimaryCtxRetain"))?;
        // amso owns no `CudaSlice`, whose reads and writes event tracking orders; with it on,
        // cudarc's `new_stream` synchronises the whole context, which a CUDA graph capture in
        // progress forbids. SAFETY: no cudarc slice of this context exists.
        unsafe { created.disable_event_tracking() };
        let context: &'static Arc<CudaContext> = Box::leak(Box::new(created));
        let _ = slot.set(context);
        Ok(context)
    })
}

/// The device's primary context is current on this thread while this guard lives.
pub(crate) struct Current {
    /// Whether `enter` pushed the context (it was not current already), so the drop pops it.
    pushed: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Current {
    /// Make `device_id`'s primary context current until the guard drops.
    pub(crate) fn enter(device_id: DeviceId) -> Result<Current> {
        let context = context(device_id)?.cu_ctx();
        // Already current (the usual case in a thread of PyTorch or CuPy on that device): a
        // read of the driver's thread state, and nothing to restore.
        if result::ctx::get_current().ok().flatten() == Some(context) {
            return Ok(Current { pushed: false, _not_send: std::marker::PhantomData });
        }
        // Raw push/pop: cudarc binds contexts with cuCtxSetCurrent, which would leave the
        // caller's thread on amso's device afterwards; pushing restores it on drop.
        // SAFETY: a retained primary context, kept for the process.
        unsafe { sys::cuCtxPushCurrent_v2(context) }.result().map_err(cuda_error("cuCtxPushCurrent"))?;
        Ok(Current { pushed: true, _not_send: std::marker::PhantomData })
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        if !self.pushed {
            return;
        }
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops the context `enter` pushed on this same thread (the guard is !Send).
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    }
}

/// Free and total memory of `device_id`, in bytes.
pub(crate) fn memory_info(device_id: DeviceId) -> Result<(usize, usize)> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        result::mem_get_info().map_err(cuda_error("cuMemGetInfo"))
    })
}
