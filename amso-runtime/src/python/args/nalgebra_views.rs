//! nalgebra over typed arguments (the `nalgebra` feature), as rust-numpy's `try_as_matrix`:
//! matrix views of 2-D arguments and column-vector views of 1-D ones, dynamic or fixed-size,
//! read-only or writable, over the argument's host memory in place; and nalgebra's owned
//! matrices and vectors handed to the caller's framework without a copy (`IntoFramework`).
//!
//! nalgebra takes non-negative strides only, so a reversed view (`x[::-1]`) is refused. And
//! nalgebra 0.35's own products (`*`, `gemv`, `axpy`) read and write out of bounds over a view
//! whose row stride is not 1 (nalgebra issue #1616, open): such views (C order, row slices of
//! Fortran order, strided vectors) are refused too: amso hands out no such view (views nalgebra
//! derives from one, such as `rows_with_step`, are nalgebra's). A misaligned array is viewed
//! through its aligned copy, which is in C order, so a misaligned matrix of more than one row is
//! refused, with a hint to make an aligned Fortran-order copy.

use nalgebra::{Const, Dim, Dyn, Matrix, Scalar, ViewStorage, ViewStorageMut, U1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::results::{Framework, IntoFramework};
use crate::element::{ArrayElement, Element};
use crate::python::args::{Access, Rank, TypedArray, Write};

/// A read-only view: `R` x `C` elements, rows one element apart, columns `CS` apart.
type View<'a, T, R, C, CS> = Matrix<T, R, C, ViewStorage<'a, T, R, C, U1, CS>>;
/// A writable view (see `View`).
type ViewMut<'a, T, R, C, CS> = Matrix<T, R, C, ViewStorageMut<'a, T, R, C, U1, CS>>;

/// The column stride of a view of `rows` rows with element strides `strides` (`shown` in the
/// message): refused unless rows are one element apart and no stride is negative (module doc).
fn column_stride(rows: usize, strides: [isize; 2], shown: &[isize]) -> Result<usize, String> {
    match (usize::try_from(strides[0]), usize::try_from(strides[1])) {
        (Ok(row), Ok(_)) if row != 1 && rows > 1 => Err(format!(
            "a nalgebra view needs a row stride of 1 (Fortran order, or a contiguous vector): nalgebra 0.35's \
             products read and write out of bounds over other views (nalgebra issue #1616); this array has strides \
             {shown:?}; pass np.asfortranarray(x), or use as_faer()"
        )),
        (Ok(_), Ok(column)) => Ok(column),
        _ => Err(format!(
            "a nalgebra view needs non-negative strides; this array has strides {shown:?} (a reversed view); pass \
             np.ascontiguousarray(x), or use as_faer()"
        )),
    }
}

/// A fixed-size view's check: the array is `R` x `C` (`shape` in the message).
fn fixed_size<const R: usize, const C: usize>(rows: usize, columns: usize, shape: &[usize]) -> Result<(), String> {
    if (rows, columns) == (R, C) {
        return Ok(());
    }
    let wanted = if shape.len() == 1 { format!("a vector of {R} elements") } else { format!("a {R}x{C} matrix") };
    Err(format!(
        "expected {wanted} for this fixed-size nalgebra view, got an array of shape {shape:?}; pass one of that \
         shape, or take the dynamic view (as_matrix() / as_vector())"
    ))
}

/// A view over `data` of `shape`, with (row, column) `strides`.
///
/// # Safety
/// Every (row, column) of the shape reaches, through these strides, an initialised, aligned
/// element that `data` borrows (shared) for `'a`.
unsafe fn view<'a, T: Scalar, R: Dim, C: Dim, RS: Dim, CS: Dim>(
    data: *const T,
    shape: (R, C),
    strides: (RS, CS),
) -> Matrix<T, R, C, ViewStorage<'a, T, R, C, RS, CS>> {
    // SAFETY: the caller's.
    Matrix::from_data(unsafe { ViewStorage::from_raw_parts(data, shape, strides) })
}

