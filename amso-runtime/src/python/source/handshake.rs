//! The Python-level protocols: the array API's `__dlpack__` handshake and the CUDA array
//! interface. One rule for both (the module docs of `source` state it): device data is handed
//! over on the caller's stream, else the thread's `amso.cuda.stream(...)`, else amso's own
//! stream of the device.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{ffi, intern};

use crate::device::{Device, DeviceId, DeviceType};

use crate::dlpack::{ManagedTensor, RawManaged, DLPACK_VERSION};
use crate::element::DType;
use crate::python::base::convert::StreamValue;
use crate::python::source::{work_stream, Described, Holder, Producer, Request, Source};
use crate::stream::Stream;

/// Take `obj`'s tensor through `__dlpack__`: versioned (`max_version`), with the stream
/// handshake for device data, asking for `copy` when given. A producer older than the array
/// API's keywords (a `TypeError`) is asked again in the legacy form, unless a copy was asked
/// for, which the legacy form cannot promise. Returns the tensor and the stream it was handed
/// over on (device data only).
pub(crate) fn dlpack_tensor(
    obj: &Bound<'_, PyAny>,
    stream: Option<Stream>,
    copy: Option<bool>,
) -> PyResult<(ManagedTensor, Option<Stream>)> {
    let py = obj.py();
    let (device_type, device_id): (i32, i32) = match obj.getattr_opt(intern!(py, "__dlpack_device__"))? {
        Some(method) => method.call0()?.extract()?,
        None => (DeviceType::Cpu as i32, 0),
    };
    // Managed memory (kDLCUDAManaged) is handed over on a stream as device memory is.
    let on_device = device_type == DeviceType::Cuda as i32 || device_type == DeviceType::CudaManaged as i32;
    if on_device && device_id < 0 {
        return Err(PyValueError::new_err(format!(
            "the producer's device id {device_id} is not valid for device type {device_type} (its __dlpack_device__)"
        )));
    }
    let stream = on_device.then(|| work_stream(stream, DeviceId::new(device_id)?)).transpose()?;
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "max_version"), DLPACK_VERSION)?;
    if let Some(stream) = stream {
        kwargs.set_item(intern!(py, "stream"), stream.protocol_value())?;
    }
    if let Some(copy) = copy {
        kwargs.set_item(intern!(py, "copy"), copy)?;
    }
    let capsule = match obj.call_method(intern!(py, "__dlpack__"), (), Some(&kwargs)) {
        Ok(capsule) => capsule,
        Err(error) if error.is_instance_of::<PyTypeError>(py) && copy != Some(true) => {
            kwargs.del_item(intern!(py, "max_version"))?;
            if copy.is_some() {
                kwargs.del_item(intern!(py, "copy"))?; // the legacy form never copies
            }
            obj.call_method(intern!(py, "__dlpack__"), (), Some(&kwargs))?
        }
        Err(error) => return Err(error),
    };
    Ok((take_capsule(py, &capsule)?, stream))
}

/// Take over a DLPack capsule's tensor, renaming the capsule "used_...", as consumers do.
pub(crate) fn take_capsule(py: Python<'_>, capsule: &Bound<'_, PyAny>) -> PyResult<ManagedTensor> {
    for (name, used, versioned) in
        [(c"dltensor_versioned", c"used_dltensor_versioned", true), (c"dltensor", c"used_dltensor", false)]
    {
        // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
        if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), name.as_ptr()) } == 1 {
            // SAFETY: valid under `name`; renaming hands its ownership to us.
            let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
            let pointer = std::ptr::NonNull::new(pointer).ok_or_else(|| PyErr::fetch(py))?;
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

/// What a `__cuda_array_interface__` dict (version 2 or 3) describes, checked field by field.
pub(crate) struct Interface {
    pub(crate) dims: Vec<i64>,
    pub(crate) typestr: String,
    pub(crate) address: usize,
    pub(crate) readonly: bool,
    /// Byte strides, if given.
    pub(crate) strides: Option<Vec<i64>>,
    /// The producer's stream (v3), which consumers order after.
    pub(crate) stream: Option<Stream>,
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
            if error.is_instance_of::<PyOverflowError>(value.py()) {
                PyOverflowError::new_err(message)
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
    let stream: Option<StreamValue> = optional("stream")?.map(|s| typed(s, "stream", "None or an int")).transpose()?;
    let stream = stream.map(|StreamValue(stream)| stream);
    crate::memarray::foreign::check_dims(&dims)?;
    if strides.as_ref().is_some_and(|s| s.len() != dims.len()) {
        return Err(PyValueError::new_err(format!(
            "__cuda_array_interface__ has {} strides for {} dimensions",
            strides.as_ref().map_or(0, Vec::len),
            dims.len()
        )));
    }
    Ok(Interface { dims, typestr, address, readonly, strides, stream })
}

/// `obj`'s device memory through the CUDA array interface, ordered after the producer's stream
/// on the work stream.
pub(super) fn from_interface(obj: &Bound<'_, PyAny>, request: Request) -> PyResult<Source> {
    let interface = parse_interface(obj)?;
    let dtype = DType::from_typestr(&interface.typestr).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "__cuda_array_interface__ typestr {:?} is not a dtype amso knows (little-endian bool, int, uint, float \
             or complex)",
            interface.typestr
        ))
    })?;
    if request.c_contiguous {
        let strides = interface
            .strides
            .as_deref()
            .map_or(crate::python::source::Strides::COrder, crate::python::source::Strides::Bytes);
        strides.check_c_contiguous(&interface.dims, dtype.itemsize())?;
    }
    let device_id = device_of(interface.address)?;
    let work = work_stream(request.stream, device_id)?;
    #[cfg(feature = "cuda")]
    if let Some(producer) = interface.stream {
        use crate::cuda::stream::{order, StreamHandle};
        order(device_id, StreamHandle::of(producer)?, StreamHandle::of(work)?.check(device_id)?)?;
    }
    #[cfg(not(feature = "cuda"))]
    let _ = interface.stream; // device memory cannot be reached without the CUDA layer anyway
    Ok(Source {
        holder: Holder::Interface(Box::new(Described {
            _producer: Producer::new(obj),
            dims: interface.dims,
            byte_strides: interface.strides,
        })),
        data: interface.address,
        dtype: dtype.dlpack(),
        device: Device::cuda(device_id),
        readonly: interface.readonly,
        stream: Some(work),
        managed: false,
        numpy_kind: None,
    })
}

/// The CUDA device holding `address` (0 for a NULL address of an empty array).
pub(crate) fn device_of(address: usize) -> PyResult<DeviceId> {
    if address == 0 {
        return Ok(DeviceId::ZERO);
    }
    #[cfg(feature = "cuda")]
    return Ok(crate::cuda::driver::device_of_pointer(address)?);
    #[cfg(not(feature = "cuda"))]
    Err(crate::error::Error::Unavailable(
        "CUDA memory needs amso's CUDA layer, which this build does not include".into(),
    )
    .into())
}
