//! NumPy arrays at the C level: the array struct read in place (as rust-numpy and every C
//! extension read it), and new arrays made through NumPy's C API table. The two structs below
//! are the leading fields NumPy's headers declare; they have not changed since NumPy 1.7 and
//! are the same in NumPy 2 (whose descriptor changed only after `type_num`). NumPy is never
//! imported here: an object can only be a NumPy array once some code imported NumPy.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use pyo3::{ffi, intern};

use super::{as_i64s, Extents, Holder, Source, Strides};
use crate::device::Device;
use crate::element::DType;
use crate::python::identity_cache::IdentityCache;
use crate::strided::Dims;

/// `PyArrayObject_fields`' leading members (numpy/ndarraytypes.h).
#[repr(C)]
struct ArrayStruct {
    ob_base: ffi::PyObject,
    data: *mut c_char,
    nd: c_int,
    dimensions: *const isize,
    strides: *const isize,
    base: *mut ffi::PyObject,
    descr: *const DescrStruct,
    flags: c_int,
}

/// `PyArray_Descr`'s leading members, the same in NumPy 1 and 2.
#[repr(C)]
struct DescrStruct {
    ob_base: ffi::PyObject,
    typeobj: *mut ffi::PyTypeObject,
    kind: c_char,
    type_char: c_char,
    byteorder: c_char,
    former_flags: c_char,
    type_num: c_int,
}

const NPY_ARRAY_WRITEABLE: c_int = 0x0400;
/// The first type number of dtypes registered by other packages (ml_dtypes' bfloat16).
const NPY_USERDEF: c_int = 256;

/// `numpy.ndarray`, once some code has imported NumPy.
static NDARRAY: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(std::ptr::null_mut());

/// Whether `ty` is `numpy.ndarray` or a subclass of it.
pub(crate) fn is_array_type(ty: &Bound<'_, PyType>) -> bool {
    let ndarray = ndarray_type(ty.py());
    // SAFETY: two live type objects; PyType_IsSubtype never fails.
    !ndarray.is_null() && unsafe { ffi::PyType_IsSubtype(ty.as_type_ptr(), ndarray) } == 1
}

/// `numpy.ndarray`'s type object, or NULL while NumPy is not imported.
fn ndarray_type(py: Python<'_>) -> *mut ffi::PyTypeObject {
    let known = NDARRAY.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let found = py
        .import(intern!(py, "sys"))
        .and_then(|sys| sys.getattr(intern!(py, "modules")))
        .ok()
        .and_then(|modules| modules.cast_into::<PyDict>().ok())
        .and_then(|modules| modules.get_item(intern!(py, "numpy")).ok().flatten())
        .and_then(|numpy| numpy.getattr(intern!(py, "ndarray")).ok())
        .and_then(|ndarray| ndarray.cast_into::<PyType>().ok());
    match found {
        Some(ndarray) => {
            let pointer = ndarray.as_type_ptr();
            std::mem::forget(ndarray); // kept for the process, as NumPy keeps it
            NDARRAY.store(pointer, Ordering::Release);
            pointer
        }
        None => std::ptr::null_mut(),
    }
}

/// The builtin NumPy type numbers amso reads, with their DLPack (code, bits, lanes) as this
/// platform sizes C's `int` and `long` (the codes are the spec generator's).
const BUILTIN: [(c_int, (u8, u8, u16)); 16] = {
    use crate::element::dlpack_code::{BOOL, COMPLEX, FLOAT, INT, UINT};
    const C_INT: u8 = std::ffi::c_int::BITS as u8;
    const C_LONG: u8 = std::ffi::c_long::BITS as u8;
    [
        (0, (BOOL, 8, 1)),       // NPY_BOOL
        (1, (INT, 8, 1)),        // NPY_BYTE
        (2, (UINT, 8, 1)),       // NPY_UBYTE
        (3, (INT, 16, 1)),       // NPY_SHORT
        (4, (UINT, 16, 1)),      // NPY_USHORT
        (5, (INT, C_INT, 1)),    // NPY_INT
        (6, (UINT, C_INT, 1)),   // NPY_UINT
        (7, (INT, C_LONG, 1)),   // NPY_LONG
        (8, (UINT, C_LONG, 1)),  // NPY_ULONG
        (9, (INT, 64, 1)),       // NPY_LONGLONG
        (10, (UINT, 64, 1)),     // NPY_ULONGLONG
        (11, (FLOAT, 32, 1)),    // NPY_FLOAT
        (12, (FLOAT, 64, 1)),    // NPY_DOUBLE
        (14, (COMPLEX, 64, 1)),  // NPY_CFLOAT
        (15, (COMPLEX, 128, 1)), // NPY_CDOUBLE
        (23, (FLOAT, 16, 1)),    // NPY_HALF
    ]
};

