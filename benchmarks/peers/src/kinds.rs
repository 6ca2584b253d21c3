//! The element kinds beyond plain numbers (issue 39), each written against amso and against
//! rust-numpy: rust-numpy's `head` (object arrays) and `add_minutes_to_seconds` (timedelta64)
//! examples as its `examples/simple` writes them, and amso's ports; fixed-width strings,
//! `isize`, object results and a derived element type that names its NumPy dtype.

use amso_runtime::datetime::{units, Datetime, Timedelta};
use amso_runtime::ndarray::{ArrayViewD, Zip};
use amso_runtime::python::{ArrayMut, ArrayRef, ArrayRefDyn, Framework, IntoFramework};
use amso_runtime::{FixedBytes, FixedUnicode};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArrayDyn, PyReadwriteArray1};
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;

// --- rust-numpy's examples/simple, as it writes them ---

/// The first element of an object array (rust-numpy's `head`).
fn head(py: Python<'_>, x: ArrayViewD<'_, Py<PyAny>>) -> PyResult<Py<PyAny>> {
    x.get(0).map(|obj| obj.clone_ref(py)).ok_or_else(|| PyIndexError::new_err("array index out of range"))
}

#[pyfunction(name = "numpy_head")]
fn numpy_head_py(x: PyReadonlyArrayDyn<'_, Py<PyAny>>) -> PyResult<Py<PyAny>> {
    head(x.py(), x.as_array())
}

/// `x += 60 * y`, seconds plus minutes (rust-numpy's `add_minutes_to_seconds`).
#[pyfunction]
fn numpy_add_minutes_to_seconds(
    mut x: PyReadwriteArray1<'_, numpy::datetime::Timedelta<numpy::datetime::units::Seconds>>,
    y: PyReadonlyArray1<'_, numpy::datetime::Timedelta<numpy::datetime::units::Minutes>>,
) {
    Zip::from(x.as_array_mut()).and(y.as_array()).for_each(|x, y| *x = (i64::from(*x) + 60 * i64::from(*y)).into());
}

/// The byte strings of an `S4` array, each with its padding dropped.
#[pyfunction]
fn numpy_bytes(x: PyReadonlyArray1<'_, numpy::PyFixedString<4>>) -> Vec<Vec<u8>> {
    // NumPy's value of an `S<n>` element: its bytes without the trailing zeros.
    x.as_array().iter().map(|s| s.0[..s.0.iter().rposition(|&b| b != 0).map_or(0, |last| last + 1)].to_vec()).collect()
}

