//! CUDA: the driver (checked before first use, so a machine without one gets a clear error
//! instead of cudarc's panic), primary contexts, streams, device and pinned memory,
//! transfers, and the NVRTC-compiled kernels.
//!
//! Only [`is_available`] and [`device_count`] are public; arrays reach the rest through
//! `MemArray::move_memory` and friends.
//!
//! Where raw `cudarc::driver::sys` calls remain, and why cudarc's safe layer cannot serve:
//! - streams: amso orders work on streams it does not own (a caller's `torch` or CuPy stream,
//!   given as a handle); cudarc's `CudaStream` only wraps streams it created (borrowing a
//!   foreign stream is cudarc pull request 597, still open), so `stream.rs` records and waits
//!   on events over raw handles.
//! - memory: device memory comes from amso's own pool, from stream-ordered `cuMemAllocAsync`
//!   with a release threshold, or from a user's allocator, and foreign memory is wrapped by
//!   address; cudarc's `CudaSlice` owns its allocation and frees it itself, so `memory.rs` and
//!   `alloc.rs` keep raw device pointers. Pinned host memory (`cuMemHostAlloc`) likewise.
//! - transfers: copies run between those raw pointers, on those foreign streams, so
//!   `transfer.rs` calls the `cuMemcpy*Async` functions directly.
//! - pointer queries (`cuPointerGetAttribute`) that check foreign memory have no safe wrapper.
//! - kernels: `add_index` launches on those foreign streams too, and its modules are cached
//!   per device next to amso's own contexts (`kernels.rs`).
//! - contexts: amso makes a device's primary context current around each call without
//!   holding a `CudaContext` per thread (`context.rs`).

pub(crate) mod alloc;
pub(crate) mod context;
pub(crate) mod deferred;
pub(crate) mod driver;
pub(crate) mod kernels;
pub(crate) mod memory;
pub(crate) mod stream;
pub(crate) mod transfer;

pub use driver::{device_count, is_available};
