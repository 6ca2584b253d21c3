//! What every copy of amso's runtime in one process shares. Each extension module built with
//! amso links its own copy: the bundled `amso._amso`, and each user crate's module. They share
//! the stream context (`current_stream.rs`), the borrow registry (`borrow/registry.rs`) and, anchored
//! beside them (`anchor.rs`), the device-memory pool (`cuda/pool.rs`) all the same, through a table of C functions in a versioned capsule (no Rust type crosses between
//! copies, which may be different builds).
//!
//! The first copy to join publishes its table in the interpreter's own dict
//! (`PyInterpreterState_GetDict`, in the limited API since 3.8) under `"_amso_process_v4"`;
//! every later copy finds it there and uses it. Python code cannot reach that dict (no module,
//! attribute or `sys` entry leads to it), so editing, restoring or patching `sys.modules`
//! (`mock.patch.dict(sys.modules)`, `del sys.modules[...]`) cannot split the registry, where a
//! split would let two extension modules hold one array mutably. The table is mirrored as
//! `sys.modules["_amso_process_v4"].table` for earlier copies, which look only there; a joining
//! copy puts the mirror back when it is gone, adopts a mirrored table that no anchor holds yet
//! (an earlier copy published it), and refuses to load when the two hold different tables (an
//! earlier copy published a second one after the mirror was removed: whichever this copy
//! joined, it would be split from the other's users). No copy needs the `amso` package, so two
//! user crates share their borrows with or without it. Both entries are written with
//! `dict.setdefault`, one C call, which keeps the first of two racing copies even if Python code
//! (a finalizer) runs between the steps; a free-threaded interpreter is refused (`require_gil`).

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{ffi, intern};

use crate::anchor::{interpreter_dict, type_name};
use crate::borrow::registry::{self, BorrowKey};
use crate::current_stream;

/// The key of the table in the interpreter's dict, the module in `sys.modules` that mirrors it,
/// and the capsule's name; any change of `Table`'s layout takes new names, a new
/// `TABLE_VERSION`, and the old name in `EARLIER`.
const HOME: &str = "_amso_process_v4";
const CAPSULE: &std::ffi::CStr = c"_amso_process_v4.table";
/// The layout version every table starts with (with its size), checked before anything else.
const TABLE_VERSION: u32 = 4;
/// The names earlier layouts were published under: a copy of an earlier amso in the process
/// keeps a registry of its own there, so this copy refuses to load beside it.
const EARLIER: [&str; 3] = ["_amso_process_v1", "_amso_process_v2", "_amso_process_v3"];
/// The mirror module's attribute that holds the capsule.
const ATTRIBUTE: &str = "table";

/// What the first copy publishes.
#[repr(C)]
pub(crate) struct Table {
    /// `TABLE_VERSION` and the table's size in bytes.
    version: u32,
    size: u32,
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
    version: TABLE_VERSION,
    size: std::mem::size_of::<Table>() as u32,
    current_stream: current_stream::current_shared,
    replace_stream: current_stream::replace_shared,
    acquire_borrow: registry::acquire_shared,
    release_borrow: registry::release_shared,
    live_borrows: registry::live_shared,
};

/// The published table, when it is another copy's.
static JOINED_TABLE: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());
/// Whether this copy has joined: found another copy's table (`JOINED_TABLE`) or published its
/// own.
static JOINED: AtomicBool = AtomicBool::new(false);

