//! What goes through a NumPy view of a whole host array, as `iter(a)` takes its rows: `a[key]`
//! beyond one element (NumPy's basic indexing: integers, slices, `...`, `None`), assignment
//! through such a key (NumPy's broadcasting), and comparisons (elementwise, as NumPy's).
//!
//! The view is `a.__array__()`'s, so its rules are the iteration's: it holds the array's
//! memory (the export's reference), not the array object, so it stays valid after `del a`; it
//! does not stop `move_memory` (after a move it shows the host copy as it was), except for the
//! dtypes NumPy views as raw bytes (ml_dtypes' types, packed vectors), whose buffer pins the
//! data until the view goes. Device (and managed) data is a TypeError that says what to do; a locked array
//! refuses, as every read does.
//!
//! And `iter(a)`: the elements of a 1-D array (as `a[i]` gives them, read live), or the rows of a
//! host array of higher rank as NumPy views (writable unless the array is read-only). Rows of
//! device data are a `TypeError` that says what to do.

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;

use crate::python::base::array::{write_borrow, MemArrayBase};
use crate::python::base::convert::scalar_to_py;
use crate::python::export::numpy_io::array_view;

/// The NumPy view of host data behind indexing and comparisons; device data is a TypeError
/// saying that `doing` needs host memory, and what to do instead.
fn host_view<'py>(slf: &Bound<'py, MemArrayBase>, doing: &str, instead: &str) -> PyResult<Bound<'py, PyAny>> {
    refuse_device(slf, doing, instead)?;
    array_view(slf, None, None)
}

fn refuse_device(slf: &Bound<'_, MemArrayBase>, doing: &str, instead: &str) -> PyResult<()> {
    if !slf.get().header().placement().on_device() {
        return Ok(());
    }
    Err(PyTypeError::new_err(format!(
        "{doing} works on a NumPy view of host memory, and this array is in CUDA device memory: {instead}, move \
         the data first (a.move_memory('cpu')), or work on the GPU through DLPack (cupy.from_dlpack(a), \
         torch.from_dlpack(a))"
    )))
}

/// `a[key]` for a key that is not one element (`Key::Basic`, or fewer integers than
/// dimensions): a NumPy view, or NumPy's IndexError.
pub(super) fn get_item<'py>(slf: &Bound<'py, MemArrayBase>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let doing = "indexing by rows or slices";
    host_view(slf, doing, "index a host copy (a.to_numpy()[...])")?.get_item(key)
}

/// `a[key] = value` for a key that is not one element: assigned through the view, with
/// NumPy's broadcasting and casting. Read-only and locked arrays refuse as an element write
/// does; amso's borrow of the memory is held while NumPy writes.
pub(super) fn set_item(
    slf: &Bound<'_, MemArrayBase>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let (py, array) = (slf.py(), slf.get());
    refuse_device(slf, "assigning to rows or slices", "assign to a host copy and read it back (read_numpy_array)")?;
    let _borrow = array.read(py, |array| -> PyResult<_> {
        array.check_writable(None)?;
        write_borrow(py, array, true)
    })?;
    array_view(slf, None, None)?.set_item(key, value)
}

/// `a == b`, `a < b`, ...: NumPy's elementwise comparison of the host data, a NumPy bool array.
pub(super) fn compare<'py>(
    slf: &Bound<'py, MemArrayBase>,
    other: &Bound<'py, PyAny>,
    op: CompareOp,
) -> PyResult<Bound<'py, PyAny>> {
    let doing = "comparing an amso array (elementwise, as NumPy does)";
    host_view(slf, doing, "compare a host copy (a.to_numpy() == b)")?.rich_compare(other, op)
}

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