/// `[None, 1, "two"]` as a new object array.
#[pyfunction]
fn numpy_objects(py: Python<'_>) -> PyResult<Bound<'_, PyArray1<Py<PyAny>>>> {
    let items =
        vec![py.None(), 1i64.into_pyobject(py)?.into_any().unbind(), "two".into_pyobject(py)?.into_any().unbind()];
    Ok(items.into_pyarray(py))
}

/// 1024 datetimes a day apart from the epoch, as a new `datetime64[s]` array.
#[pyfunction]
fn numpy_days(py: Python<'_>) -> Bound<'_, PyArray1<numpy::datetime::Datetime<numpy::datetime::units::Seconds>>> {
    (0..1024_i64).map(|day| (day * 86_400).into()).collect::<Vec<_>>().into_pyarray(py)
}

/// 64 byte strings `b"w000"` to `b"w063"`, as a new `S4` array.
#[pyfunction]
fn numpy_words(py: Python<'_>) -> Bound<'_, PyArray1<numpy::PyFixedString<4>>> {
    words().into_iter().map(numpy::PyFixedString::from).collect::<Vec<_>>().into_pyarray(py)
}

/// The words of `numpy_words` and `amso_words`.
fn words() -> Vec<[u8; 4]> {
    (0..64_u8).map(|i| [b'w', b'0', b'0' + i / 10, b'0' + i % 10]).collect()
}

// --- amso ---

/// As `numpy_days`, through amso's owned results.
#[pyfunction]
fn amso_days(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let days: Vec<Datetime<units::Seconds>> = (0..1024_i64).map(|day| (day * 86_400).into()).collect();
    days.into_framework(py, Framework::NumPy)
}

/// As `numpy_words`, through amso's owned results.
#[pyfunction]
fn amso_words(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    words().into_iter().map(FixedBytes::from).collect::<Vec<_>>().into_framework(py, Framework::NumPy)
}

#[pyfunction(name = "amso_head")]
fn amso_head_py(x: ArrayRefDyn<'_, Py<PyAny>>) -> PyResult<Py<PyAny>> {
    head(x.object().py(), x.as_array()?)
}

/// An array-like of Python objects (a list, or an object array read in place): its items, and
/// whether a copy was made.
#[pyfunction]
fn like_objects(x: amso_runtime::python::ArrayLike<'_, Py<PyAny>, 1>) -> PyResult<(Vec<Py<PyAny>>, bool)> {
    let py = x.object().py();
    let items = x.as_array()?.iter().map(|item| item.clone_ref(py)).collect();
    Ok((items, x.converted()))
}

/// An array-like of datetime64[s], other units converted by NumPy: the array read, and whether
/// a copy was made.
#[pyfunction]
fn like_seconds<'py>(
    x: amso_runtime::python::ArrayLike<'py, Datetime<units::Seconds>, 1, amso_runtime::python::AllowTypeChange>,
) -> (Bound<'py, PyAny>, bool) {
    (x.object().clone(), x.converted())
}

/// rust-numpy's `PyArrayLike1` of Python objects: its items.
#[pyfunction]
fn numpy_like_objects(x: numpy::PyArrayLike1<'_, Py<PyAny>>) -> Vec<Py<PyAny>> {
    let py = x.py();
    x.as_array().iter().map(|item| item.clone_ref(py)).collect()
}

/// As rust-numpy's `add_minutes_to_seconds`, with amso's arguments.
#[pyfunction]
fn amso_add_minutes_to_seconds(
    mut x: ArrayMut<'_, Timedelta<units::Seconds>, 1>,
    y: ArrayRef<'_, Timedelta<units::Minutes>, 1>,
) -> PyResult<()> {
    Zip::from(x.as_array_mut()?).and(y.as_array()?).for_each(|x, y| *x = (i64::from(*x) + 60 * i64::from(*y)).into());
    Ok(())
}

/// As `numpy_bytes`.
#[pyfunction]
fn amso_bytes(x: ArrayRef<'_, FixedBytes<4>, 1>) -> PyResult<Vec<Vec<u8>>> {
    Ok(x.as_array()?.iter().map(|s| s.trimmed().to_vec()).collect())
}

/// As `numpy_objects`, through amso's owned results.
#[pyfunction]
fn amso_objects(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let items =
        vec![py.None(), 1i64.into_pyobject(py)?.into_any().unbind(), "two".into_pyobject(py)?.into_any().unbind()];
    items.into_framework(py, Framework::NumPy)
}

/// Object arrays in the caller's framework: `[repr(v) for v in x]`, a new object array.
#[pyfunction]
fn amso_reprs<'py>(x: ArrayRefDyn<'py, Py<PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    let py = x.object().py();
    let reprs = x.as_array()?.map(|v| v.bind(py).repr().map(|r| r.into_any().unbind()));
    let reprs = reprs.into_iter().collect::<PyResult<Vec<_>>>()?;
    let shape = x.shape().to_vec();
    let array = amso_runtime::ndarray::Array::from_shape_vec(shape, reprs).expect("as many as the argument");
    x.output(array)
}

/// The same objects in a new object array (each held once more, by the result).
#[pyfunction]
fn amso_echo<'py>(x: ArrayRefDyn<'py, Py<PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    let py = x.object().py();
    x.output(x.as_array()?.map(|v| v.clone_ref(py)))
}

/// Swap the first two entries of an object array in place (a writable object argument).
#[pyfunction]
fn amso_swap_objects(mut x: ArrayMut<'_, Py<PyAny>, 1>) -> PyResult<()> {
    x.as_slice_mut()?.swap(0, 1);
    Ok(())
}

/// Upper-case ASCII of a `U3` array, as a new `U3` array.
#[pyfunction]
fn amso_upper<'py>(x: ArrayRef<'py, FixedUnicode<3>, 1>) -> PyResult<Bound<'py, PyAny>> {
    let upper = x
        .as_array()?
        .iter()
        .map(|s| FixedUnicode(s.0.map(|c| if (97..123).contains(&c) { c - 32 } else { c })))
        .collect::<Vec<_>>();
    x.output(upper)
}