/// Another copy's table, if this copy found one when it joined.
pub(crate) fn joined() -> Option<&'static Table> {
    // SAFETY: JOINED_TABLE is null or points at a static table of another copy, whose module
    // stays loaded for the process (CPython never unloads extension modules).
    unsafe { JOINED_TABLE.load(Ordering::Acquire).as_ref() }
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
    // The borrow registry and the device-memory pool are the process's, kept in one
    // interpreter's dict: every copy of the runtime serves the main interpreter alone. A copy
    // first imported in a subinterpreter (a legacy one shares the main GIL, not its dict) would
    // publish a second table there, and two copies could then hold one array as `&mut` at once.
    // SAFETY: the GIL is held, so there is a current interpreter.
    let interpreter = unsafe { ffi::PyInterpreterState_GetID(ffi::PyInterpreterState_Get()) };
    if interpreter != 0 {
        return Err(PyImportError::new_err(format!(
            "amso's runtime serves the main interpreter only, and this is subinterpreter {interpreter}: the borrow \
             registry and the device-memory pool every amso-based module shares belong to the process, kept by the \
             main interpreter; import amso-based modules there"
        )));
    }
    let anchor = interpreter_dict(py)?;
    let modules = py.import("sys")?.getattr("modules")?.cast_into::<PyDict>()?;
    if let Some(earlier) =
        EARLIER.into_iter().find(|name| anchor.contains(name).unwrap_or(true) || modules.contains(name).unwrap_or(true))
    {
        return Err(another_layout(&format!("an earlier layout ({earlier})")));
    }
    let mirrored = match modules.get_item(HOME)? {
        Some(home) => Some(mirrored_table(&home)?),
        None => None,
    };
    // Anchor the mirrored table (an earlier copy's) or this copy's, unless a table is anchored.
    let candidate = capsule_of(py, mirrored.unwrap_or(&OWN))?;
    let anchored = anchor.call_method1(intern!(py, "setdefault"), (HOME, candidate))?;
    let table = table_in(&anchored).map(of_this_layout).transpose()?.ok_or_else(|| {
        PyImportError::new_err(format!(
            "the interpreter's dict holds an object of type {} under {HOME:?}, not a {CAPSULE:?} capsule: \
             something other than amso took that key; amso's extension modules cannot share their borrow registry",
            type_name(&anchored)
        ))
    })?;
    match mirrored {
        Some(mirrored) if !std::ptr::eq(mirrored, table) => return Err(two_tables(table, mirrored)),
        Some(_) => {}
        None => {
            let home = PyModule::new(py, HOME)?;
            home.setattr(
                "__doc__",
                "A mirror of the table of functions every copy of amso's runtime in this process shares (stream \
                 context, borrows), for copies that look for it here.",
            )?;
            home.add(ATTRIBUTE, anchored)?;
            let present = modules.call_method1(intern!(py, "setdefault"), (HOME, &home))?;
            if !present.is(&home) {
                let mirrored = mirrored_table(&present)?;
                if !std::ptr::eq(mirrored, table) {
                    return Err(two_tables(table, mirrored));
                }
            }
        }
    }
    if !std::ptr::eq(table, &OWN) {
        JOINED_TABLE.store((table as *const Table).cast_mut(), Ordering::Release);
    }
    #[cfg(feature = "cuda")]
    crate::cuda::pool::join(py)?;
    JOINED.store(true, Ordering::Release);
    Ok(())
}

/// A new capsule of `table`, as every copy publishes it.
fn capsule_of<'py>(py: Python<'py>, table: &'static Table) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: a table that lives for the process (a static of this copy or of another copy,
    // which CPython never unloads) and a static name; no destructor is needed.
    let capsule = unsafe { ffi::PyCapsule_New((table as *const Table).cast_mut().cast(), CAPSULE.as_ptr(), None) };
    // SAFETY: a new reference, or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, capsule) }
}

/// The table in `capsule`, if it is a capsule of amso's name (its layout is checked by
/// `of_this_layout`).
fn table_in(capsule: &Bound<'_, PyAny>) -> Option<&'static Table> {
    // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
    if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), CAPSULE.as_ptr()) } != 1 {
        return None;
    }
    // SAFETY: a valid capsule of amso's name holds a static table of a copy of the runtime,
    // loaded for the process (CPython never unloads extension modules), which starts with its
    // version and size whatever its layout; the rest is read only once they match.
    unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE.as_ptr()).cast::<Table>().as_ref() }
}

/// `table`, if it is of this copy's layout; else the refusal.
fn of_this_layout(table: &'static Table) -> PyResult<&'static Table> {
    if table.version == TABLE_VERSION && table.size as usize >= std::mem::size_of::<Table>() {
        Ok(table)
    } else {
        Err(another_layout(&format!("version {} ({} bytes)", table.version, table.size)))
    }
}

/// Refusal of a process whose shared table has another layout than this copy's.
fn another_layout(found: &str) -> PyErr {
    PyImportError::new_err(format!(
        "another amso runtime in this process shares its borrow registry through a table of {found}; this module \
         was built with version {TABLE_VERSION}, and the two would keep two registries (two modules could then hold \
         one array mutably at once): rebuild every amso-based extension module against one amso version"
    ))
}

/// The table `sys.modules[HOME]` mirrors. Read from the module's dict, as no Python code runs:
/// the capsule's module is one a copy of the runtime made.
fn mirrored_table(home: &Bound<'_, PyAny>) -> PyResult<&'static Table> {
    let capsule = home.cast::<PyModule>().ok().map(|home| home.dict().get_item(ATTRIBUTE)).transpose()?.flatten();
    capsule.as_ref().and_then(table_in).map(of_this_layout).transpose()?.ok_or_else(|| {
        PyImportError::new_err(format!(
            "sys.modules[{HOME:?}] is of type {}, not a module whose {ATTRIBUTE:?} is a {CAPSULE:?} capsule: \
             something other than amso took that name; remove it before importing amso's extension modules",
            type_name(home)
        ))
    })
}

/// Refusal of a process whose anchor and mirror hold different tables.
fn two_tables(anchored: &Table, mirrored: &Table) -> PyErr {
    PyImportError::new_err(format!(
        "amso's process table is published twice, two tables where there must be one: the interpreter's dict \
         holds one (at {anchored:p}), sys.modules['{HOME}'].{ATTRIBUTE} another (at {mirrored:p}). An earlier amso \
         runtime, which looks only in sys.modules, published the second after that entry was deleted or patched \
         away; extension modules joined to different tables could both hold one array mutably, so this one refuses \
         to load. Import amso's extension modules before editing sys.modules, or rebuild the earlier one against \
         this amso-runtime."
    ))
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