/// The DLPack type of a builtin NumPy type number (long double, object, strings, dates and
/// structured types have none).
fn builtin_dtype(type_num: c_int) -> Option<(u8, u8, u16)> {
    BUILTIN.iter().find(|(number, _)| *number == type_num).map(|&(_, dtype)| dtype)
}

/// The builtin NumPy type number of a DLPack type (the first: `long` before `long long`).
fn builtin_type_num(dtype: (u8, u8, u16)) -> Option<c_int> {
    BUILTIN.iter().find(|(_, d)| *d == dtype).map(|&(number, _)| number)
}

/// The spec dtypes of user-registered NumPy dtypes seen so far, by scalar type (0: none).
static USER_DTYPES: IdentityCache<16> = IdentityCache::new();

/// The DLPack type of a dtype another package registered (ml_dtypes' bfloat16), by its NumPy
/// name: looked up once per scalar type.
fn user_dtype(py: Python<'_>, descr: *const DescrStruct) -> Option<(u8, u8, u16)> {
    // SAFETY: a live descriptor (the array holds it) whose scalar type lives as long.
    let (descr_object, scalar_type) = unsafe {
        (
            Bound::from_borrowed_ptr(py, descr as *mut ffi::PyObject),
            Bound::from_borrowed_ptr(py, (*descr).typeobj.cast()),
        )
    };
    let known = USER_DTYPES.get(&scalar_type, 0).map(|address| address as *const DType);
    let dtype = match known {
        Some(dtype) => dtype,
        None => {
            let name: String = descr_object.getattr(intern!(py, "name")).ok()?.extract().ok()?;
            let dtype = DType::from_numpy_name(&name).map_or(std::ptr::null(), |d| d as *const DType);
            USER_DTYPES.insert(&scalar_type, 0, dtype as usize);
            dtype
        }
    };
    // SAFETY: NULL or one of the spec's static dtypes.
    unsafe { dtype.as_ref() }.map(DType::dlpack)
}

