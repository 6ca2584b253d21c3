//! PyTorch's `CUDAPluggableAllocator` and CuPy's `CFunctionAllocator` over amso's pool: C
//! functions they call without a Python frame (`amso_torch_alloc`/`amso_torch_free`,
//! `amso_cupy_malloc`/`amso_cupy_free`), each with the common lend or give-back inline
//! (`loans::lend_cached`, `reclaim_cached`) and the rest out of line. Device memory is lent
//! through `cuda/loans.rs`, which checks every address given back.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::OnceLock;

use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;

use crate::cuda::loans;
use crate::cuda::request::{Client, Request};
use crate::device::DeviceId;
use crate::error::Error;
use crate::stream::Stream;

/// The client number of PyTorch's loans, and how many refusals were reported on stderr.
const TORCH: Client = Client::Torch;
static REPORTED: AtomicU32 = AtomicU32::new(0);

/// PyTorch's `CUDAPluggableAllocator` allocation function: `size` bytes on `device` for work on
/// `stream` (a `cudaStream_t`; NULL is the legacy default stream). NULL when the pool is out
/// of memory (PyTorch then reports it; see docs/memory.md for its limits). Never unwinds.
///
/// # Safety
/// Called by PyTorch with a device it manages and one of its streams. (`device` is PyTorch's C
/// ABI, a raw id: checked here with `DeviceId::new`.)
#[no_mangle]
pub(crate) unsafe extern "C" fn amso_torch_alloc(size: usize, device: c_int, stream: *mut c_void) -> *mut c_void {
    // SAFETY: PyTorch's stream of `device` (NULL: the legacy default stream), alive for the call.
    let stream = unsafe { Stream::from_handle(stream as usize) };
    match std::panic::catch_unwind(|| loans::lend_cached(device, size, stream, TORCH)) {
        Ok(Some(Ok((ptr, _)))) => ptr as usize as *mut c_void,
        cached => torch_alloc(size, device, stream, cached),
    }
}

/// What `loans::lend_cached` answered, from behind `catch_unwind`.
type Cached = std::thread::Result<Option<crate::error::Result<(u64, u64)>>>;

/// A hook's lend beyond the common case: what `lend_cached` answered, or, where it could not
/// serve the request, `loans::lend`'s answer (a panic caught in either).
fn lend_beyond_cache(
    cached: Cached,
    (size, device): (usize, c_int),
    stream: Stream,
    client: Client,
) -> std::thread::Result<crate::error::Result<(u64, u64)>> {
    match cached {
        Ok(None) => {
            std::panic::catch_unwind(|| loans::lend(Request::Current, DeviceId::new(device)?, size, stream, client))
        }
        Ok(Some(answer)) => Ok(answer),
        Err(panic) => Err(panic),
    }
}

/// `amso_torch_alloc` beyond the common case, given what `lend_cached` answered (out of line:
/// the common case stays in few cache lines).
#[cold]
#[inline(never)]
fn torch_alloc(size: usize, device: c_int, stream: Stream, cached: Cached) -> *mut c_void {
    match lend_beyond_cache(cached, (size, device), stream, TORCH) {
        Ok(Ok((ptr, _))) => ptr as usize as *mut c_void,
        Ok(Err(error)) => {
            report(&format!("amso_torch_alloc: cannot lend {size} bytes on device {device}: {error}"));
            raise_in_torch_caller(&error);
            std::ptr::null_mut()
        }
        Err(_) => std::ptr::null_mut(),
    }
}

