//! Typed array arguments for `#[pyfunction]`s: `ArrayRef<'py, T, N>` reads, `ArrayMut<'py, T,
//! N>` writes. Either takes an array from any framework without a copy (see `source` for the
//! protocols, in order), checks the element type `T` and the number of dimensions `N` once at
//! the boundary, and holds the memory for as long as it lives.
//!
//! ```ignore
//! use amso_runtime::python::{ArrayMut, ArrayRef};
//!
//! #[pyfunction]
//! fn scale(py: Python<'_>, x: ArrayRef<'_, f64, 2>, mut out: ArrayMut<'_, f64, 2>) -> PyResult<()> {
//!     let (x, mut out) = (x.as_array()?, out.as_array_mut()?);   // ndarray views
//!     py.detach(|| out.zip_mut_with(&x, |o, &v| *o = 2.0 * v));  // the GIL released
//!     Ok(())
//! }
//! ```
//!
//! Mismatches are errors that say what was expected and what arrived: a `TypeError` for the
//! element type or the number of dimensions, a `ValueError` for a read-only array given as
//! `ArrayMut`, an unsupported layout or device; PyO3 adds the argument's name as a note
//! (`while processing 'x'`).

mod borrow;
mod output;
pub(crate) mod source;

use std::marker::PhantomData;
use std::ops::Deref;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::Borrowed;

use self::borrow::Borrow;
use self::source::Source;
use crate::device::{Device, DeviceType};
use crate::element::Element;

pub use output::{new_array, NewArray};

/// A read-only typed array argument: elements `T`, `N` dimensions, any framework.
pub struct ArrayRef<'py, T: Element, const N: usize> {
    object: Bound<'py, PyAny>,
    source: Source,
    shape: [usize; N],
    /// Strides in elements.
    strides: [usize; N],
    _borrow: Option<Borrow>,
    _element: PhantomData<T>,
}

/// A writable typed array argument (refuses read-only and locked arrays); it reads as an
/// `ArrayRef` too.
pub struct ArrayMut<'py, T: Element, const N: usize> {
    array: ArrayRef<'py, T, N>,
}

impl<'a, 'py, T: Element, const N: usize> FromPyObject<'a, 'py> for ArrayRef<'py, T, N> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        ArrayRef::check(obj.to_owned(), false)
    }
}

impl<'a, 'py, T: Element, const N: usize> FromPyObject<'a, 'py> for ArrayMut<'py, T, N> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(ArrayMut { array: ArrayRef::check(obj.to_owned(), true)? })
    }
}

/// "a float32 array with 2 dimensions", what a typed argument asks for.
fn wanted<T: Element, const N: usize>(writable: bool) -> String {
    let kind = if writable { "a writable " } else { "a " };
    format!("{kind}{} array with {N} dimension{}", T::DTYPE.name, if N == 1 { "" } else { "s" })
}

/// The DLPack type's usual name (`float64`, `bfloat16`, `int8x4`).
fn dtype_name((code, bits, lanes): (u8, u8, u16)) -> String {
    let family = match code {
        0 => "int",
        1 => "uint",
        2 => "float",
        4 => "bfloat",
        5 => "complex",
        6 => return if lanes == 1 { "bool".into() } else { format!("boolx{lanes}") },
        other => return format!("DLPack type code {other} with {bits} bits"),
    };
    if lanes == 1 {
        format!("{family}{bits}")
    } else {
        format!("{family}{bits}x{lanes}")
    }
}

/// "torch.Tensor on cuda:0": the argument's type and where its data lives.
fn describe(object: &Bound<'_, PyAny>, device: Option<Device>) -> String {
    let kind = object.get_type().fully_qualified_name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    match device {
        Some(Device { device_type: DeviceType::Cuda, id }) => format!("{kind} on cuda:{id}"),
        Some(_) => format!("{kind} on cpu"),
        None => kind,
    }
}

impl<'py, T: Element, const N: usize> ArrayRef<'py, T, N> {
    fn check(object: Bound<'py, PyAny>, writable: bool) -> PyResult<Self> {
        Self::check_on(object, writable, None)
    }

