//! rust-numpy's examples (`examples/simple`, `examples/parallel`), each as rust-numpy writes
//! it (`numpy_*`) beside its amso port (`amso_*`), in one module so that
//! `tests/python/test_rust_numpy_port.py` runs the same assertions against both in one process.
//! `head` and `add_minutes_to_seconds` are in `kinds.rs`; `examples/linalg` is not ported
//! (ndarray-linalg needs a system LAPACK, which this build has not; see docs/rust.md).

use std::ops::Add;

use amso_runtime::dtypes::complex128;
use amso_runtime::ndarray::{Array1, ArrayD, ArrayView1, ArrayViewD, ArrayViewMutD, Zip};
use amso_runtime::python::{ArrayMutDyn, ArrayRef, ArrayRefDyn};
use numpy::{
    Complex64, IntoPyArray, PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyReadonlyArrayDyn, PyReadwriteArrayDyn,
};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

// --- the computations, shared by both wrappers, as examples/simple writes them ---

fn axpy(a: f64, x: ArrayViewD<'_, f64>, y: ArrayViewD<'_, f64>) -> ArrayD<f64> {
    a * &x + &y
}

fn mult(a: f64, mut x: ArrayViewMutD<'_, f64>) {
    x *= a;
}

fn conj(x: ArrayViewD<'_, Complex64>) -> ArrayD<Complex64> {
    x.map(|c| c.conj())
}

fn generic_add<T: Copy + Add<Output = T>>(x: ArrayView1<'_, T>, y: ArrayView1<'_, T>) -> Array1<T> {
    &x + &y
}

// --- rust-numpy, as its examples write them ---

/// examples/simple `axpy`.
#[pyfunction(name = "numpy_simple_axpy")]
fn numpy_axpy_py<'py>(
    py: Python<'py>,
    a: f64,
    x: PyReadonlyArrayDyn<'py, f64>,
    y: PyReadonlyArrayDyn<'py, f64>,
) -> Bound<'py, PyArrayDyn<f64>> {
    axpy(a, x.as_array(), y.as_array()).into_pyarray(py)
}

/// examples/simple `mult` (a checked `PyReadwriteArrayDyn`, where the README's is unsafe).
#[pyfunction(name = "numpy_simple_mult")]
fn numpy_mult_py(a: f64, mut x: PyReadwriteArrayDyn<'_, f64>) {
    mult(a, x.as_array_mut());
}

/// examples/simple `conj`.
#[pyfunction(name = "numpy_conj")]
fn numpy_conj_py<'py>(py: Python<'py>, x: PyReadonlyArrayDyn<'py, Complex64>) -> Bound<'py, PyArrayDyn<Complex64>> {
    conj(x.as_array()).into_pyarray(py)
}

/// examples/simple `extract`: an array from a dict.
#[pyfunction]
fn numpy_extract(d: &Bound<'_, PyDict>) -> f64 {
    let x = d.get_item("x").unwrap().unwrap().cast_into::<PyArray1<f64>>().unwrap();
    x.readonly().as_array().sum()
}

#[derive(FromPyObject)]
enum NumpySupportedArray<'py> {
    F64(Bound<'py, PyArray1<f64>>),
    I64(Bound<'py, PyArray1<i64>>),
}

/// examples/simple `polymorphic_add`: an enum of typed arrays, one generic function.
#[pyfunction]
fn numpy_polymorphic_add<'py>(x: NumpySupportedArray<'py>, y: NumpySupportedArray<'py>) -> PyResult<Bound<'py, PyAny>> {
    use NumpySupportedArray::{F64, I64};
    match (x, y) {
        (F64(x), F64(y)) => {
            Ok(generic_add(x.readonly().as_array(), y.readonly().as_array()).into_pyarray(x.py()).into_any())
        }
        (I64(x), I64(y)) => {
            Ok(generic_add(x.readonly().as_array(), y.readonly().as_array()).into_pyarray(x.py()).into_any())
        }
        (F64(x), I64(y)) | (I64(y), F64(x)) => {
            let y = y.cast_array::<f64>(false)?;
            Ok(generic_add(x.readonly().as_array(), y.readonly().as_array()).into_pyarray(x.py()).into_any())
        }
    }
}

/// examples/parallel `rows_dot`: one dot product per row, on rayon's threads.
#[pyfunction]
fn numpy_rows_dot<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f64>,
    y: PyReadonlyArray1<'py, f64>,
) -> Bound<'py, PyArray1<f64>> {
    let (x, y) = (x.as_array(), y.as_array());
    Zip::from(x.rows()).par_map_collect(|row| row.dot(&y)).into_pyarray(py)
}

