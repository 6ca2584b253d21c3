//! NumPy's C API table (`_ARRAY_API`), found as NumPy's own `import_array()` finds it and
//! validated before anything is read through it; new arrays made through it.

use std::ffi::c_void;
use std::sync::OnceLock;

use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use pyo3::{ffi, intern};

use super::{ArrayStruct, DescrStruct};

/// NumPy's C API, validated: its function table (`_ARRAY_API`) and the two types whose
/// instances amso reads as NumPy's structs.
pub(crate) struct NumPyApi {
    pub(super) table: *const *const c_void,
    /// `PyArray_Type`, `numpy.ndarray`.
    pub(super) ndarray: *mut ffi::PyTypeObject,
    /// `PyArrayDescr_Type`, `numpy.dtype`.
    pub(super) descr: *mut ffi::PyTypeObject,
    /// The C ABI's major version (1 or 2), which lays out descriptors past `type_num`.
    pub(super) abi_major: u32,
}

// SAFETY: pointers to NumPy's function table and static types, which NumPy never changes or
// frees (CPython never unloads its extension module).
unsafe impl Send for NumPyApi {}
// SAFETY: as above.
unsafe impl Sync for NumPyApi {}

/// The real NumPy's C API, once found; a failure to find it is not cached.
pub(crate) static NUMPY: OnceLock<NumPyApi> = OnceLock::new();

/// The modules that hold `_ARRAY_API`, as NumPy's own `import_array()` looks for them: NumPy 2,
/// then NumPy 1.
const API_MODULES: [&str; 2] = ["numpy._core._multiarray_umath", "numpy.core._multiarray_umath"];

/// The indices of the table entries used here, which every NumPy since 1.7 keeps.
const GET_NDARRAY_C_VERSION: usize = 0;
const ARRAY_TYPE: usize = 2;
const DESCR_TYPE: usize = 3;
pub(super) const DESCR_FROM_TYPE: usize = 45;
pub(super) const CAST_TO_TYPE: usize = 49;
pub(super) const FROM_ANY: usize = 69;
pub(super) const RESIZE: usize = 80;
pub(super) const NEW_FROM_DESCR: usize = 94;
pub(super) const CAN_CAST_ARRAY_TO: usize = 274;
pub(super) const SET_BASE_OBJECT: usize = 282;

/// NumPy's C API if some code has imported NumPy (never importing it): after the first success,
/// one atomic load. A module that fails validation leaves the fast path off.
#[inline]
pub(crate) fn loaded(py: Python<'_>) -> Option<&'static NumPyApi> {
    match NUMPY.get() {
        Some(numpy) => Some(numpy),
        None => find(py).ok().flatten(),
    }
}

/// NumPy's C API, importing NumPy if no module of `API_MODULES` is loaded (making NumPy arrays
/// needs it anyway).
pub(super) fn api_or_import(py: Python<'_>) -> PyResult<&'static NumPyApi> {
    if let Some(numpy) = NUMPY.get() {
        return Ok(numpy);
    }
    if let Some(numpy) = find(py)? {
        return Ok(numpy);
    }
    py.import(intern!(py, "numpy"))?;
    find(py)?.ok_or_else(|| {
        PyImportError::new_err(format!(
            "`import numpy` succeeded, but sys.modules holds none of {API_MODULES:?}, whose _ARRAY_API is NumPy's C \
             API: sys.modules['numpy'] is not the real NumPy; restore it to make NumPy arrays"
        ))
    })
}

/// Refuse `module`, what `import numpy` gave, unless its `ndarray` is the validated NumPy's
/// type: amso calls NumPy's Python functions (`empty`, `frombuffer`, ...) through that module
/// only when it is the real one, whose results are NumPy's arrays.
pub(crate) fn check_module(module: &Bound<'_, PyAny>) -> PyResult<()> {
    let refuse = || {
        PyImportError::new_err(format!(
            "sys.modules['numpy'] is not the real NumPy (a {}): its ndarray is not the type NumPy's C API gives; \
             restore the real NumPy module",
            type_name(module)
        ))
    };
    let numpy = api_or_import(module.py())?;
    // From the module's dict: no `__getattr__` of a stand-in runs.
    let dict = module.cast::<PyModule>().map_err(|_| refuse())?.dict();
    let ndarray = dict.get_item(intern!(module.py(), "ndarray"))?;
    if ndarray.is_some_and(|ndarray| ndarray.as_ptr() == numpy.ndarray.cast()) {
        return Ok(());
    }
    Err(refuse())
}

/// The first module of `API_MODULES` in `sys.modules` whose `_ARRAY_API` validates, kept for the
/// process; `None` when none is loaded, the first refusal when each loaded one is refused.
#[cold]
fn find(py: Python<'_>) -> PyResult<Option<&'static NumPyApi>> {
    // SAFETY: the GIL is held; a borrowed reference to the interpreter's modules dict (the one
    // `sys.modules` names), or NULL with an exception set.
    let modules = unsafe { Bound::from_borrowed_ptr_or_err(py, ffi::PyImport_GetModuleDict()) }?;
    let modules = modules.cast_into::<PyDict>()?;
    let mut refusal = None;
    for name in API_MODULES {
        let Some(module) = modules.get_item(name)? else { continue };
        match validate(name, &module) {
            Ok(numpy) => {
                let _ = NUMPY.set(numpy); // two threads racing found the same table
                return Ok(NUMPY.get());
            }
            Err(error) => {
                refusal.get_or_insert(error);
            }
        }
    }
    refusal.map_or(Ok(None), Err)
}

/// `module`'s `_ARRAY_API`, if it is NumPy's: an unnamed capsule whose table gives the static
/// types `numpy.ndarray` and `numpy.dtype`, sized for the fields read here, and whose ABI version
/// is NumPy 1's or 2's. Read from the module's dict, so no Python code runs; anything else is
/// refused before one pointer of it is followed (a table made to fool these checks, which takes
/// C or ctypes, is beyond what a check can refuse).
fn validate(name: &str, module: &Bound<'_, PyAny>) -> PyResult<NumPyApi> {
    let refuse = |arrived: String| {
        PyImportError::new_err(format!(
            "sys.modules[{name:?}] does not hold the real NumPy's C API: its _ARRAY_API should be NumPy's unnamed \
             capsule over a table whose entry 2 is numpy.ndarray, but {arrived}. Restore the real NumPy modules in \
             sys.modules (a stand-in replaced them); until then amso reads NumPy arrays through DLPack and makes \
             none"
        ))
    };
    let Ok(module) = module.cast::<PyModule>() else {
        return Err(refuse(format!("it is of type {}, not a module", type_name(module))));
    };
    let Some(capsule) = module.dict().get_item(intern!(module.py(), "_ARRAY_API"))? else {
        return Err(refuse("the module has no _ARRAY_API".into()));
    };
    // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception; valid means a
    // capsule with a NULL name (NumPy's) and a non-NULL pointer.
    if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), std::ptr::null()) } != 1 {
        return Err(refuse(format!("it is {}", capsule_text(&capsule))));
    }
    // SAFETY: a valid capsule, of a NULL name.
    let table = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), std::ptr::null()) } as *const *const c_void;
    // SAFETY: NumPy's capsule points at its table of more than 300 entries; entries 2 and 3 are
    // read before any is trusted, and are checked to be type objects below.
    let (ndarray, descr) = unsafe { (*table.add(ARRAY_TYPE), *table.add(DESCR_TYPE)) };
    let ndarray = static_type(module.py(), ndarray, "ndarray", size_of::<ArrayStruct>()).map_err(&refuse)?;
    let descr = static_type(module.py(), descr, "dtype", size_of::<DescrStruct>()).map_err(refuse)?;
    // SAFETY: the table's entries 2 and 3 are NumPy's types, so the table is NumPy's, whose
    // entry 0 is `unsigned int PyArray_GetNDArrayCVersion(void)`.
    let version = unsafe {
        std::mem::transmute::<*const c_void, unsafe extern "C" fn() -> std::ffi::c_uint>(
            *table.add(GET_NDARRAY_C_VERSION),
        )()
    };
    if !matches!(version >> 24, 1 | 2) {
        return Err(PyImportError::new_err(format!(
            "NumPy's C ABI version is {version:#x}; amso reads NumPy's structs and C API as NumPy 1 and 2 define them \
             (ABI 0x01... and 0x02...): use NumPy 1.x or 2.x, or an amso release that supports this NumPy"
        )));
    }
    Ok(NumPyApi { table, ndarray: ndarray.as_type_ptr(), descr: descr.as_type_ptr(), abi_major: version >> 24 })
}