/// PyTorch's pluggable allocator has no error channel, and takes NULL for a tensor's memory
/// (pytorch/pytorch#133280): when the allocation came from a Python thread (one with a thread
/// state, its GIL released by PyTorch's binding), set `torch.OutOfMemoryError` (or the error)
/// as that thread's exception, so the call that asked raises, chained under CPython's
/// `SystemError` for a result returned with an exception set, instead of handing Python a
/// tensor without memory. A thread without Python state (PyTorch's own) only has the stderr line.
fn raise_in_torch_caller(error: &Error) {
    // SAFETY: reads whether the interpreter runs and whether this thread has a thread state.
    let python_thread =
        unsafe { pyo3::ffi::Py_IsInitialized() != 0 && !pyo3::ffi::PyGILState_GetThisThreadState().is_null() };
    if !python_thread {
        return;
    }
    let _ = Python::try_attach(|py| {
        let torch_error = py
            .import("sys")
            .and_then(|sys| sys.getattr("modules"))
            .and_then(|modules| modules.get_item("torch"))
            .and_then(|torch| torch.getattr("OutOfMemoryError"));
        let raised = match (error, torch_error) {
            (Error::OutOfMemory { .. }, Ok(class)) => match class.call1((error.to_string(),)) {
                Ok(value) => PyErr::from_value(value),
                Err(failed) => failed,
            },
            _ => PyErr::from(error.clone()),
        };
        raised.restore(py);
    });
}

/// PyTorch's `CUDAPluggableAllocator` free function: give back `ptr` (of `size` bytes, on
/// `device`) after the work on `stream`. A double free or an address amso never lent is
/// refused and reported on stderr (the first 10), never freed. Never unwinds.
///
/// # Safety
/// Called by PyTorch with what `amso_torch_alloc` returned and the same size and device. (A
/// `device` this machine lacks is a refused give-back, counted.)
#[no_mangle]
pub(crate) unsafe extern "C" fn amso_torch_free(ptr: *mut c_void, size: usize, device: c_int, stream: *mut c_void) {
    // SAFETY: as in `amso_torch_alloc`.
    let stream = unsafe { Stream::from_handle(stream as usize) };
    let back = loans::GiveBack { bytes: Some(size), stream: Some(stream), serial: None };
    match std::panic::catch_unwind(|| loans::reclaim_cached(device, ptr as usize as u64, TORCH, back)) {
        Ok(true) => {}
        Ok(false) => torch_free(ptr, device, back),
        Err(_) => report("amso_torch_free: internal error (panic); please report it"),
    }
}

/// `amso_torch_free` beyond the common case (out of line, as `torch_alloc`).
#[cold]
#[inline(never)]
fn torch_free(ptr: *mut c_void, device: c_int, back: loans::GiveBack) {
    if let Some(message) = reclaim_beyond_cache(ptr as usize as u64, device, TORCH, back) {
        report(&format!("amso_torch_free: {message}"));
    }
}

/// A hook's give-back beyond the common case (`loans::reclaim` of `ptr` on `device`, a raw id):
/// why it was refused, if it was (a panic caught in it is not reported: nothing was freed).
fn reclaim_beyond_cache(ptr: u64, device: c_int, client: Client, back: loans::GiveBack) -> Option<String> {
    let outcome = std::panic::catch_unwind(|| match DeviceId::new(device) {
        Ok(id) => loans::reclaim(id, ptr, client, back).map_err(|refusal| refusal.message(ptr, id)),
        Err(error) => {
            loans::count_refused();
            Err(error.to_string())
        }
    });
    outcome.ok()?.err()
}

/// Say `message` on stderr, for the first 10 refusals of a process (PyTorch's allocator
/// functions have no error channel).
fn report(message: &str) {
    use std::io::Write;
    if REPORTED.fetch_add(1, Ordering::Relaxed) < 10 {
        let _ = writeln!(std::io::stderr(), "{message}"); // never a panic: stderr may be closed
    }
}

/// CuPy's stream lookup, a C function CuPy exports through a Cython `__pyx_capi__` capsule:
/// `cupy_backends.cuda.stream`'s `get_stream_ptr(device)` where CuPy has it (one thread-local
/// read: `CFunctionAllocator` passes the device), else `cupy.cuda.stream`'s
/// `get_current_stream_ptr()`, the one CuPy's own pool calls per allocation (two thread-local
/// reads and `cudaGetDevice`), and which of the two it is, side by side (every allocation reads
/// both).
#[repr(C, align(16))]
struct CupyStream {
    function: AtomicPtr<c_void>,
    by_device: AtomicBool,
}
static CUPY_STREAM: CupyStream =
    CupyStream { function: AtomicPtr::new(std::ptr::null_mut()), by_device: AtomicBool::new(false) };
