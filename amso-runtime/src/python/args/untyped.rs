//! `UntypedArray`: an array argument of any element type and rank, as rust-numpy's
//! `PyUntypedArray`: what a typed argument can take, every producer's numbers and NumPy's
//! objects, byte and unicode strings, datetimes, timedeltas and records. It reports what arrived
//! and becomes a typed argument on request, without reading the producer again, so one function
//! can dispatch on the dtype.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::Borrowed;

use crate::device::Device;
use crate::element::{ArrayElement, DType};
use crate::python::args::{describe, name_the_argument, Access, ArgumentError, Dimensions, Framework, TypedArray};
use crate::python::source::{self, Source};

/// An array argument of any element type and rank, from any framework, holding its memory.
///
/// ```ignore
/// #[pyfunction]
/// fn total(x: UntypedArray<'_>) -> PyResult<f64> {
///     if x.is::<f32>() {
///         let x: ArrayRefDyn<'_, f32> = x.into_typed()?;
///         return Ok(x.as_array()?.sum() as f64);
///     }
///     let x: ArrayRefDyn<'_, f64> = x.into_typed()?;   // a TypeError naming what arrived
///     Ok(x.as_array()?.sum())
/// }
/// ```
pub struct UntypedArray<'py> {
    object: Bound<'py, PyAny>,
    source: Source,
    shape: Vec<usize>,
    /// In bytes, as NumPy's `ndarray.strides` (and rust-numpy's untyped array) give them.
    strides: Vec<isize>,
}

impl<'a, 'py> FromPyObject<'a, 'py> for UntypedArray<'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let object = obj.to_owned();
        let acquired = source::acquire_any_kind(&object).map_err(|error| name_the_argument(obj.py(), error))?;
        let Some(source) = acquired else {
            return Err(name_the_argument(
                obj.py(),
                PyTypeError::new_err(format!(
                "expected an array (an object with __dlpack__, __cuda_array_interface__, the buffer protocol or the \
                 DLPack C exchange API), got {}",
                describe(&object, None)
            )),
            ));
        };
        let extents = source.extents(object.py());
        let shape: Vec<usize> = extents.dims.iter().map(|&d| d as usize).collect();
        let itemsize = (source.dtype.1 as usize * source.dtype.2 as usize).div_ceil(8) as isize;
        let strides = match extents.strides {
            source::Strides::Bytes(given) => given.iter().map(|&s| s as isize).collect(),
            source::Strides::Elements(given) => given.iter().map(|&s| (s as isize).saturating_mul(itemsize)).collect(),
            source::Strides::COrder => c_strides(&shape, itemsize),
        };
        Ok(UntypedArray { object, source, shape, strides })
    }
}

impl<'py> UntypedArray<'py> {
    /// The argument as passed.
    pub fn object(&self) -> &Bound<'py, PyAny> {
        &self.object
    }

    /// The spec's dtype of the elements, if the spec has one for what arrived (`None` for the
    /// kinds DLPack lacks: see `kind`).
    pub fn dtype(&self) -> Option<&'static DType> {
        match self.source.numpy_kind {
            Some(_) => None,
            None => DType::from_dlpack_type(self.source.dtype),
        }
    }

    /// NumPy's name of a kind DLPack lacks, for a NumPy array of one: `"object"`,
    /// `"datetime64[s]"`, `"timedelta64[ms]"`, `"S8"`, `"U4"`, or `"record"` for a structured
    /// dtype; `None` for every other array.
    pub fn kind(&self) -> Option<&str> {
        self.source.numpy_kind.as_deref()
    }

    /// The elements' DLPack type: (code, bits, lanes). For a kind DLPack lacks (`kind`), only
    /// its size: (the DLPack code amso files it under, bits per lane, lanes).
    pub fn dlpack_dtype(&self) -> (u8, u8, u16) {
        self.source.dtype
    }

    /// Whether the elements are `T`s: the test `into_typed` makes of the element type (a kind
    /// DLPack lacks by its NumPy name, a record by its fields, a vector by its lanes, every
    /// other type by DLPack's).
    pub fn is<T: ArrayElement>(&self) -> bool {
        super::check::holds::<T>(&self.object, &self.source)
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The strides in bytes, as NumPy's `ndarray.strides` gives them (C-order strides where
    /// the producer gave none).
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// Whether the elements are in C order, without gaps (axes of length 1 step anyhow).
    pub fn is_c_contiguous(&self) -> bool {
        let itemsize = (self.source.dtype.1 as usize * self.source.dtype.2 as usize).div_ceil(8) as isize;
        contiguous(&self.shape, &self.strides, &c_strides(&self.shape, itemsize))
    }

    /// Whether the elements are in Fortran order, without gaps.
    pub fn is_fortran_contiguous(&self) -> bool {
        let itemsize = (self.source.dtype.1 as usize * self.source.dtype.2 as usize).div_ceil(8) as isize;
        let reversed: Vec<usize> = self.shape.iter().rev().copied().collect();
        let mut expected = c_strides(&reversed, itemsize);
        expected.reverse();
        contiguous(&self.shape, &self.strides, &expected)
    }

    /// Whether the elements are in C or Fortran order, without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.is_c_contiguous() || self.is_fortran_contiguous()
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.source.device
    }

    /// Whether the producer forbids writes.
    pub fn readonly(&self) -> bool {
        self.source.readonly
    }

    /// The framework the argument came from.
    pub fn framework(&self) -> PyResult<Framework> {
        Framework::of(&self.object, self.source.device)
    }

    /// The typed argument (any of `ArrayRef`, `ArrayMut`, `ArrayRefDyn`, `ArrayMutDyn`, named
    /// by the type it is assigned to, of any element type: objects, strings, datetimes and
    /// records included), checked as extraction checks it: a mismatch is the same `TypeError` or
    /// `ValueError`.
    pub fn into_typed<T: ArrayElement, D: Dimensions, A: Access>(
        self,
    ) -> Result<TypedArray<'py, T, D, A>, ArgumentError> {
        TypedArray::check(self.object, self.source).map_err(|error| *error)
    }
}

/// C-order byte strides of `shape`.
fn c_strides(shape: &[usize], itemsize: isize) -> Vec<isize> {
    let mut strides = vec![0; shape.len()];
    let mut step = itemsize;
    for (slot, &extent) in strides.iter_mut().zip(shape).rev() {
        *slot = step;
        step = step.saturating_mul(extent.max(1) as isize);
    }
    strides
}

/// Whether `strides` step as `expected` on every axis that steps (of length above 1); an
/// empty array is contiguous.
fn contiguous(shape: &[usize], strides: &[isize], expected: &[isize]) -> bool {
    shape.contains(&0) || shape.iter().zip(strides.iter().zip(expected)).all(|(&n, (&s, &e))| n <= 1 || s == e)
}
