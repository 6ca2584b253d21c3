//! The DLPack C exchange API (DLPack >= 1.2): a static `DLPackExchangeAPI` that C, C++ and
//! Rust extensions reach through `type(array).__dlpack_c_exchange_api__` to exchange amso
//! arrays without Python calls. Failures follow the table's convention: -1 with a Python
//! exception set (the allocator reports through `set_error` instead). No unwinding escapes.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::NonNull;

use dlpark::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI,
    DLPackExchangeAPIHeader, DLPackVersion, DLTensor,
};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::device::{Device, DeviceId, DeviceType};
use crate::dlpack::{Format, ManagedTensor, RawManaged, DLPACK_VERSION};
use crate::error::{code, Error, Result};
use crate::memarray::options::ArrayOptions;
use crate::python::base::array::MemArrayBase;
use crate::python::base::registry;
use crate::python::export::capsule::export_for_stream;

struct Table(DLPackExchangeAPI);

// SAFETY: the table is immutable and holds only function pointers and a null pointer.
unsafe impl Sync for Table {}

static API: Table = Table(DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion { major: DLPACK_VERSION.0, minor: DLPACK_VERSION.1 },
        prev_api: std::ptr::null_mut(),
    },
    managed_tensor_allocator: Some(managed_tensor_allocator),
    managed_tensor_from_py_object_no_sync: Some(managed_tensor_from_py_object_no_sync),
    managed_tensor_to_py_object_no_sync: Some(managed_tensor_to_py_object_no_sync),
    dltensor_from_py_object_no_sync: Some(dltensor_from_py_object_no_sync),
    current_work_stream: Some(current_work_stream),
});

/// Address of the static table (`__c_dlpack_exchange_api__`).
pub(in crate::python) fn api_address() -> usize {
    &API.0 as *const DLPackExchangeAPI as usize
}

/// The "dlpack_exchange_api" capsule (`__dlpack_c_exchange_api__`).
pub(in crate::python) fn api_capsule(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // SAFETY: a static table and name; no destructor is needed.
    let capsule = unsafe { ffi::PyCapsule_New(api_address() as *mut c_void, c"dlpack_exchange_api".as_ptr(), None) };
    // SAFETY: a new reference or NULL with an exception set.
    Ok(unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?.unbind())
}

/// Run `body` with the GIL the caller holds; an error or panic becomes a Python exception
/// and -1.
fn python_call(body: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    // SAFETY: the exchange API's Python-object functions are called with the GIL held.
    unsafe { crate::python::base::error::at_c_entry(-1, |py| body(py).map(|()| 0)) }
}

/// The `TypeError` for an object that is no amso array, though its type offers amso's table.
fn not_an_amso_array(object: &Bound<'_, PyAny>) -> PyErr {
    let kind = object.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!(
        "{} object is not an amso array: amso's DLPack exchange API takes amso arrays only; use the API of the \
         object's own type (type(x).__dlpack_c_exchange_api__), or its __dlpack__",
        crate::error::with_article(kind)
    ))
}

/// The header of the amso array `object`, borrowed for as long as `object` is; a locked array
/// is refused (exports happen inside the `with` block that holds it), and so is a record array,
/// which DLPack cannot describe (as every export refuses it: `record_refusal`).
fn exportable_header<'a>(object: &'a Bound<'_, PyAny>) -> PyResult<&'a crate::python::base::header::Header> {
    let header = crate::python::base::recognize::header_of_object(object).ok_or_else(|| not_an_amso_array(object))?;
    if header.code == crate::element::OPAQUE_HANDLE {
        let message = match object.cast::<MemArrayBase>() {
            Ok(array) => crate::memarray::export::record_refusal(array.get().element_type()),
            // Another runtime copy's record array: its fields are its own DType's.
            Err(_) => "the array holds records (C structs), and DLPack has no record type: export a field's view \
                       (a[\"name\"]) instead"
                .to_owned(),
        };
        return Err(PyBufferError::new_err(message));
    }
    let lock_id = header.placement().lock_id;
    if lock_id != 0 {
        return Err(PyBufferError::new_err(format!(
            "array is locked by context {lock_id}; export it inside that `with` block"
        )));
    }
    Ok(header)
}

