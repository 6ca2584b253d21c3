//! The DLPack methods every consumer calls (`__dlpack__`, `__dlpack_device__`) as descriptors
//! of each generated class itself, not only of the base class: CPython specialises a method
//! call only when the instance's type is the descriptor's own type, and instances are of the
//! generated classes. The descriptors share the base class's method table (PyO3's entries),
//! so each class adds two small objects and no code.
//!
//! `__dlpack__`'s descriptor has its own entry: every consumer calls it, and
//! PyO3's generic keyword parsing (each keyword name decoded and compared as text) cost more
//! than the export itself. The entry (`dlpack_body`) takes the forms consumers send (keyword names the
//! compiler or NumPy interned, found by pointer; `None`, ints, bools, an exact `max_version`
//! tuple) and hands every other call, unchanged, to PyO3's entry, so that every error reads as
//! it did. A call site passes the same `kwnames` and `max_version` tuples on every call, so
//! each is read when the call site changes and then known by its address (`LastCall`).

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::PyTypeInfo;

use crate::python::base::array::MemArrayBase;
use crate::python::export::capsule::dlpack_call;

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
            let def = if name == c"__dlpack__" { dlpack_def(py, def)? } else { def };
            // SAFETY: a live type and a method entry that outlives the descriptor. The
            // descriptor checks that `self` is an instance of `class` before calling the entry.
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

/// What `dlpack_entry` needs, made once: PyO3's entry (for every call the fast one does not
/// take), the method entry itself, and the keyword names, interned.
struct DlpackEntry {
    pyo3: ffi::PyCFunctionFastWithKeywords,
    def: usize,
    /// `stream`, `max_version`, `dl_device`, `copy`: interned strings, alive for the process
    /// (one reference each is kept).
    keywords: [usize; 4],
}

static DLPACK_ENTRY: OnceLock<DlpackEntry> = OnceLock::new();

/// The method entry of the fast `__dlpack__`, beside PyO3's `pyo3_def` (a METH_FASTCALL |
/// METH_KEYWORDS entry: anything else is an internal error).
fn dlpack_def(py: Python<'_>, pyo3_def: *mut ffi::PyMethodDef) -> PyResult<*mut ffi::PyMethodDef> {
    // SAFETY: a live entry of the base class's table (see `install`).
    let pyo3_def = unsafe { &*pyo3_def };
    if pyo3_def.ml_flags != ffi::METH_FASTCALL | ffi::METH_KEYWORDS {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "internal error in amso: PyO3's __dlpack__ is not a METH_FASTCALL | METH_KEYWORDS method",
        ));
    }
    if let Some(entry) = DLPACK_ENTRY.get() {
        return Ok(entry.def as *mut ffi::PyMethodDef);
    }
    let mut keywords = [0; 4];
    for (slot, name) in keywords.iter_mut().zip([c"stream", c"max_version", c"dl_device", c"copy"]) {
        // SAFETY: a NUL-terminated string; the new reference is kept for the process.
        let interned = unsafe { ffi::PyUnicode_InternFromString(name.as_ptr()) };
        if interned.is_null() {
            return Err(PyErr::fetch(py));
        }
        *slot = interned as usize;
    }
    let def = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: pyo3_def.ml_name,
        ml_meth: ffi::PyMethodDefPointer { PyCFunctionFastWithKeywords: dlpack_entry },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        // The same docstring, so `__text_signature__` and `help` read as before.
        ml_doc: pyo3_def.ml_doc,
    }));
    // SAFETY: the flags say which member of the union PyO3 set.
    let pyo3 = unsafe { pyo3_def.ml_meth.PyCFunctionFastWithKeywords };
    // Classes are registered with the GIL held, one at a time, so this sets the entry once.
    Ok(DLPACK_ENTRY.get_or_init(|| DlpackEntry { pyo3, def: def as *mut _ as usize, keywords }).def
        as *mut ffi::PyMethodDef)
}

/// `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`'s arguments as the
/// fast entry takes them.
#[derive(Default)]
struct DlpackArgs {
    stream: Option<i64>, // the protocol's raw value (`DlpackRequest::stream`)
    max_version: Option<(u32, u32)>,
    copy: Option<bool>,
}

/// `__dlpack__`'s entry on the generated classes: `dlpack_body` with panics caught and errors
/// restored, as PyO3's trampoline does, without the trampoline's thread-local GIL count (two
/// `__tls_get_addr` calls in a shared library) and pending-decref check. The host path needs
/// neither: it makes no `Python::attach` and drops no `Py<T>` (errors are restored, not
/// dropped). Other paths still work with the count at zero: a `Python::attach` on them (a
/// device copy through a Python allocator) takes the GIL again through `PyGILState_Ensure`, and
/// a `Py<T>` dropped there has its reference given back at PyO3's next entry. A panic is a
/// `RuntimeError`, as at amso's other C entries.
///
/// # Safety
/// As `dlpack_body`.
unsafe extern "C" fn dlpack_entry(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a method entry with the GIL held; the rest is the contract.
    unsafe {
        crate::python::base::error::at_c_entry(std::ptr::null_mut(), |py| dlpack_body(py, slf, args, nargs, kwnames))
    }
}

