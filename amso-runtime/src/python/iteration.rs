//! `iter(a)`: the elements of a 1-D array (as `a[i]` gives them, read live), or the rows of a
//! host array of higher rank as NumPy views (writable unless the array is read-only). Rows of
//! device data are a `TypeError` that says what to do.

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;

use super::array::MemArrayBase;
use super::convert::scalar_to_py;

/// An iterator over an amso array (Python name `amso._amso.ArrayIterator`).
#[pyclass(frozen, module = "amso._amso", name = "ArrayIterator")]
pub struct ArrayIterator {
    array: Py<MemArrayBase>,
    /// A NumPy view of a host array of rank > 1, whose rows are yielded.
    rows: Option<Py<PyAny>>,
    next: AtomicUsize,
    len: usize,
}

/// `iter(a)`.
pub(super) fn iterate(slf: &Bound<'_, MemArrayBase>) -> PyResult<ArrayIterator> {
    let array = slf.get();
    let dims = array.header().dims();
    // Rows of a higher rank, a record array's records (`np.void`) and a vector array's lanes
    // come from a NumPy view.
    let rows = if dims.len() > 1 || array.element_type().is_compound() {
        if array.header().placement().on_device() {
            return Err(PyTypeError::new_err(format!(
                "iterating over {}-D array yields its rows as NumPy views of host memory, and this array is on \
                 the device: iterate over a.to_numpy(), or move_memory(kDLCPU) first",
                crate::error::with_article(dims.len())
            )));
        }
        Some(slf.call_method0(intern!(slf.py(), "__array__"))?.unbind())
    } else {
        None
    };
    Ok(ArrayIterator { array: slf.clone().unbind(), rows, next: AtomicUsize::new(0), len: dims[0] as usize })
}

#[pymethods]
impl ArrayIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        if index >= self.len {
            self.next.store(self.len, Ordering::Relaxed);
            return Ok(None);
        }
        if let Some(rows) = &self.rows {
            return Ok(Some(rows.bind(py).get_item(index)?));
        }
        let value = self.array.get().read(py, |array| array.get_scalar(&[index as i64], None))?;
        Ok(Some(scalar_to_py(py, value)?))
    }

    fn __length_hint__(&self) -> usize {
        self.len.saturating_sub(self.next.load(Ordering::Relaxed))
    }
}
