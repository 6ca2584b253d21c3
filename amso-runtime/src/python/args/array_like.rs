//! `ArrayLike`: a read-only array argument that also takes what NumPy converts to an array
//! (lists, nested lists, scalars, arrays of another dtype), as rust-numpy's `PyArrayLike`. An
//! array of the element type is read in place, from any framework, exactly as `ArrayRef`
//! reads it; anything else is converted as `numpy.asarray(value, dtype=T)` converts it (its C
//! function, `PyArray_FromAny`), a copy made once at the boundary. `C` says whether an array of another dtype is converted
//! ([`AllowTypeChange`]) or refused ([`TypeMustMatch`], the default).

use std::marker::PhantomData;
use std::ops::Deref;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyTuple};
use pyo3::{intern, Borrowed};

use crate::device::DeviceType;
use crate::element::{dlpack_code, dlpack_type_name, ArrayElement, DTypeOf, Element, Scalar};
use crate::python::args::{
    describe, name_the_argument, wanted, ArgumentError, Dimensions, DynRank, Framework, IntoFramework, Rank, Read,
    TypedArray,
};
use crate::python::source;

/// Whether an array of another element type is converted: [`TypeMustMatch`] or
/// [`AllowTypeChange`].
pub trait Coerce: sealed::Sealed + 'static {
    /// Whether arrays of another dtype are converted (else refused with a `TypeError`).
    const ALLOW_TYPE_CHANGE: bool;
}

/// Arrays must hold `T` already; lists and scalars are still converted.
pub struct TypeMustMatch;

/// Arrays of any dtype NumPy casts to `T` are converted (a copy; NumPy's casting, which
/// truncates floats into integers as `astype` does).
pub struct AllowTypeChange;

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::python::args::array_like::TypeMustMatch {}
    impl Sealed for crate::python::args::array_like::AllowTypeChange {}
}

impl Coerce for TypeMustMatch {
    const ALLOW_TYPE_CHANGE: bool = false;
}

impl Coerce for AllowTypeChange {
    const ALLOW_TYPE_CHANGE: bool = true;
}

/// A read-only argument of elements `T` in dimensions `D` from an array or anything NumPy
/// converts to one; it reads as the [`TypedArray`] it derefs to (`as_array()`,
/// `as_slice()`). Written through its aliases [`ArrayLike`] and [`ArrayLikeDyn`].
pub struct TypedArrayLike<'py, T: ArrayElement, D: Dimensions, C: Coerce = TypeMustMatch> {
    array: TypedArray<'py, T, D, Read>,
    converted: bool,
    _coerce: PhantomData<C>,
}

/// An array-like argument with elements `T` and `N` dimensions.
pub type ArrayLike<'py, T, const N: usize, C = TypeMustMatch> = TypedArrayLike<'py, T, Rank<N>, C>;
/// An array-like argument with elements `T` and any number of dimensions.
pub type ArrayLikeDyn<'py, T, C = TypeMustMatch> = TypedArrayLike<'py, T, DynRank, C>;

impl<'py, T: ArrayElement, D: Dimensions, C: Coerce> Deref for TypedArrayLike<'py, T, D, C> {
    type Target = TypedArray<'py, T, D, Read>;

    fn deref(&self) -> &Self::Target {
        &self.array
    }
}

impl<'py, T: ArrayElement, D: Dimensions, C: Coerce> TypedArrayLike<'py, T, D, C> {
    /// Whether the argument was converted (a copy NumPy made) rather than read in place.
    pub fn converted(&self) -> bool {
        self.converted
    }

    /// The typed argument (for a converted value, over NumPy's copy).
    pub fn into_array(self) -> TypedArray<'py, T, D, Read> {
        self.array
    }
}

impl<'a, 'py, T: ArrayElement, D: Dimensions, C: Coerce> FromPyObject<'a, 'py> for TypedArrayLike<'py, T, D, C> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Self::convert(obj).map_err(|error| name_the_argument(obj.py(), error))
    }
}

