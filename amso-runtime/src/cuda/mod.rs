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
//! events (`CudaEvent`), modules (`CudaModule`) and kernel launches (the launch builder, with
//! `DeviceRepr` for amso's device indexers). Raw `cudarc::driver::sys` calls remain where
//! that layer cannot serve, each with its reason at the call:
//! - context push/pop (`context.rs`): cudarc binds with `cuCtxSetCurrent`, which would leave
//!   the caller's thread (PyTorch's, CuPy's) on amso's device afterwards;
//! - device memory, pinned memory and transfers (`memory.rs`, `alloc.rs`, `transfer.rs`):
//!   amso's memory comes from its own pool, from `cuMemAllocAsync` with a release threshold,
//!   from a user's allocator, or from a foreign producer by address, while cudarc's
//!   `CudaSlice` owns and frees its allocation itself; copies run between those raw pointers;
//! - pointer and stream queries (`driver.rs`, `stream.rs`, `capture.rs`), which cudarc does
//!   not wrap or wraps only behind a context bind on every call;
//! - NVRTC to CUBIN (`compile.rs`): cudarc's `compile_ptx` returns PTX only.

pub(crate) mod alloc;
pub(crate) mod capture;
pub(crate) mod compile;
pub(crate) mod context;
pub(crate) mod deferred;
pub(crate) mod driver;
pub(crate) mod ipc;
mod kernel;
pub(crate) mod kernels;
pub(crate) mod memory;
pub(crate) mod stream;
pub(crate) mod transfer;

pub use driver::{device_count, is_available};
pub use kernel::{
    order_streams, with_stream, CudaFunction, CudaStream, DriverError, Kernel, LaunchConfig, PushKernelArg,
};
