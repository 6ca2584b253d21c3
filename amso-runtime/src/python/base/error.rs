//! amso's errors as Python exceptions: the exception type of each error's C code
//! (`Error::code`, the one grouping), with the error's message.

use pyo3::exceptions::{
    PyBufferError, PyIndexError, PyMemoryError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::PyErr;

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