impl<'py, T: ArrayElement, D: Dimensions, C: Coerce> TypedArrayLike<'py, T, D, C> {
    /// `extract`'s body (whose errors `extract` names after the argument).
    fn convert(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        let object = obj.to_owned();
        let py = object.py();
        crate::element::own::register::<T>();
        let like = |array, converted| TypedArrayLike { array, converted, _coerce: PhantomData };
        if D::NDIM.is_none_or(|n| n == 1) {
            if let Some(array) = flat_sequence_of::<T>(&object)? {
                let source = source::acquire(&array, None)?.expect("a NumPy array amso made");
                return Ok(like(TypedArray::check(array, source).map_err(ArgumentError::raise)?, true));
            }
        }
        // A plain list or tuple exports no array protocol: NumPy converts it, with no probing
        // first (a probe of a list raises and clears an AttributeError per protocol).
        let sequence = object.is_exact_instance_of::<PyList>() || object.is_exact_instance_of::<PyTuple>();
        if let Some(source) = if sequence { None } else { acquire::<T>(&object)? } {
            // The same DLPack fields and, for NumPy's own kinds, the same kind (datetime64[ms] and
            // int64 share their fields).
            let kind = T::DTYPE.numpy_only().then_some(T::DTYPE.numpy);
            if source.dtype == T::DTYPE.dlpack() && source.numpy_kind.as_deref() == kind {
                return Ok(like(TypedArray::check(object, source).map_err(ArgumentError::raise)?, false));
            }
            let ndim = source.extents(py).dims.len();
            let arrived = format!(
                "{} array with {ndim} dimension{} ({})",
                crate::error::with_article(
                    source.numpy_kind.as_deref().map_or_else(|| dlpack_type_name(source.dtype), str::to_owned)
                ),
                if ndim == 1 { "" } else { "s" },
                describe(&object, Some(source.device))
            );
            if !C::ALLOW_TYPE_CHANGE {
                return Err(PyTypeError::new_err(format!(
                    "expected {}, got {arrived}; convert it first (x.astype(\"{}\")), or take the argument as \
                     ArrayLike<..., AllowTypeChange> to convert here",
                    wanted::<T, D, Read>(),
                    T::DTYPE.numpy
                )));
            }
            if source.device.device_type == DeviceType::Cuda {
                return Err(PyTypeError::new_err(format!(
                    "expected {}, got {arrived}; NumPy converts on the host only, so convert it on its device first",
                    wanted::<T, D, Read>()
                )));
            }
            // The producer's hold ends here: NumPy reads it again to convert.
            drop(source);
        }
        // What arrived, for messages only (a Python call): worked out when one is made.
        let arrived = || describe(&object, None);
        let array = crate::python::npyffi::dtype::from_any(&object, DTypeOf::<T>::REF).inspect_err(|error| {
            // NumPy's own exception, its type and message, as rust-numpy's `PyArrayLike`
            // raises it; a note says what the argument expected (best effort).
            let note = format!(
                "amso: expected {} or a value numpy.asarray converts to one, got {}",
                wanted::<T, D, Read>(),
                arrived()
            );
            let _ = error.value(py).call_method1(intern!(py, "add_note"), (note,));
        })?;
        let Some(source) = acquire::<T>(&array)? else {
            return Err(PyTypeError::new_err(format!(
                "NumPy's conversion (numpy.asarray's) gave no array for {}",
                arrived()
            )));
        };
        let ndim = source.extents(py).dims.len();
        if D::NDIM.is_some_and(|n| n != ndim) {
            return Err(PyTypeError::new_err(format!(
                "expected {}, got {} that converts to {ndim} dimension{}",
                wanted::<T, D, Read>(),
                arrived(),
                if ndim == 1 { "" } else { "s" }
            )));
        }
        Ok(like(TypedArray::check(array, source).map_err(ArgumentError::raise)?, true))
    }
}

