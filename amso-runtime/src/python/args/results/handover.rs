//! Handing memory to a framework without a copy: the DLPack tensor built over memory Rust
//! owns (`Handover`, `Owner`), ordered on the consumer's stream.

use std::any::Any;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use dlpark::ffi::DLPackVersion;
use pyo3::exceptions::{PyBufferError, PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

use super::framework::Framework;
use crate::device::{Device, DeviceId, DeviceType};
use crate::dlpack::{ExportSource, Format, ManagedTensor, RawManaged, DLPACK_VERSION};
use crate::element::{ArrayElement, DType};
use crate::python::npyffi::dtype;
use crate::stream::Stream;
use crate::strided::Dims;

/// Memory handed to a framework: what a DLPack tensor describes, and `owner`, which keeps it
/// alive.
pub(crate) struct Handover<O: Owner> {
    pub(in crate::python::args) data: *mut c_void,
    pub(in crate::python::args) device: Device,
    pub(in crate::python::args) dtype: &'static DType,
    pub(in crate::python::args) shape: Dims<usize>,
    /// Strides in elements; `None` for C order.
    pub(in crate::python::args) strides: Option<Dims<isize>>,
    pub(in crate::python::args) owner: O,
    pub(in crate::python::args) readonly: bool,
    /// For device data: the stream its last work was on, which the consumer is ordered after.
    pub(in crate::python::args) stream: Option<Stream>,
}

// SAFETY: `data` addresses memory `owner` (which is Send + Sync) keeps alive; the rest is
// plain data.
unsafe impl<O: Owner> Send for Handover<O> {}

impl<O: Owner> Handover<O> {
    /// Hand the memory to `framework`, as its array object.
    pub(in crate::python::args) fn deliver(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        framework.check_device(self.device)?;
        if self.dtype.is_record() && framework == Framework::Amso && self.device.device_type != DeviceType::Cuda {
            // DLPack has no record type: NumPy's array over the memory, then amso's record
            // class over NumPy's (`amso.asarray`, the bundled module's classes), without a copy
            // in C order (amso's arrays are), with one otherwise.
            let c_order =
                self.strides.as_deref().is_none_or(|strides| crate::strided::is_c_contiguous(&self.shape, strides));
            let array = self.deliver(py, Framework::NumPy)?;
            let asarray = py.import(pyo3::intern!(py, "amso"))?.getattr(pyo3::intern!(py, "asarray"))?;
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item(pyo3::intern!(py, "copy"), if c_order { Some(false) } else { None })?;
            return asarray.call((array,), Some(&kwargs));
        }
        if self.dtype.numpy_only() && framework != Framework::NumPy {
            let also = if self.dtype.is_record() { " (and, on the host, to amso)" } else { "" };
            return Err(PyValueError::new_err(format!(
                "{} arrays go to NumPy{also} only (DLPack has no such element type, so {framework:?} cannot take \
                 them); hand them to Framework::NumPy",
                self.dtype.name
            )));
        }
        if framework == Framework::NumPy {
            let owner = self.owner.into_capsule(py)?;
            // SAFETY: `data` holds the elements `shape` and `strides` reach, kept alive by the
            // owner, which NumPy holds as the array's base.
            return unsafe {
                dtype::array_over(
                    py,
                    self.dtype,
                    &self.shape,
                    self.strides.as_deref(),
                    self.data,
                    Some(owner),
                    self.readonly,
                )
            };
        }
        if self.shape.len() > crate::shape::MAX_NDIM {
            return Err(PyValueError::new_err(format!(
                "amso hands arrays of at most {} dimensions to DLPack consumers, not {}; NumPy takes more \
                 (Framework::NumPy)",
                crate::shape::MAX_NDIM,
                self.shape.len()
            )));
        }
        if let Some(table) = framework.exchange_table(py)? {
            if let Some(to_object) = table.managed_tensor_to_py_object_no_sync {
                if self.device.device_type == DeviceType::Cuda {
                    let consumer = crate::python::source::framework_stream(py, table, self.device.id)?;
                    order(self.device.id, self.stream, Some(consumer))?;
                }
                let RawManaged::Versioned(raw) = self.into_tensor(VERSIONED).into_raw() else {
                    unreachable!("asked for a versioned tensor")
                };
                let mut out: *mut c_void = std::ptr::null_mut();
                // SAFETY: the function takes ownership of the tensor (deleting it on failure);
                // the GIL is held.
                if unsafe { to_object(raw.as_ptr(), &mut out) } != 0 || out.is_null() {
                    return Err(PyErr::take(py)
                        .unwrap_or_else(|| PyRuntimeError::new_err("the framework could not wrap the tensor")));
                }
                // SAFETY: a new reference from the framework.
                return Ok(unsafe { Bound::from_owned_ptr(py, out.cast()) });
            }
        }
        let from_dlpack = framework.dlpack_importer(py)?;
        let handoff = Bound::new(py, Handoff { handover: Mutex::new(Some(self.shared())) })?;
        from_dlpack.call1((handoff,))
    }

    /// `deliver`, for elements `T` known where the handover is made (`dtype` is `T`'s): a host
    /// array for NumPy is made with `T`'s NumPy type number worked out at compile time
    /// (`dtype::array_of`), with no other step; anything else goes through `deliver`.
    pub(in crate::python::args) fn deliver_as<T: ArrayElement>(
        self,
        py: Python<'_>,
        framework: Framework,
    ) -> PyResult<Bound<'_, PyAny>> {
        debug_assert_eq!(self.dtype.name, T::DTYPE.name, "a handover delivered as another element type");
        if framework != Framework::NumPy || self.device != Device::CPU {
            return self.deliver(py, framework);
        }
        let owner = self.owner.into_capsule(py)?;
        // SAFETY: as in `deliver`: `data` holds the elements `shape` and `strides` reach, kept
        // alive by the owner, which NumPy holds as the array's base.
        unsafe { dtype::array_of::<T>(py, &self.shape, self.strides.as_deref(), self.data, Some(owner), self.readonly) }
    }

    /// The same handover with its owner shared (what a Python object can hold).
    fn shared(self) -> Handover<Arc<dyn Any + Send + Sync>> {
        Handover {
            data: self.data,
            device: self.device,
            dtype: self.dtype,
            shape: self.shape,
            strides: self.strides,
            owner: self.owner.into_arc(),
            readonly: self.readonly,
            stream: self.stream,
        }
    }

    fn into_tensor(self, format: Format) -> ManagedTensor {
        let source = ExportSource {
            data: self.data,
            device: self.device,
            dtype: self.dtype.dl_data_type(),
            shape: &self.shape,
            strides: self.strides.as_deref(),
            owner: self.owner.into_arc().into(),
            readonly: self.readonly,
            copied: false,
        };
        ManagedTensor::new(source, format)
    }
}

