//! Allocators that cross between copies of the runtime through the pool table (`pool.rs`):
//! another copy's allocator plugged into this copy's pool (`Foreign`), and this copy's
//! allocator handed to another copy's pool (the `exported_*` functions over its context).

use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;

use super::{guarded, panicked, Failure, ForeignAllocator};
use crate::cuda::alloc::DeviceAllocator;
use crate::cuda::stream::StreamHandle;
use crate::device::DeviceId;
use crate::error::Result;
use crate::stream::Stream;

/// Another copy's allocator, plugged into this copy's pool.
pub(super) struct Foreign(pub(super) ForeignAllocator);

// SAFETY: the other copy's allocator is a `DeviceAllocator` there (Send + Sync), reached only
// through its functions.
unsafe impl Send for Foreign {}
// SAFETY: as above.
unsafe impl Sync for Foreign {}

impl DeviceAllocator for Foreign {
    fn name(&self) -> String {
        // SAFETY: a NUL-terminated name that lives as long as the context.
        unsafe { CStr::from_ptr(self.0.name) }.to_string_lossy().into_owned()
    }

    fn allocate(&self, device_id: DeviceId, bytes: usize, stream: StreamHandle) -> Result<u64> {
        let (mut ptr, mut failure) = (0u64, Failure::new());
        // SAFETY: the other copy's function over its own context, with valid out-pointers.
        match unsafe { (self.0.allocate)(self.0.context, device_id, bytes, stream.stream(), &mut ptr, &mut failure) } {
            0 => Ok(ptr),
            _ => Err(failure.error(bytes, "device")),
        }
    }

    fn free(&self, device_id: DeviceId, ptr: u64, bytes: usize, stream: StreamHandle) {
        // SAFETY: as above.
        unsafe { (self.0.free)(self.0.context, device_id, ptr, bytes, stream.stream()) }
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        // SAFETY: the context is dropped once, by the pool that owns it.
        unsafe { (self.0.drop)(self.0.context) }
    }
}

/// The context of an allocator this copy hands to another copy's pool.
pub(super) type Exported = (Arc<dyn DeviceAllocator>, std::ffi::CString);

pub(super) unsafe extern "C" fn exported_allocate(
    context: *mut c_void,
    device_id: DeviceId,
    bytes: usize,
    stream: Stream,
    ptr: *mut u64,
    failure: *mut Failure,
) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the context `plug` boxed, alive until `exported_drop`.
        let (allocator, _) = unsafe { &*context.cast::<Exported>() };
        let stream = StreamHandle::of(stream).unwrap_or(StreamHandle::LEGACY);
        match allocator.allocate(device_id, bytes, stream) {
            Ok(address) => {
                // SAFETY: the caller's out-pointer.
                unsafe { *ptr = address };
                0
            }
            Err(error) => {
                // SAFETY: the caller's out-pointer.
                unsafe { (*failure).write(&error) };
                -1
            }
        }
    }))
    .unwrap_or_else(|_| panicked(failure))
}

pub(super) unsafe extern "C" fn exported_free(
    context: *mut c_void,
    device_id: DeviceId,
    ptr: u64,
    bytes: usize,
    stream: Stream,
) {
    guarded((), || {
        // SAFETY: as in `exported_allocate`.
        let (allocator, _) = unsafe { &*context.cast::<Exported>() };
        allocator.free(device_id, ptr, bytes, StreamHandle::of(stream).unwrap_or(StreamHandle::LEGACY));
    })
}

pub(super) unsafe extern "C" fn exported_drop(context: *mut c_void) {
    guarded((), || {
        // SAFETY: the context `plug` boxed, dropped once.
        drop(unsafe { Box::from_raw(context.cast::<Exported>()) });
    })
}
