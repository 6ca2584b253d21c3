//! NumPy arrays at the C level: the array struct read in place (as rust-numpy and every C
//! extension read it), and new arrays made through NumPy's C API table. The two structs below
//! are the leading fields NumPy's headers declare; they have not changed since NumPy 1.7 and
//! are the same in NumPy 2 (whose descriptor changed only after `type_num`).
//!
//! `numpy.ndarray` is known by NumPy's own C API, as C extensions know it: the `_ARRAY_API`
//! capsule of NumPy's C module gives `PyArray_Type`, validated before anything is read as
//! NumPy's struct. `sys.modules["numpy"].ndarray` is never consulted: any code can replace it
//! (a stand-in module in a test), and an object of the stand-in's type read as NumPy's struct
//! is a crash. Only a validated table is cached; NumPy never unloads it, so no later
//! `sys.modules` change can turn it into a misread. NumPy is never imported to check a type (an
//! object can only be a NumPy array once some code imported NumPy); `array_over` imports it.

use std::ffi::{c_char, c_int, c_void};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{ffi, intern};

use crate::element::DType;
use crate::python::identity_cache::IdentityCache;

/// `PyArrayObject_fields`' leading members (numpy/ndarraytypes.h).
#[repr(C)]
pub(crate) struct ArrayStruct {
    ob_base: ffi::PyObject,
    pub(crate) data: *mut c_char,
    pub(crate) nd: c_int,
    pub(crate) dimensions: *const isize,
    pub(crate) strides: *const isize,
    pub(crate) base: *mut ffi::PyObject,
    pub(crate) descr: *const DescrStruct,
    pub(crate) flags: c_int,
}

/// `PyArray_Descr`'s leading members, the same in NumPy 1 and 2.
#[repr(C)]
pub(crate) struct DescrStruct {
    ob_base: ffi::PyObject,
    pub(crate) typeobj: *mut ffi::PyTypeObject,
    pub(crate) kind: c_char,
    pub(crate) type_char: c_char,
    pub(crate) byteorder: c_char,
    pub(crate) former_flags: c_char,
    pub(crate) type_num: c_int,
}

pub(crate) const NPY_ARRAY_WRITEABLE: c_int = 0x0400;
/// The first type number of dtypes registered by other packages (ml_dtypes' bfloat16).
pub(crate) const NPY_USERDEF: c_int = 256;

/// Whether `ty` is `numpy.ndarray` or a subclass of it.
pub(crate) fn is_array_type(ty: &Bound<'_, PyType>) -> bool {
    let Some(numpy) = loaded(ty.py()) else { return false };
    // SAFETY: two live type objects; PyType_IsSubtype never fails.
    unsafe { ffi::PyType_IsSubtype(ty.as_type_ptr(), numpy.ndarray) == 1 }
}

