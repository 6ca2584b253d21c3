//! Typed array arguments for `#[pyfunction]`s. `ArrayRef<'py, T, N>` reads and
//! `ArrayMut<'py, T, N>` writes an array of elements `T` with `N` dimensions; `ArrayRefDyn`
//! and `ArrayMutDyn` take any number of dimensions; `UntypedArray` takes any array and says
//! what it holds, for functions that dispatch on the dtype. Each takes an array from any
//! framework without a copy (see `source` for the protocols, in order), checks it once at the
//! boundary and holds the memory for as long as it lives.
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
//! writable, an unusable layout or device, a `BufferError` for memory another argument holds
//! for writing. Each message starts with the argument's name (`argument 'x': expected ...`),
//! and PyO3's note says it too (`while processing 'x'`).
//!
//! An amso array's unlocked host data is read in place, from the array's header, with no
//! reference to its buffer (`source::from_amso`): the argument's borrow keeps the data where it
//! is, since every change of an amso array that runs with the GIL released borrows the memory
//! for writing first and is refused (`BufferError`) while an argument holds it.

mod array_like;
mod cast;
mod check;
mod error;
#[cfg(feature = "faer")]
mod faer_views;
#[cfg(feature = "nalgebra")]
mod nalgebra_views;
#[cfg(feature = "ndarray")]
mod owned_view;
#[cfg(feature = "ndarray")]
mod record;
mod results;
mod staged;
mod untyped;

use std::marker::PhantomData;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::Borrowed;

use crate::borrow::guard::{self, Borrow};
use crate::device::{Device, DeviceType};
use crate::element::{ArrayElement, Element};
use crate::python::source::{self, Source};
use crate::strided::{self, Dims};

use self::check::{describe, wanted};

pub use array_like::{AllowTypeChange, ArrayLike, ArrayLikeDyn, Coerce, TypeMustMatch, TypedArrayLike};
pub use cast::Casting;
pub use error::ArgumentError;
#[cfg(feature = "ndarray")]
pub use owned_view::{ClassView, OwnedView};
pub use results::{Framework, IntoFramework, NewArray};
pub use untyped::UntypedArray;

/// A typed array argument: elements `T`, dimensions `D` ([`Rank<N>`] or [`DynRank`]), access
/// `A` ([`Read`] or [`Write`]). Written through its aliases: [`ArrayRef`], [`ArrayMut`],
/// [`ArrayRefDyn`], [`ArrayMutDyn`].
pub struct TypedArray<'py, T: ArrayElement, D: Dimensions, A: Access> {
    /// `None` for host data read in place (a NumPy array, an amso array's header): what keeps
    /// it is the caller's object and, unless it is empty, a borrow in the registry whose key
    /// `Drop` makes again from `data`, the shape and the strides. Anything more to hold (device
    /// data, a producer's hold to release, an aligned copy) is boxed here, so that an argument
    /// moves as a few words: PyO3 moves it several times on the way into a function, and each
    /// copy of a large struct, read back just after it was written, costs more than the rest
    /// of the call. First, so that an aligned copy is written back while `object` (which may
    /// be the last reference to the producer's memory) is alive.
    held: Option<Box<Held<'py, T>>>,
    object: Bound<'py, PyAny>,
    /// The producer's first element (host or device).
    data: usize,
    shape: D::Shape,
    /// Strides in elements (negative for reversed axes); C order's for an aligned copy.
    strides: D::Strides,
    _element: PhantomData<(T, A)>,
}

/// What holds an argument's memory beyond the caller's object and the registry, dropped in
/// this order.
struct Held<'py, T> {
    /// For a misaligned host array: read and written in place by the indexers, else through
    /// an aligned copy the views read, written back while the borrow and the producer's memory
    /// below are still held.
    staged: Option<staged::Staged<T>>,
    _borrow: Option<Borrow<'py>>,
    source: Source,
}

// An argument read in place is seven words at rank 2: keep it so (see `held`).
const _: () = assert!(size_of::<ArrayRef<'static, f64, 2>>() == 7 * size_of::<usize>());

impl<T: ArrayElement, D: Dimensions, A: Access> Drop for TypedArray<'_, T, D, A> {
    fn drop(&mut self) {
        // Read in place and not empty: `check` registered a borrow under this key.
        if self.held.is_none() && !self.is_empty() {
            let axes = self.shape().iter().copied().zip(self.strides().iter().copied());
            let extent = crate::shape::byte_extent(axes, size_of::<T>(), size_of::<T>());
            debug_assert!(extent.is_some(), "the extent `check` registered is made again");
            if let Some(extent) = extent {
                let key = guard::key(self.data, extent, self.shape(), self.strides(), size_of::<T>(), A::WRITABLE);
                guard::release(self.object.py(), &key);
            }
        }
    }
}