/// `entry` as a static (C-defined, not heap) type named `numpy.NAME` whose instances are at
/// least `size` bytes, or what it is instead.
fn static_type<'py>(
    py: Python<'py>,
    entry: *const c_void,
    name: &str,
    size: usize,
) -> Result<Bound<'py, PyType>, String> {
    // SAFETY: NULL or a pointer the table holds; PyType_Check reads the object's type, which a
    // type object (what NumPy's entries are) has.
    if entry.is_null() || unsafe { ffi::PyType_Check(entry as *mut ffi::PyObject) } == 0 {
        return Err(format!("its entry for numpy.{name} is not a type object"));
    }
    // SAFETY: a live type object: NumPy's, or one a module defines, which CPython keeps loaded.
    let ty =
        unsafe { Bound::from_borrowed_ptr(py, entry as *mut ffi::PyObject) }.cast_into::<PyType>().map_err(|_| "?")?;
    let qualified = match (ty.module(), ty.name()) {
        (Ok(module), Ok(short)) => format!("{module}.{short}"),
        _ => "?".into(),
    };
    // SAFETY: a live type object.
    let heap = unsafe { ffi::PyType_GetFlags(ty.as_type_ptr()) } & ffi::Py_TPFLAGS_HEAPTYPE != 0;
    let basicsize: usize = ty.getattr(intern!(py, "__basicsize__")).and_then(|s| s.extract()).unwrap_or(0);
    if qualified != format!("numpy.{name}") || heap || basicsize < size {
        return Err(format!(
            "its entry for numpy.{name} is type {qualified} ({basicsize}-byte instances{})",
            if heap { ", a heap type, as Python classes are" } else { "" }
        ));
    }
    Ok(ty)
}

/// What a capsule-like object is, for messages.
fn capsule_text(object: &Bound<'_, PyAny>) -> String {
    // SAFETY: PyCapsule_GetName accepts any object; for one that is no capsule it returns NULL
    // with an exception set, which is cleared.
    let name = unsafe { ffi::PyCapsule_GetName(object.as_ptr()) };
    if name.is_null() {
        let _ = PyErr::take(object.py());
        return format!("of type {}", type_name(object));
    }
    // SAFETY: a capsule's name, a NUL-terminated string that lives as long as the capsule.
    format!("a capsule named {:?}", unsafe { std::ffi::CStr::from_ptr(name) })
}

/// `type(value).__name__`, for messages.
pub(super) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map_or_else(|_| "?".into(), |name| name.to_string())
}

impl NumPyApi {
    /// # Safety
    /// `index` is a function of the table with signature `F`.
    pub(super) unsafe fn function<F: Copy>(&self, index: usize) -> F {
        // SAFETY: forwarded from the caller; the table holds pointers to functions.
        unsafe { std::mem::transmute_copy::<*const c_void, F>(&*self.table.add(index)) }
    }
}
