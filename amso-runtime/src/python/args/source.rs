//! Where a typed argument's memory comes from, in order of preference:
//! 1. the producer type's DLPack C exchange API (`__dlpack_c_exchange_api__`: PyTorch, TVM-FFI,
//!    amso arrays of any crate), with no Python call; the work stream is the producer's
//!    `current_work_stream` (inside `with torch.cuda.stream(s):` that is `s`);
//! 2. `__dlpack__` (NumPy, CuPy, JAX): the versioned capsule, the legacy one as a fallback, with
//!    the array API stream handshake on the stream this call works on;
//! 3. `__cuda_array_interface__`, ordered after the producer's stream.
//!
//! What comes back holds the memory: a managed tensor (its deleter runs exactly once, when the
//! argument drops, also if a later check refuses it) or the producer object itself.

use std::ffi::c_void;
use std::ptr::NonNull;

use dlpark::ffi::{DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use pyo3::{ffi, intern};

use crate::device::{Device, DeviceType};
use crate::dlpack::{ManagedTensor, RawManaged, DLPACK_VERSION};
use crate::python::identity_cache::IdentityCache;

/// What keeps an argument's memory alive, and owns its dimensions and strides.
pub(crate) enum Holder {
    /// A managed tensor, deleted once on drop; its own shape and strides are read in place.
    Tensor(ManagedTensor),
    /// The producer object (the CUDA array interface has no tensor to own), with the
    /// interface's dimensions and strides in elements.
    Object { _object: Py<PyAny>, dims: Vec<i64>, strides: Option<Vec<i64>> },
}

/// An argument's memory as its producer describes it, before the typed checks.
pub(crate) struct Source {
    /// Private: `dims` and `strides` read a tensor that `from_tensor` checked.
    holder: Holder,
    /// Address of the first element (the producer's byte offset applied).
    pub(crate) data: usize,
    /// DLPack (code, bits, lanes).
    pub(crate) dtype: (u8, u8, u16),
    pub(crate) device: Device,
    pub(crate) readonly: bool,
    /// For device data: the stream this call works on.
    pub(crate) stream: Option<i64>,
    /// The producer type's exchange table, for results in the caller's framework.
    pub(crate) api: Option<&'static DLPackExchangeAPI>,
}

impl Source {
    /// The dimensions, as the producer gave them.
    pub(crate) fn dims(&self) -> &[i64] {
        self.extents().0
    }

    /// The strides in elements; `None` for C order.
    pub(crate) fn strides(&self) -> Option<&[i64]> {
        self.extents().1
    }

    /// What keeps the memory alive, for a caller that outlives this source (kernel launches).
    #[cfg(feature = "cuda")]
    pub(crate) fn into_holder(self) -> Holder {
        self.holder
    }

    /// Read in place, not copied: an argument costs no allocation for them.
    fn extents(&self) -> (&[i64], Option<&[i64]>) {
        match &self.holder {
            Holder::Tensor(tensor) => {
                let t = tensor.describe().0;
                let ndim = t.ndim as usize;
                if ndim == 0 {
                    return (&[], None);
                }
                // SAFETY: `from_tensor` checked that ndim is in 0..=64 and the shape is not NULL;
                // a DLTensor's shape and (non-NULL) strides hold ndim entries, which the tensor,
                // owned by `self`, keeps alive and unchanged.
                unsafe {
                    (
                        std::slice::from_raw_parts(t.shape, ndim),
                        (!t.strides.is_null()).then(|| std::slice::from_raw_parts(t.strides, ndim)),
                    )
                }
            }
            Holder::Object { dims, strides, .. } => (dims, strides.as_deref()),
        }
    }
}

/// The exchange tables of the types seen so far (table address; 0: the type has none), looked
/// up for every argument.
static TABLES: IdentityCache<64> = IdentityCache::new();

/// `type.__dlpack_c_exchange_api__`, if the type has a DLPack 1.x table (cached per type).
pub(crate) fn exchange_table(ty: &Bound<'_, PyType>) -> PyResult<Option<&'static DLPackExchangeAPI>> {
    if let Some(address) = TABLES.get(ty.as_any(), 0) {
        // SAFETY: 0 or the address of a table that lives for the process (see below).
        return Ok(unsafe { (address as *const DLPackExchangeAPI).as_ref() });
    }
    let table = match ty.getattr_opt(intern!(ty.py(), "__dlpack_c_exchange_api__"))? {
        // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
        Some(capsule) if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr()) } == 1 => {
            // SAFETY: a valid capsule of that name points at a table that lives for the
            // process (the DLPack contract for `__dlpack_c_exchange_api__`).
            let table = unsafe {
                &*ffi::PyCapsule_GetPointer(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr())
                    .cast::<DLPackExchangeAPI>()
            };
            (table.header.version.major == DLPACK_VERSION.0).then_some(table)
        }
        _ => None,
    };
    TABLES.insert(ty.as_any(), 0, table.map_or(0, |t| t as *const DLPackExchangeAPI as usize));
    Ok(table)
}

