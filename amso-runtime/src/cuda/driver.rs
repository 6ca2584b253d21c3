//! The CUDA driver: loaded once, checked before any cudarc call (cudarc panics on first use
//! when libcuda is missing), and its errors mapped onto amso's error.

use std::sync::OnceLock;

use cudarc::driver::{result, sys, DriverError};

use crate::device::DeviceId;
use crate::error::{Error, Result};

/// Whether the driver loaded, or why not; its device count is kept in the pool's switches
/// (`SWITCHES.device_count`), which every allocation reads.
static DRIVER: OnceLock<std::result::Result<(), String>> = OnceLock::new();

fn load() -> std::result::Result<(), String> {
    // SAFETY: only probes whether the library can be opened; catch_unwind guards against
    // cudarc's own panics on exotic loader failures.
    let present = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return Err("no CUDA driver found (libcuda.so.1 could not be loaded); amso's host features \
                    work without one, CUDA features need an NVIDIA driver"
            .into());
    }
    result::init().map_err(|e| format!("the CUDA driver failed to initialise: {}", describe(&e)))?;
    let device_count = result::device::get_count().map_err(|e| describe(&e))?;
    super::switches::SWITCHES.device_count.store(device_count, std::sync::atomic::Ordering::Release);
    Ok(())
}

/// The driver, loaded on first use with the GIL released (`cuInit` takes up to seconds).
fn loaded() -> &'static std::result::Result<(), String> {
    match DRIVER.get() {
        Some(driver) => driver,
        None => crate::gil::released(|| DRIVER.get_or_init(load)),
    }
}

/// The driver is loaded, or the error saying why not: what a path into cudarc checks first
/// (device ids were checked where they entered, `DeviceId::new`).
#[inline]
pub(crate) fn require() -> Result<()> {
    if loaded_device_count().is_some() {
        return Ok(()); // every allocation and free comes here: a read, once the driver is loaded
    }
    device_count().map(drop)
}

/// The number of devices, once the driver is loaded; None before, or without a driver (a
/// read, for the paths every allocation takes).
#[inline]
pub(crate) fn loaded_device_count() -> Option<i32> {
    let count = super::switches::SWITCHES.device_count.load(std::sync::atomic::Ordering::Acquire);
    (count >= 0).then_some(count)
}

/// Whether a CUDA driver is loaded and sees at least one device (`DeviceId::new` asks: without
/// building the error `device_count` would).
pub fn is_available() -> bool {
    loaded().is_ok() && loaded_device_count().is_some_and(|count| count > 0)
}

/// Number of CUDA devices (an error when no driver is present).
pub fn device_count() -> Result<i32> {
    loaded().as_ref().map_err(|message| Error::Unavailable(message.clone()))?;
    Ok(loaded_device_count().unwrap_or(0)) // set by `load` before it answered
}

/// The CUDA device holding device memory at `address`; anything the driver does not know as
/// device memory (a host pointer, a made-up number) is `InvalidArgument`.
pub(crate) fn device_of_pointer(address: usize) -> Result<DeviceId> {
    use cudarc::driver::sys;
    device_count()?;
    let mut ordinal: i32 = -1;
    // SAFETY: the attribute is an int; the driver validates the address.
    let status = crate::gil::released(|| unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            address as sys::CUdeviceptr,
        )
    });
    if status != sys::CUresult::CUDA_SUCCESS || ordinal < 0 {
        return Err(Error::InvalidArgument(format!("0x{address:x} is not CUDA device memory ({status:?})")));
    }
    Ok(DeviceId::from_driver(ordinal))
}

/// The slot of `device_id` in a table with one entry per device. Device ids are checked where
/// they enter amso ([`DeviceId::new`]); this lookup only keeps the indexing in bounds, and says
/// the same as the check when it fails.
pub(crate) fn per_device<T>(slots: &[T], device_id: DeviceId) -> Result<&T> {
    match slots.get(device_id.index()) {
        Some(slot) => Ok(slot),
        None => Err(check_device(device_id.ordinal()).err().unwrap_or_else(|| {
            Error::InvalidArgument(format!("device_id {device_id} has no slot (table of {})", slots.len()))
        })),
    }
}

/// Check that `device_id` names a device of this machine: `DeviceId::new`'s check, where a raw
/// id enters amso (hence the raw `i32`).
pub(crate) fn check_device(device_id: i32) -> Result<()> {
    let count = device_count()?;
    if (0..count).contains(&device_id) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "device_id {device_id} is out of range: this machine has {count} CUDA device{} (ids 0..{count})",
            if count == 1 { "" } else { "s" }
        )))
    }
}

/// A driver error's name and description.
pub(crate) fn describe(error: &DriverError) -> String {
    let name = error.error_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let text = error.error_string().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{name}: {text}")
}

/// Map an allocation's driver error: out of memory (by its code) is `OutOfMemory`, with the
/// size asked for (Python MemoryError); the rest keep the driver's word (`cuda_error`).
pub(crate) fn map_error(call: &'static str, error: DriverError, bytes: usize, what: &'static str) -> Error {
    if error.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
        Error::OutOfMemory { bytes, what }
    } else {
        cuda_error(call)(error)
    }
}

/// The error of driver call `call` (`cuMemcpyAsync`): its `CUresult` as the driver gave it,
/// with the driver's name and description of it. Use as `.map_err(cuda_error("cuX"))`.
pub(crate) fn cuda_error(call: &'static str) -> impl FnOnce(DriverError) -> Error {
    move |error| Error::Cuda { call, code: Some(error.0 as u32), message: describe(&error) }
}