/// A read-only array argument with elements `T` and `N` dimensions, from any framework.
pub type ArrayRef<'py, T, const N: usize> = TypedArray<'py, T, Rank<N>, Read>;
/// A writable array argument with elements `T` and `N` dimensions (refuses read-only and
/// locked arrays, and memory another argument holds).
pub type ArrayMut<'py, T, const N: usize> = TypedArray<'py, T, Rank<N>, Write>;
/// A read-only array argument with elements `T` and any number of dimensions.
pub type ArrayRefDyn<'py, T> = TypedArray<'py, T, DynRank, Read>;
/// A writable array argument with elements `T` and any number of dimensions.
pub type ArrayMutDyn<'py, T> = TypedArray<'py, T, DynRank, Write>;

/// Exactly `N` dimensions.
pub struct Rank<const N: usize>;

/// Any number of dimensions.
pub struct DynRank;

/// Read-only access.
pub struct Read;

/// Writable, exclusive access.
pub struct Write;

mod sealed {
    pub trait Sealed {}
    impl<const N: usize> Sealed for crate::python::args::Rank<N> {}
    impl Sealed for crate::python::args::DynRank {}
    impl Sealed for crate::python::args::Read {}
    impl Sealed for crate::python::args::Write {}
}

/// How many dimensions a typed argument has: [`Rank<N>`] or [`DynRank`].
pub trait Dimensions: sealed::Sealed + 'static {
    /// The shape's storage.
    #[doc(hidden)]
    type Shape: AsRef<[usize]>;
    /// The strides' storage.
    #[doc(hidden)]
    type Strides: AsRef<[isize]> + AsMut<[isize]>;
    /// The number of dimensions required, if fixed.
    #[doc(hidden)]
    const NDIM: Option<usize>;
    /// The shape from a producer's dimensions (checked: as many as `NDIM`, none negative).
    #[doc(hidden)]
    fn shape(dims: &[i64]) -> Self::Shape;
    /// Zeroed strides for `ndim` dimensions, to fill.
    #[doc(hidden)]
    fn zero_strides(ndim: usize) -> Self::Strides;
}

impl<const N: usize> Dimensions for Rank<N> {
    type Shape = [usize; N];
    type Strides = [isize; N];
    const NDIM: Option<usize> = Some(N);

    #[inline]
    fn shape(dims: &[i64]) -> [usize; N] {
        std::array::from_fn(|axis| dims[axis] as usize)
    }

    #[inline]
    fn zero_strides(_: usize) -> [isize; N] {
        [0; N]
    }
}

impl Dimensions for DynRank {
    type Shape = Dims<usize>;
    type Strides = Dims<isize>;
    const NDIM: Option<usize> = None;

    fn shape(dims: &[i64]) -> Dims<usize> {
        Dims::collect(dims.len(), dims.iter().map(|&d| d as usize))
    }

    fn zero_strides(ndim: usize) -> Dims<isize> {
        Dims::collect(ndim, std::iter::repeat(0))
    }
}

/// Read-only ([`Read`]) or writable ([`Write`]) access.
pub trait Access: sealed::Sealed + 'static {
    /// Whether the argument may write.
    #[doc(hidden)]
    const WRITABLE: bool;
}

impl Access for Read {
    const WRITABLE: bool = false;
}

impl Access for Write {
    const WRITABLE: bool = true;
}

/// The dimensions ndarray views of an argument have: `Dim<[usize; N]>` (up to 6) or `IxDyn`.
#[cfg(feature = "ndarray")]
pub trait NdDimensions: Dimensions {
    /// ndarray's dimension type.
    type Nd: ndarray::Dimension;
    #[doc(hidden)]
    fn nd(values: &[usize]) -> Self::Nd;
}

#[cfg(feature = "ndarray")]
impl<const N: usize> NdDimensions for Rank<N>
where
    ndarray::Dim<[usize; N]>: ndarray::Dimension,
{
    type Nd = ndarray::Dim<[usize; N]>;

    fn nd(values: &[usize]) -> Self::Nd {
        use ndarray::Dimension;
        let mut index = ndarray::Dim::<[usize; N]>::zeros(N);
        index.slice_mut().copy_from_slice(values);
        index
    }
}

