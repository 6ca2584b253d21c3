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

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;

use super::array::{write_borrow, MemArrayBase};
use super::numpy_io::array_view;

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
