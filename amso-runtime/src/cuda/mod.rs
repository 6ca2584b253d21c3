//! CUDA through cudarc's thin `result` layer: the driver (checked before first use, so a
//! machine without one gets a clear error instead of cudarc's panic), primary contexts,
//! streams, device and pinned memory, transfers, and the NVRTC-compiled kernels.

pub mod alloc;
pub mod context;
pub mod deferred;
pub mod driver;
pub mod kernels;
pub mod memory;
pub mod stream;
pub mod transfer;

pub use driver::{device_count, is_available};