#[cfg(feature = "ndarray")]
impl NdDimensions for DynRank {
    type Nd = ndarray::IxDyn;

    fn nd(values: &[usize]) -> Self::Nd {
        ndarray::IxDyn(values)
    }
}

impl<'a, 'py, T: ArrayElement, D: Dimensions, A: Access> FromPyObject<'a, 'py> for TypedArray<'py, T, D, A> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let object = obj.to_owned();
        // A type of the extension's own becomes known to NumPy-name lookups (nothing for the
        // spec's types).
        crate::element::own::register::<T>();
        let extracted = match source::acquire_argument(&object) {
            Ok(Some(source)) => Self::check(object, source).map_err(ArgumentError::raise),
            Ok(None) => Err(PyTypeError::new_err(format!(
                "expected {} (an object with __dlpack__, __cuda_array_interface__, the buffer protocol or the DLPack C \
                 exchange API), got {}",
                wanted::<T, D, A>(),
                describe(&object, None)
            ))),
            Err(error) => Err(error),
        };
        extracted.map_err(|error| name_the_argument(obj.py(), error))
    }
}

/// Let the argument's name into the message: `argument 'x': expected a float32 array, ...`.
///
/// PyO3 (0.30) tells an extractor nothing of the argument it extracts: once extraction fails,
/// it calls the exception's `add_note("while processing 'x'")`. So the exception carries, in
/// its own `__dict__`, an `add_note` that puts the name before the message first, removes
/// itself and adds the note as `BaseException.add_note` does. The exception's type stays the
/// builtin one; an error raised outside argument extraction keeps its message.
pub(super) fn name_the_argument(py: Python<'_>, error: PyErr) -> PyErr {
    let install = || -> PyResult<()> {
        let value = error.value(py);
        let hook = pyo3::types::PyCFunction::new_closure(py, None, None, |args, _kwargs| -> PyResult<()> {
            let (exception, note) = args.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
            let _ = exception.getattr("__dict__")?.del_item("add_note");
            let name = note.extract::<String>().ok().and_then(|note| {
                note.strip_prefix("while processing '").and_then(|rest| rest.strip_suffix('\'')).map(str::to_owned)
            });
            if let (Some(name), Ok((message,))) = (name, exception.getattr("args")?.extract::<(String,)>()) {
                exception.setattr("args", (argument_message(&name, &message),))?;
            }
            exception
                .py()
                .get_type::<pyo3::exceptions::PyBaseException>()
                .call_method1("add_note", (&exception, note))?;
            Ok(())
        })?;
        let method = py.import("types")?.getattr("MethodType")?.call1((hook, value))?;
        value.setattr("add_note", method)
    };
    // Best effort: should the hook not install, the message stays as it was, with PyO3's note.
    let _ = install();
    error
}

/// "argument 'x': ...", the one form of a message that names the argument it is about.
fn argument_message(name: &str, message: &str) -> String {
    format!("argument '{name}': {message}")
}

