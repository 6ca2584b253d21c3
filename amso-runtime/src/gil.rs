//! Driver calls with the GIL released. A thread that holds the GIL while it waits inside the
//! CUDA driver (for a driver lock, for the device, for NVRTC) stops every Python thread, and
//! deadlocks when what it waits for needs a Python thread to move: a host function on a stream
//! calling back into Python, a Python allocator plugged into another library, a tool such as
//! compute-sanitizer serialising driver calls. So every driver call amso makes from a thread
//! that holds the GIL goes through `released`, which gives the GIL up for the call and takes it
//! back after (about 30 ns when no other thread wants it).
//!
//! What runs inside holds no Python object and may take amso's own locks: Python threads wait
//! for those with the GIL released too (`python/base/array.rs`), and Python allocator plug-ins take
//! the GIL back themselves (`python/allocators.rs`).
//!
//! The same test of whether this thread holds the GIL, and of which interpreter's, tells a DLPack
//! deleter whether it may release an export on its hub's GIL side (`dlpack/export_hub.rs`).

/// Whether this thread holds the GIL (is attached to the interpreter). A DLPack deleter amso
/// runs may be called by another library's object, with the GIL, or by a library's own
/// thread, without it; PyO3's own count sees neither.
///
/// Where the interpreter offers no exact test (`thread_state` finds no function to ask),
/// `PyGILState_Check` answers (public since 3.4); it is wrong only after a subinterpreter was
/// created, when CPython turns its check off and it always says 1.
#[cfg(all(feature = "python", any(feature = "cuda", test)))]
fn attached() -> bool {
    extern "C" {
        // In the stable ABI, though pyo3-ffi declares it only outside the limited API.
        fn PyGILState_Check() -> std::ffi::c_int;
    }
    match thread_state() {
        Some(state) => !state.is_null(),
        // SAFETY: may be called on any thread, with or without the GIL; only reads.
        None => unsafe { PyGILState_Check() == 1 },
    }
}

/// The interpreter whose GIL this thread holds, when that is known for certain: `None` when
/// the thread holds none, or when the interpreter offers no exact test. (Under a per-interpreter
/// GIL, 3.12+, holding one interpreter's GIL serialises nothing of another's.)
#[cfg(feature = "python")]
pub(crate) fn attached_interpreter() -> Option<std::ptr::NonNull<pyo3::ffi::PyInterpreterState>> {
    let state = std::ptr::NonNull::new(thread_state()?)?;
    // SAFETY: this thread's attached thread state, alive while it is attached.
    std::ptr::NonNull::new(unsafe { pyo3::ffi::PyThreadState_GetInterpreter(state.as_ptr()) })
}

/// This thread's thread state if the thread holds the GIL, else NULL; `None` where the
/// interpreter has no function to ask.
///
/// `PyThreadState_GetUnchecked` (3.13+) and its older name `_PyThreadState_UncheckedGet`
/// (3.11-3.12) read the current thread state without failing, but neither is in the limited
/// API amso's abi3 wheels are built against, so they are looked up at run time. Their answer
/// differs by version: from 3.12 the calling thread's state while it is attached (a
/// thread-local that CPython clears whenever the thread lets the GIL go); in 3.11 the state of
/// whichever thread holds the GIL (one global). It is this thread's only if it is also the
/// state `PyGILState_GetThisThreadState` keeps for this thread (public since 3.3), which makes
/// the answer exact on both (a thread attached through a second state of its own reads as not
/// attached: the safe side for every caller).
#[cfg(feature = "python")]
fn thread_state() -> Option<*mut pyo3::ffi::PyThreadState> {
    use pyo3::ffi::PyThreadState;
    use std::ffi::{c_char, c_void};
    use std::sync::OnceLock;

    extern "C" {
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    // glibc's and musl's RTLD_DEFAULT: search the global symbols (the interpreter's).
    #[cfg(target_os = "linux")]
    const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();
    #[cfg(target_os = "macos")]
    const RTLD_DEFAULT: *mut c_void = -2isize as *mut c_void;

    type GetUnchecked = unsafe extern "C" fn() -> *mut PyThreadState;
    static CURRENT: OnceLock<Option<GetUnchecked>> = OnceLock::new();
    let current = (*CURRENT.get_or_init(|| {
        #[cfg(any(target_os = "linux", target_os = "macos"))]
        for name in [c"PyThreadState_GetUnchecked", c"_PyThreadState_UncheckedGet"] {
            // SAFETY: dlsym with a NUL-terminated name; a found symbol is CPython's function
            // of this signature (`PyThreadState *(void)`).
            let found = unsafe { dlsym(RTLD_DEFAULT, name.as_ptr()) };
            if !found.is_null() {
                // SAFETY: as above.
                return Some(unsafe { std::mem::transmute::<*mut c_void, GetUnchecked>(found) });
            }
        }
        None
    }))?;
    // SAFETY: both may be called on any thread, with or without the GIL, and only read; the
    // second is asked only while some thread holds the GIL (the interpreter is running).
    unsafe {
        let state = current();
        Some(match !state.is_null() && state == pyo3::ffi::PyGILState_GetThisThreadState() {
            true => state,
            false => std::ptr::null_mut(),
        })
    }
}

/// Run `blocking` with the GIL released, if this thread holds it; otherwise just run it.
#[cfg(feature = "cuda")]
#[inline]
pub(crate) fn released<R: Send>(blocking: impl FnOnce() -> R + Send) -> R {
    #[cfg(feature = "python")]
    {
        // SAFETY: only reads whether the interpreter runs; a Rust test's process has none.
        if unsafe { pyo3::ffi::Py_IsInitialized() != 0 } && attached() {
            // SAFETY: this thread holds the GIL (checked just above).
            let py = unsafe { pyo3::Python::assume_attached() };
            return py.detach(blocking);
        }
    }
    blocking()
}

#[cfg(all(test, feature = "python"))]
mod tests {
    use super::{attached, attached_interpreter};
    use pyo3::Python;

    /// Only the thread that holds the GIL reads as attached, on every Python version: in 3.11
    /// the current thread state CPython keeps is the GIL holder's, whichever thread asks.
    #[test]
    fn only_the_thread_holding_the_gil_is_attached() {
        Python::initialize();
        Python::attach(|py| {
            assert!(attached());
            // SAFETY: the GIL is held.
            let here = unsafe { pyo3::ffi::PyInterpreterState_Get() };
            assert_eq!(attached_interpreter().map(|i| i.as_ptr()), Some(here));
            // Another thread, while this one holds the GIL, holds none.
            let elsewhere = std::thread::spawn(|| (attached(), attached_interpreter().is_some())).join();
            assert_eq!(elsewhere.expect("the probe thread ran"), (false, false));
            // This thread, once it lets the GIL go, holds none either.
            assert_eq!(py.detach(|| (attached(), attached_interpreter().is_some())), (false, false));
        });
    }
}
