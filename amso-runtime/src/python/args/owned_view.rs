//! `OwnedView`: a result over memory inside a Rust value of any type (a field of a struct, a
//! buffer of a library's own type), handed to a framework without a copy: the framework's
//! array keeps the value alive and drops it when the array goes. rust-numpy's
//! `borrow_from_array` asks the caller to keep a container alive (`unsafe`); here the value is
//! moved in, so nothing can free or move it while Python sees the memory. `ClassView` is the
//! same for memory inside a frozen `#[pyclass]` object, which the array holds instead.

use std::any::Any;
use std::sync::Arc;

use pyo3::prelude::*;

use crate::device::Device;
use crate::element::Element;
use crate::python::args::results::{Framework, Handover, IntoFramework};
use crate::strided::Dims;

/// A view of memory that a Rust value (the owner) holds, to hand to a framework as an
/// array (`into_framework`, or `x.output(view)`); the owner is dropped when the framework's
/// array is.
///
/// ```ignore
/// struct Simulation { positions: ndarray::Array2<f64>, names: Vec<String> }
///
/// let view = OwnedView::new(simulation, |s| s.positions.view_mut());
/// let array = view.readonly().into_framework(py, Framework::NumPy)?;   // no copy
/// ```
pub struct OwnedView<T: Element> {
    owner: Erased,
    data: *mut T,
    shape: Dims<usize>,
    /// In elements, negative for reversed axes.
    strides: Dims<isize>,
    readonly: bool,
}

impl<T: Element> OwnedView<T> {
    /// Move `owner` to the heap and view the memory `view` picks in it (writable from the
    /// framework, unless [`readonly`](Self::readonly)).
    pub fn new<O: Send + 'static, D: ndarray::Dimension>(
        owner: O,
        view: impl for<'a> FnOnce(&'a mut O) -> ndarray::ArrayViewMut<'a, T, D>,
    ) -> Self {
        let owner = Box::into_raw(Box::new(owner));
        // SAFETY: the box just leaked, not moved or reached otherwise until `Erased` drops it;
        // this exclusive borrow is the only access meanwhile.
        let mut view = view(unsafe { &mut *owner });
        let (shape, strides) = (Dims::from_slice(view.shape()), Dims::from_slice(view.strides()));
        let data = view.as_mut_ptr();
        OwnedView { owner: Erased::new(owner), data, shape, strides, readonly: false }
    }

    /// The same view, read-only in the framework (NumPy's `writeable` flag off; DLPack's
    /// read-only flag): rust-numpy's `make_nonwriteable`.
    pub fn readonly(mut self) -> Self {
        self.readonly = true;
        self
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
}

impl<T: Element> IntoFramework for OwnedView<T> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let owner: Arc<dyn Any + Send + Sync> = Arc::new(self.owner);
        Handover {
            data: self.data.cast(),
            device: Device::CPU,
            dtype: &T::DTYPE,
            shape: self.shape,
            strides: Some(self.strides),
            owner,
            readonly: self.readonly,
            stream: None,
        }
        .deliver_as::<T>(py, framework)
    }
}

/// A read-only view of memory inside a frozen `#[pyclass]` object, for a getter to return: the
/// framework's array holds the object, so the memory lives as long as the array (NumPy's array
/// has the object itself as its base). rust-numpy's `borrow_from_array`, without its `unsafe`:
/// a frozen class gives no `&mut` access, so nothing moves or writes the memory meanwhile.
///
/// ```ignore
/// #[pyclass(frozen)]
/// struct Grid { values: ndarray::Array2<f64> }
///
/// #[pymethods]
/// impl Grid {
///     #[getter]
///     fn values<'py>(this: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
///         ClassView::new(&this, |grid| grid.values.view()).into_framework(this.py(), Framework::NumPy)
///     }
/// }
/// ```
pub struct ClassView<T: Element> {
    owner: Py<PyAny>,
    data: *const T,
    shape: Dims<usize>,
    /// In elements, negative for reversed axes.
    strides: Dims<isize>,
}

impl<T: Element> ClassView<T> {
    /// The memory `view` picks in `object`'s value.
    pub fn new<'py, C, D: ndarray::Dimension>(
        object: &Bound<'py, C>,
        view: impl for<'a> FnOnce(&'a C) -> ndarray::ArrayView<'a, T, D>,
    ) -> Self
    where
        C: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
    {
        let view = view(object.get());
        let (shape, strides) = (Dims::from_slice(view.shape()), Dims::from_slice(view.strides()));
        ClassView { owner: object.clone().into_any().unbind(), data: view.as_ptr(), shape, strides }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
}

impl<T: Element> IntoFramework for ClassView<T> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        if framework == Framework::NumPy {
            // A getter's common case, straight to NumPy: the object is the array's base.
            // SAFETY: `data` addresses the elements `shape` and `strides` reach inside the
            // frozen object's value, which nothing writes or moves while the object (the base)
            // lives; read-only.
            return unsafe {
                crate::python::npyffi::dtype::array_of::<T>(
                    py,
                    &self.shape,
                    Some(&self.strides),
                    self.data.cast_mut().cast(),
                    Some(self.owner.into_bound(py)),
                    true,
                )
            };
        }
        Handover {
            data: self.data.cast_mut().cast(),
            device: Device::CPU,
            dtype: &T::DTYPE,
            shape: self.shape,
            strides: Some(self.strides),
            owner: self.owner,
            readonly: true,
            stream: None,
        }
        .deliver(py, framework)
    }
}

// SAFETY: `data` points into the value of the object `owner` holds (frozen, so never written
// or moved while it lives); a `Py` is `Send`.
unsafe impl<T: Element> Send for ClassView<T> {}

/// A leaked `Box<O>` of any type, dropped once with its value.
struct Erased {
    pointer: *mut (),
    drop: unsafe fn(*mut ()),
}

impl Erased {
    fn new<O: Send + 'static>(owner: *mut O) -> Erased {
        unsafe fn drop_box<O>(pointer: *mut ()) {
            // SAFETY: the pointer `Box::into_raw` gave for this `O`, dropped once (by `Erased`).
            drop(unsafe { Box::from_raw(pointer.cast::<O>()) });
        }
        Erased { pointer: owner.cast(), drop: drop_box::<O> }
    }
}

impl Drop for Erased {
    fn drop(&mut self) {
        // SAFETY: made by `Erased::new`, dropped once, here.
        unsafe { (self.drop)(self.pointer) }
    }
}

// SAFETY: the owner is `Send`; `Erased` hands out no reference to it (only drop reaches it),
// so sharing an `Erased` shares nothing.
unsafe impl Send for Erased {}
// SAFETY: as above.
unsafe impl Sync for Erased {}
// SAFETY: `data` points into the owner, which the view moves with it (see `Erased`).
unsafe impl<T: Element> Send for OwnedView<T> {}
