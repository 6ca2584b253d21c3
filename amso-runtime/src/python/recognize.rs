//! Recognising amso arrays, of this runtime or of another crate's copy of it (each extension
//! module built with amso links its own), without trusting what an object says about itself.
//!
//! Every amso class carries `__amso_type__`, a capsule named `amso.array_type.v1` that points
//! at its runtime's static `ArrayTypeInfo`. Only that runtime's `header_of` turns an object
//! into a header, and only after a real type check against its own base class. So a class
//! that copies the attribute, fakes it, or raises from it is simply not an amso array.
//! (Code that forges a capsule through ctypes can crash anything; that is outside what any
//! library can defend against.)

use std::ffi::CStr;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;

use super::array::MemArrayBase;
use crate::header::{Header, HEADER_MAGIC, HEADER_VERSION};

const TYPE_CAPSULE: &CStr = c"amso.array_type.v1";

/// What one runtime copy tells the others about its array classes.
#[repr(C)]
struct ArrayTypeInfo {
    header_version: u32,
    header_size: u32,
    /// The object's header, or NULL if it is not an array of this runtime.
    header_of: unsafe extern "C" fn(*mut ffi::PyObject) -> *const Header,
}

static INFO: ArrayTypeInfo =
    ArrayTypeInfo { header_version: HEADER_VERSION, header_size: size_of::<Header>() as u32, header_of };

/// The `__amso_type__` capsule of this runtime's classes.
pub(super) fn type_capsule(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // SAFETY: a static table and a static name; no destructor is needed.
    let capsule =
        unsafe { ffi::PyCapsule_New((&INFO as *const ArrayTypeInfo).cast_mut().cast(), TYPE_CAPSULE.as_ptr(), None) };
    // SAFETY: a new reference or NULL with an exception set.
    Ok(unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?.unbind())
}

/// # Safety
/// `object` is a live object and the GIL is held (the capsule's contract).
unsafe extern "C" fn header_of(object: *mut ffi::PyObject) -> *const Header {
    std::panic::catch_unwind(|| {
        // SAFETY: the caller holds the GIL.
        let py = unsafe { Python::assume_attached() };
        // SAFETY: a live object, borrowed.
        let object = unsafe { Bound::from_borrowed_ptr(py, object) };
        object.cast::<MemArrayBase>().map_or(std::ptr::null(), |array| array.get().header() as *const Header)
    })
    .unwrap_or(std::ptr::null())
}

/// The header of `object` if it is an amso array of any runtime copy, borrowed for as long
/// as `object` is.
pub(crate) fn header_of_object<'a>(object: &'a Bound<'_, PyAny>) -> Option<&'a Header> {
    if let Ok(array) = object.cast::<MemArrayBase>() {
        return Some(array.get().header());
    }
    let capsule = object.get_type().getattr(intern!(object.py(), "__amso_type__")).ok()?;
    // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
    if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), TYPE_CAPSULE.as_ptr()) } != 1 {
        return None;
    }
    // SAFETY: valid under this name, so this is a non-null pointer to another runtime's
    // static `ArrayTypeInfo`.
    let info = unsafe { &*ffi::PyCapsule_GetPointer(capsule.as_ptr(), TYPE_CAPSULE.as_ptr()).cast::<ArrayTypeInfo>() };
    if info.header_version != HEADER_VERSION || info.header_size as usize != size_of::<Header>() {
        return None;
    }
    // SAFETY: a live object, the GIL held; the other runtime checks the type itself.
    let header = unsafe { (info.header_of)(object.as_ptr()) };
    // SAFETY: NULL or a header inside `object`, alive while it is.
    let header = unsafe { header.as_ref() }?;
    (header.magic == HEADER_MAGIC && header.version == HEADER_VERSION).then_some(header)
}
