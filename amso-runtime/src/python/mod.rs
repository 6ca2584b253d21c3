//! The runtime of amso's Python classes: one type-erased, thread-safe base class
//! ([`MemArrayBase`]) carrying every Python method, the DLPack context manager, imports from
//! other libraries, the C ABI and the DLPack exchange API. Generated classes subclass the
//! base and add only their constructor; an extension module adds them with [`register`].
//!
//! The `amso-macros` crate's documentation shows a complete extension module.

#[cfg(feature = "cuda")]
mod allocators;
mod args;
pub(crate) mod base;
#[cfg(feature = "cuda")]
mod c_allocators;
pub(crate) mod capi;
pub(crate) mod export;
mod factory;
mod hot_methods;
pub(crate) mod identity_cache;
#[cfg(feature = "cuda")]
mod memory;
mod methods;
pub(crate) mod npyffi;
mod pickle;
mod repr;
#[cfg(feature = "cuda")]
mod share;
mod source;
#[cfg(feature = "cuda")]
mod user_kernel;
mod views;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyModule, PyTuple};
use pyo3::PyClassInitializer;

pub use args::{
    Access, AllowTypeChange, ArgumentError, ArrayLike, ArrayLikeDyn, ArrayMut, ArrayMutDyn, ArrayRef, ArrayRefDyn,
    Casting, Coerce, Dimensions, DynRank, Framework, IntoFramework, NewArray, Rank, Read, TypeMustMatch, TypedArray,
    TypedArrayLike, UntypedArray, Write,
};
#[cfg(feature = "ndarray")]
pub use args::{ClassView, NdDimensions, OwnedView};
pub use base::array::{MemArrayBase, TypedMut};
pub use base::registry::Instantiation;
pub use export::dlpack_context::DLPackContext;

use crate::device::DeviceId;

use crate::object::ArrayType;
use crate::stream::Stream;

/// What generated code and the bundled module need; see the crate's `__private`.
pub(crate) mod __private {
    pub use crate::python::capi::{add_typed_api, typed_data, typed_handle, typed_shape, Handle, TypedExport};
    pub use crate::python::{new_base, register_runtime, Instantiation};
}