/// The versioned format amso writes.
pub(in crate::python::args) const VERSIONED: Format =
    Format::Versioned(DLPackVersion { major: DLPACK_VERSION.0, minor: DLPACK_VERSION.1 });

/// What keeps a handed-over result's memory alive, whichever way it goes: as a capsule NumPy
/// holds for an array's base, or as a DLPack tensor's owner.
pub(crate) trait Owner: Send + Sync + 'static {
    /// A capsule that drops the owner with itself.
    fn into_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>>;
    /// The owner, shared.
    fn into_arc(self) -> Arc<dyn Any + Send + Sync>;
}

/// The capsule name of result owners.
pub(in crate::python::args) const OWNER: &CStr = c"amso.result_owner";

/// A new capsule over `pointer` (with `context`), whose `release` frees what it points at; if
/// no capsule can be made, `release_now` frees it at once.
pub(in crate::python::args) fn capsule<'py>(
    py: Python<'py>,
    pointer: *mut c_void,
    context: *mut c_void,
    release: unsafe extern "C" fn(*mut ffi::PyObject),
    release_now: impl FnOnce(),
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: a live, non-NULL pointer, a static name and a destructor that frees it.
    let capsule = unsafe { ffi::PyCapsule_New(pointer, OWNER.as_ptr(), Some(release)) };
    // SAFETY: a valid capsule takes any context.
    if capsule.is_null() || unsafe { ffi::PyCapsule_SetContext(capsule, context) } != 0 {
        if !capsule.is_null() {
            // SAFETY: our new reference, freed without its destructor, which would read the
            // context that was not set.
            unsafe {
                ffi::PyCapsule_SetDestructor(capsule, None);
                ffi::Py_DecRef(capsule);
            }
        }
        release_now();
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}

