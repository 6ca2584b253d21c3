//! Results in the caller's framework. A function called with NumPy arrays returns a NumPy
//! array, with torch tensors a torch tensor, with CuPy or JAX arrays theirs; [`Framework`]
//! names one explicitly, as nanobind's return tags do. Two kinds of result:
//! - [`NewArray`]: a zeroed array to fill, allocated where the framework allocates (NumPy's
//!   allocator, the exchange API's `managed_tensor_allocator` of torch and TVM-FFI) or, for
//!   frameworks without one (CuPy, JAX), by amso, then handed over through the framework's
//!   own `from_dlpack`;
//! - [`IntoFramework`]: memory Rust already owns (`Vec`, `ndarray::Array`, `MemArray`) handed to
//!   the framework without a copy, as rust-numpy's `into_pyarray`: Rust keeps the allocation
//!   until the framework's deleter runs.

mod framework;
mod handover;
mod into_framework;
mod new_array;

pub use framework::Framework;
#[cfg(feature = "ndarray")]
pub(crate) use handover::Handover;
#[cfg(feature = "nalgebra")]
pub(in crate::python::args) use into_framework::fortran_order;
pub use into_framework::IntoFramework;
pub use new_array::NewArray;