impl<'py, T: ArrayElement, D: Dimensions, A: Access> TypedArray<'py, T, D, A> {
    /// The argument as passed.
    pub fn object(&self) -> &Bound<'py, PyAny> {
        &self.object
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.shape.as_ref()
    }

    /// The strides, in elements (negative for reversed axes).
    pub fn strides(&self) -> &[isize] {
        self.strides.as_ref()
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape().iter().product()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the elements are in C order without gaps (every empty array is).
    pub fn is_c_contiguous(&self) -> bool {
        strided::is_c_contiguous(self.shape(), self.strides())
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.held.as_ref().map_or(Device::CPU, |held| held.source.device)
    }

    /// For device data: the stream to work on (the caller's current stream for producers with
    /// the DLPack exchange API, else amso's stream context, else amso's stream). `None` on the
    /// host. The producer's stream is alive while this argument is: use the value within the
    /// call, not after it.
    pub fn stream(&self) -> Option<crate::stream::Stream> {
        self.held.as_ref().and_then(|held| held.source.stream)
    }

    /// The address of the first element (host or device).
    pub fn data_address(&self) -> usize {
        self.data
    }

    /// The framework the argument came from: results made for this caller go there.
    pub fn framework(&self) -> PyResult<Framework> {
        Framework::of(&self.object, self.device())
    }

    /// The first element on the host (dangling, but aligned, for an empty array), for reads.
    fn host_ptr(&self) -> Result<*mut T, ArgumentError> {
        self.require_host()?;
        Ok(match self.held.as_ref().and_then(|held| held.staged.as_ref()) {
            _ if self.is_empty() => std::ptr::NonNull::dangling().as_ptr(),
            Some(staged) => staged.copy_ptr().cast_mut(),
            None => self.data as *mut T,
        })
    }

    /// The first element on the host, for writes (a pointer into the aligned copy of a
    /// misaligned array is taken from `&mut`).
    fn host_ptr_mut(&mut self) -> Result<*mut T, ArgumentError> {
        self.require_host()?;
        let empty = self.is_empty();
        Ok(match self.held.as_mut().and_then(|held| held.staged.as_mut()) {
            _ if empty => std::ptr::NonNull::dangling().as_ptr(),
            Some(staged) => staged.copy_ptr_mut(),
            None => self.data as *mut T,
        })
    }

    /// Whether host data is misaligned (read in place by the indexers, else through a copy).
    fn misaligned(&self) -> bool {
        self.held.as_ref().is_some_and(|held| held.staged.is_some())
    }

    /// A misaligned host array's first element, while its elements are in C order and read in
    /// place (no aligned copy stands for them).
    fn in_place(&self) -> Option<*const T> {
        let staged = self.held.as_ref()?.staged.as_ref()?;
        (!self.is_empty() && self.require_host().is_ok()).then(|| staged.in_place())?.map(|data| data as *const T)
    }

    /// `data`, the first element of host data, if the argument is in C order.
    fn c_order_host(&self, what: &'static str, data: *mut T) -> Result<*const T, ArgumentError> {
        self.require_c_contiguous(what)?;
        Ok(data)
    }

    fn require_host(&self) -> Result<(), ArgumentError> {
        if self.device().device_type == DeviceType::Cuda {
            return Err(ArgumentError::DeviceData { arrived: describe(&self.object, Some(self.device())) });
        }
        Ok(())
    }

    fn require_c_contiguous(&self, what: &'static str) -> Result<(), ArgumentError> {
        if self.is_c_contiguous() {
            return Ok(());
        }
        Err(ArgumentError::NotContiguous { what, shape: self.shape().to_vec(), strides: self.strides().to_vec() })
    }

    /// The elements in C order: host data that is C-contiguous.
    pub fn as_slice(&self) -> Result<&[T], ArgumentError> {
        let data = self.host_ptr()?;
        self.require_c_contiguous("as_slice()")?;
        // SAFETY: `len` initialised, aligned, valid elements of host memory this argument holds
        // and borrows (shared) for as long as the slice lives.
        Ok(unsafe { std::slice::from_raw_parts(data, self.len()) })
    }

    /// An `ndarray` view of host data, in any layout the argument came with (negative strides
    /// included).
    #[cfg(feature = "ndarray")]
    pub fn as_array(&self) -> PyResult<ndarray::ArrayView<'_, T, D::Nd>>
    where
        D: NdDimensions,
    {
        let (base, strides) = self.lowest(self.host_ptr()?);
        // SAFETY: the shape and non-negative strides from the lowest-addressed element describe
        // initialised, aligned elements of host memory this argument holds and borrows for the
        // view's life (checked at extraction).
        let mut view = unsafe {
            use ndarray::ShapeBuilder;
            ndarray::ArrayView::from_shape_ptr(D::nd(self.shape()).strides(D::nd(&strides)), base)
        };
        self.invert_reversed(|axis| view.invert_axis(axis));
        Ok(view)
    }

    /// The lowest-addressed element and the absolute strides: what ndarray's constructors
    /// take, before `invert_reversed` turns the reversed axes round.
    #[cfg(feature = "ndarray")]
    fn lowest(&self, data: *mut T) -> (*mut T, Dims<usize>) {
        let below = strided::lowest_offset(self.shape(), self.strides());
        let strides = Dims::collect(self.ndim(), self.strides().iter().map(|s| s.unsigned_abs()));
        (data.wrapping_offset(below), strides)
    }

    #[cfg(feature = "ndarray")]
    fn invert_reversed(&self, mut invert: impl FnMut(ndarray::Axis)) {
        for (axis, _) in self.strides().iter().enumerate().filter(|(_, &s)| s < 0) {
            invert(ndarray::Axis(axis));
        }
    }

    /// A new zeroed array of `shape` on this argument's device, in the caller's framework:
    /// NumPy in gives NumPy out, torch in gives torch out, CuPy gives CuPy, JAX gives JAX.
    pub fn new_array<U: Element, const M: usize>(&self, shape: [usize; M]) -> PyResult<NewArray<'py, U, M>> {
        NewArray::zeros_in(self.object.py(), self.framework()?, shape, self.device(), self.stream())
    }

    /// Hand `value` (a `Vec`, an `ndarray::Array`, a `MemArray`) to the caller's framework
    /// without a copy, as [`IntoFramework::into_framework`] with this argument's framework.
    pub fn output<V: IntoFramework>(&self, value: V) -> PyResult<Bound<'py, PyAny>> {
        value.into_framework(self.object.py(), self.framework()?)
    }
}