/// A `Vec` goes into its capsule as its raw parts (the buffer, and its capacity as the
/// capsule's context): no allocation beyond the vector's own.
impl<T: ArrayElement> Owner for Vec<T> {
    fn into_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        // Elements that own something (`Py<PyAny>`: one reference each) drop with the vector,
        // when the framework lets go of it (the GIL held, as NumPy frees arrays): all `capacity`
        // of them, so only a full vector goes into the capsule as its parts.
        let owned = std::mem::needs_drop::<T>();
        if owned && self.len() != self.capacity() {
            return self.into_arc().into_capsule(py);
        }
        unsafe extern "C" fn release<T: 'static>(capsule: *mut ffi::PyObject) {
            // SAFETY: a capsule made below: the vector's buffer and, as context, its capacity.
            let (pointer, capacity) = unsafe {
                (ffi::PyCapsule_GetPointer(capsule, OWNER.as_ptr()), ffi::PyCapsule_GetContext(capsule) as usize)
            };
            if !pointer.is_null() {
                // Elements that need a drop fill the whole buffer (checked before the capsule
                // was made); the others are not dropped.
                let len = if std::mem::needs_drop::<T>() { capacity } else { 0 };
                if std::any::TypeId::of::<T>() == std::any::TypeId::of::<Py<PyAny>>() {
                    // Object references, given back directly: a capsule's destructor runs with
                    // the GIL held (NumPy frees its arrays so), where PyO3's drop would first
                    // attach to learn that.
                    // SAFETY: the buffer of a vector of that capacity, given up below and freed
                    // once, here; `Py<PyAny>` is one non-NULL `PyObject*` (transparent), each
                    // holding one reference, given back once, here.
                    let objects = unsafe { Vec::from_raw_parts(pointer.cast::<*mut ffi::PyObject>(), len, capacity) };
                    for &object in &objects {
                        // SAFETY: as above; the GIL is held.
                        unsafe { ffi::Py_DecRef(object) };
                    }
                    return;
                }
                // SAFETY: the buffer of a vector of that capacity, given up below and freed once,
                // here, with `len` initialised elements.
                let vector = unsafe { Vec::from_raw_parts(pointer.cast::<T>(), len, capacity) };
                if len > 0 {
                    // Attached (the caller holds the GIL), so that the references `Py` elements
                    // hold are released now, not queued by PyO3 for its next call. No panic may
                    // cross into NumPy; a panicking drop leaks instead.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        crate::python::base::drop_attached(vector);
                    }));
                }
            }
        }
        let mut vector = std::mem::ManuallyDrop::new(self);
        let (pointer, capacity) = (vector.as_mut_ptr(), vector.capacity());
        let free = || {
            let len = if owned { capacity } else { 0 };
            // SAFETY: the parts just taken from the vector, freed once (no capsule took them).
            drop(unsafe { Vec::from_raw_parts(pointer, len, capacity) })
        };
        capsule(py, pointer.cast(), capacity as *mut c_void, release::<T>, free)
    }

    fn into_arc(self) -> Arc<dyn Any + Send + Sync> {
        Arc::new(self)
    }
}

/// A Python object (a `#[pyclass]` instance whose memory a `ClassView` shows) is the array's
/// owner itself: NumPy takes it as the array's base, with no capsule.
impl Owner for Py<PyAny> {
    fn into_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        Ok(self.into_bound(py))
    }

    fn into_arc(self) -> Arc<dyn Any + Send + Sync> {
        Arc::new(self)
    }
}

/// An amso array's host buffer goes into its capsule as the `Arc`'s own pointer: no allocation.
impl Owner for Arc<crate::host::HostBuffer> {
    fn into_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        unsafe extern "C" fn release(capsule: *mut ffi::PyObject) {
            // SAFETY: a capsule made below, holding one reference of the `Arc`.
            let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule, OWNER.as_ptr()) };
            if !pointer.is_null() {
                // No panic may cross into NumPy; a panicking drop leaks instead.
                let _ = std::panic::catch_unwind(|| {
                    // SAFETY: given up below, taken back once, here.
                    let owner = unsafe { Arc::from_raw(pointer.cast::<crate::host::HostBuffer>()) };
                    // Attached (the caller holds the GIL): a foreign producer's owner the
                    // buffer keeps may hold Python references.
                    crate::python::base::drop_attached(owner);
                });
            }
        }
        let pointer = Arc::into_raw(self);
        let free = || {
            // SAFETY: given up just above, taken back once (no capsule took it).
            drop(unsafe { Arc::from_raw(pointer) })
        };
        capsule(py, pointer.cast_mut().cast(), std::ptr::null_mut(), release, free)
    }

    fn into_arc(self) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// An amso array's memory (any kind) goes into its capsule boxed.