static CUPY_OUT_OF_MEMORY: OnceLock<Py<PyAny>> = OnceLock::new();
/// The C signatures Cython gives the two, its capsules' names.
const CUPY_STREAM_OF_DEVICE: &[u8] = b"intptr_t (int)";
const CUPY_CURRENT_STREAM: &[u8] = b"intptr_t (void)";

/// `_cupy_hooks(stream_function, OutOfMemoryError)`: the addresses of `amso_cupy_malloc` and
/// `amso_cupy_free`, for `cupy.cuda.memory.CFunctionAllocator`, once told CuPy's stream lookup
/// (`cupy_backends.cuda.stream.__pyx_capi__['get_stream_ptr']`, or
/// `cupy.cuda.stream.__pyx_capi__['get_current_stream_ptr']`) and the error to raise when the
/// pool is out of memory.
#[pyfunction]
#[pyo3(name = "_cupy_hooks")]
pub(super) fn cupy_hooks(stream_function: &Bound<'_, PyAny>, out_of_memory: Py<PyAny>) -> PyResult<(usize, usize)> {
    let refused = || {
        PyTypeError::new_err(format!(
            "expected cupy_backends.cuda.stream.__pyx_capi__['get_stream_ptr'] (a capsule named \"intptr_t (int)\") \
             or cupy.cuda.stream.__pyx_capi__['get_current_stream_ptr'] (\"intptr_t (void)\"); got {}: this CuPy \
             exports its current stream differently, so amso's C allocator cannot serve it (use \
             amso.allocators.cupy_python_malloc)",
            stream_function.repr().map_or_else(|_| "an object".into(), |r| r.to_string())
        ))
    };
    let capsule = stream_function.as_ptr();
    // SAFETY: a type check of a live object, holding the GIL.
    if unsafe { pyo3::ffi::PyCapsule_CheckExact(capsule) } == 0 {
        return Err(refused());
    }
    // SAFETY: reads a capsule's name (NULL or a C string it owns), holding the GIL.
    let raw_name = unsafe { pyo3::ffi::PyCapsule_GetName(capsule) };
    // SAFETY: a non-NULL capsule name is a NUL-terminated string alive as long as the capsule.
    let name = if raw_name.is_null() { &[][..] } else { unsafe { std::ffi::CStr::from_ptr(raw_name) }.to_bytes() };
    let by_device = if name == CUPY_STREAM_OF_DEVICE {
        true
    } else if name == CUPY_CURRENT_STREAM {
        false
    } else {
        return Err(refused());
    };
    // SAFETY: a capsule, read by its own name.
    let function = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule, raw_name) };
    if function.is_null() {
        return Err(PyErr::take(stream_function.py()).unwrap_or_else(refused));
    }
    CUPY_STREAM.by_device.store(by_device, Ordering::Relaxed);
    CUPY_STREAM.function.store(function, Ordering::Release);
    let _ = CUPY_OUT_OF_MEMORY.set(out_of_memory);
    Ok((amso_cupy_malloc as *const () as usize, amso_cupy_free as *const () as usize))
}

/// CuPy's current stream on `device`, through the lookup `_cupy_hooks` stored: -1 with a
/// Python exception set when CuPy's function failed.
///
/// # Safety
/// Holding the GIL, after `function` (non-NULL) was stored with its kind.
unsafe fn cupy_stream(function: *mut c_void, device: c_int) -> isize {
    if CUPY_STREAM.by_device.load(Ordering::Relaxed) {
        // SAFETY: CuPy's `intptr_t get_stream_ptr(int)` (checked by its capsule's name), called
        // holding the GIL, as CuPy calls it.
        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int) -> isize>(function)(device) }
    } else {
        // SAFETY: CuPy's `intptr_t get_current_stream_ptr(void)`, likewise.
        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> isize>(function)() }
    }
}

/// The value CuPy's Cython code reads as "an exception is set" from a C allocator's malloc
/// (Cython 3 checks `PyErr_Occurred` when an `intptr_t` result is -1).
const CUPY_FAILED: *mut c_void = usize::MAX as *mut c_void;

