//! What every copy of amso's runtime in one process shares. Each extension module built with
//! amso links its own copy: the bundled `amso._amso`, and each user crate's module. They share
//! the stream context (`current_stream.rs`) and the borrow registry (`borrows.rs`) all the
//! same, through a table of C functions in a versioned capsule (no Rust type crosses between
//! copies, which may be different builds).
//!
//! The first copy to load publishes its table as `sys.modules["_amso_process_v3"].table`, a
//! module object made for it; every later copy finds it there and uses it. No copy needs the
//! `amso` package, so two user crates share their borrows with or without it. Publishing is
//! a lookup and an insertion in `sys.modules` with no Python code between them, so the GIL
//! makes it atomic; a free-threaded interpreter is refused (`require_gil`).

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use pyo3::exceptions::PyImportError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::borrows::{self, BorrowKey};
use crate::current_stream;

/// The module in `sys.modules` that holds the table, and the capsule's name; any change of
/// `Table`'s layout takes new names.
const HOME_MODULE: &str = "_amso_process_v3";
const CAPSULE: &std::ffi::CStr = c"_amso_process_v3.table";
const ATTRIBUTE: &str = "table";

/// What the first copy publishes.
#[repr(C)]
pub(crate) struct Table {
    /// The thread's stream context (`current_stream::current`), -1 for none.
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
    current_stream: current_stream::current_shared,
    replace_stream: current_stream::replace_shared,
    acquire_borrow: borrows::acquire_shared,
    release_borrow: borrows::release_shared,
    live_borrows: borrows::live_shared,
};

/// The published table, when it is another copy's.
static HOME: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());
/// Whether this copy has joined: found another copy's table (`HOME`) or published its own.
static JOINED: AtomicBool = AtomicBool::new(false);

/// Another copy's table, if this copy found one when it joined.
pub(crate) fn joined() -> Option<&'static Table> {
    // SAFETY: HOME is null or points at a static table of another copy, whose module stays
    // loaded for the process (CPython never unloads extension modules).
    unsafe { HOME.load(Ordering::Acquire).as_ref() }
}

/// The table this copy uses: the published one (its own when it published).
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

/// Use the process's table from now on: another copy's, or this copy's, published for the
/// others. Called where a module registers its classes, where a typed argument is read and
/// where results are made; after the first call, one atomic load.
#[inline]
pub(crate) fn join(py: Python<'_>) -> PyResult<()> {
    if JOINED.load(Ordering::Acquire) {
        return Ok(());
    }
    join_slow(py)
}

#[cold]
fn join_slow(py: Python<'_>) -> PyResult<()> {
    require_gil(py)?;
    let modules = py.import("sys")?.getattr("modules")?.cast_into::<PyDict>()?;
    match modules.get_item(HOME_MODULE)? {
        Some(home) => {
            let capsule = home.getattr(ATTRIBUTE)?;
            // SAFETY: PyCapsule_GetPointer accepts any object; a wrong name or type returns
            // NULL with an exception set.
            let table = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE.as_ptr()) }.cast::<Table>();
            if table.is_null() {
                let _ = PyErr::take(py);
                return Err(PyImportError::new_err(format!(
                    "sys.modules[{HOME_MODULE:?}].{ATTRIBUTE} is not a {CAPSULE:?} capsule: something other than amso \
                     took that name"
                )));
            }
            if !std::ptr::eq(table, &OWN) {
                HOME.store(table, Ordering::Release);
            }
        }
        None => {
            let home = PyModule::new(py, HOME_MODULE)?;
            home.setattr(
                "__doc__",
                "The table of functions every copy of amso's runtime in this process shares (stream context, borrows).",
            )?;
            // SAFETY: a static table and a static name; no destructor is needed.
            let capsule =
                unsafe { ffi::PyCapsule_New((&OWN as *const Table).cast_mut().cast(), CAPSULE.as_ptr(), None) };
            // SAFETY: a new reference or NULL with an exception set.
            home.add(ATTRIBUTE, unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?)?;
            modules.set_item(HOME_MODULE, home)?;
        }
    }
    JOINED.store(true, Ordering::Release);
    Ok(())
}

/// amso's shared state is serialised by the GIL (the borrow registry, the first copy's
/// publication, NumPy's array fields read in place): refuse an interpreter running without it
/// (a free-threaded build that a module declared safe for it).
fn require_gil(py: Python<'_>) -> PyResult<()> {
    let sys = py.import("sys")?;
    let Some(enabled) = sys.getattr_opt("_is_gil_enabled")? else { return Ok(()) };
    if enabled.call0()?.is_truthy()? {
        return Ok(());
    }
    Err(PyImportError::new_err(
        "amso's runtime needs the GIL, but this interpreter runs without it: declare the extension module with \
         #[pymodule(gil_used = true)] (free-threaded Python then enables the GIL when importing it), or run with \
         PYTHON_GIL=1",
    ))
}