    /// Extract `object`, for device data from producers without the exchange API on `stream`
    /// (the array API handshake), else on the stream amso's rule picks.
    pub(crate) fn check_on(object: Bound<'py, PyAny>, writable: bool, stream: Option<i64>) -> PyResult<Self> {
        let Some(source) = source::acquire(&object, stream)? else {
            return Err(PyTypeError::new_err(format!(
                "expected {} (an object with __dlpack__, __cuda_array_interface__ or the DLPack C exchange API), got {}",
                wanted::<T, N>(writable),
                describe(&object, None)
            )));
        };
        // What arrived, for messages only (it costs Python calls).
        let here = || describe(&object, Some(source.device));
        let element = (T::DTYPE.code, T::DTYPE.bits, T::DTYPE.lanes);
        if source.dtype != element || source.dims().len() != N {
            return Err(PyTypeError::new_err(format!(
                "expected {}, got a {} array with {} dimension{} ({})",
                wanted::<T, N>(writable),
                dtype_name(source.dtype),
                source.dims().len(),
                if source.dims().len() == 1 { "" } else { "s" },
                here()
            )));
        }
        if writable && source.readonly {
            return Err(PyValueError::new_err(format!(
                "expected {}, got a read-only one ({}); pass a writable array",
                wanted::<T, N>(writable),
                here()
            )));
        }
        let shape: [usize; N] = std::array::from_fn(|axis| source.dims()[axis] as usize);
        let size: usize = shape.iter().product();
        if size > 0 && (source.data == 0 || source.data % align_of::<T>() != 0) {
            return Err(PyValueError::new_err(format!(
                "the array's data address 0x{:x} is NULL or not aligned for {} ({})",
                source.data,
                T::DTYPE.name,
                here()
            )));
        }
        let strides = layout(&shape, source.strides(), writable).map_err(|problem| {
            PyValueError::new_err(format!(
                "{problem}: amso reads contiguous arrays and views with non-negative, non-overlapping strides; \
                 got shape {shape:?} with strides {:?} ({}); pass a contiguous copy",
                source.strides().unwrap_or_default(),
                here()
            ))
        })?;
        let host = source.device.device_type != DeviceType::Cuda;
        let span = if size == 0 {
            None
        } else {
            let last =
                shape.iter().zip(&strides).try_fold(0usize, |sum, (&d, &s)| sum.checked_add((d - 1).checked_mul(s)?));
            let span = last.and_then(|l| l.checked_add(1)?.checked_mul(size_of::<T>()));
            let end = span.and_then(|span| source.data.checked_add(span));
            match (span, end) {
                (Some(span), Some(_)) => Some(span),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "the array's strides {:?} for shape {shape:?} reach past the address space ({})",
                        strides,
                        here()
                    )))
                }
            }
        };
        if host && T::DTYPE.code == dlpark::ffi::DLDataTypeCode::BOOL.0 && size > 0 {
            // Only 0 and 1 are Rust bools; views hand out `&bool`, so check every element.
            // SAFETY: the producer's host memory holds `span` bytes from `data`.
            let bytes = unsafe { std::slice::from_raw_parts(source.data as *const u8, span.unwrap_or(0)) };
            if strided_offsets(&shape, &strides).any(|offset| bytes[offset] > 1) {
                return Err(PyValueError::new_err(format!(
                    "the bool array holds bytes other than 0 and 1 ({}); convert it with x.astype(bool) first",
                    here()
                )));
            }
        }
        let borrow = match (host, span) {
            (true, Some(span)) => Borrow::new(source.data, source.data + span, writable)?,
            _ => None,
        };
        Ok(ArrayRef { object, source, shape, strides, _borrow: borrow, _element: PhantomData })
    }

    /// The argument as passed.
    pub fn object(&self) -> &Bound<'py, PyAny> {
        &self.object
    }

    /// The shape.
    pub fn shape(&self) -> [usize; N] {
        self.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> [usize; N] {
        self.strides
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the elements are in C order without gaps.
    pub fn is_c_contiguous(&self) -> bool {
        self.strides == c_strides(&self.shape)
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.source.device
    }

    /// For device data: the stream to work on (the caller's current stream for producers with
    /// the DLPack exchange API, else amso's stream context, else amso's stream). `None` on the
    /// host.
    pub fn stream(&self) -> Option<i64> {
        self.source.stream
    }

    /// The address of the first element (host or device).
    pub fn data_address(&self) -> usize {
        self.source.data
    }

    fn host_ptr(&self) -> PyResult<*mut T> {
        if self.source.device.device_type == DeviceType::Cuda {
            return Err(PyValueError::new_err(format!(
                "the array is in CUDA device memory ({}); host views need host data",
                describe(&self.object, Some(self.source.device))
            )));
        }
        Ok(if self.is_empty() { std::ptr::NonNull::dangling().as_ptr() } else { self.source.data as *mut T })
    }

    /// The elements, in C order: host data that is C-contiguous.
    pub fn as_slice(&self) -> PyResult<&[T]> {
        let data = self.host_ptr()?;
        self.require_c_contiguous()?;
        // SAFETY: `len` initialised, aligned, valid elements of host memory this argument holds
        // and borrows (shared) for as long as the slice lives.
        Ok(unsafe { std::slice::from_raw_parts(data, self.len()) })
    }

    fn require_c_contiguous(&self) -> PyResult<()> {
        if self.is_c_contiguous() {
            return Ok(());
        }
        Err(PyValueError::new_err(format!(
            "a slice needs a C-contiguous array, got strides {:?} for shape {:?}; use as_array() for strided views",
            self.strides, self.shape
        )))
    }

    /// An `ndarray` view of host data (any layout this argument accepted).
    #[cfg(feature = "ndarray")]
    pub fn as_array(&self) -> PyResult<ndarray::ArrayView<'_, T, ndarray::Dim<[usize; N]>>>
    where
        ndarray::Dim<[usize; N]>: ndarray::Dimension,
    {
        use ndarray::ShapeBuilder;
        let data = self.host_ptr()?;
        let shape = dim(self.shape).strides(dim(self.strides));
        // SAFETY: shape and non-negative strides (checked at extraction) describe initialised,
        // aligned elements of host memory this argument holds and borrows for the view's life.
        Ok(unsafe { ndarray::ArrayView::from_shape_ptr(shape, data) })
    }

    /// What a CUDA kernel receives for this argument's device data (C order); launch it on
    /// `stream()`.
    #[cfg(feature = "cuda")]
    pub fn device_indexer(&self) -> PyResult<crate::DeviceIndexer<'_, T, N>> {
        if self.source.device.device_type != DeviceType::Cuda {
            return Err(PyValueError::new_err(format!(
                "a device indexer needs CUDA device data; this array is in host memory ({})",
                describe(&self.object, Some(self.source.device))
            )));
        }
        self.require_c_contiguous()?;
        Ok(crate::DeviceIndexer::new(self.source.data as u64, self.shape))
    }

    /// A new zeroed array of `shape` on this argument's device, in the caller's framework when
    /// its type has the DLPack exchange API (torch in gives torch out), else an amso array.
    pub fn new_array<U: Element, const M: usize>(&self, shape: [usize; M]) -> PyResult<NewArray<'py, U, M>> {
        let api = self.source.api.unwrap_or_else(super::exchange::api);
        NewArray::allocate(self.object.py(), api, shape, self.source.device, self.source.stream)
    }
}

