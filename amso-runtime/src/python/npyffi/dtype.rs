//! NumPy dtypes of amso's element types, and NumPy arrays over amso's memory: the dtype object
//! of each spec type (checked against the element type once, then cached), and arrays made
//! through NumPy's validated C API table (`api.rs`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::exceptions::{PyImportError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::{ffi, intern};

use super::api::{
    api_or_import, type_name, NumPyApi, CAN_CAST_ARRAY_TO, CAST_TO_TYPE, DESCR_FROM_TYPE, FROM_ANY, NEW_FROM_DESCR,
    RESIZE, SET_BASE_OBJECT,
};
use super::{builtin_type_num, ArrayStruct, NPY_ARRAY_WRITEABLE};
use crate::element::{ArrayElement, DType, DTypeOf};

/// The NumPy module.
pub(crate) fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    NUMPY
        .get_or_try_init(py, || {
            // Kept only once checked: a stand-in in sys.modules['numpy'] is refused, never kept.
            let numpy = py.import(intern!(py, "numpy"))?;
            crate::python::npyffi::api::check_module(numpy.as_any())?;
            PyResult::Ok(numpy.unbind())
        })
        .map(|numpy| numpy.bind(py))
}

/// The dtype objects made so far, by their `DType`'s address: the lookup of every owned result of
/// a kind NumPy names by more than a type number (objects, strings, datetimes, records), without
/// a lock, an allocation or a Python call. Each entry keeps one reference to its dtype, for the
/// process. Full, the lookups fall back to `numpy_dtype`'s dict.
struct Known {
    dtypes: [AtomicPtr<DType>; KNOWN],
    objects: [AtomicPtr<ffi::PyObject>; KNOWN],
}

const KNOWN: usize = 64;

static KNOWN_DTYPES: Known = Known {
    dtypes: [const { AtomicPtr::new(std::ptr::null_mut()) }; KNOWN],
    objects: [const { AtomicPtr::new(std::ptr::null_mut()) }; KNOWN],
};

impl Known {
    fn find<'py>(&self, py: Python<'py>, dtype: &DType) -> Option<Bound<'py, PyAny>> {
        let wanted = (dtype as *const DType).cast_mut();
        for (slot, object) in self.dtypes.iter().zip(&self.objects) {
            match slot.load(Ordering::Acquire) {
                found if found == wanted => {
                    // SAFETY: a reference this table holds for the process (`keep`).
                    return Some(unsafe { Bound::from_borrowed_ptr(py, object.load(Ordering::Acquire)) });
                }
                found if found.is_null() => return None,
                _ => {}
            }
        }
        None
    }

    /// Keep `object` as `dtype`'s, in the first free slot (none: not kept here). A slot is
    /// claimed by its object (compare-and-swap), then named by its `DType`, so that two threads
    /// never share one, and a reader that finds the `DType` finds its object.
    fn keep(&self, dtype: &'static DType, object: &Bound<'_, PyAny>) {
        let object = object.clone().into_ptr();
        for (slot, kept) in self.dtypes.iter().zip(&self.objects) {
            if kept.compare_exchange(std::ptr::null_mut(), object, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                slot.store((dtype as *const DType).cast_mut(), Ordering::Release);
                return;
            }
        }
        // SAFETY: the reference taken above, which no slot kept.
        unsafe { ffi::Py_DecRef(object) };
    }
}

/// The NumPy dtype object of `dtype` (cached), importing the module that defines it if NumPy
/// does not (bfloat16 from ml_dtypes).
pub(crate) fn numpy_dtype<'py>(py: Python<'py>, dtype: &'static DType) -> PyResult<Bound<'py, PyAny>> {
    if let Some(found) = KNOWN_DTYPES.find(py, dtype) {
        return Ok(found);
    }
    let object = numpy_dtype_made(py, dtype)?;
    KNOWN_DTYPES.keep(dtype, &object);
    Ok(object)
}

