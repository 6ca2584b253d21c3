//! The floor of a library's allocator plug-in point: C allocators that do no work, handing out
//! one block given to them (`set_floor_block`), for PyTorch's `CUDAPluggableAllocator` and
//! CuPy's `CFunctionAllocator`. The pool table of the report (`benchmarks/bench_pool.py`) times
//! each library through its hook over these, so that amso's pool is measured by what it adds to
//! the hook itself. Each library frees a block before the benchmark allocates the next, so one
//! block serves every allocation.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::prelude::*;

/// The block every allocation returns.
static BLOCK: AtomicUsize = AtomicUsize::new(0);

/// `set_floor_block(ptr)`: the device address the floor allocators hand out.
#[pyfunction]
pub(crate) fn set_floor_block(ptr: usize) {
    BLOCK.store(ptr, Ordering::Relaxed);
}

/// `floor_cupy_functions()`: the addresses of the CuPy floor's malloc and free, for
/// `cupy.cuda.memory.CFunctionAllocator`.
#[pyfunction]
pub(crate) fn floor_cupy_functions() -> (usize, usize) {
    (floor_cupy_malloc as *const () as usize, floor_cupy_free as *const () as usize)
}

/// PyTorch's allocation function, doing nothing.
#[no_mangle]
pub(crate) extern "C" fn floor_torch_alloc(_size: usize, _device: c_int, _stream: *mut c_void) -> *mut c_void {
    BLOCK.load(Ordering::Relaxed) as *mut c_void
}

/// PyTorch's free function, doing nothing.
#[no_mangle]
pub(crate) extern "C" fn floor_torch_free(_ptr: *mut c_void, _size: usize, _device: c_int, _stream: *mut c_void) {}

/// CuPy's malloc, doing nothing.
#[no_mangle]
pub(crate) extern "C" fn floor_cupy_malloc(_param: *mut c_void, _size: usize, _device: c_int) -> *mut c_void {
    BLOCK.load(Ordering::Relaxed) as *mut c_void
}

/// CuPy's free, doing nothing.
#[no_mangle]
pub(crate) extern "C" fn floor_cupy_free(_param: *mut c_void, _ptr: *mut c_void, _device: c_int) {}

/// CuPy's `get_current_stream_ptr`, for the floor that also asks CuPy for its stream.
static CUPY_STREAM: AtomicUsize = AtomicUsize::new(0);

/// `floor_cupy_stream_functions(get_current_stream_ptr)`: the addresses of a CuPy malloc that
/// asks CuPy for its current stream (as any stream-ordered allocator must) and does nothing
/// else, and of the free, given `cupy.cuda.stream.__pyx_capi__["get_current_stream_ptr"]`.
#[pyfunction]
pub(crate) fn floor_cupy_stream_functions(stream_function: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let name = c"intptr_t (void)";
    // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
    if unsafe { pyo3::ffi::PyCapsule_IsValid(stream_function.as_ptr(), name.as_ptr()) } != 1 {
        return Err(pyo3::exceptions::PyTypeError::new_err("expected CuPy's get_current_stream_ptr capsule"));
    }
    // SAFETY: a valid capsule of that name holds a C function of that signature.
    let function = unsafe { pyo3::ffi::PyCapsule_GetPointer(stream_function.as_ptr(), name.as_ptr()) };
    CUPY_STREAM.store(function as usize, Ordering::Relaxed);
    Ok((floor_cupy_stream_malloc as *const () as usize, floor_cupy_free as *const () as usize))
}

/// CuPy's malloc that reads CuPy's current stream and does nothing else.
#[no_mangle]
pub(crate) extern "C" fn floor_cupy_stream_malloc(_param: *mut c_void, _size: usize, _device: c_int) -> *mut c_void {
    let function = CUPY_STREAM.load(Ordering::Relaxed);
    if function != 0 {
        // SAFETY: CuPy's `intptr_t get_current_stream_ptr(void)`, called holding the GIL.
        let stream = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> isize>(function)() };
        std::hint::black_box(stream);
    }
    BLOCK.load(Ordering::Relaxed) as *mut c_void
}

/// PyTorch's pair of allocator functions (`CUDAPluggableAllocator`'s C signatures).
type TorchAlloc = unsafe extern "C" fn(usize, c_int, *mut c_void) -> *mut c_void;
type TorchFree = unsafe extern "C" fn(*mut c_void, usize, c_int, *mut c_void);

/// `time_torch_pairs(alloc, free, size, stream, count, detached)`: the mean nanoseconds of one
/// call of PyTorch's allocation function at `alloc` and its free at `free` (addresses of C
/// functions of those signatures), `count` times on device 0 and `stream`, from a C loop, with
/// the GIL released (as PyTorch's bindings call them) when `detached`. A diagnostic: what a
/// plug-in costs outside PyTorch's own hook.
#[pyfunction]
pub(crate) fn time_torch_pairs(
    py: Python<'_>,
    alloc: usize,
    free: usize,
    size: usize,
    stream: usize,
    count: u32,
    detached: bool,
) -> f64 {
    // SAFETY: the caller passes the addresses of two C functions of these signatures.
    let (alloc, free) =
        unsafe { (std::mem::transmute::<usize, TorchAlloc>(alloc), std::mem::transmute::<usize, TorchFree>(free)) };
    let run = || {
        let start = std::time::Instant::now();
        for _ in 0..count {
            // SAFETY: a pair of PyTorch allocator functions, called as PyTorch calls them.
            unsafe {
                let ptr = alloc(size, 0, stream as *mut c_void);
                free(ptr, size, 0, stream as *mut c_void);
            }
        }
        start.elapsed().as_nanos() as f64 / f64::from(count.max(1))
    };
    if detached {
        py.detach(run)
    } else {
        run()
    }
}