/// `__dlpack__`'s body on the generated classes.
///
/// # Safety
/// Called by CPython's method descriptor: the GIL is held, `slf` is an instance of the class
/// the descriptor was made for (a subclass of this runtime's `MemArrayBase`: the descriptor
/// checked it), `args` holds `nargs` positional values and then one value per name of the
/// `kwnames` tuple (or NULL).
unsafe fn dlpack_body(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    let entry = DLPACK_ENTRY.get().expect("the entry exists before any descriptor of it");
    // SAFETY: the caller's contract, forwarded.
    let Some(DlpackArgs { stream, max_version, copy }) = (unsafe { dlpack_args(entry, args, nargs, kwnames) }) else {
        // PyO3's own entry for the same method, called as CPython would call it: its result,
        // or NULL with its exception set, goes back as it is.
        // SAFETY: the caller's contract, which is that entry's too.
        return Ok(unsafe { (entry.pyo3)(slf, args, nargs, kwnames) });
    };
    // SAFETY: `slf` is a live instance of a subclass of `MemArrayBase` (the descriptor's
    // check), borrowed for the call.
    let array = unsafe { Bound::from_borrowed_ptr(py, slf).cast_into_unchecked::<MemArrayBase>() };
    Ok(dlpack_call(py, array.get(), None, stream, max_version, None, copy)?.into_ptr())
}

