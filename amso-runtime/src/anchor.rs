//! Publishing a table of C functions in the interpreter's own dict, which every copy of amso's
//! runtime in one process reads (`PyInterpreterState_GetDict`, in the limited API since 3.8): no
//! Python-level name reaches that dict. The process table (`process.rs`) and the device-memory
//! pool (`cuda/pool.rs`) are anchored here, each under its own key.

use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{ffi, intern};

/// Publish `own` (a static of this copy) under `key` in the interpreter's dict, as a capsule
/// named `name`, unless a copy published one first; the published pointer. For state the
/// process table does not carry (the device-memory pool, `cuda/pool.rs`), anchored the same way.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the pool's (`cuda/pool.rs`)
pub(crate) fn anchor(
    py: Python<'_>,
    key: &str,
    name: &'static std::ffi::CStr,
    own: *const std::ffi::c_void,
) -> PyResult<*const std::ffi::c_void> {
    // SAFETY: a static of this copy, which lives for the process, and a static name.
    let capsule = unsafe { ffi::PyCapsule_New(own.cast_mut(), name.as_ptr(), None) };
    // SAFETY: a new reference, or NULL with an exception set.
    let capsule = unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?;
    let published = interpreter_dict(py)?.call_method1(intern!(py, "setdefault"), (key, capsule))?;
    // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
    if unsafe { ffi::PyCapsule_IsValid(published.as_ptr(), name.as_ptr()) } != 1 {
        return Err(PyImportError::new_err(format!(
            "the interpreter's dict holds an object of type {} under {key:?}, not a {name:?} capsule: something other \
             than amso took that key",
            type_name(&published)
        )));
    }
    // SAFETY: a valid capsule of amso's name holds a static of a copy of the runtime.
    Ok(unsafe { ffi::PyCapsule_GetPointer(published.as_ptr(), name.as_ptr()) }.cast_const())
}

/// Whether something is published under `key` in the interpreter's dict.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn published(py: Python<'_>, key: &str) -> PyResult<bool> {
    interpreter_dict(py)?.contains(key)
}

/// The interpreter's own dict, where extension modules keep per-interpreter state under
/// unique keys; no Python-level name reaches it.
pub(crate) fn interpreter_dict(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    // SAFETY: the GIL is held (`py`), so there is a current interpreter; GetDict returns a
    // borrowed reference, or NULL without an exception set.
    let dict = unsafe { ffi::PyInterpreterState_GetDict(ffi::PyInterpreterState_Get()) };
    if dict.is_null() {
        return Err(PyImportError::new_err(
            "this interpreter has no per-interpreter dict (PyInterpreterState_GetDict returned NULL), where amso's \
             extension modules share their borrow registry; amso cannot load in it",
        ));
    }
    // SAFETY: a borrowed reference to a live object, the interpreter's for its lifetime.
    Ok(unsafe { Bound::from_borrowed_ptr(py, dict) }.cast_into::<PyDict>()?)
}

/// `type(value).__name__`, for messages.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map_or_else(|_| "?".into(), |name| name.to_string())
}
