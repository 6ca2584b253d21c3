//! `amso.empty` and `amso.MemArray(shape, dtype)`: the compiled class for `(dtype, ndim)`,
//! found by the dtype object's identity in a lock-free cache, makes the array through its
//! registration, with no Python-level call of the class. Python's `amso.class_for` resolves
//! what the cache has not seen, and raises its errors.

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList, PyString, PyTuple};

use super::array::MemArrayBase;
use super::convert::ShapeArg;
use super::identity_cache::IdentityCache;
use super::registry::{self, Registration};
use crate::memarray::ArrayOptions;

/// (dtype object, ndim) -> the address of the class's `'static` registration.
static CLASSES: IdentityCache<64> = IdentityCache::new();

/// `amso.class_for(shape, dtype)`, set once when the `amso` package imports.
static CLASS_FOR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Like ``MemArray`` but, with ``on_device=True``, the device memory is left uninitialised
/// (as ``np.empty``); host memory is always zeroed.
#[pyfunction]
#[pyo3(signature = (shape, dtype=None, device_id=0, *, on_device=false))]
pub(crate) fn empty(
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device_id: i32,
    on_device: bool,
) -> PyResult<Py<PyAny>> {
    make(shape, dtype, ArrayOptions { device_id, on_device, uninitialized: true, ..ArrayOptions::default() })
}

/// What `amso.MemArray(shape, dtype, ...)` calls: a zero-filled array.
#[pyfunction(name = "_new_array")]
#[pyo3(signature = (shape, dtype=None, device_id=0, *, readonly=false, pinned=false, on_device=false))]
pub(crate) fn new_array(
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device_id: i32,
    readonly: bool,
    pinned: bool,
    on_device: bool,
) -> PyResult<Py<PyAny>> {
    make(shape, dtype, ArrayOptions { device_id, readonly, pinned, on_device, uninitialized: false })
}

/// Set the function that resolves a `(shape, dtype)` the cache has not seen to its class. The
/// first one set stays: a reloaded `amso` package keeps its module, which the first one reads.
#[pyfunction(name = "_set_class_resolver")]
pub(crate) fn set_class_resolver(class_for: Bound<'_, PyAny>) {
    let py = class_for.py();
    let _ = CLASS_FOR.set(py, class_for.unbind());
}

fn make(shape: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>, options: ArrayOptions) -> PyResult<Py<PyAny>> {
    let py = shape.py();
    let registration = class_of(shape, &dtype.cloned().unwrap_or_else(|| py.None().into_bound(py)))?;
    let dims = shape.extract::<ShapeArg>()?;
    let array = (registration.create)(&dims.0, options)?;
    (registration.instance)(py, MemArrayBase::new(array))
}

/// The registration for `(dtype, ndim of shape)`.
fn class_of(shape: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> PyResult<&'static Registration> {
    let py = shape.py();
    let key = interned(dtype);
    let ndim = plain_ndim(shape);
    if let Some(address) = ndim.and_then(|ndim| CLASSES.get(&key, ndim)) {
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
    if let Some(ndim) = ndim {
        CLASSES.insert(&key, ndim, registration as *const Registration as usize);
    }
    Ok(registration)
}

/// A dtype name as its interned string (equal names are then one object, and one cache
/// entry); other objects as they are.
fn interned<'py>(dtype: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
    if !dtype.is_exact_instance_of::<PyString>() {
        return dtype.clone();
    }
    let mut name = dtype.clone().into_ptr();
    // SAFETY: `name` is an owned reference to an exact str; the call replaces it with an
    // owned reference to the interned equal string (or interns it), as its contract says.
    // PyString::intern would take a Rust &str and build a new string first.
    unsafe {
        ffi::PyUnicode_InternInPlace(&mut name);
        Bound::from_owned_ptr(dtype.py(), name)
    }
}

/// The ndim of a shape given as an int, a tuple or a list (other shapes go to `class_for`).
fn plain_ndim(shape: &Bound<'_, PyAny>) -> Option<usize> {
    if shape.is_exact_instance_of::<PyInt>() {
        Some(1)
    } else if let Ok(tuple) = shape.cast_exact::<PyTuple>() {
        Some(tuple.len())
    } else {
        shape.cast_exact::<PyList>().ok().map(|list| list.len())
    }
}
