//! Driver calls with the GIL released. A thread that holds the GIL while it waits inside the
//! CUDA driver (for a driver lock, for the device, for NVRTC) stops every Python thread, and
//! deadlocks when what it waits for needs a Python thread to move: a host function on a stream
//! calling back into Python, a Python allocator plugged into another library, a tool such as
//! compute-sanitizer serialising driver calls. So every driver call amso makes from a thread
//! that holds the GIL goes through `released`, which gives the GIL up for the call and takes it
//! back after (about 30 ns when no other thread wants it).
//!
//! What runs inside holds no Python object and may take amso's own locks: Python threads wait
//! for those with the GIL released too (`python/array.rs`), and Python allocator plug-ins take
//! the GIL back themselves (`python/memory.rs`).

#[cfg(feature = "python")]
extern "C" {
    /// Whether this thread holds the GIL. Not in the limited API that amso's abi3 wheels are
    /// built against, but part of CPython's public API with this signature since 3.4, so every
    /// interpreter those wheels load into exports it. It is the one accurate answer: a DLPack
    /// deleter amso runs may be called by another library's object, with the GIL, or by a
    /// library's own thread, without it (PyO3's own count sees neither).
    fn PyGILState_Check() -> std::ffi::c_int;
}

/// Run `blocking` with the GIL released, if this thread holds it; otherwise just run it.
#[inline]
pub(crate) fn released<R: Send>(blocking: impl FnOnce() -> R + Send) -> R {
    #[cfg(feature = "python")]
    {
        // SAFETY: both only read state and may be called without the GIL; PyGILState_Check
        // answers 1 in a process whose interpreter never started (a Rust test), hence the first.
        if unsafe { pyo3::ffi::Py_IsInitialized() != 0 && PyGILState_Check() == 1 } {
            // SAFETY: this thread holds the GIL (checked just above).
            let py = unsafe { pyo3::Python::assume_attached() };
            return py.detach(blocking);
        }
    }
    blocking()
}
