//! The stream amso works on when a call names none: set per thread by `amso.cuda.stream(...)`
//! (Python) and reported to DLPack exchange-API consumers as the current work stream.
//!
//! Every extension module links its own copy of this runtime: the bundled `amso._amso`, and
//! each user crate's module. The context is one per thread for the whole process all the
//! same: it lives in `amso._amso`'s copy, which `amso.cuda.stream` sets, and the other copies
//! read and write it through the functions that module publishes (`join_bundled`). A copy
//! whose process has no `amso` package keeps a context of its own.

use std::cell::Cell;

thread_local! {
    static CURRENT: Cell<Option<i64>> = const { Cell::new(None) };
}

/// The current thread's stream (a protocol value: 1 legacy, 2 per-thread, else a handle).
pub fn current() -> Option<i64> {
    #[cfg(feature = "python")]
    if let Some(home) = home() {
        return decode((home.current)());
    }
    CURRENT.with(Cell::get)
}

/// Set the current thread's stream, returning the previous one (`amso.cuda.stream(...)`).
#[cfg(feature = "python")]
pub fn replace(stream: Option<i64>) -> Option<i64> {
    match home() {
        Some(home) => decode((home.replace)(encode(stream))),
        None => CURRENT.with(|c| c.replace(stream)),
    }
}

/// `stream` if given, else the current thread's stream, else the legacy default stream (0).
pub fn resolve(stream: Option<i64>) -> i64 {
    stream.or_else(current).unwrap_or(0)
}

#[cfg(feature = "python")]
pub(crate) use shared::{join_bundled, publish};

#[cfg(feature = "python")]
use shared::{decode, encode, home};

/// The context shared between copies of the runtime, as a table of C functions in a capsule
/// of `amso._amso` (no Rust types cross between copies, which may be different builds).
#[cfg(feature = "python")]
mod shared {
    use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

    use pyo3::ffi;
    use pyo3::prelude::*;

    use super::{Cell, CURRENT};

    /// The capsule's name; a change of `Table`'s layout takes a new name.
    const CAPSULE: &std::ffi::CStr = c"amso._amso._stream_context.v1";
    const ATTRIBUTE: &str = "_stream_context";
    /// `Option<i64>` across the C boundary: no stream is `NONE` (protocol values are >= 0).
    const NONE: i64 = -1;

    /// What `amso._amso` publishes: its thread-local context, read and replaced.
    #[repr(C)]
    pub(super) struct Table {
        pub(super) current: extern "C" fn() -> i64,
        pub(super) replace: extern "C" fn(i64) -> i64,
    }

    extern "C" fn own_current() -> i64 {
        encode(CURRENT.with(Cell::get))
    }

    extern "C" fn own_replace(stream: i64) -> i64 {
        encode(CURRENT.with(|c| c.replace(decode(stream))))
    }

    static OWN: Table = Table { current: own_current, replace: own_replace };

    /// The bundled module's table, when this copy is another one that found it.
    static HOME: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());
    /// Whether this copy needs to look no further: it is the bundled module's (whose own
    /// context is the process's), or the process has no `amso` package.
    static SETTLED: AtomicBool = AtomicBool::new(false);

    pub(super) fn home() -> Option<&'static Table> {
        // SAFETY: HOME is null or points at a static table of the bundled module, which stays
        // loaded for the process (CPython never unloads extension modules).
        unsafe { HOME.load(Ordering::Acquire).as_ref() }
    }

    pub(super) fn encode(stream: Option<i64>) -> i64 {
        stream.unwrap_or(NONE)
    }

    pub(super) fn decode(value: i64) -> Option<i64> {
        (value != NONE).then_some(value)
    }

    /// Add this copy's table to `module` (the bundled `amso._amso`): the process's context.
    /// Called before the module registers its classes, so that `join_bundled` finds this copy
    /// settled and never imports the module from inside its own initialisation.
    pub(crate) fn publish(module: &Bound<'_, PyModule>) -> PyResult<()> {
        // SAFETY: a static table and a static name; no destructor is needed.
        let capsule = unsafe { ffi::PyCapsule_New((&OWN as *const Table).cast_mut().cast(), CAPSULE.as_ptr(), None) };
        // SAFETY: a new reference or NULL with an exception set.
        module.add(ATTRIBUTE, unsafe { Bound::from_owned_ptr_or_err(module.py(), capsule) }?)?;
        SETTLED.store(true, Ordering::Release);
        Ok(())
    }

    /// In a user crate's copy: use the bundled module's context from now on, if the `amso`
    /// package is installed. Without it, nothing can set a context from Python, and this copy
    /// keeps its own. Called where a user crate's module registers a class and where a typed
    /// argument is read; after the first call, two atomic loads.
    pub(crate) fn join_bundled(py: Python<'_>) -> PyResult<()> {
        if home().is_some() || SETTLED.load(Ordering::Acquire) {
            return Ok(());
        }
        let bundled = match py.import("amso._amso") {
            Ok(bundled) => bundled,
            Err(error) if amso_is_absent(py, &error) => {
                SETTLED.store(true, Ordering::Release);
                return Ok(());
            }
            // amso is there but cannot be imported (a missing dependency, say): working on a
            // context of its own would silently order this crate's work wrongly.
            Err(error) => return Err(error),
        };
        let Some(capsule) = bundled.getattr_opt(ATTRIBUTE)? else {
            return Err(pyo3::exceptions::PyImportError::new_err(
                "amso._amso publishes no stream context: this module was built against a different amso version \
                 than the installed one; rebuild it against the installed amso",
            ));
        };
        // SAFETY: PyCapsule_GetPointer accepts any object; a wrong name or type returns NULL
        // with an exception set.
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
}
