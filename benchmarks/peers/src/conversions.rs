//! Issue 39's conversions, misaligned arrays and linear algebra views: each amso function
//! beside the rust-numpy function it ports, where rust-numpy has one, for the parity tests in
//! `tests/python/test_conversions.py`.

use std::sync::atomic::{AtomicUsize, Ordering};

use amso_runtime::datetime::{units, Datetime};
use amso_runtime::ndarray::{Array2, ArrayViewMut1};
use amso_runtime::python::{
    AllowTypeChange, ArrayLike, ArrayLikeDyn, ArrayMut, ArrayMutDyn, ArrayRef, ArrayRefDyn, Casting, ClassView,
    Framework, IntoFramework, NewArray, OwnedView, UntypedArray,
};
use amso_runtime::records::Particle;
use amso_runtime::{Element, FixedBytes, FixedUnicode, MemArray};
use num_complex::Complex;
use numpy::{PyArrayLike1, PyArrayLike2, PyArrayLikeDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

type Flat<T> = (Vec<usize>, Vec<T>, bool);

fn flat<T: Element, D: amso_runtime::python::NdDimensions, C: amso_runtime::python::Coerce>(
    x: &amso_runtime::python::TypedArrayLike<'_, T, D, C>,
) -> PyResult<Flat<T>> {
    Ok((x.shape().to_vec(), x.as_array()?.iter().copied().collect(), x.converted()))
}

/// An `ArrayLikeDyn<f64>`: its shape, its elements in C order, and whether it was converted.
#[pyfunction]
fn like_f64(x: ArrayLikeDyn<'_, f64>) -> PyResult<Flat<f64>> {
    flat(&x)
}

/// An `ArrayLike<i32, 1>` (the dtype must match for arrays).
#[pyfunction]
fn like_i32(x: ArrayLike<'_, i32, 1>) -> PyResult<Flat<i32>> {
    flat(&x)
}

/// An `ArrayLike<i32, 1, AllowTypeChange>`.
#[pyfunction]
fn like_i32_coerce(x: ArrayLike<'_, i32, 1, AllowTypeChange>) -> PyResult<Flat<i32>> {
    flat(&x)
}

/// An `ArrayLike<u8, 1>`.
#[pyfunction]
fn like_u8(x: ArrayLike<'_, u8, 1>) -> PyResult<Flat<u8>> {
    flat(&x)
}

/// An `ArrayLike<bool, 1>`.
#[pyfunction]
fn like_bool(x: ArrayLike<'_, bool, 1>) -> PyResult<Flat<bool>> {
    flat(&x)
}

/// An `ArrayLike<f32, 1>`.
#[pyfunction]
fn like_f32(x: ArrayLike<'_, f32, 1>) -> PyResult<Flat<f32>> {
    flat(&x)
}

/// An `ArrayLike<f32, 2>`.
#[pyfunction]
fn like_f32_2d(x: ArrayLike<'_, f32, 2>) -> PyResult<Flat<f32>> {
    flat(&x)
}

/// An `ArrayLikeDyn<f64, AllowTypeChange>`.
#[pyfunction]
fn like_f64_coerce(x: ArrayLikeDyn<'_, f64, AllowTypeChange>) -> PyResult<Flat<f64>> {
    flat(&x)
}

/// rust-numpy's `PyArrayLikeDyn<f64>`, the same answer.
#[pyfunction]
fn numpy_like_f64(x: PyArrayLikeDyn<'_, f64>) -> Flat<f64> {
    (x.shape().to_vec(), x.as_array().iter().copied().collect(), false)
}

/// rust-numpy's `PyArrayLikeDyn<f64, AllowTypeChange>`.
#[pyfunction]
fn numpy_like_f64_coerce(x: PyArrayLikeDyn<'_, f64, numpy::AllowTypeChange>) -> Flat<f64> {
    (x.shape().to_vec(), x.as_array().iter().copied().collect(), false)
}

/// rust-numpy's `PyArrayLike1<i32>`.
#[pyfunction]
fn numpy_like_i32(x: PyArrayLike1<'_, i32>) -> Flat<i32> {
    (x.shape().to_vec(), x.as_array().iter().copied().collect(), false)
}

/// rust-numpy's `PyArrayLike1<i32, AllowTypeChange>`.
#[pyfunction]
fn numpy_like_i32_coerce(x: PyArrayLike1<'_, i32, numpy::AllowTypeChange>) -> Flat<i32> {
    (x.shape().to_vec(), x.as_array().iter().copied().collect(), false)
}

/// rust-numpy's `PyArrayLike2<f32>`.
#[pyfunction]
fn numpy_like_f32_2d(x: PyArrayLike2<'_, f32>) -> Flat<f32> {
    (x.shape().to_vec(), x.as_array().iter().copied().collect(), false)
}

/// A copy of `x` (through `as_array`, or `as_slice` when `slice`), in the caller's framework.
fn copy_of<T: Element>(x: UntypedArray<'_>, slice: bool) -> PyResult<Bound<'_, PyAny>> {
    let x: ArrayRefDyn<'_, T> = x.into_typed()?;
    if slice {
        return x.output(x.as_slice()?.to_vec());
    }
    x.output(x.as_array()?.to_owned())
}

/// Reverse the elements of `x` in C order, in place (element type generic: no arithmetic).
fn reverse<T: Element>(x: UntypedArray<'_>) -> PyResult<()> {
    let mut x: ArrayMutDyn<'_, T> = x.into_typed()?;
    let mut view = x.as_array_mut()?;
    let values: Vec<T> = view.iter().copied().collect();
    for (element, &value) in view.iter_mut().zip(values.iter().rev()) {
        *element = value;
    }
    Ok(())
}

/// Calls `$body::<T>` for `x`'s element type among one of each size (1, 2, 4, 8, 16 bytes).
macro_rules! by_size {
    ($x:expr, $body:ident $(, $arg:expr)*) => {{
        let x = $x;
        if x.is::<u8>() {
            $body::<u8>(x $(, $arg)*)
        } else if x.is::<u16>() {
            $body::<u16>(x $(, $arg)*)
        } else if x.is::<f32>() {
            $body::<f32>(x $(, $arg)*)
        } else if x.is::<f64>() {
            $body::<f64>(x $(, $arg)*)
        } else if x.is::<Complex<f64>>() {
            $body::<Complex<f64>>(x $(, $arg)*)
        } else {
            Err(PyTypeError::new_err("uint8, uint16, float32, float64 or complex128"))
        }
    }};
}

/// A copy of any array (of one element type per size), read through `as_array` or `as_slice`.
#[pyfunction]
#[pyo3(signature = (x, slice = false))]
fn copy_any(x: UntypedArray<'_>, slice: bool) -> PyResult<Bound<'_, PyAny>> {
    by_size!(x, copy_of, slice)
}

/// Reverse any array (of one element type per size) in place.
#[pyfunction]
fn reverse_any(x: UntypedArray<'_>) -> PyResult<()> {
    by_size!(x, reverse)
}

/// `x`'s shape and whether amso reports it C-contiguous (a misaligned array is read through
/// an aligned C-order copy).
#[pyfunction]
fn layout_f64(x: ArrayRefDyn<'_, f64>) -> (Vec<usize>, Vec<isize>, bool) {
    (x.shape().to_vec(), x.strides().to_vec(), x.is_c_contiguous())
}

/// The sum of `x` through `indexer()`: read in place, aligned or not.
#[pyfunction]
fn indexer_sum(x: ArrayRef<'_, f64, 1>) -> PyResult<f64> {
    Ok(x.indexer()?.iter().sum())
}

/// rust-numpy's sum of the same elements in the same order, in place (`as_array().iter()`).
#[pyfunction]
fn numpy_iter_sum(x: numpy::PyReadonlyArray1<'_, f64>) -> f64 {
    x.as_array().iter().sum()
}

/// Set `x[index]` to `value` through `indexer_mut()`, then read `x[index]` through the caller's
/// object while the argument still holds `x`: `value` when the write went to `x`'s own memory.
#[pyfunction]
fn indexer_write_seen(mut x: ArrayMut<'_, f64, 2>, index: [usize; 2], value: f64) -> PyResult<f64> {
    let mut writer = x.indexer_mut()?;
    writer.set(index, value).ok_or_else(|| pyo3::exceptions::PyIndexError::new_err(format!("{index:?}")))?;
    x.object().get_item((index[0], index[1]))?.extract()
}

/// Set `x[0]` to `value` through the caller's object, then read `x[0]` through `indexer()`:
/// `value` when the indexer reads `x`'s own memory (a copy made before would hold the old one).
#[pyfunction]
fn python_write_then_indexer(x: ArrayRef<'_, f64, 1>, value: f64) -> PyResult<Option<f64>> {
    x.object().set_item(0, value)?;
    Ok(x.indexer()?.get([0]))
}

/// Write `value` at `x[0, 0]` through `as_slice_mut()` (a misaligned array's aligned copy),
/// then read it through `indexer()`: the indexer reads what the copy holds.
#[pyfunction]
fn slice_write_then_indexer(mut x: ArrayMut<'_, f64, 2>, value: f64) -> PyResult<Option<f64>> {
    x.as_slice_mut()?[0] = value;
    Ok(x.indexer()?.get([0, 0]))
}

/// Read `x` through `as_array()` (a misaligned array's aligned copy), then set `x[0]` through
/// the caller's object: a copy that was only read is not written back over it.
#[pyfunction]
fn view_then_python_write(x: ArrayMut<'_, f64, 1>, value: f64) -> PyResult<f64> {
    let total = x.as_array()?.sum();
    x.object().set_item(0, value)?;
    Ok(total)
}

/// Write `value` at `x[0]` through `as_slice_mut()`, then cast the argument to float32: the
/// cast sees the write.
#[pyfunction]
fn write_then_cast(mut x: ArrayMut<'_, f64, 1>, value: f64) -> PyResult<Vec<f32>> {
    x.as_slice_mut()?[0] = value;
    Ok(x.cast::<f32>()?.as_slice()?.to_vec())
}

/// `x` as a list through `indexer()` after a view that needs the aligned copy
/// (`as_array()`): both read the same elements.
#[pyfunction]
fn indexer_after_view(x: ArrayRef<'_, f64, 2>) -> PyResult<(Vec<f64>, Vec<f64>)> {
    let viewed: Vec<f64> = x.as_array()?.iter().copied().collect();
    Ok((viewed, x.indexer()?.iter().collect()))
}

/// Nested lists as a 2-D float64 array in the caller's framework, NumPy here
/// (`NewArray::from_vec2`: allocated by NumPy and written once, as rust-numpy's).
#[pyfunction]
fn from_vec2(py: Python<'_>, rows: Vec<Vec<f64>>) -> PyResult<Bound<'_, PyAny>> {
    NewArray::<f64, 2>::from_vec2(py, Framework::NumPy, &rows)?.into_object()
}

/// Nested lists as an amso array handed to NumPy (`MemArray::from_vec2`, then
/// `into_framework`): the owned-array route, beside the row's.
#[pyfunction]
fn memarray_from_vec2(py: Python<'_>, rows: Vec<Vec<f64>>) -> PyResult<Bound<'_, PyAny>> {
    MemArray::<f64, 2>::from_vec2(&rows)?.into_framework(py, Framework::NumPy)
}

/// rust-numpy's `PyArray::from_vec2`, for the report's row.
#[pyfunction]
fn numpy_from_vec2(py: Python<'_>, rows: Vec<Vec<f64>>) -> PyResult<Bound<'_, numpy::PyArray2<f64>>> {
    numpy::PyArray2::from_vec2(py, &rows).map_err(|error| pyo3::exceptions::PyValueError::new_err(error.to_string()))
}

/// A zeroed `shape` array of the caller's framework (NumPy here) grown to `to`
/// (`NewArray::resize`, which NumPy's `PyArray_Resize` serves for a NumPy array, as
/// rust-numpy's).
#[pyfunction]
fn amso_zeros_resized(py: Python<'_>, shape: [usize; 2], to: [usize; 2]) -> PyResult<Bound<'_, PyAny>> {
    let mut array = NewArray::<f64, 2>::zeros(py, Framework::NumPy, shape, amso_runtime::Device::CPU)?;
    array.resize(to)?;
    array.into_object()
}

/// An amso array grown with `MemArray::resize` and handed to NumPy: the owned-array route.
#[pyfunction]
fn memarray_zeros_resized(py: Python<'_>, shape: [usize; 2], to: [usize; 2]) -> PyResult<Bound<'_, PyAny>> {
    let mut array = MemArray::<f64, 2>::new(shape)?;
    array.resize(to)?;
    array.into_framework(py, Framework::NumPy)
}

/// rust-numpy's: a zeroed NumPy array resized in place (`PyArray::resize`, NumPy's
/// `PyArray_Resize`).
#[pyfunction]
fn numpy_zeros_resized(py: Python<'_>, shape: [usize; 2], to: [usize; 2]) -> PyResult<Bound<'_, numpy::PyArray2<f64>>> {
    use numpy::PyArrayMethods;
    let array = numpy::PyArray2::<f64>::zeros(py, shape, false);
    // SAFETY: a new array no other code references or views.
    unsafe { array.resize(to)? };
    Ok(array)
}

/// `rows` x `columns` of 0, 0.5, 1, ... in C order.
fn halves(rows: usize, columns: usize) -> Array2<f64> {
    Array2::from_shape_fn((rows, columns), |(i, j)| (i * columns + j) as f64 / 2.0)
}

/// A frozen class holding an array, shown by a getter without a copy (rust-numpy's
/// `borrow_from_array` example): amso's `ClassView`.
#[pyclass(frozen, module = "amso_peers")]
struct Holder {
    values: Array2<f64>,
}

#[pymethods]
impl Holder {
    #[new]
    fn new(rows: usize, columns: usize) -> Holder {
        Holder { values: halves(rows, columns) }
    }

    /// The whole array, read-only, its base this object.
    #[getter]
    fn values<'py>(this: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        ClassView::new(&this, |holder| holder.values.view()).into_framework(this.py(), Framework::NumPy)
    }

    /// Column `j`, a strided view.
    fn column<'py>(this: Bound<'py, Self>, j: usize) -> PyResult<Bound<'py, PyAny>> {
        ClassView::new(&this, |holder| holder.values.column(j)).into_framework(this.py(), Framework::NumPy)
    }
}

/// The same class through rust-numpy (`PyArray::borrow_from_array`).
#[pyclass(frozen, module = "amso_peers")]
struct NumpyHolder {
    values: Array2<f64>,
}

#[pymethods]
impl NumpyHolder {
    #[new]
    fn new(rows: usize, columns: usize) -> NumpyHolder {
        NumpyHolder { values: halves(rows, columns) }
    }

    #[getter]
    fn values<'py>(this: Bound<'py, Self>) -> Bound<'py, numpy::PyArray2<f64>> {
        let array = &this.get().values;
        // SAFETY: the class is frozen: nothing moves or writes `values` while the object,
        // which the array keeps as its base, lives.
        unsafe { numpy::PyArray2::borrow_from_array(array, this.clone().into_any()) }
    }
}

/// Nested lists as a 3-D int64 array (`MemArray::from_vec3`).
#[pyfunction]
fn from_vec3(py: Python<'_>, planes: Vec<Vec<Vec<i64>>>) -> PyResult<Bound<'_, PyAny>> {
    MemArray::<i64, 3>::from_vec3(&planes)?.into_framework(py, Framework::NumPy)
}

/// Nested lists as a 3-D int64 array in the framework of `like` (`NewArray::from_vec3`).
#[pyfunction]
fn from_vec3_like<'py>(
    py: Python<'py>,
    like: UntypedArray<'py>,
    planes: Vec<Vec<Vec<i64>>>,
) -> PyResult<Bound<'py, PyAny>> {
    NewArray::<i64, 3>::from_vec3(py, like.framework()?, &planes)?.into_object()
}

/// Nested lists as a 2-D float64 array in the framework of `like` (`NewArray::from_vec2`).
#[pyfunction]
fn from_vec2_like<'py>(py: Python<'py>, like: UntypedArray<'py>, rows: Vec<Vec<f64>>) -> PyResult<Bound<'py, PyAny>> {
    NewArray::<f64, 2>::from_vec2(py, like.framework()?, &rows)?.into_object()
}

/// `rows` as a new array in the framework of `like`, resized to `to` (`NewArray::resize`).
#[pyfunction]
fn resized_like<'py>(
    py: Python<'py>,
    like: UntypedArray<'py>,
    rows: Vec<Vec<f64>>,
    to: [usize; 2],
) -> PyResult<Bound<'py, PyAny>> {
    let mut array = NewArray::<f64, 2>::from_vec2(py, like.framework()?, &rows)?;
    array.resize(to)?;
    array.into_object()
}

/// A zeroed `shape` array on the device of `like`, in its framework, resized to `to`
/// (`NewArray::resize`: refused for device data).
#[pyfunction]
fn zeros_resized_like<'py>(
    py: Python<'py>,
    like: UntypedArray<'py>,
    shape: [usize; 2],
    to: [usize; 2],
) -> PyResult<Bound<'py, PyAny>> {
    let mut array = NewArray::<f64, 2>::zeros(py, like.framework()?, shape, like.device())?;
    array.resize(to)?;
    array.into_object()
}

