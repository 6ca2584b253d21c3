//! CUDA: the driver (checked before first use, so a machine without one gets a clear error
//! instead of cudarc's panic), primary contexts, streams, device and pinned memory,
//! transfers, and the NVRTC-compiled kernels.
//!
//! Public: [`is_available`], [`device_count`], and your own kernels ([`Kernel`],
//! [`with_stream`], with cudarc's launch builder); arrays reach the rest through
//! `MemArray::move_memory` and friends.
//!
//! cudarc's safe layer carries contexts (`CudaContext`, one primary context per device),
//! amso's own streams and borrowed foreign ones (`CudaStream`, `wrap_borrowed_stream`),
//! modules (`CudaModule`) and kernel launches (the launch builder, with `DeviceRepr` for
//! amso's device indexers). Memory is amso's own (its pool, `cuMemAllocAsync` with a release
//! threshold, a user's allocator, a foreign producer's address), not a `CudaSlice` that frees
//! itself, so allocation, events, waits, zeroing and peer copies go through cudarc's `result`
//! layer. Raw `cudarc::driver::sys` calls remain only where neither layer serves:
//! - context push/pop (`context.rs`): cudarc binds with `cuCtxSetCurrent`, which would leave
//!   the caller's thread (PyTorch's, CuPy's) on amso's device afterwards;
//! - host-device copies (`transfer.rs`): `result`'s take Rust slices, but these run between
//!   raw pointers and outlive the call (asynchronous copies), and `cuMemcpyAsync` (unified
//!   addressing) is not wrapped;
//! - pointer attributes (`driver.rs`) and capture status and mode (`capture.rs`): not wrapped;
//! - interprocess handles (`ipc.rs`): not wrapped, and an interprocess event needs two event
//!   flags at once, which `result::event::create`'s single enum value cannot carry;
//! - NVRTC to CUBIN (`compile.rs`): cudarc's `compile_ptx` returns PTX only.

pub(crate) mod add_index;
mod address_hash;
mod address_map;
pub(crate) mod alloc;
pub(crate) mod block_cache;
pub(crate) mod capture;
mod capture_probes;
pub(crate) mod compile;
pub(crate) mod context;
pub(crate) mod deferred;
pub(crate) mod device_memory;
mod device_waiter;
pub(crate) mod driver;
mod sorted_map;
// Process-to-process sharing is reached from Python only (`MemArray.share`); its handle's bytes
// (`share/handle.rs`, which the fuzz target reads without Python) take their sizes from here.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) mod ipc;
mod kernel;
mod lent;
#[cfg(feature = "python")]
pub(crate) mod loans;
pub(crate) mod pool;
pub(crate) mod pool_allocator;
pub(crate) mod pool_stats;
pub(crate) mod request;
mod shelf;
pub(crate) mod stream;
mod switches;
pub(crate) mod transfer;

pub use driver::{device_count, is_available};
pub use kernel::{
    order_streams, with_stream, CudaFunction, CudaStream, DriverError, Kernel, LaunchConfig, PushKernelArg,
};

/// A seeded xorshift sequence, for the randomised tests of the pool's structures (the address
/// map, the sorted map, the block cache).
#[cfg(test)]
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