/// `numpy_dtype` the first time for each `DType` address: by name (by address for records) in a
/// dict, else made.
fn numpy_dtype_made<'py>(py: Python<'py>, dtype: &'static DType) -> PyResult<Bound<'py, PyAny>> {
    static CACHE: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
    let cache = CACHE.get_or_init(py, || PyDict::new(py).unbind()).bind(py);
    // Records are kept by address too: two crates may each have a record of one name.
    let key = match dtype.is_record() {
        true => format!("{}@{:p}", dtype.name, dtype),
        false => dtype.name.to_owned(),
    };
    if let Some(found) = cache.get_item(&key)? {
        return Ok(found);
    }
    let spec = match dtype.numpy_module {
        _ if dtype.is_record() => {
            // NumPy's structured dtype with the record's names, types, shapes, offsets and size.
            let (names, formats, offsets) = (PyList::empty(py), PyList::empty(py), PyList::empty(py));
            for field in dtype.fields {
                names.append(field.name)?;
                let entry = numpy_dtype(py, field.dtype)?;
                match field.shape.is_empty() {
                    true => formats.append(entry)?,
                    false => formats.append((entry, PyTuple::new(py, field.shape)?))?,
                }
                offsets.append(field.offset)?;
            }
            let spec = PyDict::new(py);
            spec.set_item("names", names)?;
            spec.set_item("formats", formats)?;
            spec.set_item("offsets", offsets)?;
            spec.set_item("itemsize", dtype.itemsize())?;
            spec.into_any()
        }
        // NumPy's subarray dtype, `dtype(('<f4', (4,)))`: arrays of it are arrays of the lane
        // type with a trailing axis of `lanes`.
        _ if dtype.is_vector() => (dtype.numpy, (dtype.lanes,)).into_pyobject(py)?.into_any(),
        Some(module) => py
            .import(module)
            .map_err(|_| {
                PyImportError::new_err(format!(
                    "dtype {} comes from the `{module}` package; install it (pip install {module})",
                    dtype.name
                ))
            })?
            .getattr(dtype.numpy)?,
        None => dtype.numpy.into_pyobject(py)?.into_any(),
    };
    let object = numpy(py)?.getattr(intern!(py, "dtype"))?.call1((spec,))?;
    // What `numpy.dtype` (or a patched one, or a stand-in `ml_dtypes`) gave becomes the
    // descriptor of arrays over amso's and Rust's memory: its size, and a record's fields, must
    // be the element type's, or NumPy would read past that memory. Checked once, then cached.
    let itemsize: usize = object.getattr(intern!(py, "itemsize"))?.extract()?;
    let difference = match dtype.is_record() {
        true => crate::python::npyffi::record_layout::first_difference(&object, dtype)?,
        false => None,
    };
    if let Some(difference) = difference.or((itemsize != dtype.itemsize())
        .then(|| format!("itemsize is {itemsize} bytes, where {} has {}", dtype.name, dtype.itemsize())))
    {
        return Err(PyTypeError::new_err(format!(
            "numpy.dtype gave {} for amso's {}, whose {difference}: numpy.dtype (or the module that defines the \
             type) is not the real one; restore it",
            object.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into()),
            dtype.name
        )));
    }
    cache.set_item(key, &object)?;
    Ok(object)
}

/// The builtin NumPy type number of `dtype`, or -1 where NumPy names it otherwise (the kinds
/// DLPack lacks share DLPack fields with plain ones, datetime64 with int64: those go by name).
const fn type_number(dtype: &DType) -> c_int {
    if dtype.numpy_only() {
        return -1;
    }
    match builtin_type_num(dtype.dlpack()) {
        Some(number) => number,
        None => -1,
    }
}