/// `object`'s memory, as an argument of `T` takes it: NumPy arrays of the kinds DLPack lacks
/// (objects, datetimes, strings, records) too, for a `T` of those kinds.
fn acquire<T: ArrayElement>(object: &Bound<'_, PyAny>) -> PyResult<Option<source::Source>> {
    if T::DTYPE.numpy_only() {
        source::acquire_any_kind(object)
    } else {
        source::acquire(object, None)
    }
}

/// `flat_sequence` for the plain number types it reads (others, objects among them, go to
/// `numpy.asarray`): dispatched by type, as `ArrayLike` takes every array element type.
fn flat_sequence_of<'py, T: ArrayElement>(object: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    use std::any::TypeId;
    macro_rules! plain {
        ($($plain:ty),*) => {
            $(if TypeId::of::<T>() == TypeId::of::<$plain>() {
                return flat_sequence::<$plain>(object);
            })*
        };
    }
    plain!(bool, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, f32, f64);
    Ok(None)
}

/// A flat list or tuple of Python ints (for an integer `T`), floats (float32, float64) or bools
/// (bool), each exactly of that type, as a new NumPy array of `T`: the elements read one by
/// one, as rust-numpy reads a `Vec<T>`, without NumPy's type discovery. `None` for anything
/// else (nested sequences, subclasses, other element types, values `T` cannot hold), which
/// `numpy.asarray` converts with its own rules and errors.
fn flat_sequence<'py, T: Element>(object: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let dtype = &T::DTYPE;
    if dtype.numpy_only() || dtype.lanes != 1 {
        return Ok(None);
    }
    // The Python type each element must be exactly, for NumPy's conversion and this one to agree.
    let read: fn(&Bound<'_, PyAny>) -> Option<Scalar> = match (dtype.code, dtype.bits) {
        (dlpack_code::INT | dlpack_code::UINT, _) => {
            |item| item.is_exact_instance_of::<PyInt>().then(|| item.extract::<i64>().ok().map(Scalar::Int)).flatten()
        }
        (dlpack_code::FLOAT, 32 | 64) => |item| {
            item.is_exact_instance_of::<PyFloat>().then(|| item.extract::<f64>().ok().map(Scalar::Float)).flatten()
        },
        (dlpack_code::BOOL, _) => |item| item.cast_exact::<PyBool>().ok().map(|b| Scalar::Bool(b.is_true())),
        _ => return Ok(None),
    };
    let convert = |item: Bound<'_, PyAny>| {
        let scalar = read(&item)?;
        let element = T::from_scalar(scalar).ok()?;
        // A float that overflows or underflows float32 is left to NumPy, which warns (or raises,
        // under `np.errstate`) as it casts.
        match (scalar, element.to_scalar().ok()?) {
            (Scalar::Float(given), Scalar::Float(got))
                if given.is_finite() && (got.is_infinite() || (got == 0.0) != (given == 0.0)) =>
            {
                None
            }
            _ => Some(element),
        }
    };
    // No Python code runs while the elements are read, so the sequence cannot change under it.
    fn read_all<'py, T>(
        len: usize,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        convert: impl Fn(Bound<'py, PyAny>) -> Option<T>,
    ) -> Option<Vec<T>> {
        let mut elements = Vec::with_capacity(len);
        for item in items {
            elements.push(convert(item)?);
        }
        Some(elements)
    }
    let elements = if let Ok(list) = object.cast_exact::<PyList>() {
        read_all(list.len(), list.iter(), convert)
    } else if let Ok(tuple) = object.cast_exact::<PyTuple>() {
        read_all(tuple.len(), tuple.iter(), convert)
    } else {
        return Ok(None);
    };
    elements.map(|elements| elements.into_framework(object.py(), Framework::NumPy)).transpose()
}