// --- amso's ports: any framework in, the caller's framework out ---

/// `axpy`: results in the caller's framework.
#[pyfunction(name = "amso_axpy")]
fn amso_axpy_py<'py>(a: f64, x: ArrayRefDyn<'py, f64>, y: ArrayRefDyn<'py, f64>) -> PyResult<Bound<'py, PyAny>> {
    x.output(axpy(a, x.as_array()?, y.as_array()?))
}

/// `mult`: the mutable borrow checked at extraction.
#[pyfunction(name = "amso_mult")]
fn amso_mult_py(a: f64, mut x: ArrayMutDyn<'_, f64>) -> PyResult<()> {
    mult(a, x.as_array_mut()?);
    Ok(())
}

/// `conj`: NumPy's complex128 is `num_complex::Complex<f64>`, named `dtypes::complex128`
/// (rust-numpy's `Complex64`), no crate of one's own needed.
#[pyfunction(name = "amso_conj")]
fn amso_conj_py(x: ArrayRefDyn<'_, complex128>) -> PyResult<Bound<'_, PyAny>> {
    x.output(conj(x.as_array()?))
}

/// `extract`: a typed argument is `FromPyObject`, so a dict's value extracts as one.
#[pyfunction]
fn amso_extract(d: &Bound<'_, PyDict>) -> PyResult<f64> {
    let x = d.get_item("x")?.ok_or_else(|| PyKeyError::new_err("x"))?;
    let x = x.extract::<ArrayRef<'_, f64, 1>>()?;
    Ok(x.as_array()?.sum())
}

/// The same enum over amso's typed arguments: each variant takes any framework's arrays.
#[derive(FromPyObject)]
enum AmsoSupportedArray<'py> {
    F64(ArrayRef<'py, f64, 1>),
    I64(ArrayRef<'py, i64, 1>),
}

/// `polymorphic_add`: amso has no dtype cast of its own here, so the mixed case converts the
/// int64 view in Rust (`mapv`).
#[pyfunction]
fn amso_polymorphic_add<'py>(x: AmsoSupportedArray<'py>, y: AmsoSupportedArray<'py>) -> PyResult<Bound<'py, PyAny>> {
    use AmsoSupportedArray::{F64, I64};
    match (x, y) {
        (F64(x), F64(y)) => x.output(generic_add(x.as_array()?, y.as_array()?)),
        (I64(x), I64(y)) => x.output(generic_add(x.as_array()?, y.as_array()?)),
        (F64(x), I64(y)) | (I64(y), F64(x)) => {
            let y = y.as_array()?.mapv(|v| v as f64);
            x.output(generic_add(x.as_array()?, y.view()))
        }
    }
}

/// `rows_dot`: the same `par_map_collect`, with the GIL released while rayon works.
#[pyfunction]
fn amso_rows_dot<'py>(x: ArrayRef<'py, f64, 2>, y: ArrayRef<'py, f64, 1>) -> PyResult<Bound<'py, PyAny>> {
    let (rows, column) = (x.as_array()?, y.as_array()?);
    let dots = x.object().py().detach(|| Zip::from(rows.rows()).par_map_collect(|row| row.dot(&column)));
    x.output(dots)
}

pub(crate) fn add(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(numpy_axpy_py, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_mult_py, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_conj_py, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_extract, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_polymorphic_add, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_rows_dot, module)?)?;
    module.add_function(wrap_pyfunction!(amso_axpy_py, module)?)?;
    module.add_function(wrap_pyfunction!(amso_mult_py, module)?)?;
    module.add_function(wrap_pyfunction!(amso_conj_py, module)?)?;
    module.add_function(wrap_pyfunction!(amso_extract, module)?)?;
    module.add_function(wrap_pyfunction!(amso_polymorphic_add, module)?)?;
    module.add_function(wrap_pyfunction!(amso_rows_dot, module)?)
}
