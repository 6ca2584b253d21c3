//! CUDA IPC: device memory and events another process on the same machine opens
//! (`cuIpcGetMemHandle` / `cuIpcOpenMemHandle`, `cuIpcGetEventHandle` / `cuIpcOpenEventHandle`),
//! and the device UUIDs that name a GPU across processes (ordinals differ with
//! `CUDA_VISIBLE_DEVICES`). Raw `sys` calls: cudarc's result layer has no IPC wrappers.
//!
//! Legacy IPC handles need memory from `cuMemAlloc` (amso's `shareable=True` arrays), not from
//! a stream-ordered pool; they pass between processes as plain bytes, with no file descriptor
//! to send, so a pickle can carry them. Every call here runs with the GIL released.

use cudarc::driver::{result, sys};

use super::context::{context, Current};
use super::driver::{cuda_error, device_count};
use super::stream::StreamHandle;
use crate::device::DeviceId;
use crate::error::{Error, Result};

/// Bytes of a memory or event handle.
pub(crate) const HANDLE_BYTES: usize = 64;

/// A raw IPC handle's bytes.
pub(crate) type HandleBytes = [u8; HANDLE_BYTES];

/// The IPC handle of the allocation at `ptr` on `device_id` (memory from `cuMemAlloc`).
pub(crate) fn memory_handle(device_id: DeviceId, ptr: u64) -> Result<HandleBytes> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; HANDLE_BYTES] };
        // SAFETY: a valid out-pointer; the context of the allocation's device is current.
        unsafe { sys::cuIpcGetMemHandle(&mut handle, ptr) }.result().map_err(cuda_error("cuIpcGetMemHandle"))?;
        Ok(handle.reserved.map(|b| b as u8))
    })
}

/// Map another process's allocation into this one on `device_id`; its address here.
pub(crate) fn open_memory(device_id: DeviceId, handle: &HandleBytes) -> Result<u64> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        let handle = sys::CUipcMemHandle_st { reserved: handle.map(|b| b as std::ffi::c_char) };
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: a valid out-pointer; the context is current. A handle that names no live
        // allocation of another process is an error of the driver, not undefined behaviour.
        unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                handle,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint,
            )
        }
        .result()
        .map_err(|e| {
            Error::InvalidArgument(format!(
                "the driver cannot open the shared memory ({}): its exporter freed it, or the handle is damaged",
                super::driver::describe(&e)
            ))
        })?;
        Ok(ptr)
    })
}

/// The allocation that `ptr` lies in on `device_id`: its base address and size
/// (`cuMemGetAddressRange`). Raw `sys`: cudarc's result layer has no wrapper for it.
pub(crate) fn allocation_range(device_id: DeviceId, ptr: u64) -> Result<(u64, usize)> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: valid out-pointers; the context is current. An address that lies in no
        // allocation is an error of the driver.
        unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) }
            .result()
            .map_err(cuda_error("cuMemGetAddressRange"))?;
        Ok((base, size))
    })
}

/// Unmap memory `open_memory` mapped, after the device's work on it is done.
pub(crate) fn close_memory(device_id: DeviceId, ptr: u64) -> Result<()> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        // SAFETY: the context is current; work queued on any stream of it may still use the
        // mapping, so wait for the device first.
        result::ctx::synchronize().map_err(cuda_error("cuCtxSynchronize"))?;
        // SAFETY: `ptr` came from `open_memory` on this device and is unmapped once.
        unsafe { sys::cuIpcCloseMemHandle(ptr) }.result().map_err(cuda_error("cuIpcCloseMemHandle"))
    })
}

/// An interprocess event of `device_id`, destroyed when dropped.
#[derive(Debug)]
pub(crate) struct IpcEvent {
    event: sys::CUevent,
    device_id: DeviceId,
}

// SAFETY: a CUDA event handle may be used from any thread.
unsafe impl Send for IpcEvent {}
// SAFETY: as above; `&IpcEvent` records and reads the handle only through the driver.
unsafe impl Sync for IpcEvent {}

