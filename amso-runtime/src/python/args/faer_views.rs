//! faer matrix views of 2-D typed arguments (the `faer` feature), over the argument's host
//! memory in place, in its layout (rows stepping by the first stride, columns by the second,
//! negative strides included). A misaligned array is viewed through its aligned copy, as every
//! host view is.

use pyo3::PyResult;

use crate::element::Element;
use crate::python::args::{Access, Rank, TypedArray, Write};

impl<T: Element, A: Access> TypedArray<'_, T, Rank<2>, A> {
    /// A faer view of host data (`nrows = shape[0]`, `ncols = shape[1]`, in the array's layout:
    /// C order, Fortran order, strided and reversed views alike); a `ValueError` for device data.
    pub fn as_faer(&self) -> PyResult<faer::MatRef<'_, T>> {
        let data = self.host_ptr()?;
        let [rows, columns] = self.shape;
        // SAFETY: every (row, column) of the shape reaches, through the argument's strides, an
        // initialised, aligned element of host memory this argument holds and borrows (shared)
        // for the view's life (checked at extraction); faer takes signed strides.
        Ok(unsafe { faer::MatRef::from_raw_parts(data.cast_const(), rows, columns, self.strides[0], self.strides[1]) })
    }
}

impl<T: Element> TypedArray<'_, T, Rank<2>, Write> {
    /// A writable faer view of host data (see `as_faer`).
    pub fn as_faer_mut(&mut self) -> PyResult<faer::MatMut<'_, T>> {
        let data = self.host_ptr_mut()?;
        let [rows, columns] = self.shape;
        // SAFETY: as `as_faer`; the strides reach no element twice (checked at extraction for
        // writable arguments) and the borrow registered then is exclusive.
        Ok(unsafe { faer::MatMut::from_raw_parts_mut(data, rows, columns, self.strides[0], self.strides[1]) })
    }
}