/// Whether `obj` is exactly a `numpy.ndarray` (no subclass, whose methods could be overridden).
pub(crate) fn is_exact_array(obj: &Bound<'_, PyAny>) -> bool {
    loaded(obj.py()).is_some_and(|numpy| obj.get_type().as_type_ptr() == numpy.ndarray)
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
#[inline]
pub(crate) fn builtin_dtype(type_num: c_int) -> Option<(u8, u8, u16)> {
    // `BUILTIN` by type number (its last row has the largest), for the lookup every NumPy
    // argument makes.
    const BY_NUMBER: [Option<(u8, u8, u16)>; BUILTIN[BUILTIN.len() - 1].0 as usize + 1] = {
        let mut table = [None; BUILTIN[BUILTIN.len() - 1].0 as usize + 1];
        let mut row = 0;
        while row < BUILTIN.len() {
            table[BUILTIN[row].0 as usize] = Some(BUILTIN[row].1);
            row += 1;
        }
        table
    };
    *BY_NUMBER.get(usize::try_from(type_num).ok()?)?
}

/// The builtin NumPy type number of a DLPack type (the first: `long` before `long long`); a
/// `const fn`, so that a typed result knows its number at compile time (`dtype::array_of`).
pub(crate) const fn builtin_type_num(dtype: (u8, u8, u16)) -> Option<c_int> {
    let mut row = 0;
    while row < BUILTIN.len() {
        let (number, (code, bits, lanes)) = BUILTIN[row];
        if code == dtype.0 && bits == dtype.1 && lanes == dtype.2 {
            return Some(number);
        }
        row += 1;
    }
    None
}

/// The spec dtypes of user-registered NumPy dtypes seen so far, by scalar type (0: none).
static USER_DTYPES: IdentityCache<16> = IdentityCache::new();

/// The DLPack type of a dtype another package registered (ml_dtypes' bfloat16), by its NumPy
/// name, checked against its item size: looked up once per scalar type, which the cache holds,
/// so renaming the type later changes nothing. A name that claims a spec dtype of another size
/// (a scalar type's `__name__` is writable) is a TypeError, never a misread.
pub(crate) fn user_dtype(py: Python<'_>, descr: *const DescrStruct) -> PyResult<Option<(u8, u8, u16)>> {
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
            let Ok(name) = descr_object.getattr(intern!(py, "name")).and_then(|n| n.extract::<String>()) else {
                return Ok(None);
            };
            let itemsize: usize = descr_object.getattr(intern!(py, "itemsize"))?.extract()?;
            let dtype = DType::from_numpy_name(&name).map_or(std::ptr::null(), |d| d as *const DType);
            // SAFETY: NULL or one of the spec's static dtypes.
            if let Some(claimed) = unsafe { dtype.as_ref() } {
                let bytes = claimed.itemsize();
                if bytes != itemsize {
                    return Err(PyTypeError::new_err(format!(
                        "NumPy's user dtype {} calls itself {name:?}, whose items are {bytes} bytes, but its items \
                         are {itemsize} bytes: a renamed or foreign type; amso refuses it rather than misread the \
                         array (restore the type's name, or convert with x.astype(...))",
                        scalar_type.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                    )));
                }
            }
            USER_DTYPES.insert(&scalar_type, 0, dtype as usize);
            dtype
        }
    };
    // SAFETY: NULL or one of the spec's static dtypes.
    Ok(unsafe { dtype.as_ref() }.map(DType::dlpack))
}

/// NumPy's type numbers of the kinds DLPack lacks.
const NPY_OBJECT: c_int = 17;
const NPY_STRING: c_int = 18;
const NPY_UNICODE: c_int = 19;
const NPY_VOID: c_int = 20;
const NPY_DATETIME: c_int = 21;
const NPY_TIMEDELTA: c_int = 22;