/// The arguments, if every one is of a form this entry takes; `None` sends the call to PyO3's
/// entry (positional arguments, a keyword name not interned or unknown, `dl_device` other than
/// None, any value needing conversion or an error message).
///
/// # Safety
/// As `dlpack_body`.
#[inline]
unsafe fn dlpack_args(
    entry: &DlpackEntry,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> Option<DlpackArgs> {
    let mut parsed = DlpackArgs::default();
    if nargs != 0 {
        return None;
    }
    if kwnames.is_null() {
        return Some(parsed);
    }
    let last = &LAST_CALL;
    // SAFETY: `kwnames` is a tuple of str, `args` holds one value per name (the contract); the
    // GIL is held.
    unsafe {
        let KeywordSlots { count, slots } = match last.kwnames.get(kwnames) {
            Some(known) => known,
            None => last.learn_kwnames(entry, kwnames)?,
        };
        let none = ffi::Py_None();
        for index in 0..usize::from(count) {
            let value = *args.add(index);
            if value == none {
                continue;
            }
            match (slots >> (2 * index)) & 3 {
                0 if ffi::Py_IS_TYPE(value, &raw mut ffi::PyLong_Type) != 0 => {
                    let stream = ffi::PyLong_AsLongLong(value);
                    if stream == -1 && !ffi::PyErr_Occurred().is_null() {
                        ffi::PyErr_Clear();
                        return None;
                    }
                    parsed.stream = Some(stream);
                }
                1 => parsed.max_version = Some(last.max_version(value)?),
                3 if value == ffi::Py_True() => parsed.copy = Some(true),
                3 if value == ffi::Py_False() => parsed.copy = Some(false),
                _ => return None,
            }
        }
    }
    Some(parsed)
}

/// Which keyword each name of a `kwnames` tuple is: `count` names, the `index`-th one's
/// position in `DlpackEntry::keywords` in bits `2 * index` and up.
#[derive(Clone, Copy)]
struct KeywordSlots {
    count: u8,
    slots: u8,
}

/// The keyword names of one call, if `kwnames` is an exact tuple (CPython's; a C caller might
/// pass a subclass, whose release could run Python code) and each name is one of the entry's
/// interned names, once: `None` for any other name, or one given twice (CPython refuses that
/// before calling, but a C caller might not).
///
/// # Safety
/// `kwnames` is a live tuple of str, and the GIL is held.
unsafe fn keyword_slots(entry: &DlpackEntry, kwnames: *mut ffi::PyObject) -> Option<KeywordSlots> {
    // SAFETY: the caller's contract; a tuple's items are live while it is.
    if unsafe { ffi::Py_IS_TYPE(kwnames, &raw mut ffi::PyTuple_Type) } == 0 {
        return None;
    }
    // SAFETY: as above.
    let count = usize::try_from(unsafe { ffi::PyTuple_Size(kwnames) }).ok()?;
    if count > entry.keywords.len() {
        return None;
    }
    let mut slots = 0u8;
    let mut seen = 0u8;
    for index in 0..count {
        // SAFETY: as above, `index` within the tuple.
        let name = unsafe { ffi::PyTuple_GetItem(kwnames, index as ffi::Py_ssize_t) } as usize;
        let which = entry.keywords.iter().position(|&keyword| keyword == name)?;
        if seen & (1 << which) != 0 {
            return None;
        }
        seen |= 1 << which;
        slots |= (which as u8) << (2 * index);
    }
    Some(KeywordSlots { count: u8::try_from(count).ok()?, slots })
}

/// The last `kwnames` tuple and `max_version` tuple a call passed (each a strong reference, so
/// that its address names it while cached), and what they read as. A consumer passes the same
/// tuples on every call (constants of its code, NumPy's static ones), so reading them is a
/// pointer compare. One for the process, behind the GIL: no thread-local lookup per call.
struct LastCall {
    kwnames: Known<KeywordSlots>,
    version: Known<(u32, u32)>,
}

impl LastCall {
    /// Read `kwnames` (`keyword_slots`) and cache it: a reference taken for the cache, the
    /// previous one given back (an exact tuple of the entry's interned names: freeing it runs no
    /// Python code). `None`, and nothing cached, if the entry does not take these names.
    ///
    /// # Safety
    /// `kwnames` is a live tuple of str, and the GIL is held.
    #[cold]
    #[inline(never)]
    unsafe fn learn_kwnames(&self, entry: &DlpackEntry, kwnames: *mut ffi::PyObject) -> Option<KeywordSlots> {
        // SAFETY: the caller's contract; an exact tuple of exact str (`keyword_slots`).
        unsafe {
            let slots = keyword_slots(entry, kwnames)?;
            self.kwnames.remember(kwnames, slots);
            Some(slots)
        }
    }

    /// `max_version` as `(major, minor)`, if `value` is an exact tuple of two exact ints that fit:
    /// any other form goes to PyO3's entry, which reads it (or says what is wrong) with
    /// `convert::dlpack_version`. Read once per tuple.
    ///
    /// # Safety
    /// `value` is a live object and the GIL is held.
    #[inline(always)]
    unsafe fn max_version(&self, value: *mut ffi::PyObject) -> Option<(u32, u32)> {
        match self.version.get(value) {
            Some(known) => Some(known),
            // SAFETY: the caller's contract, forwarded.
            None => unsafe { self.learn_version(value) },
        }
    }

    /// `max_version` read and cached (the cache missed).
    ///
    /// # Safety
    /// As `max_version`.
    #[cold]
    #[inline(never)]
    unsafe fn learn_version(&self, value: *mut ffi::PyObject) -> Option<(u32, u32)> {
        // SAFETY: a live object, the GIL held; a tuple's items are live while it is.
        unsafe {
            if ffi::Py_IS_TYPE(value, &raw mut ffi::PyTuple_Type) == 0 || ffi::PyTuple_Size(value) != 2 {
                return None;
            }
            let part = |index| {
                let item = ffi::PyTuple_GetItem(value, index);
                if ffi::Py_IS_TYPE(item, &raw mut ffi::PyLong_Type) == 0 {
                    return None;
                }
                let part = ffi::PyLong_AsLong(item);
                if part == -1 && !ffi::PyErr_Occurred().is_null() {
                    ffi::PyErr_Clear();
                    return None;
                }
                u32::try_from(part).ok()
            };
            let version = (part(0)?, part(1)?);
            // An exact tuple of exact ints, as the one named before: freeing either runs no Python code.
            self.version.remember(value, version);
            Some(version)
        }
    }
}

/// One object a call passed, named by its address (the cache holds a reference to it, so the
/// address names no other object while cached), and what it reads as.
struct Known<T> {
    object: Cell<usize>,
    read: Cell<T>,
}

impl<T: Copy> Known<T> {
    const fn new(read: T) -> Self {
        Known { object: Cell::new(0), read: Cell::new(read) }
    }

    /// What `object` reads as, if it is the object named.
    #[inline(always)]
    fn get(&self, object: *mut ffi::PyObject) -> Option<T> {
        (self.object.get() == object as usize).then(|| self.read.get())
    }

    /// Name `object` with a reference of the cache's own, and what it reads as; then give back
    /// the reference to the object named before (so the cache never names a freed object, nor
    /// a read of another).
    ///
    /// # Safety
    /// `object` is live, the GIL is held, and freeing `object` or the one named before runs no
    /// Python code (it could re-enter the entry).
    unsafe fn remember(&self, object: *mut ffi::PyObject, read: T) {
        // SAFETY: the caller's contract; the previous object is alive through the cache's
        // reference.
        unsafe {
            ffi::Py_IncRef(object);
            let previous = self.object.replace(object as usize);
            self.read.set(read);
            if previous != 0 {
                ffi::Py_DecRef(previous as *mut ffi::PyObject);
            }
        }
    }
}

// SAFETY: reached only by `dlpack_args`, whose callers hold the GIL, and one GIL serialises
// them all: an abi3 extension runs only on builds with a GIL, and an interpreter with a GIL of
// its own (isolated, 3.12 on) refuses to load it (CPython's check of a module that declares no
// support; tested). Legacy subinterpreters share the main GIL.
unsafe impl Sync for LastCall {}

static LAST_CALL: LastCall =
    LastCall { kwnames: Known::new(KeywordSlots { count: 0, slots: 0 }), version: Known::new((0, 0)) };