/// CuPy's `CFunctionAllocator` malloc: `size` bytes on `device` from amso's pool, lent on CuPy's
/// current stream. On failure a Python exception is set (CuPy's `OutOfMemoryError` when the pool
/// is out of memory) and the result is -1. Never unwinds.
///
/// # Safety
/// Called by CuPy (from `CFunctionAllocatorMemory.__init__`, holding the GIL) after
/// `_cupy_hooks` told it CuPy's stream function.
#[no_mangle]
pub(crate) unsafe extern "C" fn amso_cupy_malloc(_param: *mut c_void, size: usize, device: c_int) -> *mut c_void {
    let function = CUPY_STREAM.function.load(Ordering::Acquire);
    if function.is_null() {
        return cupy_failure(PyRuntimeError::new_err("amso_cupy_malloc was called before amso.allocators set it up"));
    }
    // SAFETY: CuPy calls this holding the GIL; `function` was stored with its kind.
    let stream = unsafe { cupy_stream(function, device) };
    // SAFETY: only reads the error indicator, holding the GIL.
    if stream == -1 && unsafe { !pyo3::ffi::PyErr_Occurred().is_null() } {
        return CUPY_FAILED; // CuPy's own error, propagated
    }
    // SAFETY: CuPy's current stream of `device` (0: the legacy default stream).
    let stream = unsafe { Stream::from_handle(stream as usize) };
    match std::panic::catch_unwind(|| loans::lend_cached(device, size, stream, Client::CuPy)) {
        Ok(Some(Ok((ptr, _)))) => ptr as usize as *mut c_void,
        cached => cupy_lend(size, device, stream, cached),
    }
}

/// `amso_cupy_malloc` beyond the common case (out of line, as `torch_alloc`).
#[cold]
#[inline(never)]
fn cupy_lend(size: usize, device: c_int, stream: Stream, cached: Cached) -> *mut c_void {
    match lend_beyond_cache(cached, (size, device), stream, Client::CuPy) {
        Ok(Ok((ptr, _))) => ptr as usize as *mut c_void,
        Ok(Err(Error::OutOfMemory { .. })) => Python::attach(|py| {
            let error = match CUPY_OUT_OF_MEMORY.get().map(|class| class.bind(py).call1((size, 0, 0))) {
                Some(Ok(error)) => PyErr::from_value(error),
                Some(Err(error)) => error,
                None => PyMemoryError::new_err(format!("amso's pool is out of memory for {size} bytes")),
            };
            cupy_failure(error)
        }),
        Ok(Err(error)) => cupy_failure(error.into()),
        Err(_) => cupy_failure(PyRuntimeError::new_err("amso_cupy_malloc: internal error (panic); please report it")),
    }
}

/// Set `error` for CuPy to raise; the failure result.
fn cupy_failure(error: PyErr) -> *mut c_void {
    Python::attach(|py| error.restore(py));
    CUPY_FAILED
}

/// CuPy's `CFunctionAllocator` free: give back `ptr` on `device`, ordered after the work on the
/// stream it was lent on. A double free or an address amso never lent is refused and reported on
/// stderr (the first 10), never freed. Never unwinds.
///
/// # Safety
/// Called by CuPy with what `amso_cupy_malloc` returned. (A `device` this machine lacks is a
/// refused give-back, counted.)
#[no_mangle]
pub(crate) unsafe extern "C" fn amso_cupy_free(_param: *mut c_void, ptr: *mut c_void, device: c_int) {
    let ptr = ptr as usize as u64;
    let back = loans::GiveBack::default();
    match std::panic::catch_unwind(|| loans::reclaim_cached(device, ptr, Client::CuPy, back)) {
        Ok(true) => {}
        Ok(false) => cupy_free(ptr, device),
        Err(_) => report("amso_cupy_free: internal error (panic); please report it"),
    }
}

/// `amso_cupy_free` beyond the common case (out of line, as `torch_alloc`).
#[cold]
#[inline(never)]
fn cupy_free(ptr: u64, device: c_int) {
    if let Some(message) = reclaim_beyond_cache(ptr, device, Client::CuPy, loans::GiveBack::default()) {
        report(&format!("amso_cupy_free: {message}"));
    }
}