/// A kind DLPack lacks, by its canonical name, and the DLPack fields that size it.
pub(crate) type Kind = (std::borrow::Cow<'static, str>, (u8, u8, u16));

/// A kind DLPack lacks: its canonical name (`DType::numpy_only`) and the DLPack fields that
/// size it (object: DLPack's opaque handle, 64 bits; dates: int64; `S<n>`: n uint8 lanes;
/// `U<n>`: n uint32 lanes). `None` for every other dtype.
pub(crate) fn numpy_kind(numpy: &NumPyApi, descr_object: &Bound<'_, PyAny>, type_num: c_int) -> PyResult<Option<Kind>> {
    use crate::element::dlpack_code::{INT, UINT};
    let py = descr_object.py();
    let itemsize = || -> PyResult<usize> { descr_object.getattr(intern!(py, "itemsize"))?.extract() };
    Ok(match type_num {
        NPY_OBJECT => Some(("object".into(), (3, 64, 1))),
        NPY_DATETIME | NPY_TIMEDELTA => {
            // SAFETY: the descriptor of a live NumPy array, of NumPy's own date type.
            let name = match unsafe { date_name(numpy, descr_object.as_ptr().cast(), type_num) } {
                Some(name) => name.into(),
                None => {
                    // A unit with a multiplier ('<m8[5s]'): from `dtype.str`, a C getter
                    // (`dtype.name` runs Python code, tens of thousands of instructions).
                    let code: String = descr_object.getattr(intern!(py, "str"))?.extract()?;
                    let unit = code.find('[').map_or("", |open| &code[open..]);
                    let kind = if type_num == NPY_DATETIME { "datetime64" } else { "timedelta64" };
                    format!("{kind}{unit}").into()
                }
            };
            Some((name, (INT, 64, 1)))
        }
        NPY_VOID => {
            // SAFETY: the descriptor of a live NumPy array, of NumPy's own void type.
            let fields = unsafe { legacy_fields(numpy, descr_object.as_ptr().cast()) };
            // A structured dtype (named fields) whose size DLPack's lanes can carry: a record,
            // compared field by field by typed arguments of a record type. Plain `V<n>` has no kind.
            match (!fields.names.is_null(), u16::try_from(fields.elsize)) {
                (true, Ok(lanes)) if lanes > 0 => {
                    Some((crate::element::RECORD.into(), (crate::element::OPAQUE_HANDLE, 8, lanes)))
                }
                _ => None,
            }
        }
        NPY_STRING => {
            let n = itemsize()?;
            Some((format!("S{n}").into(), (UINT, 8, u16::try_from(n).unwrap_or(0))))
        }
        NPY_UNICODE => {
            let n = itemsize()? / 4;
            Some((format!("U{n}").into(), (UINT, 32, u16::try_from(n).unwrap_or(0))))
        }
        _ => None,
    })
}

/// `PyArray_Descr` as NumPy 2 lays out its own dtypes (`_PyArray_LegacyDescr`), up to
/// `c_metadata`.
#[repr(C)]
struct LegacyDescr2 {
    head: DescrStruct,
    flags: u64,
    elsize: isize,
    alignment: isize,
    metadata: *mut ffi::PyObject,
    hash: isize,
    reserved_null: [*mut c_void; 2],
    subarray: *mut c_void,
    fields: *mut ffi::PyObject,
    names: *mut ffi::PyObject,
    c_metadata: *const DateMetadata,
}

/// `PyArray_Descr` as NumPy 1 lays it out, up to `c_metadata`.
#[repr(C)]
struct Descr1 {
    head: DescrStruct,
    elsize: c_int,
    alignment: c_int,
    subarray: *mut c_void,
    fields: *mut ffi::PyObject,
    names: *mut ffi::PyObject,
    f: *mut c_void,
    metadata: *mut ffi::PyObject,
    c_metadata: *const DateMetadata,
}

/// `PyArray_DatetimeDTypeMetaData`: NumPy's auxiliary-data header, then the unit and its
/// multiplier.
#[repr(C)]
struct DateMetadata {
    aux: [*mut c_void; 4],
    base: c_int,
    num: c_int,
}

/// The canonical names of the date kinds by NumPy's unit number (`NPY_DATETIMEUNIT`: 3 was
/// NumPy 1.6's business day, 14 is the generic unit).
const DATETIME_NAMES: [&str; 15] = [
    "datetime64[Y]",
    "datetime64[M]",
    "datetime64[W]",
    "",
    "datetime64[D]",
    "datetime64[h]",
    "datetime64[m]",
    "datetime64[s]",
    "datetime64[ms]",
    "datetime64[us]",
    "datetime64[ns]",
    "datetime64[ps]",
    "datetime64[fs]",
    "datetime64[as]",
    "datetime64",
];
const TIMEDELTA_NAMES: [&str; 15] = [
    "timedelta64[Y]",
    "timedelta64[M]",
    "timedelta64[W]",
    "",
    "timedelta64[D]",
    "timedelta64[h]",
    "timedelta64[m]",
    "timedelta64[s]",
    "timedelta64[ms]",
    "timedelta64[us]",
    "timedelta64[ns]",
    "timedelta64[ps]",
    "timedelta64[fs]",
    "timedelta64[as]",
    "timedelta64",
];

/// The fields of a NumPy-defined (legacy) descriptor past `type_num` that amso reads, whichever
/// of NumPy 1's and 2's layouts the loaded NumPy has.
struct LegacyFields {
    elsize: usize,
    /// The field-names tuple (NULL unless the dtype has fields).
    names: *mut ffi::PyObject,
    /// A date's unit metadata (NULL or the metadata for `datetime64`/`timedelta64`).
    c_metadata: *const DateMetadata,
}

/// `descr`'s legacy fields, read in place as NumPy's `PyDataType_ELSIZE`, `PyDataType_NAMES` and
/// `PyDataType_C_METADATA` read them.
///
/// # Safety
/// `descr` is a live descriptor of one of NumPy's own types (a legacy descriptor), of the NumPy
/// whose C API `numpy` is.
unsafe fn legacy_fields(numpy: &NumPyApi, descr: *const DescrStruct) -> LegacyFields {
    // SAFETY: as the caller guarantees: laid out as this NumPy's ABI major version says.
    unsafe {
        match numpy.abi_major {
            2 => {
                let d = &*descr.cast::<LegacyDescr2>();
                LegacyFields { elsize: d.elsize.max(0) as usize, names: d.names, c_metadata: d.c_metadata }
            }
            _ => {
                let d = &*descr.cast::<Descr1>();
                LegacyFields { elsize: d.elsize.max(0) as usize, names: d.names, c_metadata: d.c_metadata }
            }
        }
    }
}

/// The field-names tuple of a structured descriptor (NULL for another dtype), read in place:
/// NumPy replaces it when a program renames the fields (`dtype.names = ...`).
///
/// # Safety
/// `descr` is a live NumPy descriptor of NumPy's own void type, of the loaded NumPy.
pub(crate) unsafe fn field_names(descr: *mut ffi::PyObject) -> *mut ffi::PyObject {
    let Some(numpy) = NUMPY.get() else { return std::ptr::null_mut() };
    // SAFETY: as the caller guarantees; a void descriptor is a legacy descriptor.
    unsafe { legacy_fields(numpy, descr.cast()) }.names
}

/// The descriptor of NumPy array `obj` (a borrowed pointer, valid while the array lives).
///
/// # Safety
/// `obj` is a live NumPy array (its type checked through NumPy's C API).
pub(crate) unsafe fn descr_of(obj: &Bound<'_, PyAny>) -> *mut ffi::PyObject {
    // SAFETY: as the caller guarantees.
    unsafe { (*obj.as_ptr().cast::<ArrayStruct>()).descr as *mut ffi::PyObject }
}

/// The canonical name of a date descriptor's kind (`timedelta64[s]`), read from its unit
/// metadata in place as NumPy's `get_datetime_metadata_from_dtype` reads it: no Python call, no
/// allocation. `None` for a unit with a multiplier (`[5s]`), which has no static name.
///
/// # Safety
/// `descr` is a live descriptor of NumPy's own `datetime64` or `timedelta64` type (`type_num`),
/// of the NumPy whose C API `numpy` is.
unsafe fn date_name(numpy: &NumPyApi, descr: *const DescrStruct, type_num: c_int) -> Option<&'static str> {
    // SAFETY: NumPy's date descriptors are legacy descriptors; their `c_metadata` is NULL or
    // the date metadata.
    let metadata = unsafe { legacy_fields(numpy, descr).c_metadata.as_ref() }?;
    if metadata.num != 1 {
        return None;
    }
    let names = if type_num == NPY_DATETIME { &DATETIME_NAMES } else { &TIMEDELTA_NAMES };
    names.get(usize::try_from(metadata.base).ok()?).copied().filter(|name| !name.is_empty())
}

pub(crate) mod api;
pub(crate) mod dtype;
pub(crate) mod record_layout;

use self::api::{loaded, NumPyApi, NUMPY};
