//! Linear algebra views of 2-D typed arguments: nalgebra matrices (the `nalgebra` feature, as
//! rust-numpy's `try_as_matrix`) and faer matrices (the `faer` feature), over the argument's
//! host memory in place, in its layout (rows stepping by the first stride, columns by the
//! second). A misaligned array is viewed through its aligned copy, as every host view is.

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;

use crate::element::Element;
use crate::python::args::{Access, Rank, TypedArray, Write};

impl<T: Element, A: Access> TypedArray<'_, T, Rank<2>, A> {
    /// nalgebra needs non-negative strides; a reversed view (`x[::-1]`) is refused. And
    /// nalgebra 0.35's own products (`*`, `gemv`, `axpy`) read and write out of bounds over a
    /// view whose row stride is not 1 (nalgebra issue #1616, open): such views (C order, row
    /// slices of Fortran order) are refused too, so that no safe call on a view amso hands out
    /// can corrupt memory.
    #[cfg(feature = "nalgebra")]
    fn unsigned_strides(&self) -> PyResult<(usize, usize)> {
        match (usize::try_from(self.strides[0]), usize::try_from(self.strides[1])) {
            (Ok(rows), Ok(_)) if rows != 1 && self.shape[0] > 1 => Err(PyValueError::new_err(format!(
                "a nalgebra view needs a row stride of 1 (Fortran order): nalgebra 0.35's products read and write out \
                 of bounds over other views (nalgebra issue #1616); this array has strides {:?}; pass \
                 np.asfortranarray(x), or use as_faer()",
                self.strides()
            ))),
            (Ok(rows), Ok(columns)) => Ok((rows, columns)),
            _ => Err(PyValueError::new_err(format!(
                "a nalgebra view needs non-negative strides; this array has strides {:?} (a reversed view); pass \
                 np.ascontiguousarray(x), or use as_faer()",
                self.strides()
            ))),
        }
    }

    /// A nalgebra view of host data (`nrows = shape[0]`, `ncols = shape[1]`, in the array's
    /// layout: C order, Fortran order and strided views alike); a `ValueError` for device data
    /// or negative strides.
    #[cfg(feature = "nalgebra")]
    pub fn as_matrix(
        &self,
    ) -> PyResult<nalgebra::MatrixView<'_, T, nalgebra::Dyn, nalgebra::Dyn, nalgebra::Dyn, nalgebra::Dyn>>
    where
        T: nalgebra::Scalar,
    {
        let data = self.host_ptr()?;
        let (row_stride, column_stride) = self.unsigned_strides()?;
        let [rows, columns] = self.shape;
        use nalgebra::Dyn;
        // SAFETY: every (row, column) of the shape reaches, through these strides, an
        // initialised, aligned element of host memory this argument holds and borrows (shared)
        // for the view's life (checked at extraction).
        let storage = unsafe {
            nalgebra::ViewStorage::from_raw_parts(
                data.cast_const(),
                (Dyn(rows), Dyn(columns)),
                (Dyn(row_stride), Dyn(column_stride)),
            )
        };
        Ok(nalgebra::Matrix::from_data(storage))
    }

    /// A faer view of host data (rows and columns as `as_matrix`; negative strides allowed); a
    /// `ValueError` for device data.
    #[cfg(feature = "faer")]
    pub fn as_faer(&self) -> PyResult<faer::MatRef<'_, T>> {
        let data = self.host_ptr()?;
        let [rows, columns] = self.shape;
        // SAFETY: as `as_matrix`; faer takes signed strides.
        Ok(unsafe { faer::MatRef::from_raw_parts(data.cast_const(), rows, columns, self.strides[0], self.strides[1]) })
    }
}

impl<T: Element> TypedArray<'_, T, Rank<2>, Write> {
    /// A writable nalgebra view of host data (see `as_matrix`).
    #[cfg(feature = "nalgebra")]
    pub fn as_matrix_mut(
        &mut self,
    ) -> PyResult<nalgebra::MatrixViewMut<'_, T, nalgebra::Dyn, nalgebra::Dyn, nalgebra::Dyn, nalgebra::Dyn>>
    where
        T: nalgebra::Scalar,
    {
        let (row_stride, column_stride) = self.unsigned_strides()?;
        let data = self.host_ptr_mut()?;
        let [rows, columns] = self.shape;
        use nalgebra::Dyn;
        // SAFETY: as `as_matrix`; the strides reach no element twice (checked at extraction for
        // writable arguments) and the borrow registered then is exclusive.
        let storage = unsafe {
            nalgebra::ViewStorageMut::from_raw_parts(
                data,
                (Dyn(rows), Dyn(columns)),
                (Dyn(row_stride), Dyn(column_stride)),
            )
        };
        Ok(nalgebra::Matrix::from_data(storage))
    }

    /// A writable faer view of host data (see `as_faer`).
    #[cfg(feature = "faer")]
    pub fn as_faer_mut(&mut self) -> PyResult<faer::MatMut<'_, T>> {
        let data = self.host_ptr_mut()?;
        let [rows, columns] = self.shape;
        // SAFETY: as `as_matrix_mut`.
        Ok(unsafe { faer::MatMut::from_raw_parts_mut(data, rows, columns, self.strides[0], self.strides[1]) })
    }
}
