//! The DLPack methods every consumer calls (`__dlpack__`, `__dlpack_device__`) as descriptors
//! of each generated class itself, not only of the base class: CPython specialises a method
//! call only when the instance's type is the descriptor's own type, and instances are of the
//! generated classes. The descriptors share the base class's method table (PyO3's entries),
//! so each class adds two small objects and no code.

use std::ffi::CStr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::PyTypeInfo;

use super::array::MemArrayBase;

const HOT: [&CStr; 2] = [c"__dlpack__", c"__dlpack_device__"];

/// Give `class` (a subclass of this runtime's base class) its own descriptors of the hot
/// methods. A base class without them as plain methods is an internal error (PyO3 changed how
/// it builds classes), reported at import rather than left as a silent slowdown.
pub(super) fn install(class: &Bound<'_, PyType>) -> PyResult<()> {
    let py = class.py();
    let base = MemArrayBase::type_object_raw(py);
    // SAFETY: the base class is a heap type PyO3 made from a spec with a method table, which
    // lives for the process (a class is never freed once created).
    let mut def = unsafe { ffi::PyType_GetSlot(base, ffi::Py_tp_methods) }.cast::<ffi::PyMethodDef>();
    let mut installed = 0;
    while !def.is_null() {
        // SAFETY: `def` is an entry of the table, which ends with a NULL name.
        let Some(name) = (unsafe { (*def).ml_name.as_ref() }) else { break };
        // SAFETY: entry names are NUL-terminated static strings.
        let name = unsafe { CStr::from_ptr(name) };
        // SAFETY: as above, a live entry.
        let plain = unsafe { (*def).ml_flags } & (ffi::METH_CLASS | ffi::METH_STATIC) == 0;
        if HOT.contains(&name) && plain {
            // SAFETY: a live type and a method entry that outlives the descriptor.
            let descriptor = unsafe { ffi::PyDescr_NewMethod(class.as_type_ptr(), def) };
            // SAFETY: a new reference, or NULL with an exception set.
            let descriptor = unsafe { Bound::from_owned_ptr_or_err(py, descriptor) }?;
            class.setattr(name.to_str().expect("ASCII method name"), descriptor)?;
            installed += 1;
        }
        // SAFETY: the table continues up to its NULL-named end.
        def = unsafe { def.add(1) };
    }
    if installed != HOT.len() {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
            "internal error in amso: the base class's method table has {installed} of {HOT:?} as plain methods"
        )));
    }
    Ok(())
}
