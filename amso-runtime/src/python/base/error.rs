//! amso's errors as Python exceptions: the exception type of each error's C code
//! (`Error::code`, the one grouping), with the error's message.

use pyo3::exceptions::{
    PyBufferError, PyIndexError, PyMemoryError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::{PyErr, PyResult, Python};

use crate::error::{code, Error};

impl From<Error> for PyErr {
    fn from(error: Error) -> PyErr {
        let message = error.to_string();
        match error.code() {
            code::INDEX => PyIndexError::new_err(message),
            code::VALUE => PyValueError::new_err(message),
            code::OVERFLOW => PyOverflowError::new_err(message),
            code::TYPE => PyTypeError::new_err(message),
            code::MEMORY => PyMemoryError::new_err(message),
            code::BUFFER => PyBufferError::new_err(message),
            _ => PyRuntimeError::new_err(message),
        }
    }
}

/// Run `body` at a C entry point that CPython or another extension calls with the GIL held:
/// its value, or `failed` with the Python exception set for an error or a panic (which must
/// not unwind into C code). The one frame of amso's C entries that PyO3 does not make.
///
/// # Safety
/// The GIL is held.
#[inline]
pub(crate) unsafe fn at_c_entry<R>(failed: R, body: impl FnOnce(Python<'_>) -> PyResult<R>) -> R {
    // SAFETY: the caller holds the GIL.
    let py = unsafe { Python::assume_attached() };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(py)))
        .unwrap_or_else(|_| Err(PyRuntimeError::new_err("internal error (panic) inside amso; please report it")));
    outcome.unwrap_or_else(|error| {
        error.restore(py);
        failed
    })
}
