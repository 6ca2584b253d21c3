//! `amso.empty` and `amso.MemArray(shape, dtype)`: the compiled class for `(dtype, ndim)`,
//! found by the dtype object's identity in a lock-free cache, makes the array through its
//! registration, with no Python-level call of the class. Python's `amso.class_for` resolves
//! what the cache has not seen, and raises its errors.

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList, PyString, PyTuple, PyType};

use crate::device::DeviceId;
use crate::memarray::options::ArrayOptions;
use crate::python::base::array::MemArrayBase;
use crate::python::base::convert::{self, ShapeArg};
use crate::python::base::registry::{self, Registration};
use crate::python::identity_cache::IdentityCache;

/// (dtype object, ndim) -> the address of the class's `'static` registration.
static CLASSES: IdentityCache<1024> = IdentityCache::new();

/// `amso.class_for(shape, dtype)`, set once when the `amso` package imports.
static CLASS_FOR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Like ``MemArray`` but, with ``on_device=True``, the device memory is left uninitialised
/// (as ``np.empty``); host memory is always zeroed.
#[pyfunction]
#[pyo3(
    signature = (shape, dtype=None, device_id=None, *, on_device=None, managed=None, shareable=None),
    text_signature = "(shape, dtype=None, device_id=0, *, on_device=False, managed=False, shareable=False)"
)]
pub(crate) fn empty(
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device_id: Option<&Bound<'_, PyAny>>,
    on_device: Option<&Bound<'_, PyAny>>,
    managed: Option<&Bound<'_, PyAny>>,
    shareable: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let flags = Flags { on_device, managed, shareable, ..Flags::default() };
    make(shape, dtype, options(device_id, flags, true)?)
}

/// What `amso.MemArray(shape, dtype, ...)` calls: a zero-filled array. Arguments left out
/// (None) take their defaults; the others are checked as the classes' constructors check them.
#[pyfunction(name = "_new_array")]
#[pyo3(signature = (shape, dtype=None, device_id=None, *, readonly=None, pinned=None, on_device=None, managed=None, shareable=None))]
#[allow(clippy::too_many_arguments)] // Python's keywords, one each
pub(crate) fn zeroed_array(
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device_id: Option<&Bound<'_, PyAny>>,
    readonly: Option<&Bound<'_, PyAny>>,
    pinned: Option<&Bound<'_, PyAny>>,
    on_device: Option<&Bound<'_, PyAny>>,
    managed: Option<&Bound<'_, PyAny>>,
    shareable: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let flags = Flags { readonly, pinned, on_device, managed, shareable };
    make(shape, dtype, options(device_id, flags, false)?)
}

/// Set the function that resolves a `(shape, dtype)` the cache has not seen to its class. The
/// first one set stays: a reloaded `amso` package keeps its module, which the first one reads
/// (replacing `amso.class_for` later does not change what `MemArray` and `empty` use).
#[pyfunction(name = "_set_class_resolver")]
pub(crate) fn set_class_resolver(class_for: Bound<'_, PyAny>) {
    let py = class_for.py();
    let _ = CLASS_FOR.set(py, class_for.unbind());
}

/// Entries in the class cache (for tests).
#[pyfunction(name = "_class_cache_len")]
pub(crate) fn class_cache_len() -> usize {
    CLASSES.len()
}

/// The options of `empty` and `_new_array`, checked as the classes' constructors check them;
/// an argument left out (None) takes its default.
/// The flag keywords of `empty` and `_new_array`, as Python passed them (None: left out).
#[derive(Default)]
struct Flags<'a, 'py> {
    readonly: Option<&'a Bound<'py, PyAny>>,
    pinned: Option<&'a Bound<'py, PyAny>>,
    on_device: Option<&'a Bound<'py, PyAny>>,
    managed: Option<&'a Bound<'py, PyAny>>,
    shareable: Option<&'a Bound<'py, PyAny>>,
}