impl<'py, T: Element, const N: usize> ArrayMut<'py, T, N> {
    /// The elements, writable, in C order: host data that is C-contiguous.
    pub fn as_slice_mut(&mut self) -> PyResult<&mut [T]> {
        let data = self.array.host_ptr()?;
        self.array.require_c_contiguous()?;
        // SAFETY: as `as_slice`, and the borrow registered at extraction is exclusive.
        Ok(unsafe { std::slice::from_raw_parts_mut(data, self.array.len()) })
    }

    /// A writable `ndarray` view of host data.
    #[cfg(feature = "ndarray")]
    pub fn as_array_mut(&mut self) -> PyResult<ndarray::ArrayViewMut<'_, T, ndarray::Dim<[usize; N]>>>
    where
        ndarray::Dim<[usize; N]>: ndarray::Dimension,
    {
        use ndarray::ShapeBuilder;
        let data = self.array.host_ptr()?;
        let shape = dim(self.array.shape).strides(dim(self.array.strides));
        // SAFETY: as `as_array`; the strides do not overlap (checked at extraction for
        // writable arguments) and the registered borrow is exclusive.
        Ok(unsafe { ndarray::ArrayViewMut::from_shape_ptr(shape, data) })
    }
}

impl<'py, T: Element, const N: usize> Deref for ArrayMut<'py, T, N> {
    type Target = ArrayRef<'py, T, N>;

