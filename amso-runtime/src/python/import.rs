//! Importing foreign memory without copying: an amso array over another library's DLPack
//! tensor (versioned or legacy) or `__cuda_array_interface__` data. The producer's tensor or
//! object is kept alive until the amso array and every view exported from it are gone.

use std::ptr::NonNull;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::array::MemArrayBase;
use super::registry;
use crate::device::{Device, DeviceType};
use crate::dlpack::{ManagedTensor, RawManaged, DLPACK_VERSION};
use crate::memarray::foreign::{check_c_contiguous, check_dims, check_major_version, claim, ForeignMemory};

/// An amso array over the tensor `owner` owns (its deleter runs exactly once, also when the
/// tensor is refused).
pub(super) fn wrap_tensor(py: Python<'_>, owner: ManagedTensor) -> PyResult<Py<PyAny>> {
    let (t, readonly, major) = owner.describe();
    check_major_version(major)?;
    // SAFETY: a producer's tensor: shape and strides hold ndim entries.
    let (dims, address, device) = unsafe { claim(t) }?;
    let registration = registry::find(t.dtype.code.0, t.dtype.bits, t.dtype.lanes, dims.len()).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "no compiled amso array for DLPack dtype (code {}, bits {}, lanes {}) with ndim {}; compiled: {}. \
             Add it to specs/types.yaml and rebuild",
            t.dtype.code.0,
            t.dtype.bits,
            t.dtype.lanes,
            dims.len(),
            registry::compiled()
        ))
    })?;
    let memory = ForeignMemory { address, device, owner: Box::new(owner) };
    // SAFETY: the producer's tensor describes `dims` C-contiguous elements of this dtype at
    // that address, valid until its deleter runs (when the owner drops).
    let array = unsafe { registration.wrap(&dims, memory, readonly) }?;
    (registration.instance)(py, MemArrayBase::new(array))
}

/// Take over a DLPack capsule's tensor, renaming the capsule "used_...", as consumers do.
pub(super) fn take_capsule(py: Python<'_>, capsule: &Bound<'_, PyAny>) -> PyResult<ManagedTensor> {
    for (name, used, versioned) in
        [(c"dltensor_versioned", c"used_dltensor_versioned", true), (c"dltensor", c"used_dltensor", false)]
    {
        // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
        if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), name.as_ptr()) } == 1 {
            // SAFETY: valid under `name`; renaming hands its ownership to us.
            let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
            let pointer = NonNull::new(pointer).ok_or_else(|| PyErr::fetch(py))?;
            // SAFETY: as above.
            if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), used.as_ptr()) } != 0 {
                return Err(PyErr::fetch(py));
            }
            let raw =
                if versioned { RawManaged::Versioned(pointer.cast()) } else { RawManaged::Legacy(pointer.cast()) };
            // SAFETY: the renamed capsule no longer owns the tensor; we do, alone.
            return Ok(unsafe { ManagedTensor::from_raw(raw) });
        }
    }
    Err(PyTypeError::new_err(
        "__dlpack__ returned something that is not an unconsumed DLPack capsule (\"dltensor\" or \"dltensor_versioned\")",
    ))
}

/// Take over a DLPack capsule and wrap its tensor.
pub(super) fn wrap_capsule(py: Python<'_>, capsule: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    wrap_tensor(py, take_capsule(py, capsule)?)
}

/// `amso.from_dlpack(obj, *, copy=None)`: an amso array over `obj`'s memory (or a copy of it
/// with copy=True), for any object with `__dlpack__` and `__dlpack_device__`.
#[pyfunction]
#[pyo3(signature = (obj, *, copy = None))]
pub fn from_dlpack(py: Python<'_>, obj: &Bound<'_, PyAny>, copy: Option<bool>) -> PyResult<Py<PyAny>> {
    if !obj.hasattr("__dlpack__")? {
        return Err(PyTypeError::new_err(format!(
            "{} has no __dlpack__; amso.asarray also takes the CUDA array interface and the buffer protocol",
            obj.get_type().name()?
        )));
    }
    let (device_type, _): (i32, i32) =
        if obj.hasattr("__dlpack_device__")? { obj.call_method0("__dlpack_device__")?.extract()? } else { (1, 0) };
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", DLPACK_VERSION)?;
    if device_type == DeviceType::Cuda as i32 {
        // The producer orders its pending work before our stream (amso's current, else legacy).
        kwargs.set_item("stream", crate::stream_context::current().unwrap_or(1))?;
    }
    if let Some(copy) = copy {
        kwargs.set_item("copy", copy)?;
    }
    let capsule = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(capsule) => capsule,
        // Producers older than the array API's keywords: ask again without them (legacy).
        Err(error) if error.is_instance_of::<PyTypeError>(py) && copy.is_none() => {
            let legacy = PyDict::new(py);
            if let Some(stream) = kwargs.get_item("stream")? {
                legacy.set_item("stream", stream)?;
            }
            obj.call_method("__dlpack__", (), Some(&legacy))?
        }
        Err(error) => return Err(error),
    };
    wrap_capsule(py, &capsule)
}

