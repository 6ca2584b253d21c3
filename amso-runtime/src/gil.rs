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

/// Whether this thread holds the GIL (is attached to the interpreter). A DLPack deleter amso
/// runs may be called by another library's object, with the GIL, or by a library's own
/// thread, without it; PyO3's own count sees neither.
///
/// `PyThreadState_GetUnchecked` (3.13+) and its older name `_PyThreadState_UncheckedGet`
/// (3.11-3.12) read CPython's current thread state without failing, but neither is in the
/// limited API amso's abi3 wheels are built against, so they are looked up at run time. Their
/// answer differs by version: from 3.12 the calling thread's state while it is attached (a
/// thread-local that CPython clears whenever the thread lets the GIL go); in 3.11 the state of
/// whichever thread holds the GIL (one global). The thread holds the GIL only if that state is
/// also the one `PyGILState_GetThisThreadState` keeps for it (public since 3.3), which is exact
/// on both (a thread attached through a second state of its own reads as not attached, and
/// keeps the GIL through the call: the safe side). Without either function,
/// `PyGILState_Check` answers (public since 3.4); it is wrong only after a subinterpreter was
/// created, when CPython turns its check off and it always says 1.
#[cfg(feature = "python")]
fn attached() -> bool {
    use pyo3::ffi::{PyGILState_GetThisThreadState, PyThreadState};
    use std::ffi::{c_char, c_int, c_void};
    use std::sync::OnceLock;

    extern "C" {
        // In the stable ABI, though pyo3-ffi declares it only outside the limited API.
        fn PyGILState_Check() -> c_int;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    // glibc's and musl's RTLD_DEFAULT: search the global symbols (the interpreter's).
    #[cfg(target_os = "linux")]
    const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();
    #[cfg(target_os = "macos")]
    const RTLD_DEFAULT: *mut c_void = -2isize as *mut c_void;

    type GetUnchecked = unsafe extern "C" fn() -> *mut PyThreadState;
    static CURRENT: OnceLock<Option<GetUnchecked>> = OnceLock::new();
    let current = *CURRENT.get_or_init(|| {
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
    });
    // SAFETY: each may be called on any thread, with or without the GIL, and only reads; the
    // thread's own state is asked for only while some thread holds the GIL (the interpreter
    // runs).
    unsafe {
        match current {
            Some(get) => {
                let state = get();
                !state.is_null() && state == PyGILState_GetThisThreadState()
            }
            None => PyGILState_Check() == 1,
        }
    }
}

/// Run `blocking` with the GIL released, if this thread holds it; otherwise just run it.
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
    use super::attached;
    use pyo3::Python;

    /// Only the thread that holds the GIL reads as attached, on every Python version: in 3.11
    /// the current thread state CPython keeps is the GIL holder's, whichever thread asks.
    #[test]
    fn only_the_thread_holding_the_gil_is_attached() {
        Python::initialize();
        Python::attach(|py| {
            assert!(attached());
            // Another thread, while this one holds the GIL, holds none.
            let elsewhere = std::thread::spawn(attached).join();
            assert!(!elsewhere.expect("the probe thread ran"));
            // This thread, once it lets the GIL go, holds none either.
            assert!(!py.detach(attached));
        });
    }
}