    fn deref(&self) -> &Self::Target {
        &self.array
    }
}

/// `values` as ndarray's fixed-rank index type (ndarray implements it for up to 6 axes).
#[cfg(feature = "ndarray")]
pub(crate) fn dim<const N: usize>(values: [usize; N]) -> ndarray::Dim<[usize; N]>
where
    ndarray::Dim<[usize; N]>: ndarray::Dimension,
{
    use ndarray::Dimension;
    let mut index = ndarray::Dim::<[usize; N]>::zeros(N);
    index.slice_mut().copy_from_slice(&values);
    index
}

/// C-order strides in elements.
fn c_strides<const N: usize>(shape: &[usize; N]) -> [usize; N] {
    let mut strides = [0usize; N];
    let mut stride = 1usize;
    for axis in (0..N).rev() {
        strides[axis] = stride;
        stride = stride.saturating_mul(shape[axis].max(1));
    }
    strides
}

/// The strides to use for `shape`, from the producer's (`None`: C order): non-negative and,
/// for a writable argument, such that no two indices reach the same element. Axes of length
/// 0 or 1 take the C stride, whatever the producer wrote there.
fn layout<const N: usize>(shape: &[usize; N], given: Option<&[i64]>, writable: bool) -> Result<[usize; N], String> {
    let mut strides = c_strides(shape);
    let Some(given) = given else { return Ok(strides) };
    for axis in 0..N {
        if shape[axis] > 1 {
            strides[axis] = usize::try_from(given[axis]).map_err(|_| format!("negative stride on axis {axis}"))?;
        }
    }
    if writable {
        let mut axes: Vec<usize> = (0..N).filter(|&a| shape[a] > 1).collect();
        axes.sort_by_key(|&a| strides[a]);
        let mut reach = 0usize; // the largest offset the smaller-strided axes reach
        for axis in axes {
            if strides[axis] <= reach {
                return Err(format!("overlapping strides (axis {axis}) in a writable array"));
            }
            reach = strides[axis]
                .checked_mul(shape[axis] - 1)
                .and_then(|step| reach.checked_add(step))
                .ok_or_else(|| format!("strides too large (axis {axis})"))?;
        }
    }
    Ok(strides)
}

/// The byte offsets of every element of a strided one-byte array.
fn strided_offsets<const N: usize>(shape: &[usize; N], strides: &[usize; N]) -> impl Iterator<Item = usize> {
    let (shape, strides) = (*shape, *strides);
    let size: usize = shape.iter().product();
    (0..size).map(move |linear| {
        let index = crate::shape::unravel(&shape, linear);
        index.iter().zip(&strides).map(|(i, s)| i * s).sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_accept_views_and_refuse_what_would_alias() {
        assert_eq!(layout(&[2, 3], None, true), Ok([3, 1]));
        assert_eq!(layout(&[2, 3], Some(&[1, 2]), true), Ok([1, 2]), "a transposed view");
        assert_eq!(layout(&[2, 1], Some(&[1, -5]), true), Ok([1, 1]), "length-1 axes take the C stride");
        assert!(layout(&[2, 3], Some(&[-3, 1]), false).unwrap_err().contains("negative"));
        assert_eq!(layout(&[4, 3], Some(&[0, 1]), false), Ok([0, 1]), "a broadcast reads fine");
        assert!(layout(&[4, 3], Some(&[0, 1]), true).unwrap_err().contains("overlapping"));
        assert!(layout(&[3, 3], Some(&[2, 1]), true).unwrap_err().contains("overlapping"));
    }

    #[test]
    fn dtype_names_follow_numpy() {
        assert_eq!(dtype_name((2, 64, 1)), "float64");
        assert_eq!(dtype_name((4, 16, 1)), "bfloat16");
        assert_eq!(dtype_name((6, 8, 1)), "bool");
        assert_eq!(dtype_name((0, 8, 4)), "int8x4");
    }
}