/// Fill the caller's `DLTensor` with borrowed fields of an amso array: no allocation.
unsafe extern "C" fn dltensor_from_py_object_no_sync(object: *mut c_void, out: *mut DLTensor) -> c_int {
    python_call(|py| {
        if object.is_null() || out.is_null() {
            return Err(PyValueError::new_err("dltensor_from_py_object_no_sync: NULL argument"));
        }
        // SAFETY: a live object (the table's contract), borrowed for this call.
        let object = unsafe { Bound::from_borrowed_ptr(py, object.cast()) };
        let h = exportable_header(&object)?;
        let placement = h.placement();
        if placement.flags & crate::python::base::header::FLAG_READONLY != 0 {
            return Err(PyBufferError::new_err(
                "the array is read-only, which a DLTensor cannot say: its consumer could write it; use \
                 managed_tensor_from_py_object_no_sync (a versioned tensor with the READ_ONLY flag), or export a \
                 writable copy",
            ));
        }
        // SAFETY: `out` is the caller's writable DLTensor; shape and strides point into the
        // header, which lives as long as the object (the caller keeps it alive).
        unsafe {
            *out = DLTensor {
                data: placement.data as *mut c_void,
                device: DLDevice {
                    device_type: DLDeviceType(placement.device_type as u32),
                    device_id: placement.device_id,
                },
                ndim: h.ndim,
                dtype: DLDataType { code: DLDataTypeCode(h.code), bits: h.bits, lanes: h.lanes },
                shape: h.shape.as_ptr().cast_mut(),
                strides: h.strides.as_ptr().cast_mut(),
                byte_offset: 0,
            }
        };
        Ok(())
    })
}

