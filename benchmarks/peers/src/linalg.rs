//! nalgebra and faer over typed arguments, against NumPy's `@` in the tests, and nalgebra's
//! matrix-vector product against rust-numpy's `try_as_matrix` in the benchmark report.

use amso_runtime::nalgebra::{self, DMatrix, DVector, Dyn};
use amso_runtime::ndarray::Array2;
use amso_runtime::python::{ArrayMut, ArrayRef};
use numpy::{PyReadonlyArray1, PyReadonlyArray2, ToPyArray};
use pyo3::prelude::*;

/// `a @ b` through nalgebra views of the arguments, the product handed back as nalgebra made it
/// (a Fortran-order array over the matrix's own buffer).
#[pyfunction]
fn nalgebra_matmul<'py>(a: ArrayRef<'py, f64, 2>, b: ArrayRef<'py, f64, 2>) -> PyResult<Bound<'py, PyAny>> {
    let product: DMatrix<f64> = a.as_matrix()? * b.as_matrix()?;
    a.output(product)
}

/// `a @ x`: a matrix view times a column-vector view, the result a nalgebra vector handed back.
#[pyfunction]
fn nalgebra_matvec<'py>(a: ArrayRef<'py, f64, 2>, x: ArrayRef<'py, f64, 1>) -> PyResult<Bound<'py, PyAny>> {
    let product: DVector<f64> = a.as_matrix()? * x.as_vector()?;
    a.output(product)
}

/// rust-numpy's `a @ x` over its own views: `try_as_matrix` with dynamic strides (a Fortran-order
/// argument: nalgebra's products are sound over views whose row stride is 1, nalgebra #1616),
/// the vector a rust-numpy array (`to_pyarray` of the nalgebra result).
#[pyfunction]
fn numpy_nalgebra_matvec<'py>(
    py: Python<'py>,
    a: PyReadonlyArray2<'py, f64>,
    x: PyReadonlyArray1<'py, f64>,
) -> PyResult<Bound<'py, numpy::PyArray1<f64>>> {
    let refused = || pyo3::exceptions::PyValueError::new_err("not a Fortran-order matrix and a contiguous vector");
    let matrix: nalgebra::MatrixView<'_, f64, Dyn, Dyn, Dyn, Dyn> = a.try_as_matrix().ok_or_else(refused)?;
    let vector: nalgebra::MatrixView<'_, f64, Dyn, nalgebra::U1, Dyn, Dyn> = x.try_as_matrix().ok_or_else(refused)?;
    if matrix.strides().0 != 1 || vector.strides().0 != 1 {
        return Err(refused());
    }
    let product = matrix * vector;
    Ok(product.as_slice().to_pyarray(py))
}

/// The trace and the sum of a 3x3 int32 matrix, through a fixed-size view.
#[pyfunction]
fn nalgebra_fixed3(a: ArrayRef<'_, i32, 2>) -> PyResult<(i32, i32)> {
    let matrix = a.as_smatrix::<3, 3>()?;
    Ok((matrix.trace(), matrix.sum()))
}

/// A 3-vector doubled in place through a writable fixed-size view; its norm before.
#[pyfunction]
fn nalgebra_svector_double(mut x: ArrayMut<'_, f64, 1>) -> PyResult<f64> {
    let mut vector = x.as_svector_mut::<3>()?;
    let norm = vector.norm();
    vector *= 2.0;
    Ok(norm)
}

/// `a[:, 0] += v` through a writable fixed-size 2x2 view and a fixed-size 2-vector view.
#[pyfunction]
fn nalgebra_add_to_first_column(mut a: ArrayMut<'_, f64, 2>, v: ArrayRef<'_, f64, 1>) -> PyResult<()> {
    let v = v.as_svector::<2>()?;
    let mut matrix = a.as_smatrix_mut::<2, 2>()?;
    matrix.column_mut(0).zip_apply(&v, |x, y| *x += y);
    Ok(())
}

/// `x *= 2` through a writable nalgebra view.
#[pyfunction]
fn nalgebra_double(mut x: ArrayMut<'_, f64, 2>) -> PyResult<()> {
    let mut matrix = x.as_matrix_mut()?;
    matrix *= 2.0;
    Ok(())
}

/// `x += y` through a writable column-vector view and a read-only one (nalgebra's `axpy`, the
/// call nalgebra #1616 is about).
#[pyfunction]
fn nalgebra_axpy(mut x: ArrayMut<'_, f64, 1>, y: ArrayRef<'_, f64, 1>) -> PyResult<()> {
    let y = y.as_vector()?;
    x.as_vector_mut()?.axpy(1.0, &y, 1.0);
    Ok(())
}

/// rust-numpy's `matrix_to_numpy` (tests/to_py.rs), ported: a `Matrix3`, its first row (a view,
/// owned first), a `Vector4` and a `RowVector2`, each handed to NumPy.
#[pyfunction]
fn nalgebra_matrix_to_numpy(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyAny>>> {
    use amso_runtime::python::{Framework, IntoFramework};
    let matrix = nalgebra::Matrix3::<i32>::new(0, 1, 2, 3, 4, 5, 6, 7, 8);
    Ok(vec![
        matrix.into_framework(py, Framework::NumPy)?,
        matrix.row(0).clone_owned().into_framework(py, Framework::NumPy)?,
        nalgebra::Vector4::<i32>::new(-4, 1, 2, 3).into_framework(py, Framework::NumPy)?,
        nalgebra::RowVector2::<i32>::new(23, 42).into_framework(py, Framework::NumPy)?,
    ])
}

/// `a @ b` through faer views of the arguments.
#[pyfunction]
fn faer_matmul<'py>(a: ArrayRef<'py, f64, 2>, b: ArrayRef<'py, f64, 2>) -> PyResult<Bound<'py, PyAny>> {
    let product = a.as_faer()? * b.as_faer()?;
    let rows = Array2::from_shape_fn((product.nrows(), product.ncols()), |(i, j)| product[(i, j)]);
    a.output(rows)
}

/// `x[i, j] += 10 * i + j` through a writable faer view.
#[pyfunction]
fn faer_add_index(mut x: ArrayMut<'_, f64, 2>) -> PyResult<()> {
    let mut matrix = x.as_faer_mut()?;
    for i in 0..matrix.nrows() {
        for j in 0..matrix.ncols() {
            matrix[(i, j)] += (10 * i + j) as f64;
        }
    }
    Ok(())
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    for function in [
        wrap_pyfunction!(nalgebra_matmul, module)?,
        wrap_pyfunction!(nalgebra_matvec, module)?,
        wrap_pyfunction!(numpy_nalgebra_matvec, module)?,
        wrap_pyfunction!(nalgebra_fixed3, module)?,
        wrap_pyfunction!(nalgebra_svector_double, module)?,
        wrap_pyfunction!(nalgebra_add_to_first_column, module)?,
        wrap_pyfunction!(nalgebra_double, module)?,
        wrap_pyfunction!(nalgebra_axpy, module)?,
        wrap_pyfunction!(nalgebra_matrix_to_numpy, module)?,
        wrap_pyfunction!(faer_matmul, module)?,
        wrap_pyfunction!(faer_add_index, module)?,
    ] {
        module.add_function(function)?;
    }
    Ok(())
}