/// The descriptor of `dtype` (a new reference): NumPy's builtin one of type `number` (from
/// `type_number`), or the registered one of a dtype another package defines, checked to be a
/// `numpy.dtype` (NumPy steals and reads it).
fn descriptor<'py>(
    py: Python<'py>,
    numpy: &NumPyApi,
    dtype: &'static DType,
    number: c_int,
) -> PyResult<Bound<'py, PyAny>> {
    if number >= 0 {
        // SAFETY: PyArray_DescrFromType(int) -> PyArray_Descr* (a new reference or NULL).
        let descr_from_type: unsafe extern "C" fn(c_int) -> *mut ffi::PyObject =
            unsafe { numpy.function(DESCR_FROM_TYPE) };
        // SAFETY: a builtin type number.
        return unsafe { Bound::from_owned_ptr_or_err(py, descr_from_type(number)) };
    }
    // Made by `sys.modules["numpy"].dtype(...)`, which a stand-in may answer.
    let descr = numpy_dtype(py, dtype)?;
    // SAFETY: a live object and NumPy's validated descriptor type.
    if unsafe { ffi::PyObject_TypeCheck(descr.as_ptr(), numpy.descr) } == 0 {
        return Err(PyTypeError::new_err(format!(
            "numpy.dtype({:?}) gave a {}, not a numpy.dtype: the numpy module amso imported first is not the real \
             NumPy; restore it in sys.modules before making {} arrays",
            dtype.name,
            type_name(&descr),
            dtype.name
        )));
    }
    Ok(descr)
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
    dtype: &'static DType,
    shape: &[usize],
    strides: Option<&[isize]>,
    data: *mut c_void,
    owner: Option<Bound<'py, PyAny>>,
    readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: forwarded from the caller.
    unsafe { new_array(py, dtype, type_number(dtype), shape, strides, data, owner, readonly) }
}

/// `array_over` for elements `T`, whose NumPy type number is worked out at compile time (a
/// typed result: a `#[pyclass]` getter's view, an owned `Vec` or `MemArray`).
///
/// # Safety
/// As `array_over`'s, with `dtype` `T`'s.
pub(crate) unsafe fn array_of<'py, T: ArrayElement>(
    py: Python<'py>,
    shape: &[usize],
    strides: Option<&[isize]>,
    data: *mut c_void,
    owner: Option<Bound<'py, PyAny>>,
    readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let number = const { type_number(&T::DTYPE) };
    // SAFETY: forwarded from the caller.
    unsafe { new_array(py, DTypeOf::<T>::REF, number, shape, strides, data, owner, readonly) }
}