impl Owner for Arc<dyn Any + Send + Sync> {
    fn into_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        unsafe extern "C" fn release(capsule: *mut ffi::PyObject) {
            // SAFETY: a capsule made below, holding a leaked box.
            let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule, OWNER.as_ptr()) };
            if !pointer.is_null() {
                // No panic may cross into NumPy; a panicking drop leaks instead.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // SAFETY: leaked below, released once, here.
                    let owner = unsafe { Box::from_raw(pointer.cast::<Arc<dyn Any + Send + Sync>>()) };
                    // Attached (the caller holds the GIL), so that Python references the owner
                    // holds (`Vec<Py<PyAny>>`) are released now; leaked quietly at exit.
                    crate::python::base::drop_attached(owner);
                }));
            }
        }
        let pointer = Box::into_raw(Box::new(self));
        let free = || {
            // SAFETY: leaked just above, freed once (no capsule took it).
            drop(unsafe { Box::from_raw(pointer) })
        };
        capsule(py, pointer.cast(), std::ptr::null_mut(), release, free)
    }

    fn into_arc(self) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// Order work on `later` after the producer's work on `earlier` (device `device_id`).
pub(in crate::python::args) fn order(
    device_id: DeviceId,
    earlier: Option<Stream>,
    later: Option<Stream>,
) -> PyResult<()> {
    let (Some(earlier), Some(later)) = (earlier, later) else { return Ok(()) };
    if earlier == later {
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    {
        use crate::cuda::stream::StreamHandle;
        let later = StreamHandle::of(later)?.check(device_id)?;
        crate::cuda::stream::order(device_id, StreamHandle::of(earlier)?, later)?;
        Ok(())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device_id;
        Err(PyRuntimeError::new_err("device memory needs amso's CUDA layer, which this build does not include"))
    }
}

/// A result on its way to a framework without an exchange table: the object its `from_dlpack`
/// reads, once.
#[pyclass(frozen, module = "amso._amso", name = "_Handoff")]
pub(in crate::python::args) struct Handoff {
    handover: Mutex<Option<Handover<Arc<dyn Any + Send + Sync>>>>,
}

#[pymethods]
impl Handoff {
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>, // the protocol's raw value (`DlpackRequest::stream`)
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut slot = self.handover.lock().unwrap_or_else(|e| e.into_inner());
        let handover = slot.as_ref().ok_or_else(|| PyBufferError::new_err("this result was handed over already"))?;
        let here = handover.device.dlpack_codes();
        if dl_device.is_some_and(|wanted| wanted != here) || copy == Some(true) {
            return Err(PyBufferError::new_err(format!(
                "a result is handed over once, where it is ({here:?}), without a copy; asked for dl_device={dl_device:?}, \
                 copy={copy:?}"
            )));
        }
        let format = match max_version {
            Some((major, minor)) if major >= 1 => {
                let minor = if major == DLPACK_VERSION.0 { minor.min(DLPACK_VERSION.1) } else { DLPACK_VERSION.1 };
                Format::Versioned(DLPackVersion { major: DLPACK_VERSION.0, minor })
            }
            _ if handover.readonly => {
                return Err(PyBufferError::new_err(
                    "the result is read-only, which a legacy (unversioned) DLPack capsule cannot say: call \
                     __dlpack__(max_version=(1, 0)) or later (its READ_ONLY flag)",
                ))
            }
            _ if crate::dlpack::padded(handover.dtype.dl_data_type()) => {
                return Err(PyBufferError::new_err(
                    "a sub-byte element padded to a byte needs a versioned DLPack tensor (its padded flag): call \
                     __dlpack__(max_version=(1, 0)) or later",
                ))
            }
            _ => Format::Legacy,
        };
        // Out of the slot before the ordering lets the GIL go, so that no other thread waits
        // for the slot's lock holding the GIL; back in if the ordering fails.
        let handover = slot.take().expect("checked above");
        drop(slot);
        // DLPack's -1: the consumer asks for no ordering.
        let consumer = match stream {
            Some(-1) => None,
            other => Some(Stream::reported(other.unwrap_or(1))),
        };
        if handover.device.device_type == DeviceType::Cuda {
            if let Err(error) = order(handover.device.id, handover.stream, consumer) {
                *self.handover.lock().unwrap_or_else(|e| e.into_inner()) = Some(handover);
                return Err(error);
            }
        }
        crate::python::export::capsule::into_capsule(py, handover.into_tensor(format))
    }

    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        let slot = self.handover.lock().unwrap_or_else(|e| e.into_inner());
        let handover = slot.as_ref().ok_or_else(|| PyBufferError::new_err("this result was handed over already"))?;
        Ok(handover.device.dlpack_codes())
    }
}
