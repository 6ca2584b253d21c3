//! The same functions over NumPy arrays, written once against amso and once against
//! rust-numpy (the `numpy` crate), in one extension module: the benchmark report times them
//! side by side in one process, and the tests check that both give the same results.
//!
//! Each pair does the same work: nothing (the cost of reading the arguments), a sum, an
//! in-place scale, and a new 1-D float64 result handed to NumPy without a copy. rust-numpy's
//! README examples `axpy` and `mult` are here as its README writes them; their amso port is
//! `examples/rust/numpy-readme`.

mod conversions;
mod hook_floor;
mod linalg;

use amso_runtime::ndarray::{ArrayD, ArrayViewD, ArrayViewMutD};
use amso_runtime::python::{ArrayMut, ArrayRef, Framework, IntoFramework};
use numpy::{
    IntoPyArray, PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray2, PyReadonlyArrayDyn, PyReadwriteArray2,
};
use pyo3::prelude::*;

mod kinds;
mod port_tests;
mod ported;
mod records;
mod vectors;

// --- PyO3 alone: the floor under both ---

/// Take one argument as it comes and do nothing: the cost of the call itself.
#[pyfunction]
fn pyo3_noop1(_a: &Bound<'_, PyAny>) {}

/// Take three arguments as they come and do nothing.
#[pyfunction]
fn pyo3_noop3(_a: &Bound<'_, PyAny>, _b: &Bound<'_, PyAny>, _c: &Bound<'_, PyAny>) {}

// --- amso ---

/// Read one float32 2-D argument and do nothing.
#[pyfunction]
fn amso_noop1(_a: ArrayRef<'_, f32, 2>) {}

/// Read three float32 2-D arguments and do nothing.
#[pyfunction]
fn amso_noop3(_a: ArrayRef<'_, f32, 2>, _b: ArrayRef<'_, f32, 2>, _c: ArrayRef<'_, f32, 2>) {}

/// The sum of a float32 2-D array, in float64.
#[pyfunction]
fn amso_sum(a: ArrayRef<'_, f32, 2>) -> PyResult<f64> {
    Ok(a.as_array()?.iter().map(|&x| x as f64).sum())
}

/// Multiply a float32 2-D array by `by`, in place.
#[pyfunction]
fn amso_scale(mut a: ArrayMut<'_, f32, 2>, by: f32) -> PyResult<()> {
    a.as_array_mut()?.map_inplace(|x| *x *= by);
    Ok(())
}

/// `0.0, 1.0, ..., n - 1` as a new NumPy array that owns the Rust vector.
#[pyfunction]
fn amso_arange(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    (0..n).map(|i| i as f64).collect::<Vec<f64>>().into_framework(py, Framework::NumPy)
}

// --- rust-numpy ---

/// Read one float32 2-D argument and do nothing.
#[pyfunction]
fn numpy_noop1(_a: PyReadonlyArray2<'_, f32>) {}

/// Read three float32 2-D arguments and do nothing.
#[pyfunction]
fn numpy_noop3(_a: PyReadonlyArray2<'_, f32>, _b: PyReadonlyArray2<'_, f32>, _c: PyReadonlyArray2<'_, f32>) {}

/// The sum of a float32 2-D array, in float64.
#[pyfunction]
fn numpy_sum(a: PyReadonlyArray2<'_, f32>) -> f64 {
    a.as_array().iter().map(|&x| x as f64).sum()
}

/// Multiply a float32 2-D array by `by`, in place.
#[pyfunction]
fn numpy_scale(mut a: PyReadwriteArray2<'_, f32>, by: f32) {
    a.as_array_mut().map_inplace(|x| *x *= by);
}

/// `0.0, 1.0, ..., n - 1` as a new NumPy array that owns the Rust vector.
#[pyfunction]
fn numpy_arange(py: Python<'_>, n: usize) -> Bound<'_, PyArray1<f64>> {
    (0..n).map(|i| i as f64).collect::<Vec<f64>>().into_pyarray(py)
}

fn axpy(a: f64, x: ArrayViewD<'_, f64>, y: ArrayViewD<'_, f64>) -> ArrayD<f64> {
    a * &x + &y
}

fn mult(a: f64, mut x: ArrayViewMutD<'_, f64>) {
    x *= a;
}

/// rust-numpy's README `axpy`, as its README writes it.
#[pyfunction(name = "numpy_axpy")]
fn numpy_axpy_py<'py>(
    py: Python<'py>,
    a: f64,
    x: PyReadonlyArrayDyn<'py, f64>,
    y: PyReadonlyArrayDyn<'py, f64>,
) -> Bound<'py, PyArrayDyn<f64>> {
    axpy(a, x.as_array(), y.as_array()).into_pyarray(py)
}

/// rust-numpy's README `mult`, as its README writes it (an unchecked mutable view).
#[pyfunction(name = "numpy_mult")]
fn numpy_mult_py(a: f64, x: &Bound<'_, PyArrayDyn<f64>>) {
    // SAFETY: rust-numpy's README example; the tests pass arrays nothing else views meanwhile.
    let x = unsafe { x.as_array_mut() };
    mult(a, x);
}

#[pymodule]
fn amso_peers(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(pyo3_noop1, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::set_floor_block, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::floor_cupy_functions, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::floor_cupy_stream_functions, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::time_torch_pairs, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::time_torch_pairs_cold, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::forward_torch_to, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::torch_floor_functions, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::torch_floor_capture_functions, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::floor_cupy_stream_capture_functions, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::timed_torch_total, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::set_floor_rmw, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::least_torch_functions, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::least_torch_capture_functions, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::least_cupy_functions, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::floor_numba_lend, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::least_numba_lend, module)?)?;
    module.add_function(wrap_pyfunction!(hook_floor::numba_barrier_failures, module)?)?;
    module.add_class::<hook_floor::NumbaLoan>()?;
    module.add_function(wrap_pyfunction!(pyo3_noop3, module)?)?;
    module.add_function(wrap_pyfunction!(amso_noop1, module)?)?;
    module.add_function(wrap_pyfunction!(amso_noop3, module)?)?;
    module.add_function(wrap_pyfunction!(amso_sum, module)?)?;
    module.add_function(wrap_pyfunction!(amso_scale, module)?)?;
    module.add_function(wrap_pyfunction!(amso_arange, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_noop1, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_noop3, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_sum, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_scale, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_arange, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_axpy_py, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_mult_py, module)?)?;
    kinds::add(module)?;
    records::add(module)?;
    vectors::add(module)?;
    conversions::register(module)?;
    linalg::register(module)?;
    ported::add(module)?;
    port_tests::add(module)
}