/// A writable view (see `view`).
///
/// # Safety
/// As `view`; the strides reach no element twice and the borrow is exclusive.
unsafe fn view_mut<'a, T: Scalar, R: Dim, C: Dim, RS: Dim, CS: Dim>(
    data: *mut T,
    shape: (R, C),
    strides: (RS, CS),
) -> Matrix<T, R, C, ViewStorageMut<'a, T, R, C, RS, CS>> {
    // SAFETY: the caller's.
    Matrix::from_data(unsafe { ViewStorageMut::from_raw_parts(data, shape, strides) })
}

impl<T: Element, A: Access> TypedArray<'_, T, Rank<2>, A> {
    /// (rows, columns, column stride) of a matrix view.
    fn matrix_layout(&self) -> PyResult<(usize, usize, usize)> {
        let [rows, columns] = self.shape;
        let column = column_stride(rows, self.strides, self.strides()).map_err(|message| {
            let hint = match self.misaligned() {
                // The strides are the aligned copy's (C order), whatever the producer's were.
                true => {
                    " (a misaligned array is viewed through an aligned C-order copy: pass \
                         np.require(x, requirements=\"FA\"), an aligned Fortran-order copy)"
                }
                false => "",
            };
            PyValueError::new_err(format!("{message}{hint}"))
        })?;
        Ok((rows, columns, column))
    }
}

impl<T: Element, A: Access> TypedArray<'_, T, Rank<1>, A> {
    /// (rows, 1, column stride) of a column-vector view.
    fn vector_layout(&self) -> PyResult<(usize, usize, usize)> {
        let rows = self.shape[0];
        Ok((
            rows,
            1,
            column_stride(rows, [self.strides[0], rows.max(1) as isize], self.strides())
                .map_err(PyValueError::new_err)?,
        ))
    }
}

impl<T: Element + Scalar, A: Access> TypedArray<'_, T, Rank<2>, A> {
    /// A nalgebra view of host data (`nrows = shape[0]`, `ncols = shape[1]`) in Fortran order
    /// (module doc); a `ValueError` for device data, other layouts or negative strides.
    pub fn as_matrix(&self) -> PyResult<nalgebra::MatrixView<'_, T, Dyn, Dyn, Dyn, Dyn>> {
        let (rows, columns, column) = self.matrix_layout()?;
        let data = self.host_ptr()?;
        // SAFETY: every (row, column) of the shape reaches, through the argument's strides, an
        // initialised, aligned element of host memory this argument holds and borrows (shared)
        // for the view's life (checked at extraction); rows are one element apart.
        Ok(unsafe { view(data.cast_const(), (Dyn(rows), Dyn(columns)), (Dyn(1), Dyn(column))) })
    }

    /// A fixed-size view, `R` x `C` (nalgebra's `Const` dimensions), as `as_matrix`; a
    /// `ValueError` naming both shapes when the array has another.
    pub fn as_smatrix<const R: usize, const C: usize>(&self) -> PyResult<View<'_, T, Const<R>, Const<C>, Dyn>> {
        let (rows, columns, column) = self.matrix_layout()?;
        fixed_size::<R, C>(rows, columns, self.shape()).map_err(PyValueError::new_err)?;
        let data = self.host_ptr()?;
        // SAFETY: as `as_matrix`, with the shape checked to be R x C.
        Ok(unsafe { view(data.cast_const(), (Const::<R>, Const::<C>), (U1, Dyn(column))) })
    }
}

