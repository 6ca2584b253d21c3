//! rust-numpy's own tests (`tests/array.rs`, `tests/borrow.rs`, `tests/to_py.rs`) as amso
//! code: each function here does what one or more of those tests do through rust-numpy's API,
//! with amso's typed arguments and owned results, and `tests/python/test_rust_numpy_port.py`
//! asserts the same behaviour (its docstring maps each rust-numpy test to its port).

use amso_runtime::dtypes::{bfloat16, float16};
use amso_runtime::ndarray::{s, Array1, Array2, Array3, IxDyn, Order, ShapeBuilder};
use amso_runtime::python::{
    ArrayMut, ArrayMutDyn, ArrayRef, ArrayRefDyn, Framework, IntoFramework, NewArray, UntypedArray,
};
use amso_runtime::{Device, FixedBytes, FixedUnicode};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

// --- tests/array.rs ---

/// `PyArray::zeros(py, [rows, columns], false)`: a zeroed C-order NumPy array.
#[pyfunction]
fn port_zeros(py: Python<'_>, rows: usize, columns: usize) -> PyResult<Bound<'_, PyAny>> {
    NewArray::<f64, 2>::zeros(py, Framework::NumPy, [rows, columns], Device::CPU)?.into_object()
}

/// `PyArray::zeros(py, [rows, columns], true)`: amso's `NewArray` is C order only; an
/// F-order `ndarray::Array` handed over keeps its layout.
#[pyfunction]
fn port_zeros_fortran(py: Python<'_>, rows: usize, columns: usize) -> PyResult<Bound<'_, PyAny>> {
    Array2::<f64>::zeros((rows, columns).f()).into_framework(py, Framework::NumPy)
}

/// `PyArray::zeros(py, (), false)`: a 0-d array (`NewArray` and `MemArray` start at one
/// dimension; an `ndarray::Array0` handed over is 0-d).
#[pyfunction]
fn port_zeros_0d(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    amso_runtime::ndarray::arr0(0.0_f64).into_framework(py, Framework::NumPy)
}

/// The one element of a 0-d argument (rust-numpy's `item()`).
#[pyfunction]
fn port_item(x: ArrayRef<'_, f64, 0>) -> PyResult<(usize, bool, f64)> {
    Ok((x.len(), x.is_empty(), x.as_array()?[[]]))
}

/// `PyArray::arange(py, start, stop, step)`: ndarray's `range`, handed over.
#[pyfunction]
fn port_arange(py: Python<'_>, start: f64, stop: f64, step: f64) -> PyResult<Bound<'_, PyAny>> {
    Array1::range(start, stop, step).into_framework(py, Framework::NumPy)
}

/// What an argument reports: shape, strides (elements), the view's strides, length,
/// emptiness, C contiguity and the data address (rust-numpy's `as_array`, `as_raw_array`).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn port_describe(x: ArrayRefDyn<'_, f64>) -> PyResult<(Vec<usize>, Vec<isize>, Vec<isize>, usize, bool, bool, usize)> {
    let view_strides = x.as_array()?.strides().to_vec();
    Ok((
        x.shape().to_vec(),
        x.strides().to_vec(),
        view_strides,
        x.len(),
        x.is_empty(),
        x.is_c_contiguous(),
        x.data_address(),
    ))
}

/// The elements of an int32 argument in logical order, through its `ndarray` view.
#[pyfunction]
fn port_i32_values(x: ArrayRefDyn<'_, i32>) -> PyResult<Vec<i32>> {
    Ok(x.as_array()?.iter().copied().collect())
}

/// `as_slice()` of an int32 argument.
#[pyfunction]
fn port_i32_slice(x: ArrayRefDyn<'_, i32>) -> PyResult<Vec<i32>> {
    Ok(x.as_slice()?.to_vec())
}

/// `as_slice_mut()` of a writable int32 argument: its length.
#[pyfunction]
fn port_i32_slice_mut(mut x: ArrayMutDyn<'_, i32>) -> PyResult<usize> {
    Ok(x.as_slice_mut()?.len())
}

/// `as_slice()` of a uint16 argument.
#[pyfunction]
fn port_u16_slice(x: ArrayRefDyn<'_, u16>) -> PyResult<Vec<u16>> {
    Ok(x.as_slice()?.to_vec())
}

/// `as_slice_mut()` of a writable uint16 argument: its length.
#[pyfunction]
fn port_u16_slice_mut(mut x: ArrayMutDyn<'_, u16>) -> PyResult<usize> {
    Ok(x.as_slice_mut()?.len())
}

/// Typed arguments that only extract, for the type and dimension checks
/// (rust-numpy's `cast`, `cast_exact`, `is_instance_of`, `extract`).
macro_rules! takers {
    ($($name:ident: $ty:ty;)+) => {
        $(
            #[pyfunction]
            fn $name(_x: $ty) {}
        )+
        fn add_takers(module: &Bound<'_, PyModule>) -> PyResult<()> {
            $(module.add_function(wrap_pyfunction!($name, module)?)?;)+
            Ok(())
        }
    };
}

takers! {
    port_take_f64_2d: ArrayRef<'_, f64, 2>;
    port_take_f32_2d: ArrayRef<'_, f32, 2>;
    port_take_i32_1d: ArrayRef<'_, i32, 1>;
    port_take_f64_1d: ArrayRef<'_, f64, 1>;
    port_take_i32_2d: ArrayRef<'_, i32, 2>;
    port_take_f64_3d: ArrayRef<'_, f64, 3>;
    port_take_mut_f64_3d: ArrayMut<'_, f64, 3>;
    port_take_bytes3: ArrayRef<'_, FixedBytes<3>, 1>;
    port_take_unicode3: ArrayRef<'_, FixedUnicode<3>, 1>;
}

/// The rows of a uint32 argument, through its `ndarray` view (negative strides included).
#[pyfunction]
fn port_u32_rows(x: ArrayRef<'_, u32, 2>) -> PyResult<Vec<Vec<u32>>> {
    Ok(x.as_array()?.rows().into_iter().map(|row| row.to_vec()).collect())
}

/// The dtype an untyped argument reports (rust-numpy's `PyArrayDescr`).
#[pyfunction]
fn port_dtype_name(x: UntypedArray<'_>) -> Option<&'static str> {
    x.dtype().map(|dtype| dtype.name)
}

/// `vec![1, 2, 3].into_pyarray(py)`: an int32 array over Rust's vector.
#[pyfunction]
fn port_vec_i32(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    vec![1_i32, 2, 3].into_framework(py, Framework::NumPy)
}

/// `copy_to`: float64 into int64, element by element (NumPy's casting, truncation).
#[pyfunction]
fn port_copy_to(source: ArrayRef<'_, f64, 1>, mut destination: ArrayMut<'_, i64, 1>) -> PyResult<()> {
    destination.as_array_mut()?.zip_mut_with(&source.as_array()?, |d, &s| *d = s as i64);
    Ok(())
}

/// `get([i, j, k])`: `None` out of bounds.
#[pyfunction]
fn port_get(x: ArrayRef<'_, i64, 3>, index: [usize; 3]) -> PyResult<Option<i64>> {
    Ok(x.as_array()?.get(index).copied())
}

/// `permute(Some(axes))` / `transpose()`, on the `ndarray` view, as a new array.
#[pyfunction]
#[pyo3(signature = (x, axes=None))]
fn port_permute<'py>(x: ArrayRefDyn<'py, i64>, axes: Option<Vec<usize>>) -> PyResult<Bound<'py, PyAny>> {
    let view = x.as_array()?;
    let permuted = match axes {
        Some(axes) if axes.len() == view.ndim() => view.permuted_axes(axes),
        Some(_) => return Err(PyValueError::new_err("axes don't match the array")),
        None => view.reversed_axes(),
    };
    x.output(permuted.to_owned())
}

/// `reshape_with_order(shape, NPY_FORTRANORDER)`, on the `ndarray` view.
#[pyfunction]
fn port_reshape_fortran(x: ArrayRef<'_, i64, 1>, shape: Vec<usize>) -> PyResult<Bound<'_, PyAny>> {
    let view = x.as_array()?;
    let reshaped =
        view.to_shape((IxDyn(&shape), Order::F)).map_err(|e| PyValueError::new_err(format!("cannot reshape: {e}")))?;
    x.output(reshaped.into_owned())
}

/// float16: the values read, then doubled in place.
#[pyfunction]
fn port_f16_double(mut x: ArrayMut<'_, float16, 2>) -> PyResult<Vec<f32>> {
    let before = x.as_array()?.iter().map(|v| v.to_f32()).collect();
    x.as_array_mut()?.map_inplace(|v| *v *= float16::from_f32(2.0));
    Ok(before)
}

/// bfloat16 (ml_dtypes' dtype): the values read, then doubled in place.
#[pyfunction]
fn port_bf16_double(mut x: ArrayMut<'_, bfloat16, 2>) -> PyResult<Vec<f32>> {
    let before = x.as_array()?.iter().map(|v| v.to_f32()).collect();
    x.as_array_mut()?.map_inplace(|v| *v *= bfloat16::from_f32(2.0));
    Ok(before)
}

/// `S6`: the raw bytes (padding included), then the last byte of the third set to `z`.
#[pyfunction]
fn port_bytes6(mut x: ArrayMut<'_, FixedBytes<6>, 1>) -> PyResult<Vec<Vec<u8>>> {
    let raw = x.as_array()?.iter().map(|s| s.0.to_vec()).collect();
    x.as_array_mut()?[2].0[5] = b'z';
    Ok(raw)
}

/// `U6`: the raw code points (padding included), then the last of the third set to `z`.
#[pyfunction]
fn port_unicode6(mut x: ArrayMut<'_, FixedUnicode<6>, 1>) -> PyResult<Vec<Vec<u32>>> {
    let raw = x.as_array()?.iter().map(|s| s.0.to_vec()).collect();
    x.as_array_mut()?[2].0[5] = u32::from(b'z');
    Ok(raw)
}

// --- tests/borrow.rs ---

/// Two writable arguments: their shapes.
#[pyfunction]
fn port_rw_rw(a: ArrayMutDyn<'_, f64>, b: ArrayMutDyn<'_, f64>) -> (Vec<usize>, Vec<usize>) {
    (a.shape().to_vec(), b.shape().to_vec())
}

/// Two read-only arguments: their shapes.
#[pyfunction]
fn port_ro_ro(a: ArrayRefDyn<'_, f64>, b: ArrayRefDyn<'_, f64>) -> (Vec<usize>, Vec<usize>) {
    (a.shape().to_vec(), b.shape().to_vec())
}

/// A writable argument, then a read-only one.
#[pyfunction]
fn port_rw_ro(a: ArrayMutDyn<'_, f64>, b: ArrayRefDyn<'_, f64>) -> (Vec<usize>, Vec<usize>) {
    (a.shape().to_vec(), b.shape().to_vec())
}

/// A read-only argument, then a writable one.
#[pyfunction]
fn port_ro_rw(a: ArrayRefDyn<'_, f64>, b: ArrayMutDyn<'_, f64>) -> (Vec<usize>, Vec<usize>) {
    (a.shape().to_vec(), b.shape().to_vec())
}

/// Three writable arguments: their lengths.
#[pyfunction]
fn port_rw3(a: ArrayMutDyn<'_, f64>, b: ArrayMutDyn<'_, f64>, c: ArrayMutDyn<'_, f64>) -> [usize; 3] {
    [a.len(), b.len(), c.len()]
}

/// Three read-only arguments: their lengths.
#[pyfunction]
fn port_ro3(a: ArrayRefDyn<'_, f64>, b: ArrayRefDyn<'_, f64>, c: ArrayRefDyn<'_, f64>) -> [usize; 3] {
    [a.len(), b.len(), c.len()]
}

/// Hold `x` for writing while `callback` runs (Python code, other calls, other threads).
#[pyfunction]
fn port_while_writing(_x: ArrayMutDyn<'_, f64>, callback: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    Ok(callback.call0()?.unbind())
}

/// A read-only argument's `as_array()` shape, `as_slice()` length and `get([0, 1, 2])`.
#[pyfunction]
fn port_readonly_access(x: ArrayRef<'_, f64, 3>) -> PyResult<(Vec<usize>, usize, Option<f64>)> {
    let view = x.as_array()?;
    Ok((view.shape().to_vec(), x.as_slice()?.len(), view.get([0, 1, 2]).copied()))
}

/// The same through a writable argument, the mutable accessors included.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn port_readwrite_access(mut x: ArrayMut<'_, f64, 3>) -> PyResult<(Vec<usize>, Vec<usize>, usize, usize, Option<f64>)> {
    let shape = x.as_array()?.shape().to_vec();
    let len = x.as_slice()?.len();
    let mut view = x.as_array_mut()?;
    let shape_mut = view.shape().to_vec();
    let element = view.get_mut([0, 1, 2]).map(|v| *v);
    let len_mut = x.as_slice_mut()?.len();
    Ok((shape, shape_mut, len, len_mut, element))
}

// --- tests/to_py.rs ---

/// `slice.to_pyarray(py)`: amso hands over owned values, so a borrowed slice is copied first.
#[pyfunction]
fn port_slice_to_numpy(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let values: &[i32] = &[1, 2, 3];
    values.to_vec().into_framework(py, Framework::NumPy)
}

/// `Box<[T]>::into_pyarray`: a boxed slice becomes a `Vec` without a copy first.
#[pyfunction]
fn port_boxed_slice(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    vec![1_i32, 2, 3].into_boxed_slice().into_vec().into_framework(py, Framework::NumPy)
}

/// `Array3::<f64>::zeros((3, 4, 2))` handed over (`copy`: from a view, as `to_pyarray`).
#[pyfunction]
fn port_array3(py: Python<'_>, copy: bool) -> PyResult<Bound<'_, PyAny>> {
    let array = Array3::<f64>::zeros((3, 4, 2));
    match copy {
        true => array.view().to_owned().into_framework(py, Framework::NumPy),
        false => array.into_framework(py, Framework::NumPy),
    }
}

/// `PyArray::from_iter(py, (0..n).map(|x| x * x))`: collected, then handed over.
#[pyfunction]
fn port_from_iter(py: Python<'_>, n: i32) -> PyResult<Bound<'_, PyAny>> {
    (0..n).map(|x| x * x).collect::<Vec<i32>>().into_framework(py, Framework::NumPy)
}

/// `PyArray::from_iter(py, 0_u32..n)`.
#[pyfunction]
fn port_from_range_u32(py: Python<'_>, n: u32) -> PyResult<Bound<'_, PyAny>> {
    (0..n).collect::<Vec<u32>>().into_framework(py, Framework::NumPy)
}

/// `[T::MIN, T::MAX].to_pyarray(py)` for every integer type, as (Rust type, array) pairs.
#[pyfunction]
fn port_small_arrays(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    macro_rules! each {
        ($($t:ty)+) => {$(
            let array = [<$t>::MIN, <$t>::MAX].to_vec().into_framework(py, Framework::NumPy)?;
            list.append((stringify!($t), array, <$t>::MIN, <$t>::MAX))?;
        )+};
    }
    each!(i8 u8 i16 u16 i32 u32 i64 u64 isize usize);
    Ok(list)
}

/// `Array2` from `shape_fn`, `slice_collapse(s![1.., ..])`, handed over (the first element
/// not at the start of the allocation).
#[pyfunction]
fn port_collapsed(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let mut array = Array2::<f64>::from_shape_fn([3, 4], |(i, j)| (i * 10 + j) as f64);
    array.slice_collapse(s![1.., ..]);
    array.into_framework(py, Framework::NumPy)
}

/// `matrix.slice(s![1..4; -1, ..]).to_pyarray(py)`: the view copied (`standard`: into C
/// order, as rust-numpy's copy is; else `to_owned()`, which keeps the view's memory order).
#[pyfunction]
fn port_sliced(py: Python<'_>, standard: bool) -> PyResult<Bound<'_, PyAny>> {
    let matrix = Array2::from_shape_vec([4, 2], vec![0_i64, 1, 2, 3, 4, 5, 6, 7]).expect("8 elements");
    let sliced = matrix.slice(s![1..4;-1, ..]);
    match standard {
        true => sliced.as_standard_layout().into_owned().into_framework(py, Framework::NumPy),
        false => sliced.to_owned().into_framework(py, Framework::NumPy),
    }
}

/// `matrix.reversed_axes()` handed over (`copy`: from a view, as `to_pyarray`).
#[pyfunction]
fn port_fortran_order(py: Python<'_>, copy: bool) -> PyResult<Bound<'_, PyAny>> {
    let matrix = Array2::from_shape_vec([4, 2], vec![0_i64, 1, 2, 3, 4, 5, 6, 7]).expect("8 elements");
    let fortran = matrix.reversed_axes();
    match copy {
        true => fortran.view().to_owned().into_framework(py, Framework::NumPy),
        false => fortran.into_framework(py, Framework::NumPy),
    }
}

/// A `Vec<Py<PyAny>>` (a dict and a string) as an object array, with the originals.
#[pyfunction]
fn port_objects_vec(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Vec<Py<PyAny>>)> {
    let items = vec![PyDict::new(py).into_any().unbind(), PyString::new(py, "Hello:)").into_any().unbind()];
    let copies = items.iter().map(|item| item.clone_ref(py)).collect::<Vec<_>>();
    Ok((copies.into_framework(py, Framework::NumPy)?, items))
}

/// A 2x3 `Array2<Py<PyAny>>` (Nones, a dict, a string) as an object array, with the originals
/// in C order.
#[pyfunction]
fn port_objects_2d(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Vec<Py<PyAny>>)> {
    let mut array = Array2::from_shape_fn((2, 3), |_| py.None());
    array[(0, 2)] = PyDict::new(py).into_any().unbind();
    array[(1, 0)] = PyString::new(py, "Hello:)").into_any().unbind();
    let originals = array.iter().map(|item| item.clone_ref(py)).collect();
    Ok((array.into_framework(py, Framework::NumPy)?, originals))
}

/// An object array, then an int32 one, both dropped (rust-numpy issue 232's use-after-free).
#[pyfunction]
fn port_objects_then_ints(py: Python<'_>) -> PyResult<()> {
    let mut array = Array2::from_shape_fn((2, 3), |_| py.None());
    array[(0, 2)] = PyDict::new(py).into_any().unbind();
    drop(array.into_framework(py, Framework::NumPy)?);
    drop(vec![1_i32, 2, 3].into_framework(py, Framework::NumPy)?);
    Ok(())
}

pub(crate) fn add(module: &Bound<'_, PyModule>) -> PyResult<()> {
    add_takers(module)?;
    module.add_function(wrap_pyfunction!(port_zeros, module)?)?;
    module.add_function(wrap_pyfunction!(port_zeros_fortran, module)?)?;
    module.add_function(wrap_pyfunction!(port_zeros_0d, module)?)?;
    module.add_function(wrap_pyfunction!(port_item, module)?)?;
    module.add_function(wrap_pyfunction!(port_arange, module)?)?;
    module.add_function(wrap_pyfunction!(port_describe, module)?)?;
    module.add_function(wrap_pyfunction!(port_i32_values, module)?)?;
    module.add_function(wrap_pyfunction!(port_i32_slice, module)?)?;
    module.add_function(wrap_pyfunction!(port_i32_slice_mut, module)?)?;
    module.add_function(wrap_pyfunction!(port_u16_slice, module)?)?;
    module.add_function(wrap_pyfunction!(port_u16_slice_mut, module)?)?;
    module.add_function(wrap_pyfunction!(port_u32_rows, module)?)?;
    module.add_function(wrap_pyfunction!(port_dtype_name, module)?)?;
    module.add_function(wrap_pyfunction!(port_vec_i32, module)?)?;
    module.add_function(wrap_pyfunction!(port_copy_to, module)?)?;
    module.add_function(wrap_pyfunction!(port_get, module)?)?;
    module.add_function(wrap_pyfunction!(port_permute, module)?)?;
    module.add_function(wrap_pyfunction!(port_reshape_fortran, module)?)?;
    module.add_function(wrap_pyfunction!(port_f16_double, module)?)?;
    module.add_function(wrap_pyfunction!(port_bf16_double, module)?)?;
    module.add_function(wrap_pyfunction!(port_bytes6, module)?)?;
    module.add_function(wrap_pyfunction!(port_unicode6, module)?)?;
    module.add_function(wrap_pyfunction!(port_rw_rw, module)?)?;
    module.add_function(wrap_pyfunction!(port_ro_ro, module)?)?;
    module.add_function(wrap_pyfunction!(port_rw_ro, module)?)?;
    module.add_function(wrap_pyfunction!(port_ro_rw, module)?)?;
    module.add_function(wrap_pyfunction!(port_rw3, module)?)?;
    module.add_function(wrap_pyfunction!(port_ro3, module)?)?;
    module.add_function(wrap_pyfunction!(port_while_writing, module)?)?;
    module.add_function(wrap_pyfunction!(port_readonly_access, module)?)?;
    module.add_function(wrap_pyfunction!(port_readwrite_access, module)?)?;
    module.add_function(wrap_pyfunction!(port_slice_to_numpy, module)?)?;
    module.add_function(wrap_pyfunction!(port_boxed_slice, module)?)?;
    module.add_function(wrap_pyfunction!(port_array3, module)?)?;
    module.add_function(wrap_pyfunction!(port_from_iter, module)?)?;
    module.add_function(wrap_pyfunction!(port_from_range_u32, module)?)?;
    module.add_function(wrap_pyfunction!(port_small_arrays, module)?)?;
    module.add_function(wrap_pyfunction!(port_collapsed, module)?)?;
    module.add_function(wrap_pyfunction!(port_sliced, module)?)?;
    module.add_function(wrap_pyfunction!(port_fortran_order, module)?)?;
    module.add_function(wrap_pyfunction!(port_objects_vec, module)?)?;
    module.add_function(wrap_pyfunction!(port_objects_2d, module)?)?;
    module.add_function(wrap_pyfunction!(port_objects_then_ints, module)?)
}
