//! `DLPackContext`: what `MemArray.get_dlpack()` returns. Entering locks the array with a
//! fresh id, `__dlpack__` exports with that id, and leaving unlocks even when the body
//! raised.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use crate::lock::LockId;
use crate::python::base::array::MemArrayBase;
use crate::python::export::capsule::dlpack_call;

/// A locking DLPack exporter for one array (Python name `amso._amso.DLPackContext`).
#[pyclass(frozen, module = "amso._amso", name = "DLPackContext")]
pub struct DLPackContext {
    array: Py<MemArrayBase>,
    lock: LockId,
    entered: AtomicBool,
}

impl DLPackContext {
    pub(in crate::python) fn new(array: Py<MemArrayBase>, lock: LockId) -> Self {
        DLPackContext { array, lock, entered: AtomicBool::new(false) }
    }
}

impl Drop for DLPackContext {
    /// A context dropped while entered (its `with` block never reached `__exit__`, e.g. a
    /// generator that was not finished) releases its lock: the id exists nowhere else.
    fn drop(&mut self) {
        if *self.entered.get_mut() {
            let lock = self.lock;
            Python::attach(|py| {
                let _ = self.array.get().modify(py, |array| array.exit(lock));
            });
        }
    }
}

#[pymethods]
impl DLPackContext {
    /// The lock id this context holds while entered.
    #[getter]
    fn lock_id(&self) -> u64 {
        self.lock.get()
    }

    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let this = slf.get();
        let lock = this.lock;
        this.array.get().modify(slf.py(), |array| array.enter(lock))?;
        this.entered.store(true, Ordering::Release);
        Ok(slf.clone())
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, py: Python<'_>, _exc_info: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        if !self.entered.swap(false, Ordering::AcqRel) {
            return Err(PyBufferError::new_err("this context is not entered (exited twice, or never entered)"));
        }
        // Only fails if this context no longer holds the lock; nothing to release then.
        let lock = self.lock;
        let _ = self.array.get().modify(py, |array| array.exit(lock));
        Ok(false)
    }

    /// Export the locked array through DLPack (same arguments as `MemArray.__dlpack__`).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>, // the protocol's raw value (`DlpackRequest::stream`)
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.entered.load(Ordering::Acquire) {
            return Err(PyBufferError::new_err(
                "this DLPack context is not entered; use it as `with array.get_dlpack() as view: np.from_dlpack(view)`",
            ));
        }
        let max_version = max_version.map(crate::python::base::convert::dlpack_version).transpose()?;
        dlpack_call(py, self.array.get(), Some(self.lock), stream, max_version, dl_device, copy)
    }

    /// `(device type, device id)` of the array's current data.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let placement = self.array.get().header().placement();
        (placement.device_type, placement.device_id)
    }
}
