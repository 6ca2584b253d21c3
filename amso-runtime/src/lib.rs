//! amso's runtime: typed n-dimensional arrays (`MemArray<T, N>`) holding host memory (and,
//! with the CUDA layer, device memory), lock ids for exported views, a `#[repr(C)]` indexer
//! for kernels, DLPack export, and the Python glue the generated classes delegate to.
//!
//! Nothing here knows the spec's instantiation list: the generated code names types and
//! calls these generic functions.

mod access;
pub mod capi;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod device;
pub mod dlpack;
pub mod element;
pub mod error;
mod export;
pub mod foreign;
pub mod host;
pub mod indexer;
pub mod lock;
pub mod memarray;
pub mod object;
pub mod shape;
pub mod stream_context;

#[cfg(feature = "python")]
pub mod python;

pub use element::{dtypes, DType, Element, Scalar};
pub use error::{Error, Result};
pub use indexer::ArrayIndexer;
pub use lock::{LockGuard, LockId};
pub use memarray::{ArrayOptions, Device, DeviceType, MemArray, Residence};
pub use object::ArrayObject;

/// The largest number of dimensions amso compiles (the spec's ndim range is `1..=MAX_NDIM`).
pub const MAX_NDIM: usize = 8;