/// The array `array_over` describes, `dtype`'s NumPy type number given (`type_number`).
///
/// # Safety
/// As `array_over`'s.
#[allow(clippy::too_many_arguments)]
unsafe fn new_array<'py>(
    py: Python<'py>,
    dtype: &'static DType,
    number: c_int,
    shape: &[usize],
    strides: Option<&[isize]>,
    data: *mut c_void,
    owner: Option<Bound<'py, PyAny>>,
    readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let numpy = api_or_import(py)?;
    let descr = descriptor(py, numpy, dtype, number)?;
    let itemsize = dtype.itemsize();
    const STACK: usize = crate::shape::MAX_NDIM;
    let ndim = shape.len();
    // NumPy reads the dimensions as `npy_intp`s, which `usize`s are bit for bit (one above
    // `isize::MAX` reads as negative, which NumPy refuses), and copies them: no copy here.
    let dims = shape.as_ptr().cast::<isize>();
    debug_assert!(strides.is_none_or(|s| s.len() == ndim), "one stride per dimension");
    let strides = strides.filter(|s| !data.is_null() && !numpys_c_strides(shape, s));
    // Byte strides (none where they are the ones NumPy gives C order: it fills them in and
    // knows the flags without working them out), on the stack up to `STACK` dimensions.
    let mut stack = [std::mem::MaybeUninit::<isize>::uninit(); STACK];
    let mut heap = Vec::new();
    let strides_ptr = match strides {
        Some(strides) => {
            let bytes = strides.iter().map(|&stride| stride.saturating_mul(itemsize as isize));
            if ndim <= STACK {
                for (slot, byte_stride) in stack.iter_mut().zip(bytes) {
                    slot.write(byte_stride);
                }
                stack.as_ptr().cast::<isize>()
            } else {
                heap.extend(bytes);
                heap.as_ptr()
            }
        }
        None => std::ptr::null(),
    };
    type NewFromDescr = unsafe extern "C" fn(
        *mut ffi::PyTypeObject,
        *mut ffi::PyObject,
        c_int,
        *const isize,
        *const isize,
        *mut c_void,
        c_int,
        *mut ffi::PyObject,
    ) -> *mut ffi::PyObject;
    type SetBaseObject = unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject) -> c_int;
    // SAFETY: the table's functions with their C signatures (numpy/__multiarray_api.h).
    let (new_from_descr, set_base): (NewFromDescr, SetBaseObject) =
        unsafe { (numpy.function(NEW_FROM_DESCR), numpy.function(SET_BASE_OBJECT)) };
    let flags = if readonly || data.is_null() { 0 } else { NPY_ARRAY_WRITEABLE };
    // SAFETY: ndarray's own type, a descriptor reference NumPy steals, `ndim` dims and strides
    // (or none: C order), and data the caller vouches for; NULL or a new reference with an
    // exception set.
    let array = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            new_from_descr(
                numpy.ndarray,
                descr.into_ptr(),
                ndim as c_int,
                dims,
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

/// Whether element `strides` are the ones NumPy gives a C-order array of `shape` when it is
/// passed none (`_array_fill_strides`: each the product of the later dimensions, a zero one
/// counting as 1), so that leaving them out changes nothing a caller sees.
fn numpys_c_strides(shape: &[usize], strides: &[isize]) -> bool {
    let mut expected = 1isize;
    for (&dim, &stride) in shape.iter().zip(strides).rev() {
        if stride != expected {
            return false;
        }
        expected = expected.saturating_mul(dim.max(1) as isize);
    }
    true
}

/// `numpy.asarray(object, dtype=dtype)`, through NumPy's C function behind it
/// (`PyArray_FromAny`, with the flags `asarray` passes it: any cast, as `astype` makes it, and a
/// base-class ndarray back): the same conversion, and NumPy's own exception, without a Python
/// call.
pub(crate) fn from_any<'py>(object: &Bound<'py, PyAny>, dtype: &'static DType) -> PyResult<Bound<'py, PyAny>> {
    /// `NPY_ARRAY_FORCECAST | NPY_ARRAY_ENSUREARRAY`: an array of another dtype is cast as
    /// `astype` casts it, and a subclass's data comes back as a base-class array.
    const AS_ASARRAY: c_int = 0x0010 | 0x0040;
    let py = object.py();
    let numpy = api_or_import(py)?;
    let descr = descriptor(py, numpy, dtype, type_number(dtype))?;
    type FromAny = unsafe extern "C" fn(
        *mut ffi::PyObject,
        *mut ffi::PyObject,
        c_int,
        c_int,
        c_int,
        *mut ffi::PyObject,
    ) -> *mut ffi::PyObject;
    // SAFETY: the table's function with its C signature (numpy/__multiarray_api.h).
    let from_any: FromAny = unsafe { numpy.function(FROM_ANY) };
    // SAFETY: a live object, a descriptor reference NumPy steals (also on failure), any depth;
    // NULL with an exception set, or a new reference.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            from_any(object.as_ptr(), descr.into_ptr(), 0, 0, AS_ASARRAY, std::ptr::null_mut()),
        )
    }
}

