//! What every copy of amso's runtime in one process shares. Each extension module built with
//! amso links its own copy: the bundled `amso._amso`, and each user crate's module. They share
//! the stream context (`stream_context.rs`) and the borrow registry (`borrows.rs`) all the
//! same, through a table of C functions that the bundled module publishes in a versioned
//! capsule (no Rust type crosses between copies, which may be different builds). A copy whose
//! process has no `amso` package keeps its own.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::borrows::{self, BorrowKey};
use crate::stream_context;

/// The capsule's name; any change of `Table`'s layout takes a new name.
const CAPSULE: &std::ffi::CStr = c"amso._amso._process.v2";
const ATTRIBUTE: &str = "_process";

/// What the bundled module publishes.
#[repr(C)]
pub(crate) struct Table {
    /// The thread's stream context (`stream_context::current`), -1 for none.
    pub(crate) current_stream: extern "C" fn() -> i64,
    /// Replace the thread's stream context, returning the previous one.
    pub(crate) replace_stream: extern "C" fn(i64) -> i64,
    /// Register a borrow: 0, or 1 with the conflicting borrow written to the second argument.
    /// The borrow functions are called with the GIL held, which serialises them.
    pub(crate) acquire_borrow: unsafe extern "C" fn(*const BorrowKey, *mut BorrowKey) -> c_int,
    /// Release a borrow.
    pub(crate) release_borrow: unsafe extern "C" fn(*const BorrowKey),
    /// The number of live borrows.
    pub(crate) live_borrows: unsafe extern "C" fn() -> usize,
}

static OWN: Table = Table {
    current_stream: stream_context::current_shared,
    replace_stream: stream_context::replace_shared,
    acquire_borrow: borrows::acquire_shared,
    release_borrow: borrows::release_shared,
    live_borrows: borrows::live_shared,
};

/// The bundled module's table, when this copy is another one that found it.
static HOME: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());
/// Whether this copy needs to look no further: it is the bundled module's (whose own state is
/// the process's), or the process has no `amso` package.
static SETTLED: AtomicBool = AtomicBool::new(false);

/// The bundled module's table, if this copy joined it.
pub(crate) fn joined() -> Option<&'static Table> {
    // SAFETY: HOME is null or points at a static table of the bundled module, which stays
    // loaded for the process (CPython never unloads extension modules).
    unsafe { HOME.load(Ordering::Acquire).as_ref() }
}

/// The table this copy uses: the bundled module's, else its own.
pub(crate) fn table() -> &'static Table {
    joined().unwrap_or(&OWN)
}

/// Register `key` in the process's borrow registry (the GIL held: `_attached`); `Err` holds
/// the borrow it conflicts with.
pub(crate) fn acquire_borrow(_attached: Python<'_>, key: &BorrowKey) -> Result<(), BorrowKey> {
    let mut other = *key;
    // SAFETY: the GIL is held; a valid key and a writable output, alive for the call.
    match unsafe { (table().acquire_borrow)(key, &mut other) } {
        0 => Ok(()),
        _ => Err(other),
    }
}

/// Release `key` from the process's borrow registry (the GIL held: `_attached`).
pub(crate) fn release_borrow(_attached: Python<'_>, key: &BorrowKey) {
    // SAFETY: the GIL is held; a valid key, alive for the call.
    unsafe { (table().release_borrow)(key) }
}

/// The number of live borrows in the process's registry.
pub(crate) fn live_borrows(_attached: Python<'_>) -> usize {
    // SAFETY: the GIL is held.
    unsafe { (table().live_borrows)() }
}

/// Add this copy's table to `module` (the bundled `amso._amso`): the process's state. Called
/// before the module registers its classes, so that `join_bundled` finds this copy settled and
/// never imports the module from inside its own initialisation.
pub(crate) fn publish(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // SAFETY: a static table and a static name; no destructor is needed.
    let capsule = unsafe { ffi::PyCapsule_New((&OWN as *const Table).cast_mut().cast(), CAPSULE.as_ptr(), None) };
    // SAFETY: a new reference or NULL with an exception set.
    module.add(ATTRIBUTE, unsafe { Bound::from_owned_ptr_or_err(module.py(), capsule) }?)?;
    SETTLED.store(true, Ordering::Release);
    Ok(())
}

/// In a user crate's copy: use the bundled module's table from now on, if the `amso` package
/// is installed. Without it, nothing can set a context from Python, and this copy keeps its
/// own. Called where a user crate's module registers a class and where a typed argument is
/// read; after the first call, two atomic loads.
pub(crate) fn join_bundled(py: Python<'_>) -> PyResult<()> {
    if joined().is_some() || SETTLED.load(Ordering::Acquire) {
        return Ok(());
    }
    let bundled = match py.import("amso._amso") {
        Ok(bundled) => bundled,
        Err(error) if amso_is_absent(py, &error) => {
            SETTLED.store(true, Ordering::Release);
            return Ok(());
        }
        // amso is there but cannot be imported (a missing dependency, say): working on state
        // of its own would silently order this crate's work wrongly, or alias its borrows.
        Err(error) => return Err(error),
    };
    let Some(capsule) = bundled.getattr_opt(ATTRIBUTE)? else {
        return Err(pyo3::exceptions::PyImportError::new_err(
            "amso._amso publishes no process table: this module was built against a different amso version than \
             the installed one; rebuild it against the installed amso",
        ));
    };
    // SAFETY: PyCapsule_GetPointer accepts any object; a wrong name or type returns NULL with
    // an exception set.
    let table = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE.as_ptr()) }.cast::<Table>();
    if table.is_null() {
        let _ = PyErr::take(py);
        return Err(pyo3::exceptions::PyImportError::new_err(format!(
            "amso._amso.{ATTRIBUTE} is not a {CAPSULE:?} capsule: this module was built against a different amso \
             version than the installed one; rebuild it against the installed amso"
        )));
    }
    HOME.store(table, Ordering::Release);
    Ok(())
}

/// Whether `error`, from importing `amso._amso`, means the `amso` package is not installed
/// (Python finds no `amso` at all), rather than an installed one failing to import.
fn amso_is_absent(py: Python<'_>, error: &PyErr) -> bool {
    error.is_instance_of::<pyo3::exceptions::PyModuleNotFoundError>(py)
        && py
            .import("importlib.util")
            .and_then(|util| util.call_method1("find_spec", ("amso",)))
            .is_ok_and(|spec| spec.is_none())
}
