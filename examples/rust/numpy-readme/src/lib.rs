//! rust-numpy's README example, written with amso. The two functions take arrays of any
//! number of dimensions from any framework (NumPy, PyTorch, CuPy on the host, JAX, TVM-FFI,
//! amso); `axpy` returns its new array in the caller's framework without a copy, and `mult`
//! writes through a checked mutable view (rust-numpy's README needs `unsafe` there).

#[pyo3::pymodule]
mod amso_rust_ext {
    use amso_runtime::ndarray::{ArrayD, ArrayViewD, ArrayViewMutD};
    use amso_runtime::python::{ArrayMutDyn, ArrayRefDyn};
    use pyo3::prelude::*;

    // example using immutable borrows producing a new array
    fn axpy(a: f64, x: ArrayViewD<'_, f64>, y: ArrayViewD<'_, f64>) -> ArrayD<f64> {
        a * &x + &y
    }

    // example using a mutable borrow to modify an array in-place
    fn mult(a: f64, mut x: ArrayViewMutD<'_, f64>) {
        x *= a;
    }

    /// `a * x + y`, as a new array in the caller's framework (NumPy in, NumPy out).
    #[pyfunction(name = "axpy")]
    fn axpy_py<'py>(a: f64, x: ArrayRefDyn<'py, f64>, y: ArrayRefDyn<'py, f64>) -> PyResult<Bound<'py, PyAny>> {
        let z = axpy(a, x.as_array()?, y.as_array()?);
        x.output(z)
    }

    /// `x *= a`, in place.
    #[pyfunction(name = "mult")]
    fn mult_py(a: f64, mut x: ArrayMutDyn<'_, f64>) -> PyResult<()> {
        mult(a, x.as_array_mut()?);
        Ok(())
    }
}
