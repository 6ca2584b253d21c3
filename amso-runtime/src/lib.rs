//! amso's runtime: typed n-dimensional arrays (`MemArray<T, N>`) in host memory and, with the
//! `cuda` feature, CUDA device memory; shared zero-copy with NumPy, PyTorch, CuPy, JAX and C
//! through DLPack, the CUDA array interface and a small C ABI.
//!
//! Nothing here knows the spec's instantiation list: `specs/types.yaml` and the
//! `#[amso_array]` macro generate the Python classes, which call the generic code here.
//!
//! ```
//! use amso_runtime::{MemArray, Error};
//!
//! let mut density = MemArray::<f64, 3>::new([4, 4, 4])?;
//! density.write([1, 2, 3], 0.5)?;
//! assert_eq!(density.get([1, 2, 3])?, 0.5);
//!
//! // Tight loops go through an indexer, which borrows the array.
//! let mut cells = density.indexer_mut()?;
//! for offset in 0..cells.size() {
//!     let [i, j, k] = cells.unravel(offset);
//!     cells.set([i, j, k], (i + j + k) as f64);
//! }
//! assert_eq!(density.to_vec()?[1 * 16 + 2 * 4 + 3], 6.0);
//!
//! // A lock makes the array refuse every access but the guard's.
//! let guard = density.lock()?;
//! assert_eq!(guard.get([0, 0, 1])?, 1.0);
//! drop(guard);
//! assert_eq!(density.get([4, 0, 0]), Err(Error::IndexOutOfBounds { index: 4, axis: 0, size: 4 }));
//! # Ok::<(), Error>(())
//! ```
//!
//! Features: `python` adds the PyO3 classes' runtime ([`python::register`]); `cuda` adds
//! device memory, transfers on CUDA streams and kernels ([`cuda`]).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "python")]
pub(crate) mod anchor;
#[cfg(feature = "python")]
pub(crate) mod borrow;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
#[cfg(any(feature = "python", feature = "cuda"))]
pub(crate) mod current_stream;
mod device;
pub(crate) mod dlpack;
mod element;
mod error;
#[cfg(feature = "cuda")]
pub(crate) mod gil;
pub(crate) mod host;
mod indexer;
mod kinds;
mod lock;
mod memarray;
pub(crate) mod object;
#[cfg(feature = "python")]
pub(crate) mod process;
pub(crate) mod shape;
#[cfg(feature = "cuda")]
#[cfg_attr(not(feature = "python"), allow(dead_code))] // the Python class uses it; the fuzz target reads handles
pub(crate) mod share;
#[cfg(any(feature = "cuda", test))]
pub(crate) mod staging;
#[cfg(any(feature = "python", test))]
#[cfg_attr(not(feature = "python"), allow(dead_code))] // the Python class uses it; Miri runs its tests
pub(crate) mod state_cell;
mod stream;
#[cfg(feature = "python")]
pub(crate) mod strided;

/// Rust functions inside compiled graphs (`jax.jit`, `torch.compile`): `#[amso_macros::op]`.
#[cfg(feature = "python")]
#[cfg_attr(docsrs, doc(cfg(feature = "python")))]
pub mod op;
#[cfg(feature = "python")]
#[cfg_attr(docsrs, doc(cfg(feature = "python")))]
pub mod python;
/// The records of `specs/types.yaml` (C structs of the table's scalars) as `#[repr(C)]` Rust
/// structs, e.g. [`records::Particle`]; a crate's own come from `#[derive(Element)]`.
pub mod records;

pub use device::{Device, DeviceId, DeviceType, Residence};
pub use element::{dtypes, ArrayElement, DType, Element, Field, Float4E2M1FnX2, Scalar};
pub use error::{CaptureProblem, Error, Result};
pub use indexer::{DeviceIndexer, HostIndexer, HostIndexerMut};
pub use kinds::{datetime, FixedBytes, FixedUnicode};
pub use memarray::{ArrayOptions, ForeignMemory, LockGuard, MemArray};
pub use stream::Stream;

/// The `faer` that `as_faer` views are made of (the `faer` feature).
#[cfg(feature = "faer")]
pub use faer;
/// The `nalgebra` that `as_matrix` views are made of (the `nalgebra` feature).
#[cfg(feature = "nalgebra")]
pub use nalgebra;
/// The `ndarray` crate amso's views are made of (the `ndarray` feature): name its types
/// through this path, and a helper taking `ArrayView2` needs no version of its own.
#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub use ndarray;

pub use shape::MAX_NDIM;

/// What generated code, the bundled extension, the fuzz targets and amso's own tests need
/// beyond the documented surface. Not part of the API: it changes without notice.
#[doc(hidden)]
pub mod __private {
    pub use crate::dlpack::{plan_export, DlpackRequest, ManagedTensor};
    pub use crate::element::{scalar, ElementOps, PlainBits, OPAQUE_HANDLE, RECORD};
    pub use crate::error::code;
    pub use crate::lock::LockId;
    pub use crate::memarray::access::RawView;
    pub use crate::memarray::buffer_claim::{claim_buffer, BufferClaim, BufferFields, BufferRefusal};
    pub use crate::memarray::foreign::{check_major_version, claim};
    pub use crate::memarray::rebuild::{plan_rebuild, Pickled, PickledData, RebuildMemory, RebuildPlan};
    pub use crate::object::{ArrayObject, ArrayType};
    #[cfg(feature = "python")]
    pub use crate::python::__private::*;
    pub use crate::records::{record_typestr, record_typestr_bytes};
    pub use crate::shape::unravel;
    #[cfg(feature = "cuda")]
    pub use crate::share::handle::round_trip as shared_handle_round_trip;
}