/// The argument's memory, by the first protocol `obj` speaks; device data of producers
/// without the exchange API is handed over on `stream` (default: amso's stream rule).
pub(crate) fn acquire(obj: &Bound<'_, PyAny>, stream: Option<i64>) -> PyResult<Option<Source>> {
    // A user crate whose module only defines typed functions registers no class: join here.
    crate::stream_context::join_bundled(obj.py())?;
    if let Some(api) = exchange_table(&obj.get_type())? {
        if let Some(from_object) = api.managed_tensor_from_py_object_no_sync {
            let mut out: *mut DLManagedTensorVersioned = std::ptr::null_mut();
            // SAFETY: `obj` is of the type the table came from, alive for the call, GIL held.
            if unsafe { from_object(obj.as_ptr().cast(), &mut out) } != 0 {
                return Err(PyErr::fetch(obj.py()));
            }
            let tensor = NonNull::new(out)
                .ok_or_else(|| PyValueError::new_err("the producer's exchange API returned no tensor"))?;
            // SAFETY: the producer hands the tensor over; we delete it once.
            let tensor = unsafe { ManagedTensor::from_raw(RawManaged::Versioned(tensor)) };
            let mut source = from_tensor(tensor)?;
            source.api = Some(api);
            if source.device.device_type == DeviceType::Cuda {
                source.stream = Some(producer_stream(obj.py(), api, source.device.id)?);
            }
            return Ok(Some(source));
        }
    }
    let py = obj.py();
    if obj.hasattr(intern!(py, "__dlpack__"))? {
        return from_dlpack(obj, stream).map(Some);
    }
    if obj.hasattr(intern!(py, "__cuda_array_interface__"))? {
        return from_interface(obj, stream).map(Some);
    }
    Ok(None)
}

/// The producer's current work stream on CUDA device `device_id` (NULL: the legacy default).
fn producer_stream(py: Python<'_>, api: &DLPackExchangeAPI, device_id: i32) -> PyResult<i64> {
    let Some(current) = api.current_work_stream else { return Ok(1) };
    let mut stream: *mut c_void = std::ptr::null_mut();
    // SAFETY: the producer's function with a writable output; the GIL is held.
    if unsafe { current(DLDeviceType::CUDA, device_id, &mut stream) } != 0 {
        return Err(
            PyErr::take(py).unwrap_or_else(|| PyValueError::new_err("the producer's current_work_stream failed"))
        );
    }
    Ok(if stream.is_null() { 1 } else { stream as i64 })
}

/// The stream this call works on for a producer without the exchange API: amso's stream
/// context, else amso's own stream of the device.
fn work_stream(device_id: i32) -> PyResult<i64> {
    if let Some(stream) = crate::stream_context::current() {
        return Ok(stream);
    }
    #[cfg(feature = "cuda")]
    return Ok(crate::cuda::stream::amso_stream(device_id)?.as_int());
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device_id;
        Ok(1)
    }
}

fn from_dlpack(obj: &Bound<'_, PyAny>, stream: Option<i64>) -> PyResult<Source> {
    let py = obj.py();
    let (device_type, device_id): (i32, i32) = match obj.getattr_opt(intern!(py, "__dlpack_device__"))? {
        Some(method) => method.call0()?.extract()?,
        None => (DeviceType::Cpu as i32, 0),
    };
    let stream = match stream {
        Some(stream) if device_type == DeviceType::Cuda as i32 => Some(stream),
        _ => (device_type == DeviceType::Cuda as i32).then(|| work_stream(device_id)).transpose()?,
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "max_version"), DLPACK_VERSION)?;
    if let Some(stream) = stream {
        kwargs.set_item(intern!(py, "stream"), stream)?;
    }
    let capsule = match obj.call_method(intern!(py, "__dlpack__"), (), Some(&kwargs)) {
        Ok(capsule) => capsule,
        // Producers older than the array API's keywords: ask again without them (legacy).
        Err(error) if error.is_instance_of::<PyTypeError>(py) => {
            kwargs.del_item(intern!(py, "max_version"))?;
            obj.call_method(intern!(py, "__dlpack__"), (), Some(&kwargs))?
        }
        Err(error) => return Err(error),
    };
    let mut source = from_tensor(super::super::import::take_capsule(py, &capsule)?)?;
    source.stream = stream;
    Ok(source)
}