/// The array `obj` (whose type is `numpy.ndarray` or a subclass) as a source: its fields read
/// in place, the array itself held.
#[inline]
pub(crate) fn read(obj: &Bound<'_, PyAny>) -> PyResult<Source> {
    let py = obj.py();
    // SAFETY: the caller checked the type; a NumPy array starts with these fields, which only
    // NumPy changes, with the GIL held, as we hold it now.
    let (array, descr) = unsafe {
        let array = &*obj.as_ptr().cast::<ArrayStruct>();
        (array, &*array.descr)
    };
    let dtype = if descr.type_num < NPY_USERDEF { builtin_dtype(descr.type_num) } else { user_dtype(py, descr) };
    let Some(dtype) = dtype else {
        return Err(PyTypeError::new_err(format!(
            "a NumPy array of dtype {} has no DLPack type; amso reads bool, integer, float, complex and the spec's \
             other dtypes",
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

/// NumPy's C API table (`numpy._core.multiarray._ARRAY_API`, or `numpy.core` before NumPy 2).
struct ArrayApi(*const *const c_void);

// SAFETY: a table of function pointers that NumPy never changes or frees.
unsafe impl Send for ArrayApi {}
// SAFETY: as above.
unsafe impl Sync for ArrayApi {}

static API: PyOnceLock<ArrayApi> = PyOnceLock::new();

/// The indices of the functions used here, which every NumPy since 1.7 keeps.
const DESCR_FROM_TYPE: usize = 45;
const NEW_FROM_DESCR: usize = 94;
const SET_BASE_OBJECT: usize = 282;

fn api(py: Python<'_>) -> PyResult<&'static ArrayApi> {
    API.get_or_try_init(py, || {
        let module = py.import("numpy._core.multiarray").or_else(|_| py.import("numpy.core.multiarray"))?;
        let capsule = module.getattr("_ARRAY_API")?;
        // SAFETY: PyCapsule_GetPointer accepts any object; NULL comes with an exception set.
        let table = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), std::ptr::null()) };
        if table.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(ArrayApi(table as *const *const c_void)) // NumPy's module holds the capsule for good
    })
}

impl ArrayApi {
    /// # Safety
    /// `index` is a function of the table with signature `F`.
    unsafe fn function<F: Copy>(&self, index: usize) -> F {
        // SAFETY: forwarded from the caller; the table holds pointers to functions.
        unsafe { std::mem::transmute_copy::<*const c_void, F>(&*self.0.add(index)) }
    }
}

/// The descriptor of `dtype` (a new reference): NumPy's builtin one, or the registered one of
/// a dtype another package defines.
fn descriptor<'py>(py: Python<'py>, dtype: &DType) -> PyResult<Bound<'py, PyAny>> {
    match builtin_type_num(dtype.dlpack()) {
        Some(type_num) => {
            // SAFETY: PyArray_DescrFromType(int) -> PyArray_Descr* (a new reference or NULL).
            let descr_from_type: unsafe extern "C" fn(c_int) -> *mut ffi::PyObject =
                unsafe { api(py)?.function(DESCR_FROM_TYPE) };
            // SAFETY: a builtin type number.
            unsafe { Bound::from_owned_ptr_or_err(py, descr_from_type(type_num)) }
        }
        None => crate::python::convert::numpy_dtype(py, dtype),
    }
}

/// A NumPy array of `dtype` with `shape` and element `strides` over `data`, whose memory
/// `owner` keeps alive: NumPy holds `owner` as the array's base until its last view is gone.
/// `data` NULL lets NumPy allocate (C order, `strides` ignored).
///
/// # Safety
/// Unless NULL, `data` addresses initialised elements of `dtype` at every index `shape` and
/// `strides` reach, valid while `owner` lives and writable unless `readonly`.
pub(crate) unsafe fn array_over<'py>(
    py: Python<'py>,
    dtype: &DType,
    shape: &[usize],
    strides: Option<&[isize]>,
    data: *mut c_void,
    owner: Option<Bound<'py, PyAny>>,
    readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let api = api(py)?;
    let descr = descriptor(py, dtype)?;
    let itemsize = dtype.itemsize() as isize;
    let mut dims: Dims<isize> = Dims::collect(shape.len(), shape.iter().map(|&d| d as isize));
    let mut byte_strides: Option<Dims<isize>> =
        strides.map(|s| Dims::collect(s.len(), s.iter().map(|&s| s.saturating_mul(itemsize))));
    type NewFromDescr = unsafe extern "C" fn(
        *mut ffi::PyTypeObject,
        *mut ffi::PyObject,
        c_int,
        *mut isize,
        *mut isize,
        *mut c_void,
        c_int,
        *mut ffi::PyObject,
    ) -> *mut ffi::PyObject;
    type SetBaseObject = unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject) -> c_int;
    // SAFETY: the table's functions with their C signatures (numpy/__multiarray_api.h).
    let (new_from_descr, set_base): (NewFromDescr, SetBaseObject) =
        unsafe { (api.function(NEW_FROM_DESCR), api.function(SET_BASE_OBJECT)) };
    let flags = if readonly || data.is_null() { 0 } else { NPY_ARRAY_WRITEABLE };
    let strides_ptr = match (&mut byte_strides, data.is_null()) {
        (Some(s), false) => s.as_mut_ptr(),
        _ => std::ptr::null_mut(),
    };
    // SAFETY: ndarray's own type, a descriptor reference NumPy steals, `shape.len()` dims and
    // strides, and data the caller vouches for; NULL or a new reference with an exception set.
    let array = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            new_from_descr(
                ndarray_type_or_import(py)?,
                descr.into_ptr(),
                shape.len() as c_int,
                dims.as_mut_ptr(),
                strides_ptr,
                data,
                flags,
                std::ptr::null_mut(),
            ),
        )
    }?;
    if let Some(owner) = owner {
        // SAFETY: a new array without a base; NumPy steals the owner reference, also on failure.
        if unsafe { set_base(array.as_ptr(), owner.into_ptr()) } != 0 {
            return Err(PyErr::fetch(py));
        }
    }
    Ok(array)
}

/// `numpy.ndarray`, importing NumPy if needed (making NumPy arrays needs it anyway).
fn ndarray_type_or_import(py: Python<'_>) -> PyResult<*mut ffi::PyTypeObject> {
    let known = ndarray_type(py);
    if !known.is_null() {
        return Ok(known);
    }
    py.import("numpy")?;
    let found = ndarray_type(py);
    if found.is_null() {
        return Err(PyTypeError::new_err("numpy.ndarray is not a type"));
    }
    Ok(found)
}

/// The address of the first element of NumPy array `array` (of a type `is_array_type` accepts).
pub(crate) fn data_address(array: &Bound<'_, PyAny>) -> usize {
    // SAFETY: the caller checked the type; `data` is the struct's second field.
    unsafe { (*array.as_ptr().cast::<ArrayStruct>()).data as usize }
}