/// The base-class part of a new instance of class `C`, from the constructor's arguments;
/// generated constructors add their (empty) subclass to it.
#[doc(hidden)]
#[inline]
pub fn new_base<C: Instantiation>(
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyClassInitializer<MemArrayBase>> {
    construct(args, kwargs, C::Array::OPS, C::Array::NDIM)
}

/// `new_base`'s body, one for every class.
fn construct(
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    ops: &'static crate::element::ElementOps,
    ndim: usize,
) -> PyResult<PyClassInitializer<MemArrayBase>> {
    let (shape, options) = base::convert::constructor_args(args, kwargs)?;
    let array = crate::memarray::core::ArrayCore::from_dims(&shape.0, ndim, ops, options)?;
    Ok(PyClassInitializer::from(MemArrayBase::new(array)))
}

/// Name of the module attribute holding the `(dtype name, ndim) -> class` dispatch map.
const DISPATCH_ATTR: &str = "__amso_dispatch__";

/// Add class `C` to `module` and its entry to the module's dispatch map.
pub fn register<C: Instantiation>(module: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::element::own::note(<C::Array as crate::object::ArrayType>::OPS.dtype);
    module.add_class::<C>()?;
    register_class(module, base::registry::Registration::of::<C>(module.py()))
}

/// `register`'s body, one for every class: the dispatch entry, the registry, `_amso_rebuild`.
fn register_class(module: &Bound<'_, PyModule>, mut registration: base::registry::Registration) -> PyResult<()> {
    let py = module.py();
    crate::process::join(py)?;
    let class = base::registry::class_object(py, &registration);
    let dispatch = match module.getattr(DISPATCH_ATTR) {
        Ok(existing) => existing.cast_into::<PyDict>()?,
        Err(_) => {
            let created = PyDict::new(py);
            module.add(DISPATCH_ATTR, &created)?;
            created
        }
    };
    hot_methods::install(&class)?;
    views::install_numpy_habits(py)?;
    dispatch.set_item((registration.dtype().name, registration.ndim), &class)?;
    registration.module = base::registry::interned(&module.name()?.to_cow()?);
    registration.name = base::registry::interned(&class.name()?.to_cow()?);
    base::registry::add(registration);
    if !module.hasattr(pickle::REBUILD)? {
        module.add_function(pyo3::wrap_pyfunction!(pickle::rebuild, module)?)?;
    }
    Ok(())
}

/// Add the shared classes (the base class and the DLPack context) and constants to `module`
/// (the bundled `amso._amso` module).
#[doc(hidden)]
pub fn register_runtime(module: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::process::join(module.py())?;
    base::registry::set_bundled();
    module.add_class::<MemArrayBase>()?;
    module.add_class::<DLPackContext>()?;
    module.add_class::<views::ArrayIterator>()?;
    module.add_function(pyo3::wrap_pyfunction!(base::recognize::is_amso_array, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(base::recognize::is_amso_class, module)?)?;
    module.add("MAX_NDIM", crate::shape::MAX_NDIM)?;
    module.add_function(pyo3::wrap_pyfunction!(cuda_is_available, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(dtypes, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(uncompiled, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(set_source_checkout, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(cuda_device_count, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(cuda_memory_info, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(set_current_stream, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(source::import::from_dlpack, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(factory::empty, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(factory::zeroed_array, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(factory::set_class_resolver, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(factory::class_cache_len, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(source::import::from_cuda_array_interface, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(source::import::wrap, module)?)?;
    module.add_function(pyo3::wrap_pyfunction!(live_borrows, module)?)?;
    #[cfg(feature = "cuda")]
    {
        module.add_class::<user_kernel::UserKernel>()?;
        module.add_class::<share::SharedHandle>()?;
        module.add_function(pyo3::wrap_pyfunction!(share::collect_shared, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::set_allocator, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::deferred_limits, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::set_release_threshold, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::defer_hold, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::defer_release, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::flush_frees, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::memory_info, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(allocators::lend, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(allocators::reclaim, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(allocators::reset_loans, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(allocators::refused_frees, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(c_allocators::cupy_hooks, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(allocators::clients, module)?)?;
        module.add_class::<allocators::RmmHooks>()?;
        module.add_function(pyo3::wrap_pyfunction!(allocators::pool_pair_ns, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::empty_cache, module)?)?;
        module.add_function(pyo3::wrap_pyfunction!(memory::set_cache_limit, module)?)?;
        module.add_class::<allocators::Loan>()?;
        module.add_class::<allocators::Lender>()?;
        module.add_class::<allocators::PinnedLoan>()?;
    }
    module.add("_C_API", capi::api_capsule(module.py())?)?;
    if module.getattr(DISPATCH_ATTR).is_err() {
        module.add(DISPATCH_ATTR, PyDict::new(module.py()))?;
    }
    Ok(())
}

/// The number of typed-argument borrows alive in the process (for tests).
#[pyfunction(name = "_live_borrows")]
fn live_borrows(py: Python<'_>) -> usize {
    crate::process::live_borrows(py)
}

/// One dtype as `_dtypes` lists it: `(name, code, bits, lanes, numpy name, numpy module)`.
type DTypeRow = (&'static str, u8, u8, u16, &'static str, Option<&'static str>);

/// The spec's element types, one `DTypeRow` each.
#[pyfunction(name = "_dtypes")]
fn dtypes() -> Vec<DTypeRow> {
    crate::element::ALL.iter().map(|d| (d.name, d.code, d.bits, d.lanes, d.numpy, d.numpy_module)).collect()
}

/// The message for a `(dtype, ndim)` pair this module does not compile (`amso.class_for`
/// raises it as a TypeError).
#[pyfunction(name = "_uncompiled")]
fn uncompiled(dtype: &str, ndim: usize) -> String {
    base::registry::uncompiled(dtype, ndim)
}

/// The bundled package notes, when imported, whether it runs from a source checkout.
#[pyfunction(name = "_set_source_checkout")]
fn set_source_checkout(checkout: bool) {
    base::registry::set_source_checkout(checkout)
}

/// Whether a CUDA driver and at least one device are present (never raises).
#[pyfunction]
fn cuda_is_available() -> bool {
    #[cfg(feature = "cuda")]
    return crate::cuda::is_available();
    #[cfg(not(feature = "cuda"))]
    false
}

/// Number of CUDA devices: 0 without a usable driver, as `torch.cuda.device_count()` (never
/// raises; why CUDA is unavailable is said by the first CUDA request).
#[pyfunction]
fn cuda_device_count() -> i32 {
    #[cfg(feature = "cuda")]
    return crate::cuda::device_count().unwrap_or(0);
    #[cfg(not(feature = "cuda"))]
    0
}

/// `(free, total)` bytes of device memory on `device_id`.
#[pyfunction]
#[pyo3(signature = (device_id = DeviceId::ZERO), text_signature = "(device_id=0)")]
fn cuda_memory_info(device_id: DeviceId) -> PyResult<(usize, usize)> {
    #[cfg(feature = "cuda")]
    return Ok(crate::cuda::context::memory_info(device_id)?);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device_id;
        Err(crate::error::Error::Unavailable("this amso build has no CUDA layer".into()).into())
    }
}

/// Set this thread's current stream (None: the legacy default; an int handle or an object with
/// `__cuda_stream__`); returns the previous one.
#[pyfunction]
#[pyo3(signature = (stream))]
fn set_current_stream(stream: base::convert::StreamArg) -> PyResult<Option<Stream>> {
    let stream = stream.0;
    if let Some(value) = stream.map(Stream::protocol_value).filter(|&v| v < 0) {
        return Err(crate::error::Error::InvalidArgument(format!("stream {value} is not a CUDA stream")).into());
    }
    Ok(crate::current_stream::replace(stream))
}