fn from_interface(obj: &Bound<'_, PyAny>, stream: Option<i64>) -> PyResult<Source> {
    let interface = super::super::import::parse_interface(obj)?;
    let (dtype, itemsize) = dlpack_of_typestr(&interface.typestr).ok_or_else(|| {
        PyTypeError::new_err(format!("__cuda_array_interface__ typestr {:?} is not a DLPack type", interface.typestr))
    })?;
    let strides = match interface.strides {
        Some(bytes) if bytes.iter().any(|&s| s % itemsize != 0) => {
            return Err(PyValueError::new_err(format!(
                "__cuda_array_interface__ strides {bytes:?} are not multiples of the itemsize {itemsize}"
            )))
        }
        Some(bytes) => Some(bytes.iter().map(|&s| s / itemsize).collect()),
        None => None,
    };
    let device_id = super::super::import::device_of(interface.address)?;
    let stream = Some(match stream {
        Some(stream) => stream,
        None => work_stream(device_id)?,
    });
    #[cfg(feature = "cuda")]
    if let (Some(producer), Some(work)) = (interface.stream, stream) {
        use crate::cuda::stream::{order, StreamHandle};
        order(device_id, StreamHandle::from_int(producer)?, StreamHandle::from_int(work)?.check(device_id)?)?;
    }
    Ok(Source {
        holder: Holder::Object { _object: obj.clone().unbind(), dims: interface.dims, strides },
        data: interface.address,
        dtype,
        device: Device::cuda(device_id),
        readonly: interface.readonly,
        stream,
        api: None,
    })
}

/// DLPack (code, bits, lanes) and the itemsize of a little-endian array-interface typestr.
fn dlpack_of_typestr(typestr: &str) -> Option<((u8, u8, u16), i64)> {
    let bytes = typestr.as_bytes();
    if bytes.len() < 3 || !matches!(bytes[0], b'<' | b'|') {
        return None;
    }
    let size: u8 = typestr[2..].parse().ok()?;
    let code = match bytes[1] {
        b'b' => 6,
        b'i' => 0,
        b'u' => 1,
        b'f' => 2,
        b'c' => 5,
        _ => return None,
    };
    Some(((code, size.checked_mul(8)?, 1), size as i64))
}

/// A source over `tensor` (amso's own export, say), whose device data is on `stream`.
#[cfg(feature = "cuda")]
pub(crate) fn from_managed(tensor: ManagedTensor, stream: Option<i64>) -> PyResult<Source> {
    let mut source = from_tensor(tensor)?;
    source.stream = stream.filter(|_| source.device.device_type == DeviceType::Cuda);
    Ok(source)
}

/// The fields of a producer's managed tensor, checked enough to be read safely.
fn from_tensor(tensor: ManagedTensor) -> PyResult<Source> {
    let (t, readonly, major) = tensor.describe();
    crate::memarray::foreign::check_major_version(major)?;
    if !(0..=64).contains(&t.ndim) || (t.ndim > 0 && t.shape.is_null()) {
        return Err(PyValueError::new_err(format!("the producer's tensor has ndim {} and no usable shape", t.ndim)));
    }
    let ndim = t.ndim as usize;
    // SAFETY: a DLTensor's shape holds ndim entries (checked not NULL above when ndim > 0).
    let dims = if ndim == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(t.shape, ndim) } };
    if let Some(&negative) = dims.iter().find(|&&d| d < 0) {
        return Err(PyValueError::new_err(format!("the producer's tensor has a negative dimension {negative}")));
    }
    let kind = DeviceType::from_dlpack(t.device.device_type.0 as i32)?;
    let device = match kind {
        DeviceType::CudaHost => Device::CPU, // page-locked host memory reads as host memory
        _ => Device { device_type: kind, id: t.device.device_id },
    };
    let data = (t.data as usize)
        .checked_add(usize::try_from(t.byte_offset).unwrap_or(usize::MAX))
        .ok_or_else(|| PyValueError::new_err("the producer's byte_offset overflows its data pointer"))?;
    let dtype = (t.dtype.code.0, t.dtype.bits, t.dtype.lanes);
    Ok(Source { holder: Holder::Tensor(tensor), data, dtype, device, readonly, stream: None, api: None })
}