impl<T: Element + Scalar> TypedArray<'_, T, Rank<2>, Write> {
    /// A writable nalgebra view of host data (see `as_matrix`).
    pub fn as_matrix_mut(&mut self) -> PyResult<nalgebra::MatrixViewMut<'_, T, Dyn, Dyn, Dyn, Dyn>> {
        let (rows, columns, column) = self.matrix_layout()?;
        let data = self.host_ptr_mut()?;
        // SAFETY: as `as_matrix`; the strides reach no element twice (checked at extraction for
        // writable arguments) and the borrow registered then is exclusive.
        Ok(unsafe { view_mut(data, (Dyn(rows), Dyn(columns)), (Dyn(1), Dyn(column))) })
    }

    /// A writable fixed-size view (see `as_smatrix`).
    pub fn as_smatrix_mut<const R: usize, const C: usize>(
        &mut self,
    ) -> PyResult<ViewMut<'_, T, Const<R>, Const<C>, Dyn>> {
        let (rows, columns, column) = self.matrix_layout()?;
        fixed_size::<R, C>(rows, columns, self.shape()).map_err(PyValueError::new_err)?;
        let data = self.host_ptr_mut()?;
        // SAFETY: as `as_matrix_mut`, with the shape checked to be R x C.
        Ok(unsafe { view_mut(data, (Const::<R>, Const::<C>), (U1, Dyn(column))) })
    }
}

impl<T: Element + Scalar, A: Access> TypedArray<'_, T, Rank<1>, A> {
    /// A nalgebra column vector over a contiguous 1-D array's host data (nalgebra's
    /// `DVectorView`); a `ValueError` for device data, a strided or a reversed array.
    pub fn as_vector(&self) -> PyResult<nalgebra::DVectorView<'_, T>> {
        let (rows, _, column) = self.vector_layout()?;
        let data = self.host_ptr()?;
        // SAFETY: as `as_matrix`: one column of `rows` contiguous elements.
        Ok(unsafe { view(data.cast_const(), (Dyn(rows), U1), (U1, Dyn(column))) })
    }

    /// A fixed-size column vector of `N` elements (nalgebra's `SVectorView`), as `as_vector`; a
    /// `ValueError` naming both lengths when the array has another.
    pub fn as_svector<const N: usize>(&self) -> PyResult<nalgebra::SVectorView<'_, T, N>> {
        let (rows, columns, _) = self.vector_layout()?;
        fixed_size::<N, 1>(rows, columns, self.shape()).map_err(PyValueError::new_err)?;
        let data = self.host_ptr()?;
        // SAFETY: as `as_vector`, with the length checked to be N.
        Ok(unsafe { view(data.cast_const(), (Const::<N>, Const::<1>), (Const::<1>, Const::<N>)) })
    }
}

impl<T: Element + Scalar> TypedArray<'_, T, Rank<1>, Write> {
    /// A writable column vector (see `as_vector`).
    pub fn as_vector_mut(&mut self) -> PyResult<nalgebra::DVectorViewMut<'_, T>> {
        let (rows, _, column) = self.vector_layout()?;
        let data = self.host_ptr_mut()?;
        // SAFETY: as `as_matrix_mut`: one column of `rows` contiguous elements.
        Ok(unsafe { view_mut(data, (Dyn(rows), U1), (U1, Dyn(column))) })
    }

    /// A writable fixed-size column vector (see `as_svector`).
    pub fn as_svector_mut<const N: usize>(&mut self) -> PyResult<nalgebra::SVectorViewMut<'_, T, N>> {
        let (rows, columns, _) = self.vector_layout()?;
        fixed_size::<N, 1>(rows, columns, self.shape()).map_err(PyValueError::new_err)?;
        let data = self.host_ptr_mut()?;
        // SAFETY: as `as_vector_mut`, with the length checked to be N.
        Ok(unsafe { view_mut(data, (Const::<N>, Const::<1>), (Const::<1>, Const::<N>)) })
    }
}

/// A nalgebra matrix goes to the framework as a Fortran-order array over its own buffer (no
/// copy): `shape` is `(nrows, ncols)`.
impl<T: ArrayElement + Scalar> IntoFramework for nalgebra::DMatrix<T> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let (rows, columns) = self.shape();
        let elements: Vec<T> = self.data.into();
        super::results::fortran_order(py, elements, [rows, columns], framework)
    }
}

/// A nalgebra column vector goes to the framework as a 1-D array over its own buffer (no copy).
impl<T: ArrayElement + Scalar> IntoFramework for nalgebra::DVector<T> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let elements: Vec<T> = self.data.into();
        elements.into_framework(py, framework)
    }
}

