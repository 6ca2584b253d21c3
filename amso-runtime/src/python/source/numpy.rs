//! NumPy arrays as sources of foreign memory: an array's struct read in place, through
//! NumPy's C-level knowledge (`python/npyffi/`).

use std::ffi::c_char;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::{ffi, intern};

use crate::device::Device;
use crate::python::npyffi::api::loaded;
use crate::python::npyffi::{builtin_dtype, numpy_kind, user_dtype, ArrayStruct, NPY_ARRAY_WRITEABLE, NPY_USERDEF};
use crate::python::source::{as_i64s, Extents, Holder, Source, Strides};

/// The array `obj` (whose type is `numpy.ndarray` or a subclass) as a source: its fields read
/// in place, the array itself held. `kinds`: also take the kinds DLPack lacks (object,
/// datetime64, timedelta64, bytes and unicode strings), named in `Source::numpy_kind`.
#[inline]
pub(crate) fn read(obj: &Bound<'_, PyAny>, kinds: bool) -> PyResult<Source> {
    let py = obj.py();
    // SAFETY: the caller checked the type; a NumPy array starts with these fields, which only
    // NumPy changes, with the GIL held, as we hold it now.
    let (array, descr) = unsafe {
        let array = &*obj.as_ptr().cast::<ArrayStruct>();
        (array, &*array.descr)
    };
    let mut kind = None;
    let mut dtype = if descr.type_num < NPY_USERDEF { builtin_dtype(descr.type_num) } else { user_dtype(py, descr)? };
    if dtype.is_none() && kinds {
        // SAFETY: the array's live descriptor (the array holds a reference).
        let descr_object = unsafe { Bound::from_borrowed_ptr(py, array.descr as *mut ffi::PyObject) };
        let numpy = loaded(py).expect("the caller checked a NumPy array's type through NumPy's C API");
        if let Some((name, sized)) = numpy_kind(numpy, &descr_object, descr.type_num)? {
            (kind, dtype) = (Some(name), Some(sized));
        }
    }
    let Some(dtype) = dtype else {
        return Err(PyTypeError::new_err(format!(
            "a NumPy array of dtype {} has no DLPack type; amso reads bool, integer, float, complex, the spec's \
             other dtypes and records (structured dtypes with named fields)",
            dtype_text(obj)
        )));
    };
    if descr.byteorder == b'>' as c_char && cfg!(target_endian = "little") {
        return Err(PyValueError::new_err(format!(
            "the NumPy array is big-endian (dtype {}); amso reads the machine's byte order: pass \
             x.astype(x.dtype.newbyteorder('='))",
            dtype_text(obj)
        )));
    }
    Ok(Source {
        holder: Holder::NumPy(std::ptr::NonNull::new(obj.as_ptr()).expect("a live object")),
        data: array.data as usize,
        dtype,
        device: Device::CPU,
        readonly: array.flags & NPY_ARRAY_WRITEABLE == 0,
        stream: None,
        managed: false,
        numpy_kind: kind,
    })
}

/// `'str(x.dtype)'`, for messages.
fn dtype_text(obj: &Bound<'_, PyAny>) -> String {
    let text = obj.getattr(intern!(obj.py(), "dtype")).and_then(|d| d.str()).map(|r| r.to_string());
    format!("'{}'", text.unwrap_or_else(|_| "?".into()))
}

/// The dimensions and byte strides of NumPy array `array`, in its struct.
///
/// # Safety
/// `array` is a live NumPy array, alive and left unchanged by Python code for `'a`.
pub(super) unsafe fn extents<'a>(array: std::ptr::NonNull<ffi::PyObject>) -> Extents<'a> {
    // SAFETY: as the caller guarantees; a NumPy array's dimensions and strides hold `nd`
    // entries each.
    unsafe {
        let array = &*array.as_ptr().cast::<ArrayStruct>();
        let ndim = array.nd.max(0) as usize;
        Extents { dims: as_i64s(array.dimensions, ndim), strides: Strides::Bytes(as_i64s(array.strides, ndim)) }
    }
}
