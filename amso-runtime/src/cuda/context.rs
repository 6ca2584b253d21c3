//! Primary contexts, one per device, retained once for the life of the process. Each amso
//! call pushes the device's context and pops it afterwards, so the caller's current context
//! (PyTorch's, CuPy's) is left as it was.

use std::sync::Mutex;

use cudarc::driver::{result, sys};

use super::driver::{check_device, cuda_error};
use crate::error::Result;

#[derive(Clone, Copy)]
struct Context(sys::CUcontext);

// SAFETY: a CUcontext handle may be used from any thread; the driver synchronises access.
unsafe impl Send for Context {}

static CONTEXTS: Mutex<Vec<Option<Context>>> = Mutex::new(Vec::new());

fn primary(device_id: i32) -> Result<sys::CUcontext> {
    check_device(device_id)?;
    let mut contexts = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    let slot = device_id as usize;
    if contexts.len() <= slot {
        contexts.resize(slot + 1, None);
    }
    if let Some(Context(ctx)) = contexts[slot] {
        return Ok(ctx);
    }
    let device = result::device::get(device_id).map_err(cuda_error)?;
    // SAFETY: `device` is a valid ordinal (checked); the retained context is never released,
    // so handles derived from it stay valid for the process.
    let ctx = unsafe { result::primary_ctx::retain(device) }.map_err(cuda_error)?;
    contexts[slot] = Some(Context(ctx));
    Ok(ctx)
}

/// The device's primary context is current on this thread while this guard lives.
pub struct Current {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Current {
    /// Make `device_id`'s primary context current until the guard drops.
    pub fn enter(device_id: i32) -> Result<Current> {
        let ctx = primary(device_id)?;
        // SAFETY: `ctx` is a retained primary context.
        unsafe { sys::cuCtxPushCurrent_v2(ctx) }.result().map_err(cuda_error)?;
        Ok(Current { _not_send: std::marker::PhantomData })
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops the context `enter` pushed on this same thread (the guard is !Send).
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    }
}