fn options(device_id: Option<&Bound<'_, PyAny>>, flags: Flags<'_, '_>, uninitialized: bool) -> PyResult<ArrayOptions> {
    let flag = |name, value: Option<&Bound<'_, PyAny>>| value.map_or(Ok(false), |value| convert::flag_arg(name, value));
    Ok(ArrayOptions {
        device_id: device_id.map_or(Ok(DeviceId::ZERO), convert::device_id_arg)?,
        readonly: flag("readonly", flags.readonly)?,
        pinned: flag("pinned", flags.pinned)?,
        on_device: flag("on_device", flags.on_device)?,
        managed: flag("managed", flags.managed)?,
        shareable: flag("shareable", flags.shareable)?,
        uninitialized,
    })
}

fn make(shape: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>, options: ArrayOptions) -> PyResult<Py<PyAny>> {
    let py = shape.py();
    let registration = class_of(shape, &dtype.cloned().unwrap_or_else(|| py.None().into_bound(py)))?;
    let dims = shape.extract::<ShapeArg>()?;
    let array = registration.create(&dims.0, options)?;
    (registration.instance)(py, MemArrayBase::new(array))
}

/// The registration for `(dtype, ndim of shape)`.
fn class_of(shape: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> PyResult<&'static Registration> {
    let py = shape.py();
    let ndim = plain_ndim(shape);
    if let Some(address) = ndim.and_then(|ndim| CLASSES.get(dtype, ndim)) {
        // SAFETY: the cache holds addresses of registrations, which live for the process.
        return Ok(unsafe { &*(address as *const Registration) });
    }
    let class_for = CLASS_FOR
        .get(py)
        .ok_or_else(|| PyRuntimeError::new_err("amso's class resolver is not set: import amso first"))?;
    let class = class_for.bind(py).call1((shape, dtype))?;
    let registration = registry::of_type(class.as_ptr() as usize).ok_or_else(|| {
        PyTypeError::new_err(format!("amso.class_for returned {class}, which is not a class of this module"))
    })?;
    if let (Some(ndim), Some(key)) = (ndim, cache_key(dtype)) {
        CLASSES.insert(&key, ndim, registration as *const Registration as usize);
    }
    Ok(registration)
}

/// The object to cache a resolved dtype under, if later calls pass that same object again:
/// the interned string of a name (names written in code are that object), a type
/// (`np.float32`), `None`, or NumPy's own instance of a builtin dtype. Equal copies (an
/// unpickled dtype, a name built at run time) would each take a slot, so they are not cached.
fn cache_key<'py>(dtype: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    if dtype.is_exact_instance_of::<PyString>() {
        let mut name = dtype.clone().into_ptr();
        // SAFETY: `name` is an owned reference to an exact str; the call replaces it with an
        // owned reference to the interned equal string (or interns this one), as its contract
        // says. Only names `class_for` accepted get here, so the interned set stays small.
        return Some(unsafe {
            ffi::PyUnicode_InternInPlace(&mut name);
            Bound::from_owned_ptr(dtype.py(), name)
        });
    }
    if dtype.is_none() || dtype.is_instance_of::<PyType>() {
        return Some(dtype.clone());
    }
    let canonical = || -> PyResult<bool> {
        let numpy_dtype = crate::python::npyffi::dtype::numpy(dtype.py())?.getattr("dtype")?;
        Ok(dtype.is_instance(&numpy_dtype)? && numpy_dtype.call1((dtype.getattr("name")?,))?.is(dtype))
    };
    canonical().unwrap_or(false).then(|| dtype.clone())
}

/// The ndim of a shape given as an int, a tuple or a list (other shapes go to `class_for`);
/// it must agree with Python's `amso._ndim`, which `class_for` uses.
fn plain_ndim(shape: &Bound<'_, PyAny>) -> Option<usize> {
    if shape.is_exact_instance_of::<PyInt>() {
        Some(1)
    } else if let Ok(tuple) = shape.cast_exact::<PyTuple>() {
        Some(tuple.len())
    } else {
        shape.cast_exact::<PyList>().ok().map(|list| list.len())
    }
}