/// NumPy's `array.astype(dtype, casting=rule)`: a new C-order array of `dtype` holding `array`'s
/// elements converted by NumPy's own casts (`PyArray_CastToType`, as rust-numpy's
/// `cast_array`), after NumPy's check of `rule` (`numpy.can_cast`; 4, unsafe, allows every
/// cast), whose refusal is NumPy's `TypeError`, in NumPy's words.
///
/// # Safety
/// `array` is a NumPy array (of a type `is_array_type` accepts).
pub(crate) unsafe fn cast<'py>(
    array: &Bound<'py, PyAny>,
    dtype: &'static DType,
    rule: c_int,
) -> PyResult<Bound<'py, PyAny>> {
    const UNSAFE: c_int = 4;
    const RULES: [&str; 5] = ["no", "equiv", "safe", "same_kind", "unsafe"];
    let py = array.py();
    let numpy = api_or_import(py)?;
    let descr = descriptor(py, numpy, dtype, type_number(dtype))?;
    type CanCastArrayTo = unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject, c_int) -> std::ffi::c_uchar;
    type CastToType = unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject, c_int) -> *mut ffi::PyObject;
    // SAFETY: the table's functions with their C signatures (numpy/__multiarray_api.h).
    let (can_cast, cast_to): (CanCastArrayTo, CastToType) =
        unsafe { (numpy.function(CAN_CAST_ARRAY_TO), numpy.function(CAST_TO_TYPE)) };
    // SAFETY: a NumPy array (the caller's promise) and a live descriptor, borrowed.
    if rule != UNSAFE && unsafe { can_cast(array.as_ptr(), descr.as_ptr(), rule) } == 0 {
        let from = array.getattr(intern!(py, "dtype"))?.repr()?;
        // NumPy's words (`npy_set_invalid_cast_error`): "scalar" for a 0-d array.
        let what = if array.getattr(intern!(py, "ndim"))?.extract::<usize>()? == 0 { "scalar" } else { "array data" };
        return Err(PyTypeError::new_err(format!(
            "Cannot cast {what} from {from} to {} according to the rule '{}'",
            descr.repr()?,
            RULES.get(rule as usize).copied().unwrap_or("?")
        )));
    }
    // SAFETY: as above; NumPy steals the descriptor reference, and returns a new reference or
    // NULL with an exception set. 0: C order.
    unsafe { Bound::from_owned_ptr_or_err(py, cast_to(array.as_ptr(), descr.into_ptr(), 0)) }
}

/// Resize `array` to `shape` in C order, as NumPy's `ndarray.resize` (`PyArray_Resize`: new
/// elements zero): its data's new address.
///
/// # Safety
/// `array` is a NumPy array that no other object references (NumPy checks the count too) and no
/// view or borrow reaches.
pub(crate) unsafe fn resize(array: &Bound<'_, PyAny>, shape: &[usize]) -> PyResult<usize> {
    /// NumPy's `PyArray_Dims`.
    #[repr(C)]
    struct Dims {
        ptr: *mut isize,
        len: c_int,
    }
    type Resize = unsafe extern "C" fn(*mut ffi::PyObject, *mut Dims, c_int, c_int) -> *mut ffi::PyObject;
    const NPY_CORDER: c_int = 0;
    let py = array.py();
    let numpy = api_or_import(py)?;
    // SAFETY: the table's `PyArray_Resize` with its C signature (numpy/__multiarray_api.h).
    let resize: Resize = unsafe { numpy.function(RESIZE) };
    // NumPy reads the dimensions as `npy_intp`s, which `usize`s are bit for bit (each checked
    // to fit by the caller), and copies them.
    let mut dims = Dims { ptr: shape.as_ptr().cast_mut().cast(), len: shape.len() as c_int };
    // SAFETY: the caller's array; refcheck on; None (a new reference) or NULL with an exception.
    let _none = unsafe { Bound::from_owned_ptr_or_err(py, resize(array.as_ptr(), &mut dims, 1, NPY_CORDER)) }?;
    Ok(data_address(array))
}

/// The address of the first element of NumPy array `array` (of a type `is_array_type` accepts).
pub(crate) fn data_address(array: &Bound<'_, PyAny>) -> usize {
    // SAFETY: the caller checked the type; `data` is the struct's second field.
    unsafe { (*array.as_ptr().cast::<ArrayStruct>()).data as usize }
}