/// A float64 matrix cast to int32 (`MemArray::cast`).
#[pyfunction]
fn cast_to_i32(x: ArrayRef<'_, f64, 2>) -> PyResult<Bound<'_, PyAny>> {
    let [rows, columns] = x.dim();
    let values: Vec<f64> = x.as_array()?.iter().copied().collect();
    let array = MemArray::<f64, 2>::from_slice([rows, columns], &values)?;
    x.output(array.cast::<i32>()?)
}

/// A float64 matrix resized to `shape` (`MemArray::resize`).
#[pyfunction]
fn resized(x: ArrayRef<'_, f64, 2>, shape: [usize; 2]) -> PyResult<Bound<'_, PyAny>> {
    let values: Vec<f64> = x.as_array()?.iter().copied().collect();
    let mut array = MemArray::<f64, 2>::from_slice(x.dim(), &values)?;
    array.resize(shape)?;
    x.output(array)
}

/// How many `Particles` have been dropped (each `owned_positions` result owns one).
static DROPPED: AtomicUsize = AtomicUsize::new(0);

/// A Rust value with an array inside and more beside it.
struct Particles {
    positions: Array2<f64>,
    _names: Vec<String>,
}

impl Drop for Particles {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

/// The `positions` of a new `Particles` (`n` rows of x, y, z: row i is i, i + 0.5, -i), as a
/// NumPy array over the struct's memory; `column` picks one column (a strided view); read-only
/// when `readonly`.
#[pyfunction]
#[pyo3(signature = (n, readonly = false, column = None))]
fn owned_positions(py: Python<'_>, n: usize, readonly: bool, column: Option<usize>) -> PyResult<Bound<'_, PyAny>> {
    let positions = Array2::from_shape_fn((n, 3), |(i, j)| [i as f64, i as f64 + 0.5, -(i as f64)][j]);
    let particles = Particles { positions, _names: vec!["a".into(); n] };
    let view = match column {
        Some(j) => OwnedView::new(particles, move |p| -> ArrayViewMut1<'_, f64> { p.positions.column_mut(j) }),
        None => OwnedView::new(particles, |p| p.positions.view_mut()),
    };
    let view = if readonly { view.readonly() } else { view };
    view.into_framework(py, Framework::NumPy)
}

/// How many `Particles` have been dropped so far.
#[pyfunction]
fn dropped_particles() -> usize {
    DROPPED.load(Ordering::SeqCst)
}

/// An untyped argument's byte strides and contiguity (rust-numpy's `PyUntypedArray` facts).
#[pyfunction]
fn untyped_layout(x: UntypedArray<'_>) -> (Vec<isize>, bool, bool, bool) {
    (x.strides().to_vec(), x.is_c_contiguous(), x.is_fortran_contiguous(), x.is_contiguous())
}

/// What an untyped argument of any kind reports: (the spec's dtype, NumPy's kind, shape, byte
/// strides), and, dispatched to the typed view of the kinds this crate knows, its first element
/// as text.
#[pyfunction]
fn untyped_kind(py: Python<'_>, x: UntypedArray<'_>) -> PyResult<UntypedFacts> {
    let facts = (x.dtype().map(|d| d.name), x.kind().map(str::to_owned), x.shape().to_vec(), x.strides().to_vec());
    let first = if x.is::<Py<PyAny>>() {
        let x: ArrayRefDyn<'_, Py<PyAny>> = x.into_typed()?;
        x.as_array()?.iter().next().map(|o| o.bind(py).str().map(|s| s.to_string())).transpose()?
    } else if x.is::<FixedBytes<3>>() {
        let x: ArrayRefDyn<'_, FixedBytes<3>> = x.into_typed()?;
        x.as_array()?.iter().next().map(ToString::to_string)
    } else if x.is::<FixedUnicode<2>>() {
        let x: ArrayRefDyn<'_, FixedUnicode<2>> = x.into_typed()?;
        x.as_array()?.iter().next().map(ToString::to_string)
    } else if x.is::<Datetime<units::Seconds>>() {
        let x: ArrayRefDyn<'_, Datetime<units::Seconds>> = x.into_typed()?;
        x.as_array()?.iter().next().map(|&t| i64::from(t).to_string())
    } else if x.is::<Particle>() {
        let x: ArrayRefDyn<'_, Particle> = x.into_typed()?;
        x.as_array()?.iter().next().map(|p| p.id.to_string())
    } else if x.is::<f64>() {
        let x: ArrayRefDyn<'_, f64> = x.into_typed()?;
        x.as_array()?.iter().next().map(f64::to_string)
    } else {
        None
    };
    Ok((facts.0, facts.1, facts.2, facts.3, first))
}

/// `untyped_kind`'s answer.
type UntypedFacts = (Option<&'static str>, Option<String>, Vec<usize>, Vec<isize>, Option<String>);

/// An untyped argument turned into a typed view of an element type it does not hold: the error.
#[pyfunction]
fn untyped_as_objects(x: UntypedArray<'_>) -> PyResult<usize> {
    let x: ArrayRefDyn<'_, Py<PyAny>> = x.into_typed()?;
    Ok(x.as_array()?.len())
}

/// `x.astype(np.uint8)` through `cast`: the new array (unsafe casting, as NumPy's).
#[pyfunction]
fn amso_cast_u8<'py>(x: ArrayRefDyn<'py, i64>) -> PyResult<Bound<'py, PyAny>> {
    Ok(x.cast::<u8>()?.object().clone())
}

/// The same through rust-numpy's `cast_array`.
#[pyfunction]
fn numpy_cast_u8<'py>(x: &Bound<'py, numpy::PyArrayDyn<i64>>) -> PyResult<Bound<'py, numpy::PyArrayDyn<u8>>> {
    use numpy::PyArrayMethods;
    x.cast_array::<u8>(false)
}

/// int64 into float32, the first element of the cast (the benchmark's row).
#[pyfunction]
fn amso_cast_f32(x: ArrayRef<'_, i64, 1>) -> PyResult<f32> {
    Ok(x.cast::<f32>()?.as_slice()?.first().copied().unwrap_or(0.0))
}

/// The same through rust-numpy's `cast_array`.
#[pyfunction]
fn numpy_cast_f32(x: numpy::PyReadonlyArray1<'_, i64>) -> PyResult<f32> {
    use numpy::PyArrayMethods;
    let y = x.cast_array::<f32>(false)?;
    let first = y.readonly().as_slice()?.first().copied().unwrap_or(0.0);
    Ok(first)
}

/// `x` cast to `U` by a casting rule ("no", "equiv", "safe", "same_kind", "unsafe"): (shape,
/// elements).
fn cast_by<T: Element, U: Element>(x: &ArrayRefDyn<'_, T>, rule: &str) -> PyResult<(Vec<usize>, Vec<U>)> {
    let casting = match rule {
        "no" => Casting::No,
        "equiv" => Casting::Equiv,
        "safe" => Casting::Safe,
        "same_kind" => Casting::SameKind,
        _ => Casting::Unsafe,
    };
    let y = x.cast_with::<U>(casting)?;
    Ok((y.shape().to_vec(), y.as_array()?.iter().copied().collect()))
}

/// float64 into int32 by a casting rule.
#[pyfunction]
fn amso_cast_i32_by(x: ArrayRefDyn<'_, f64>, rule: &str) -> PyResult<(Vec<usize>, Vec<i32>)> {
    cast_by(&x, rule)
}

/// float64 into float64 by a casting rule (every rule allows it).
#[pyfunction]
fn amso_cast_f64_by(x: ArrayRefDyn<'_, f64>, rule: &str) -> PyResult<(Vec<usize>, Vec<f64>)> {
    cast_by(&x, rule)
}

/// int64 into float64 by a casting rule (safe and wider allow it).
#[pyfunction]
fn amso_cast_f64_from_i64_by(x: ArrayRefDyn<'_, i64>, rule: &str) -> PyResult<(Vec<usize>, Vec<f64>)> {
    cast_by(&x, rule)
}

/// float32 lanes cast to float32x4 vectors: the error.
#[pyfunction]
fn amso_cast_to_vectors(x: ArrayRef<'_, f32, 2>) -> PyResult<usize> {
    Ok(x.cast::<amso_runtime::dtypes::float32x4>()?.len())
}

/// Whether an untyped argument is a float32x4 array (`is`), and then its typed view's shape and
/// first vector.
#[pyfunction]
fn untyped_vectors(x: UntypedArray<'_>) -> PyResult<(bool, Vec<usize>, Vec<f32>)> {
    use amso_runtime::dtypes::float32x4;
    if !x.is::<float32x4>() {
        return Ok((false, Vec::new(), Vec::new()));
    }
    let x: ArrayRefDyn<'_, float32x4> = x.into_typed()?;
    let first = x.as_array()?.iter().next().map(|v| v.to_vec()).unwrap_or_default();
    Ok((true, x.shape().to_vec(), first))
}

/// The datetimes of a `datetime64[s]` argument as `datetime64[D]` (NumPy's own unit cast).
#[pyfunction]
fn amso_cast_days(x: ArrayRef<'_, Datetime<units::Seconds>, 1>) -> PyResult<Vec<i64>> {
    Ok(x.cast::<Datetime<units::Days>>()?.as_array()?.iter().map(|&d| i64::from(d)).collect())
}

/// The same facts from rust-numpy's untyped array.
#[pyfunction]
fn numpy_untyped_layout(x: &Bound<'_, numpy::PyUntypedArray>) -> (Vec<isize>, bool, bool, bool) {
    (x.strides().to_vec(), x.is_c_contiguous(), x.is_fortran_contiguous(), x.is_contiguous())
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    for function in [
        wrap_pyfunction!(untyped_layout, module)?,
        wrap_pyfunction!(untyped_kind, module)?,
        wrap_pyfunction!(untyped_as_objects, module)?,
        wrap_pyfunction!(amso_cast_u8, module)?,
        wrap_pyfunction!(numpy_cast_u8, module)?,
        wrap_pyfunction!(amso_cast_i32_by, module)?,
        wrap_pyfunction!(amso_cast_f64_by, module)?,
        wrap_pyfunction!(amso_cast_f64_from_i64_by, module)?,
        wrap_pyfunction!(untyped_vectors, module)?,
        wrap_pyfunction!(amso_cast_to_vectors, module)?,
        wrap_pyfunction!(amso_cast_days, module)?,
        wrap_pyfunction!(amso_cast_f32, module)?,
        wrap_pyfunction!(numpy_cast_f32, module)?,
        wrap_pyfunction!(numpy_untyped_layout, module)?,
        wrap_pyfunction!(like_f64, module)?,
        wrap_pyfunction!(like_i32, module)?,
        wrap_pyfunction!(like_i32_coerce, module)?,
        wrap_pyfunction!(like_f32_2d, module)?,
        wrap_pyfunction!(like_f64_coerce, module)?,
        wrap_pyfunction!(like_u8, module)?,
        wrap_pyfunction!(like_bool, module)?,
        wrap_pyfunction!(like_f32, module)?,
        wrap_pyfunction!(numpy_like_f64, module)?,
        wrap_pyfunction!(numpy_like_i32, module)?,
        wrap_pyfunction!(numpy_like_i32_coerce, module)?,
        wrap_pyfunction!(numpy_like_f64_coerce, module)?,
        wrap_pyfunction!(numpy_like_f32_2d, module)?,
        wrap_pyfunction!(copy_any, module)?,
        wrap_pyfunction!(reverse_any, module)?,
        wrap_pyfunction!(layout_f64, module)?,
        wrap_pyfunction!(indexer_sum, module)?,
        wrap_pyfunction!(numpy_iter_sum, module)?,
        wrap_pyfunction!(indexer_write_seen, module)?,
        wrap_pyfunction!(indexer_after_view, module)?,
        wrap_pyfunction!(slice_write_then_indexer, module)?,
        wrap_pyfunction!(python_write_then_indexer, module)?,
        wrap_pyfunction!(view_then_python_write, module)?,
        wrap_pyfunction!(write_then_cast, module)?,
        wrap_pyfunction!(from_vec2, module)?,
        wrap_pyfunction!(memarray_from_vec2, module)?,
        wrap_pyfunction!(from_vec2_like, module)?,
        wrap_pyfunction!(from_vec3_like, module)?,
        wrap_pyfunction!(resized_like, module)?,
        wrap_pyfunction!(zeros_resized_like, module)?,
        wrap_pyfunction!(numpy_from_vec2, module)?,
        wrap_pyfunction!(amso_zeros_resized, module)?,
        wrap_pyfunction!(memarray_zeros_resized, module)?,
        wrap_pyfunction!(numpy_zeros_resized, module)?,
        wrap_pyfunction!(from_vec3, module)?,
        wrap_pyfunction!(cast_to_i32, module)?,
        wrap_pyfunction!(resized, module)?,
        wrap_pyfunction!(owned_positions, module)?,
        wrap_pyfunction!(dropped_particles, module)?,
    ] {
        module.add_function(function)?;
    }
    module.add_class::<Holder>()?;
    module.add_class::<NumpyHolder>()?;
    Ok(())
}
