//! A record argument's fields as strided `ndarray` views (`field`, `field_mut`). Whether an
//! array lays out the record at all is checked below, in `python/npyffi/record_layout.rs`.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::element::{ArrayElement, Field};
use crate::python::args::{Access, Dimensions, TypedArray, Write};

/// Field `name` of record `T`, for a view of element type `F`: refuses another element type,
/// and layouts `ndarray` cannot stride (a record size that is not a whole number of `F`s).
fn locate<T: ArrayElement, F: ArrayElement>(name: &str) -> PyResult<&'static Field> {
    let record = crate::element::DTypeOf::<T>::REF;
    let Some(field) = record.fields.iter().find(|f| f.name == name) else {
        let names: Vec<&str> = record.fields.iter().map(|f| f.name).collect();
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{} has no field `{name}`{}",
            if record.is_record() {
                format!("record {}", record.name)
            } else {
                format!("{} (not a record)", record.name)
            },
            if names.is_empty() { String::new() } else { format!("; its fields are {}", names.join(", ")) }
        )));
    };
    if *field.dtype != F::DTYPE {
        return Err(PyTypeError::new_err(format!(
            "field `{name}` of record {} holds {}, not {}: ask for field::<{}>(\"{name}\")",
            record.name,
            field.dtype.name,
            F::DTYPE.name,
            field.dtype.name
        )));
    }
    if !size_of::<T>().is_multiple_of(size_of::<F>()) || !field.offset.is_multiple_of(align_of::<F>()) {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "field `{name}` of record {} ({} bytes, the field at offset {}) is not a whole number of {} apart: no \
             strided view reaches it",
            record.name,
            size_of::<T>(),
            field.offset,
            F::DTYPE.name
        )));
    }
    Ok(field)
}

impl<'py, T: ArrayElement, D: Dimensions, A: Access> TypedArray<'py, T, D, A> {
    /// Field `name` of a record argument as an `ndarray` view of its `F` entries, without a
    /// copy: the array's dimensions, then the field's own shape (`pos: [f32; 3]` of a 1-D array
    /// of `n` records is an `n` x 3 view).
    pub fn field<F: ArrayElement>(&self, name: &str) -> PyResult<ndarray::ArrayViewD<'_, F>> {
        let field = locate::<T, F>(name)?;
        let (base, dims, strides, reversed) = self.field_layout::<F>(self.host_ptr()?.cast(), field);
        // SAFETY: the records are initialised host memory this argument holds and borrows for
        // the view's life; field `name` holds `F`s at `offset` in each (the record's layout,
        // checked against the producer's at extraction), aligned for `F` (the record is, and
        // the offset is a multiple of F's alignment), and the strides step whole records.
        let mut view = unsafe {
            use ndarray::ShapeBuilder;
            ndarray::ArrayViewD::from_shape_ptr(ndarray::IxDyn(&dims).strides(ndarray::IxDyn(&strides)), base)
        };
        for axis in reversed {
            view.invert_axis(ndarray::Axis(axis));
        }
        Ok(view)
    }

    /// Field `name` as a view of static rank `E` (`Ix1` for a scalar field of a 1-D array,
    /// `Ix2` for `pos: [f32; 3]` of one): `field`'s view, which `ndarray`'s axis reductions
    /// (`sum_axis`) and indexing by `[i, j]` want. A rank that is not the array's plus the
    /// field's is a `TypeError` naming both, as an argument of another rank is.
    pub fn field_view<F: ArrayElement, E: ndarray::Dimension>(
        &self,
        name: &str,
    ) -> PyResult<ndarray::ArrayView<'_, F, E>> {
        let view = self.field::<F>(name)?;
        let ndim = view.ndim();
        view.into_dimensionality::<E>().map_err(|_| field_rank_error::<E>(name, ndim))
    }

    /// The lowest-addressed `F` of the field, the view's dimensions and absolute strides (in
    /// `F`s), and the axes to turn round (the argument's reversed ones).
    fn field_layout<F: ArrayElement>(
        &self,
        records: *mut u8,
        field: &Field,
    ) -> (*mut F, Vec<usize>, Vec<usize>, Vec<usize>) {
        let per_record = (size_of::<T>() / size_of::<F>()) as isize;
        let mut dims: Vec<usize> = self.shape().to_vec();
        let mut strides: Vec<isize> = self.strides().iter().map(|&s| s * per_record).collect();
        dims.extend_from_slice(field.shape);
        let mut inner = 1isize;
        let mut trailing: Vec<isize> = field
            .shape
            .iter()
            .rev()
            .map(|&d| {
                let stride = inner;
                inner *= d as isize;
                stride
            })
            .collect();
        trailing.reverse();
        strides.extend(trailing);
        let below = crate::strided::lowest_offset(&dims, &strides);
        let first = records.wrapping_add(field.offset).cast::<F>().wrapping_offset(below);
        let reversed = strides.iter().enumerate().filter(|(_, &s)| s < 0).map(|(axis, _)| axis).collect();
        (first, dims, strides.iter().map(|s| s.unsigned_abs()).collect(), reversed)
    }
}

/// The error for a field view asked for at rank `E` that has `ndim` dimensions.
fn field_rank_error<E: ndarray::Dimension>(name: &str, ndim: usize) -> pyo3::PyErr {
    let asked = E::NDIM
        .map_or_else(|| "a dynamic rank".to_owned(), |n| format!("{n} dimension{}", if n == 1 { "" } else { "s" }));
    PyTypeError::new_err(format!(
        "field `{name}` has {ndim} dimensions (the array's, then the field's own shape), not {asked}: ask for \
         Ix{ndim}, or use field() for a view of dynamic rank"
    ))
}

impl<'py, T: ArrayElement, D: Dimensions> TypedArray<'py, T, D, Write> {
    /// Field `name` of a writable record argument as a writable `ndarray` view (see `field`).
    pub fn field_mut<F: ArrayElement>(&mut self, name: &str) -> PyResult<ndarray::ArrayViewMutD<'_, F>> {
        let field = locate::<T, F>(name)?;
        let records = self.host_ptr_mut()?.cast::<u8>();
        let (base, dims, strides, reversed) = self.field_layout::<F>(records, field);
        // SAFETY: as `field`; the argument's strides reach no record twice (checked at
        // extraction for writable arguments), its borrow is exclusive, and `&mut self` keeps
        // every other view of it away while this one lives.
        let mut view = unsafe {
            use ndarray::ShapeBuilder;
            ndarray::ArrayViewMutD::from_shape_ptr(ndarray::IxDyn(&dims).strides(ndarray::IxDyn(&strides)), base)
        };
        for axis in reversed {
            view.invert_axis(ndarray::Axis(axis));
        }
        Ok(view)
    }

    /// Field `name` as a writable view of static rank `E` (see `field_view`).
    pub fn field_view_mut<F: ArrayElement, E: ndarray::Dimension>(
        &mut self,
        name: &str,
    ) -> PyResult<ndarray::ArrayViewMut<'_, F, E>> {
        let view = self.field_mut::<F>(name)?;
        let ndim = view.ndim();
        view.into_dimensionality::<E>().map_err(|_| field_rank_error::<E>(name, ndim))
    }
}