/// A fixed-size nalgebra matrix (its elements inline) goes to the framework as a Fortran-order
/// copy of shape `(R, C)`; a column vector (`SVector`, `C` = 1) as a 1-D copy, as a `DVector`
/// goes (rust-numpy's `to_pyarray` gives `(R, 1)`).
impl<T: ArrayElement + Scalar, const R: usize, const C: usize> IntoFramework for nalgebra::SMatrix<T, R, C> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let elements: Vec<T> = self.as_slice().to_vec();
        if C == 1 {
            return elements.into_framework(py, framework);
        }
        super::results::fortran_order(py, elements, [R, C], framework)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The views amso hands out, over a Fortran-order 3x4 buffer and a column slice of it, in
    /// nalgebra's product and `axpy` (the calls of nalgebra #1616): exact, and within the buffer
    /// (Miri: `cargo +nightly miri test -p amso-runtime --features nalgebra --lib -- nalgebra`).
    #[test]
    fn nalgebra_views_multiply_within_their_memory() {
        let elements: Vec<f64> = (0..12).map(f64::from).collect(); // column j is 3j, 3j+1, 3j+2
        let column = column_stride(3, [1, 3], &[1, 3]).unwrap();
        // SAFETY: 3 x 4 elements, rows one apart, columns 3 apart, within `elements`.
        let a: View<'_, f64, Dyn, Dyn, Dyn> = unsafe { view(elements.as_ptr(), (Dyn(3), Dyn(4)), (U1, Dyn(column))) };
        let x = [1.0, 0.0, -1.0, 2.0];
        // SAFETY: 4 contiguous elements of `x`.
        let x: View<'_, f64, Dyn, U1, Dyn> = unsafe { view(x.as_ptr(), (Dyn(4), U1), (U1, Dyn(4))) };
        let y = a * x;
        assert_eq!(y.as_slice(), &[0.0 - 6.0 + 18.0, 1.0 - 7.0 + 20.0, 2.0 - 8.0 + 22.0]);
        // Every other column: columns 6 apart.
        // SAFETY: 3 x 2 elements, columns 6 apart, within `elements`.
        let odd: View<'_, f64, Dyn, Dyn, Dyn> = unsafe { view(elements.as_ptr(), (Dyn(3), Dyn(2)), (U1, Dyn(6))) };
        assert_eq!((odd * nalgebra::DVector::from_vec(vec![1.0, 1.0])).as_slice(), &[6.0, 8.0, 10.0]);
        let mut target = vec![0.0; 5];
        {
            // SAFETY: the first 3 of `target`'s elements, borrowed exclusively here.
            let mut y: ViewMut<'_, f64, Dyn, U1, Dyn> =
                unsafe { view_mut(target.as_mut_ptr(), (Dyn(3), U1), (U1, Dyn(3))) };
            y.axpy(2.0, &a.column(1), 1.0);
        }
        assert_eq!(target, [6.0, 8.0, 10.0, 0.0, 0.0]);
    }

    #[test]
    fn other_layouts_and_sizes_are_refused() {
        assert!(column_stride(3, [4, 1], &[4, 1]).unwrap_err().contains("nalgebra issue #1616"));
        assert!(column_stride(3, [-1, 3], &[-1, 3]).unwrap_err().contains("non-negative"));
        assert_eq!(column_stride(1, [7, 1], &[7, 1]).unwrap(), 1); // one row: its stride is never used
        assert!(fixed_size::<3, 3>(3, 3, &[3, 3]).is_ok());
        let message = fixed_size::<3, 3>(2, 3, &[2, 3]).unwrap_err();
        assert!(message.contains("expected a 3x3 matrix") && message.contains("[2, 3]"), "{message}");
        let message = fixed_size::<4, 1>(3, 1, &[3]).unwrap_err();
        assert!(message.contains("a vector of 4 elements"), "{message}");
    }
}
