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
/// The answer is whether the thread has a current thread state: CPython clears it whenever a
/// thread lets the GIL go. `PyThreadState_GetUnchecked` (3.13+) and its older name
/// `_PyThreadState_UncheckedGet` (3.11-3.12) read it without failing, but neither is in the
/// limited API amso's abi3 wheels are built against, so they are looked up at run time.
/// Without either, `PyGILState_Check` answers (public since 3.4); it is wrong only after a
/// subinterpreter was created, when CPython turns its check off and it always says 1.
#[cfg(feature = "python")]
fn attached() -> bool {
    use std::ffi::{c_char, c_int, c_void};
    use std::sync::OnceLock;

    extern "C" {
        fn PyGILState_Check() -> c_int;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    // glibc's and musl's RTLD_DEFAULT: search the global symbols (the interpreter's).
    #[cfg(target_os = "linux")]
    const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();
    #[cfg(target_os = "macos")]
    const RTLD_DEFAULT: *mut c_void = -2isize as *mut c_void;

    type GetUnchecked = unsafe extern "C" fn() -> *mut c_void;
    static THREAD_STATE: OnceLock<Option<GetUnchecked>> = OnceLock::new();
    let thread_state = *THREAD_STATE.get_or_init(|| {
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
    // SAFETY: both may be called on any thread, with or without the GIL, and only read.
    unsafe {
        match thread_state {
            Some(get) => !get().is_null(),
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