/// Datetimes one day (in seconds) later, as a new `datetime64[s]` array.
#[pyfunction]
fn amso_next_day<'py>(x: ArrayRef<'py, Datetime<units::Seconds>, 1>) -> PyResult<Bound<'py, PyAny>> {
    let later = x.as_array()?.map(|&t| Datetime::<units::Seconds>::from(i64::from(t) + 86_400));
    x.output(later)
}

/// The sum of an `isize` array (NumPy's intp: int64 arrays).
#[pyfunction]
fn amso_isize_sum(x: ArrayRef<'_, isize, 1>) -> PyResult<isize> {
    Ok(x.as_array()?.sum())
}

/// The sum of an `isize` array, rust-numpy's way.
#[pyfunction]
fn numpy_isize_sum(x: PyReadonlyArray1<'_, isize>) -> isize {
    x.as_array().sum()
}

/// `0, 1, ..., n - 1` as `usize`s: a NumPy uint64 array.
#[pyfunction]
fn amso_usize_range(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    (0..n).collect::<Vec<usize>>().into_framework(py, Framework::NumPy)
}

/// A float64 argument, to be given object arrays.
#[pyfunction]
fn amso_floats(x: ArrayRef<'_, f64, 1>) -> PyResult<f64> {
    Ok(x.as_array()?.sum())
}

/// An object array handed to torch: refused (DLPack has no object type).
#[pyfunction]
fn amso_objects_to(py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
    vec![py.None()].into_framework(py, framework)
}

/// A dtype of this crate's own that says which NumPy dtype it is: `timedelta64[ms]`
/// (a derived `Element` naming a NumPy dtype).
#[derive(Clone, Copy, Debug, Default, PartialEq, amso_macros::Element)]
#[repr(transparent)]
#[amso(name = "millis", code = kDLInt, bits = 64, numpy = "timedelta64[ms]", scalar = i64)]
pub struct Millis(i64);

impl From<Millis> for i64 {
    fn from(x: Millis) -> i64 {
        x.0
    }
}

impl From<i64> for Millis {
    fn from(x: i64) -> Millis {
        Millis(x)
    }
}

/// Millisecond spans doubled, as a new `timedelta64[ms]` array.
#[pyfunction]
fn amso_double_millis<'py>(x: ArrayRef<'py, Millis, 1>) -> PyResult<Bound<'py, PyAny>> {
    x.output(x.as_array()?.map(|m| Millis(m.0 * 2)))
}

pub(crate) fn add(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(numpy_head_py, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_days, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_words, module)?)?;
    module.add_function(wrap_pyfunction!(amso_days, module)?)?;
    module.add_function(wrap_pyfunction!(amso_words, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_add_minutes_to_seconds, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_bytes, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_objects, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_isize_sum, module)?)?;
    module.add_function(wrap_pyfunction!(amso_head_py, module)?)?;
    module.add_function(wrap_pyfunction!(like_objects, module)?)?;
    module.add_function(wrap_pyfunction!(like_seconds, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_like_objects, module)?)?;
    module.add_function(wrap_pyfunction!(amso_add_minutes_to_seconds, module)?)?;
    module.add_function(wrap_pyfunction!(amso_bytes, module)?)?;
    module.add_function(wrap_pyfunction!(amso_objects, module)?)?;
    module.add_function(wrap_pyfunction!(amso_reprs, module)?)?;
    module.add_function(wrap_pyfunction!(amso_swap_objects, module)?)?;
    module.add_function(wrap_pyfunction!(amso_echo, module)?)?;
    module.add_function(wrap_pyfunction!(amso_upper, module)?)?;
    module.add_function(wrap_pyfunction!(amso_next_day, module)?)?;
    module.add_function(wrap_pyfunction!(amso_isize_sum, module)?)?;
    module.add_function(wrap_pyfunction!(amso_usize_range, module)?)?;
    module.add_function(wrap_pyfunction!(amso_floats, module)?)?;
    module.add_function(wrap_pyfunction!(amso_objects_to, module)?)?;
    module.add_function(wrap_pyfunction!(amso_double_millis, module)?)
}
