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
//! the GIL back themselves (`python/memory.rs`).

/// Whether this thread holds the GIL (is attached to the interpreter). A DLPack deleter amso
/// runs may be called by another library's object, with the GIL, or by a library's own
/// thread, without it; PyO3's own count sees neither.
///
/// `PyThreadState_GetUnchecked` (3.13+) and its older name `_PyThreadState_UncheckedGet`
/// (3.11-3.12) read CPython's current thread state without failing, but neither is in the
/// limited API amso's abi3 wheels are built against, so they are looked up at run time. Their
/// answer differs by version:
/// - from 3.12, the calling thread's state while it is attached: a thread-local that CPython
///   clears whenever the thread lets the GIL go, so a non-NULL answer is the test;
/// - in 3.11, the state of whichever thread holds the GIL: one global, which a thread without
///   the GIL reads as non-NULL while another holds it. There the state must also be the one
///   `PyGILState_GetThisThreadState` (public since 3.3) keeps for this thread. That assumes a
///   state runs on the thread that made it, as CPython's own `PyGILState_Check` does: a state
///   made on one thread and run on another, or a slot left pointing at a state another thread
///   deleted, can still mislead it (3.11 keeps nothing that tells those apart), and a thread
///   attached through a second state of its own reads as not attached (it then keeps the GIL
///   through the call: safe, though the waits described above become possible).
///
/// Without either function, `PyGILState_Check` answers; it is wrong only after a subinterpreter
/// was created, when CPython turns its check off and it always says 1.
#[cfg(feature = "python")]
fn attached() -> bool {
    use pyo3::ffi::{PyGILState_GetThisThreadState, PyThreadState, Py_Version};
    use std::ffi::{c_char, c_int, c_void};
    use std::sync::OnceLock;

    extern "C" {
        // Exported by libpython, though in neither the limited API nor the stable ABI.
        fn PyGILState_Check() -> c_int;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    // glibc's and musl's RTLD_DEFAULT: search the global symbols (the interpreter's).
    #[cfg(target_os = "linux")]
    const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();
    #[cfg(target_os = "macos")]
    const RTLD_DEFAULT: *mut c_void = -2isize as *mut c_void;

    type GetUnchecked = unsafe extern "C" fn() -> *mut PyThreadState;
    /// The function that reads the current thread state, and whether its answer is the GIL
    /// holder's rather than this thread's (3.11).
    static CURRENT: OnceLock<Option<(GetUnchecked, bool)>> = OnceLock::new();
    let current = *CURRENT.get_or_init(|| {
        // SAFETY: stable-ABI data since 3.11, the oldest version amso's wheels load in.
        let holders = unsafe { Py_Version } < 0x030C_0000;
        #[cfg(any(target_os = "linux", target_os = "macos"))]
        for name in [c"PyThreadState_GetUnchecked", c"_PyThreadState_UncheckedGet"] {
            // SAFETY: dlsym with a NUL-terminated name; a found symbol is CPython's function
            // of this signature (`PyThreadState *(void)`).
            let found = unsafe { dlsym(RTLD_DEFAULT, name.as_ptr()) };
            if !found.is_null() {
                // SAFETY: as above.
                return Some((unsafe { std::mem::transmute::<*mut c_void, GetUnchecked>(found) }, holders));
            }
        }
        None
    });
    // SAFETY: each may be called on any thread, with or without the GIL, and only reads. (In
    // 3.11 the thread's own state is asked for only while some thread holds the GIL; during
    // finalization, once CPython has dropped that slot, it answers NULL, which reads as not
    // attached.)
    unsafe {
        match current {
            Some((get, false)) => !get().is_null(),
            Some((get, true)) => {
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
        // SAFETY: only reads whether the interpreter runs (a Rust test's process may have none).
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

    /// Only the thread that holds the GIL reads as attached. (Against Python 3.11 this is the
    /// test of the fix: there the current thread state CPython keeps is the GIL holder's,
    /// whichever thread asks; from 3.12 it is the asking thread's.)
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