/// An owning versioned tensor of an amso array, without stream synchronisation.
unsafe extern "C" fn managed_tensor_from_py_object_no_sync(
    object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    python_call(|py| {
        if object.is_null() || out.is_null() {
            return Err(PyValueError::new_err("managed_tensor_from_py_object_no_sync: NULL argument"));
        }
        // SAFETY: a live object (the table's contract).
        let object = unsafe { Bound::from_borrowed_ptr(py, object.cast()) };
        if let Ok(array) = object.cast::<MemArrayBase>() {
            // "No sync" means the consumer works on `current_work_stream`; amso orders its own
            // pending work on the array before that stream, so the consumer needs nothing else.
            let work = crate::current_stream::resolve(None);
            let tensor = array.get().read(py, |array| export_for_stream(array, work))?;
            let RawManaged::Versioned(raw) = tensor.into_raw() else { unreachable!("asked for a versioned tensor") };
            // SAFETY: checked non-null above.
            unsafe { *out = raw.as_ptr() };
            return Ok(());
        }
        // Another module's amso array: through its own __dlpack__, taking over the capsule. An
        // object of another kind (a type that copied amso's table) is refused as the borrowed
        // export refuses it.
        if crate::python::base::recognize::header_of_object(&object).is_none() {
            return Err(not_an_amso_array(&object));
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item("max_version", DLPACK_VERSION)?;
        kwargs.set_item("stream", -1i64)?;
        let capsule = object.call_method("__dlpack__", (), Some(&kwargs))?;
        let tensor = crate::python::source::take_capsule(py, &capsule)?;
        let RawManaged::Versioned(_) = tensor.raw() else {
            return Err(PyBufferError::new_err("asked for a versioned DLPack tensor, got a legacy one"));
        };
        let RawManaged::Versioned(raw) = tensor.into_raw() else { unreachable!("checked above") };
        // SAFETY: checked non-null above.
        unsafe { *out = raw.as_ptr() };
        Ok(())
    })
}

/// Take ownership of a versioned tensor and return an amso array over it (no copy).
unsafe extern "C" fn managed_tensor_to_py_object_no_sync(
    tensor: *mut DLManagedTensorVersioned,
    out: *mut *mut c_void,
) -> c_int {
    python_call(|py| {
        let Some(tensor) = NonNull::new(tensor) else {
            return Err(PyValueError::new_err("managed_tensor_to_py_object_no_sync: NULL tensor"));
        };
        // SAFETY: the caller hands the tensor over (the table's contract).
        let tensor = unsafe { ManagedTensor::from_raw(RawManaged::Versioned(tensor)) };
        if out.is_null() {
            // The tensor is ours all the same: dropping it frees it before reporting.
            return Err(PyValueError::new_err("managed_tensor_to_py_object_no_sync: NULL output pointer"));
        }
        let object = crate::python::source::import::wrap_tensor(py, tensor)?;
        // SAFETY: checked non-null above; the new reference goes to the caller.
        unsafe { *out = object.into_ptr().cast() };
        Ok(())
    })
}

/// A new amso array shaped like `prototype` (dtype, ndim, shape, device), as an owning tensor.
unsafe extern "C" fn managed_tensor_allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char)>,
) -> c_int {
    let report = |kind: &str, message: String| {
        if let Some(set_error) = set_error {
            let kind = CString::new(kind).unwrap_or_default();
            let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
            // SAFETY: the caller's callback with its own context and two C strings.
            unsafe { set_error(error_ctx, kind.as_ptr(), message.as_ptr()) };
        }
        -1
    };
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<*mut DLManagedTensorVersioned> {
            if prototype.is_null() || out.is_null() {
                return Err(Error::InvalidArgument("managed_tensor_allocator: NULL argument".into()));
            }
            // SAFETY: the caller's prototype tensor.
            let t = unsafe { &*prototype };
            let name = || crate::element::dlpack_type_name((t.dtype.code.0, t.dtype.bits, t.dtype.lanes));
            if !(1..=crate::shape::MAX_NDIM as i32).contains(&t.ndim) {
                return Err(Error::WrongValueType(registry::uncompiled(&name(), t.ndim.max(0) as usize)));
            }
            // SAFETY: the caller's prototype holds ndim shape entries (DLPack's contract).
            let dims =
                unsafe { crate::memarray::foreign::tensor_dims(&DLTensor { strides: std::ptr::null_mut(), ..*t }) }?;
            let registration = registry::find(t.dtype.code.0, t.dtype.bits, t.dtype.lanes, dims.len())
                .ok_or_else(|| Error::WrongValueType(registry::uncompiled(&name(), dims.len())))?;
            let device = DeviceType::from_code(t.device.device_type.0 as i32)?;
            let device_id =
                if device == DeviceType::Cuda { DeviceId::new(t.device.device_id)? } else { DeviceId::ZERO };
            let mut array = registration.create(&dims, ArrayOptions { device_id, ..Default::default() })?;
            if device == DeviceType::Cuda {
                array.move_memory(Device::cuda(device_id), crate::current_stream::resolve(None), false, None)?;
            }
            let target = array.raw_view().device();
            let plan = crate::dlpack::ExportPlan {
                format: Format::Versioned(DLPackVersion { major: DLPACK_VERSION.0, minor: DLPACK_VERSION.1 }),
                copy: false,
                target,
                consumer_stream: None,
            };
            let tensor = ManagedTensor::new(array.export_source(&plan, None)?, plan.format);
            match tensor.into_raw() {
                RawManaged::Versioned(raw) => Ok(raw.as_ptr()),
                RawManaged::Legacy(_) => unreachable!("asked for a versioned tensor"),
            }
        }));
    match outcome {
        Ok(Ok(tensor)) => {
            // SAFETY: checked non-null inside.
            unsafe { *out = tensor };
            0
        }
        Ok(Err(error)) => {
            let kind = match error.code() {
                code::MEMORY => "MemoryError",
                code::TYPE => "TypeError",
                code::BUFFER => "BufferError",
                code::RUNTIME => "RuntimeError",
                _ => "ValueError",
            };
            report(kind, error.to_string())
        }
        Err(_) => report("RuntimeError", "internal error (panic) inside amso; please report it".into()),
    }
}

/// The stream amso would use on a device: the thread's `amso.cuda.stream(...)`, else the
/// default stream (NULL). Always NULL for the host.
// DLPack's C signature: the raw id of its caller (unused: amso's stream is per thread).
unsafe extern "C" fn current_work_stream(device_type: DLDeviceType, _device_id: i32, out: *mut *mut c_void) -> c_int {
    if out.is_null() {
        return python_call(|_| Err(PyValueError::new_err("current_work_stream: NULL output pointer")));
    }
    let stream = match (device_type.0, crate::current_stream::current()) {
        (2, Some(stream)) if stream.protocol_value() > 1 => stream.protocol_value() as usize as *mut c_void,
        _ => std::ptr::null_mut(),
    };
    // SAFETY: checked non-null.
    unsafe { *out = stream };
    0
}