impl<'py, T: Element, const N: usize> TypedArray<'py, T, Rank<N>, Write> {
    /// The host data as a writable indexer in C order, written in place: a misaligned array
    /// too, with unaligned reads and writes and no copy.
    pub fn indexer_mut(&mut self) -> Result<crate::indexer::HostIndexerMut<'_, T, N>, ArgumentError> {
        let data = match self.in_place() {
            Some(data) => data.cast_mut(),
            None => {
                let data = self.host_ptr_mut()?;
                self.c_order_host("indexer_mut()", data)?.cast_mut()
            }
        };
        // SAFETY: as in `indexer`, borrowed exclusively (a writable argument's borrow, and
        // `&mut self` for the indexer's life).
        Ok(unsafe { crate::indexer::HostIndexerMut::new(data, self.shape) })
    }
}

impl<'py, T: ArrayElement, D: Dimensions> TypedArray<'py, T, D, Write> {
    /// The elements in C order, writable: host data that is C-contiguous.
    pub fn as_slice_mut(&mut self) -> Result<&mut [T], ArgumentError> {
        let data = self.host_ptr_mut()?;
        self.require_c_contiguous("as_slice_mut()")?;
        // SAFETY: as `as_slice`, and the borrow registered at extraction is exclusive.
        Ok(unsafe { std::slice::from_raw_parts_mut(data, self.len()) })
    }

    /// A writable `ndarray` view of host data, in any layout the argument came with.
    #[cfg(feature = "ndarray")]
    pub fn as_array_mut(&mut self) -> PyResult<ndarray::ArrayViewMut<'_, T, D::Nd>>
    where
        D: NdDimensions,
    {
        let data = self.host_ptr_mut()?;
        let (base, strides) = self.lowest(data);
        // SAFETY: as `as_array`; the strides reach no element twice (checked at extraction for
        // writable arguments) and the registered borrow is exclusive.
        let mut view = unsafe {
            use ndarray::ShapeBuilder;
            ndarray::ArrayViewMut::from_shape_ptr(D::nd(self.shape()).strides(D::nd(&strides)), base)
        };
        self.invert_reversed(|axis| view.invert_axis(axis));
        Ok(view)
    }
}

impl<'py, T: ArrayElement, const N: usize, A: Access> TypedArray<'py, T, Rank<N>, A> {
    /// The shape, as an array.
    pub fn dim(&self) -> [usize; N] {
        self.shape
    }
}

impl<'py, T: Element, const N: usize, A: Access> TypedArray<'py, T, Rank<N>, A> {
    /// The host data as an indexer in C order, read in place: a misaligned array too (a view
    /// at an odd byte offset), with unaligned reads and no copy, where `as_slice()` reads its
    /// aligned copy.
    pub fn indexer(&self) -> Result<crate::indexer::HostIndexer<'_, T, N>, ArgumentError> {
        let data = match self.in_place() {
            Some(data) => data,
            None => self.c_order_host("indexer()", self.host_ptr()?)?,
        };
        // SAFETY: the array's elements in C order (the producer's, possibly misaligned, which
        // the indexer reads unaligned; or the aligned copy), held and borrowed (shared) by this
        // argument for the indexer's life.
        Ok(unsafe { crate::indexer::HostIndexer::new(data, self.shape) })
    }

    /// What a CUDA kernel receives for this argument's device data (C order); launch it on
    /// `stream()`.
    #[cfg(feature = "cuda")]
    pub fn device_indexer(&self) -> Result<crate::indexer::DeviceIndexer<'_, T, N>, ArgumentError> {
        if self.device().device_type != DeviceType::Cuda {
            return Err(ArgumentError::HostData { arrived: describe(&self.object, Some(self.device())) });
        }
        self.require_c_contiguous("device_indexer()")?;
        Ok(crate::indexer::DeviceIndexer::new(self.data as u64, self.shape))
    }
}