impl IpcEvent {
    /// A new interprocess event on `device_id` (no timing, as interprocess events must be).
    pub(crate) fn new(device_id: DeviceId) -> Result<IpcEvent> {
        crate::gil::released(|| {
            let _ctx = Current::enter(device_id)?;
            let flags =
                sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32 | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            let mut event: sys::CUevent = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; the context is current.
            unsafe { sys::cuEventCreate(&mut event, flags) }.result().map_err(cuda_error("cuEventCreate"))?;
            Ok(IpcEvent { event, device_id })
        })
    }

    /// Record the event after the work queued on `stream` so far, and return its handle.
    pub(crate) fn record(&self, stream: StreamHandle) -> Result<HandleBytes> {
        crate::gil::released(|| {
            let _ctx = Current::enter(self.device_id)?;
            // SAFETY: a live event of this context and a stream checked for this device.
            unsafe { result::event::record(self.event, stream.check(self.device_id)?.handle.raw()) }
                .map_err(cuda_error("cuEventRecord"))?;
            let mut handle = sys::CUipcEventHandle_st { reserved: [0; HANDLE_BYTES] };
            // SAFETY: a valid out-pointer; an interprocess event.
            unsafe { sys::cuIpcGetEventHandle(&mut handle, self.event) }
                .result()
                .map_err(cuda_error("cuIpcGetEventHandle"))?;
            Ok(handle.reserved.map(|b| b as u8))
        })
    }

    /// Queue on `stream` a wait for the work this event was last recorded after (in the
    /// process that made the event; other processes open its handle with `wait_for`).
    pub(crate) fn wait_on(&self, stream: StreamHandle) -> Result<()> {
        crate::gil::released(|| {
            let _ctx = Current::enter(self.device_id)?;
            let stream = stream.check(self.device_id)?.handle.raw();
            // SAFETY: a live event of this context and a stream checked for this device.
            unsafe { result::stream::wait_event(stream, self.event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
                .map_err(cuda_error("cuStreamWaitEvent"))
        })
    }
}

impl Drop for IpcEvent {
    fn drop(&mut self) {
        let (event, device_id) = (self.event as usize, self.device_id);
        let _ = crate::gil::released(|| -> Result<()> {
            let _ctx = Current::enter(device_id)?;
            // SAFETY: this value's event, destroyed once.
            let _ = unsafe { result::event::destroy(event as sys::CUevent) };
            Ok(())
        });
    }
}

/// Queue on `stream` of `device_id` a wait for another process's event.
pub(crate) fn wait_for(device_id: DeviceId, handle: &HandleBytes, stream: StreamHandle) -> Result<()> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        let stream = stream.check(device_id)?.handle.raw(); // before the event exists to leak
        let handle = sys::CUipcEventHandle_st { reserved: handle.map(|b| b as std::ffi::c_char) };
        let mut event: sys::CUevent = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        unsafe { sys::cuIpcOpenEventHandle(&mut event, handle) }.result().map_err(|e| {
            Error::InvalidArgument(format!(
                "the driver cannot open the shared array's event ({}): the handle is damaged",
                super::driver::describe(&e)
            ))
        })?;
        // SAFETY: a live event and a stream checked for this device; the event may be
        // destroyed once the wait is queued (the driver keeps what the wait needs).
        let waited =
            unsafe { result::stream::wait_event(stream, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) };
        // SAFETY: the event opened above, destroyed once.
        let _ = unsafe { result::event::destroy(event) };
        waited.map_err(cuda_error("cuStreamWaitEvent"))
    })
}

/// The UUID of `device_id`, which names the GPU in every process.
pub(crate) fn uuid(device_id: DeviceId) -> Result<[u8; 16]> {
    crate::gil::released(|| {
        let device = context(device_id)?.cu_device();
        let uuid = cudarc::driver::result::device::get_uuid(device).map_err(cuda_error("cuDeviceGetUuid"))?;
        Ok(uuid.bytes.map(|b| b as u8))
    })
}

/// This process's ordinal of the GPU with `wanted` UUID, if it sees that GPU.
pub(crate) fn device_with_uuid(wanted: &[u8; 16]) -> Result<Option<DeviceId>> {
    for device_id in (0..device_count()?).map(DeviceId::from_driver) {
        if uuid(device_id)? == *wanted {
            return Ok(Some(device_id));
        }
    }
    Ok(None)
}
