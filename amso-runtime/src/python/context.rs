//! `DLPackContext`: what `MemArray.get_dlpack()` returns. Entering locks the array with a
//! fresh id, `__dlpack__` exports with that id, and leaving unlocks even when the body
//! raised.

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use super::base::MemArrayBase;
use super::capsule::dlpack_capsule;
use crate::dlpack::DlpackRequest;
use crate::lock::LockId;

/// A locking DLPack exporter for one array (Python name `amso._amso.DLPackContext`).
#[pyclass(module = "amso._amso", name = "DLPackContext")]
pub struct DLPackContext {
    array: Py<MemArrayBase>,
    lock: LockId,
    entered: bool,
}

impl DLPackContext {
    pub(super) fn new(array: Py<MemArrayBase>, lock: LockId) -> Self {
        DLPackContext { array, lock, entered: false }
    }
}

#[pymethods]
impl DLPackContext {
    /// The lock id this context holds while entered.
    #[getter]
    fn lock_id(&self) -> u64 {
        self.lock.get()
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        let py = slf.py();
        let lock = slf.lock;
        slf.array.bind(py).borrow_mut().update(|array| array.enter(lock))?;
        slf.entered = true;
        Ok(slf)
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&mut self, py: Python<'_>, _exc_info: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        if !self.entered {
            return Err(PyBufferError::new_err("this context is not entered (exited twice, or never entered)"));
        }
        // Only fails if this context no longer holds the lock; nothing to release then.
        let lock = self.lock;
        let _ = self.array.bind(py).borrow_mut().update(|array| array.exit(lock));
        self.entered = false;
        Ok(false)
    }

    /// Export the locked array through DLPack (same arguments as `MemArray.__dlpack__`).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.entered {
            return Err(PyBufferError::new_err(
                "this DLPack context is not entered; use it as `with array.get_dlpack() as view: np.from_dlpack(view)`",
            ));
        }
        let max_version = max_version.map(super::convert::dlpack_version).transpose()?;
        let request = DlpackRequest { stream, max_version, dl_device, copy };
        let array = self.array.bind(py).borrow();
        dlpack_capsule(py, array.array(), Some(self.lock), &request)
    }

    /// `(device type, device id)` of the array's current data.
    fn __dlpack_device__(&self, py: Python<'_>) -> (i32, i32) {
        let array = self.array.bind(py).borrow();
        let device = array.array().device();
        (device.device_type as i32, device.id)
    }
}
