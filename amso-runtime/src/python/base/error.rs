//! The one mapping of amso's error onto Python exception types.

use pyo3::exceptions::{
    PyBufferError, PyIndexError, PyMemoryError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::PyErr;

use crate::error::Error;

impl From<Error> for PyErr {
    fn from(error: Error) -> PyErr {
        let message = error.to_string();
        match error {
            Error::IndexOutOfBounds { .. } | Error::IndexArity { .. } => PyIndexError::new_err(message),
            Error::InvalidShape(_)
            | Error::TooLarge { .. }
            | Error::ReadOnly
            | Error::InvalidArgument(_)
            | Error::UnsupportedDevice(_) => PyValueError::new_err(message),
            Error::ValueOutOfRange(_) => PyOverflowError::new_err(message),
            Error::WrongValueType(_) => PyTypeError::new_err(message),
            Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
            Error::Locked { .. } | Error::StaleLock { .. } | Error::ExportRefused(_) => PyBufferError::new_err(message),
            Error::Unavailable(_) | Error::Cuda(_) | Error::Compile(_) | Error::Capture(_) => {
                PyRuntimeError::new_err(message)
            }
        }
    }
}