/// What a `__cuda_array_interface__` dict (version 2 or 3) describes, checked field by field.
pub(crate) struct Interface {
    pub(crate) dims: Vec<i64>,
    pub(crate) typestr: String,
    pub(crate) address: usize,
    pub(crate) readonly: bool,
    /// Byte strides, if given.
    pub(crate) strides: Option<Vec<i64>>,
    /// The producer's stream (v3), which consumers order after.
    pub(crate) stream: Option<i64>,
}

/// Read and check `obj.__cuda_array_interface__`.
pub(crate) fn parse_interface(obj: &Bound<'_, PyAny>) -> PyResult<Interface> {
    let interface = obj.getattr("__cuda_array_interface__")?;
    let interface =
        interface.cast::<PyDict>().map_err(|_| PyTypeError::new_err("__cuda_array_interface__ must be a dict"))?;
    let field = |name: &str| -> PyResult<Bound<'_, PyAny>> {
        interface
            .get_item(name)?
            .ok_or_else(|| PyTypeError::new_err(format!("__cuda_array_interface__ has no `{name}`")))
    };
    // A field of the wrong type names the field and the type it must have.
    fn typed<'py, T: for<'a> FromPyObject<'a, 'py, Error = PyErr>>(
        value: Bound<'py, PyAny>,
        name: &str,
        wanted: &str,
    ) -> PyResult<T> {
        value.extract::<T>().map_err(|error| {
            let message = format!("__cuda_array_interface__['{name}'] must be {wanted}: {error}");
            if error.is_instance_of::<pyo3::exceptions::PyOverflowError>(value.py()) {
                pyo3::exceptions::PyOverflowError::new_err(message)
            } else {
                PyTypeError::new_err(message)
            }
        })
    }
    let optional =
        |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> { Ok(interface.get_item(name)?.filter(|v| !v.is_none())) };
    let dims: Vec<i64> = typed(field("shape")?, "shape", "a tuple of ints")?;
    let typestr: String = typed(field("typestr")?, "typestr", "a str such as '<f4'")?;
    let (address, readonly): (usize, bool) = typed(field("data")?, "data", "a (pointer, read_only) tuple")?;
    let strides: Option<Vec<i64>> =
        optional("strides")?.map(|s| typed(s, "strides", "None or a tuple of ints")).transpose()?;
    let stream: Option<i64> = optional("stream")?.map(|s| typed(s, "stream", "None or an int")).transpose()?;
    check_dims(&dims)?;
    Ok(Interface { dims, typestr, address, readonly, strides, stream })
}

/// `amso._amso.from_cuda_array_interface(obj)`: an amso array over the device memory `obj`
/// describes with `__cuda_array_interface__` (version 2 or 3), keeping `obj` alive. A v3
/// `stream` is honoured: amso's work on the array waits for it.
#[pyfunction]
pub fn from_cuda_array_interface(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let Interface { dims, typestr, address, readonly, strides, stream } = parse_interface(obj)?;
    let registration = registry::find_typestr(&typestr, dims.len()).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "no compiled amso array for typestr {typestr:?} with ndim {}; compiled: {}",
            dims.len(),
            registry::compiled()
        ))
    })?;
    if let Some(strides) = &strides {
        check_c_contiguous(&dims, strides, registration.dtype().itemsize() as i64)?;
    }
    let device_id = device_of(address)?;
    #[cfg(feature = "cuda")]
    if let Some(stream) = stream {
        use crate::cuda::stream::{order, StreamHandle};
        order(device_id, StreamHandle::from_int(stream)?, StreamHandle::LEGACY.check(device_id)?)?;
    }
    #[cfg(not(feature = "cuda"))]
    let _ = stream;
    let memory = ForeignMemory { address, device: Device::cuda(device_id), owner: Box::new(obj.clone().unbind()) };
    // SAFETY: the interface describes `dims` C-contiguous elements of this dtype at `address`
    // on the device, valid while `obj` lives (the owner holds a reference to it).
    let array = unsafe { registration.wrap(&dims, memory, readonly) }?;
    (registration.instance)(py, MemArrayBase::new(array))
}

/// The CUDA device holding `address` (0 for a NULL address of an empty array).
pub(crate) fn device_of(address: usize) -> PyResult<i32> {
    if address == 0 {
        return Ok(0);
    }
    #[cfg(feature = "cuda")]
    return Ok(crate::cuda::driver::device_of_pointer(address)?);
    #[cfg(not(feature = "cuda"))]
    Err(crate::Error::Unavailable("CUDA memory needs amso's CUDA layer, which this build does not include".into())
        .into())
}
