//! The floor of a library's allocator plug-in point: C allocators that do no work, handing out
//! one block given to them (`set_floor_block`), for PyTorch's `CUDAPluggableAllocator` and
//! CuPy's `CFunctionAllocator`. The pool table of the report (`benchmarks/bench_pool.py`) times
//! each library through its hook over these, so that amso's pool is measured by what it adds to
//! the hook itself. Each library frees a block before the benchmark allocates the next, so one
//! block serves every allocation.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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

/// CuPy's stream lookup, for the floor that also asks CuPy for its stream: the address, and
/// whether it takes the device (`get_stream_ptr(int)`) or not (`get_current_stream_ptr()`).
static CUPY_STREAM: AtomicUsize = AtomicUsize::new(0);
static CUPY_STREAM_BY_DEVICE: AtomicBool = AtomicBool::new(false);

/// `floor_cupy_stream_functions(capsule)`: the addresses of a CuPy malloc that asks CuPy for its
/// current stream (as any stream-ordered allocator must) and does nothing else, and of the
/// free, given the capsule of the lookup amso's plug-in uses
/// (`amso.allocators.cupy._stream_function(cupy)`: `cupy_backends.cuda.stream`'s
/// `get_stream_ptr`, or `cupy.cuda.stream`'s `get_current_stream_ptr`).
#[pyfunction]
pub(crate) fn floor_cupy_stream_functions(stream_function: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let capsule = stream_function.as_ptr();
    // SAFETY: a type check of a live object, holding the GIL.
    if unsafe { pyo3::ffi::PyCapsule_CheckExact(capsule) } == 0 {
        return Err(pyo3::exceptions::PyTypeError::new_err("expected CuPy's stream-lookup capsule"));
    }
    // SAFETY: a capsule's name: NULL or a C string alive with the capsule.
    let name = unsafe { pyo3::ffi::PyCapsule_GetName(capsule) };
    // SAFETY: as above.
    let signature = if name.is_null() { &[][..] } else { unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes() };
    let by_device = match signature {
        b"intptr_t (int)" => true,
        b"intptr_t (void)" => false,
        _ => return Err(pyo3::exceptions::PyTypeError::new_err("expected CuPy's stream-lookup capsule")),
    };
    // SAFETY: a capsule read by its own name holds a C function of that signature.
    let function = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule, name) };
    CUPY_STREAM_BY_DEVICE.store(by_device, Ordering::Relaxed);
    CUPY_STREAM.store(function as usize, Ordering::Relaxed);
    Ok((floor_cupy_stream_malloc as *const () as usize, floor_cupy_free as *const () as usize))
}

/// CuPy's malloc that reads CuPy's current stream and does nothing else.
#[no_mangle]
pub(crate) extern "C" fn floor_cupy_stream_malloc(_param: *mut c_void, _size: usize, device: c_int) -> *mut c_void {
    std::hint::black_box(cupy_current_stream(device));
    BLOCK.load(Ordering::Relaxed) as *mut c_void
}

/// CuPy's current stream on `device`, through the lookup `floor_cupy_stream_functions` stored
/// (0 before).
fn cupy_current_stream(device: c_int) -> isize {
    let function = CUPY_STREAM.load(Ordering::Relaxed);
    if function == 0 {
        0
    } else if CUPY_STREAM_BY_DEVICE.load(Ordering::Relaxed) {
        // SAFETY: CuPy's `intptr_t get_stream_ptr(int)`, called holding the GIL.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int) -> isize>(function)(device) }
    } else {
        // SAFETY: CuPy's `intptr_t get_current_stream_ptr(void)`, called holding the GIL.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> isize>(function)() }
    }
}

/// Whether work on `stream` is being captured into a CUDA graph, asked of the driver (NULL and
/// the legacy stream, which no capture takes, are not asked): what a stream-ordered pool asks
/// before it hands a block cached on the stream to work there (captured work does not follow
/// the stream's earlier work when the graph is launched; amso's pool asks at every lend on a
/// stream of the library's own).
fn capture_query(stream: usize) -> bool {
    if stream <= 1 {
        return false;
    }
    // SAFETY: a live stream the library passed to its hook.
    let status = unsafe { cudarc::driver::result::stream::is_capturing(stream as cudarc::driver::sys::CUstream) };
    std::hint::black_box(status).is_ok()
}

/// PyTorch's allocation function that asks whether the stream is capturing, and does nothing
/// else.
#[no_mangle]
pub(crate) extern "C" fn floor_capture_torch_alloc(_size: usize, _device: c_int, stream: *mut c_void) -> *mut c_void {
    capture_query(stream as usize);
    BLOCK.load(Ordering::Relaxed) as *mut c_void
}

/// `torch_floor_capture_functions()`: the addresses of a PyTorch allocation function that asks
/// the driver whether its stream is capturing (`capture_query`) and does nothing else, and of
/// the floor's free: the floor plus what a stream-ordered pool must ask.
#[pyfunction]
pub(crate) fn torch_floor_capture_functions() -> (usize, usize) {
    (floor_capture_torch_alloc as *const () as usize, floor_torch_free as *const () as usize)
}

/// CuPy's malloc that reads CuPy's current stream, asks whether it is capturing, and does
/// nothing else.
#[no_mangle]
pub(crate) extern "C" fn floor_cupy_stream_capture_malloc(
    param: *mut c_void,
    size: usize,
    device: c_int,
) -> *mut c_void {
    let stream = cupy_current_stream(device);
    capture_query(stream as usize);
    floor_cupy_malloc(param, size, device)
}

/// `floor_cupy_stream_capture_functions(capsule)`: as `floor_cupy_stream_functions`, with a
/// malloc that also asks whether the stream is capturing (`capture_query`).
#[pyfunction]
pub(crate) fn floor_cupy_stream_capture_functions(stream_function: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    floor_cupy_stream_functions(stream_function)?;
    Ok((floor_cupy_stream_capture_malloc as *const () as usize, floor_cupy_free as *const () as usize))
}

/// PyTorch's pair of allocator functions (`CUDAPluggableAllocator`'s C signatures).
type TorchAlloc = unsafe extern "C" fn(usize, c_int, *mut c_void) -> *mut c_void;
type TorchFree = unsafe extern "C" fn(*mut c_void, usize, c_int, *mut c_void);

/// PyTorch's pair of allocator functions at two addresses.
///
/// # Safety
/// `alloc` and `free` are the addresses of C functions of `TorchAlloc`'s and `TorchFree`'s
/// signatures.
unsafe fn torch_functions(alloc: usize, free: usize) -> (TorchAlloc, TorchFree) {
    // SAFETY: the caller's promise.
    unsafe { (std::mem::transmute::<usize, TorchAlloc>(alloc), std::mem::transmute::<usize, TorchFree>(free)) }
}

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
    let (alloc, free) = unsafe { torch_functions(alloc, free) };
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

/// `time_torch_pairs_cold(alloc, free, size, stream, count, evict)`: as `time_torch_pairs`
/// (GIL held), but with `evict` bytes of other memory written between pairs, as a library's own
/// work between two allocations would, so that the pair finds its data out of the caches: the
/// mean nanoseconds of the pairs alone (each timed by itself), and the eviction's cost is not in
/// it. A diagnostic of how many cache lines a plug-in touches, which a hot loop hides.
#[pyfunction]
pub(crate) fn time_torch_pairs_cold(
    alloc: usize,
    free: usize,
    size: usize,
    stream: usize,
    count: u32,
    evict: usize,
) -> f64 {
    // SAFETY: the caller passes the addresses of two C functions of these signatures.
    let (alloc, free) = unsafe { torch_functions(alloc, free) };
    let mut other = vec![0u8; evict.max(64)];
    let mut total = std::time::Duration::ZERO;
    for round in 0..count {
        for line in other.chunks_mut(64) {
            line[0] = line[0].wrapping_add(round as u8);
        }
        std::hint::black_box(&mut other);
        let start = std::time::Instant::now();
        // SAFETY: a pair of PyTorch allocator functions, called as PyTorch calls them.
        unsafe {
            let ptr = alloc(size, 0, stream as *mut c_void);
            free(ptr, size, 0, stream as *mut c_void);
        }
        total += start.elapsed();
    }
    total.as_nanos() as f64 / f64::from(count.max(1))
}

/// The pair of functions the forwarding plug-in calls, whether it times them, and what the timed
/// calls cost so far.
static TARGET: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static TIMING: AtomicBool = AtomicBool::new(false);
static TIMED_CALLS: AtomicUsize = AtomicUsize::new(0);
static TIMED_NS: AtomicUsize = AtomicUsize::new(0);

/// `forward_torch_to(alloc, free, timed)`: make the forwarding plug-in (`forward_torch_alloc`,
/// `forward_torch_free`) call PyTorch allocator functions at `alloc` and `free`, timing each call
/// when `timed` (and zeroing the count). One plug-in set once, so that one process can time
/// PyTorch over the floor and over amso in turn, with no block live across a switch, the
/// ratio then immune to what makes whole processes faster or slower; timed, it says what a
/// plug-in costs inside `torch.empty` itself, against the same pair timed from a C loop
/// (`time_torch_pairs`).
#[pyfunction]
pub(crate) fn forward_torch_to(alloc: usize, free: usize, timed: bool) {
    TARGET[0].store(alloc, Ordering::Relaxed);
    TARGET[1].store(free, Ordering::Relaxed);
    TIMING.store(timed, Ordering::Relaxed);
    TIMED_CALLS.store(0, Ordering::Relaxed);
    TIMED_NS.store(0, Ordering::Relaxed);
}

/// `timed_torch_total()`: (calls, nanoseconds) spent in the forwarded functions since
/// `forward_torch_to(..., timed=True)`.
#[pyfunction]
pub(crate) fn timed_torch_total() -> (usize, usize) {
    (TIMED_CALLS.load(Ordering::Relaxed), TIMED_NS.load(Ordering::Relaxed))
}

fn forwarded<R>(call: impl FnOnce() -> R) -> R {
    if !TIMING.load(Ordering::Relaxed) {
        return call();
    }
    let start = std::time::Instant::now();
    let result = call();
    TIMED_NS.fetch_add(start.elapsed().as_nanos() as usize, Ordering::Relaxed);
    TIMED_CALLS.fetch_add(1, Ordering::Relaxed);
    result
}

/// PyTorch's allocation function, forwarding to the target (the floor's, when none is set).
#[no_mangle]
pub(crate) extern "C" fn forward_torch_alloc(size: usize, device: c_int, stream: *mut c_void) -> *mut c_void {
    let target = TARGET[0].load(Ordering::Relaxed);
    if target == 0 {
        return floor_torch_alloc(size, device, stream);
    }
    // SAFETY: `forward_torch_to` was given a PyTorch allocation function.
    forwarded(|| unsafe { std::mem::transmute::<usize, TorchAlloc>(target)(size, device, stream) })
}

/// PyTorch's free function, forwarding to the target (the floor's, when none is set).
#[no_mangle]
pub(crate) extern "C" fn forward_torch_free(ptr: *mut c_void, size: usize, device: c_int, stream: *mut c_void) {
    let target = TARGET[1].load(Ordering::Relaxed);
    if target == 0 {
        return floor_torch_free(ptr, size, device, stream);
    }
    // SAFETY: `forward_torch_to` was given a PyTorch free function.
    forwarded(|| unsafe { std::mem::transmute::<usize, TorchFree>(target)(ptr, size, device, stream) })
}

/// `torch_floor_functions()`: the addresses of the PyTorch floor's allocation and free.
#[pyfunction]
pub(crate) fn torch_floor_functions() -> (usize, usize) {
    (floor_torch_alloc as *const () as usize, floor_torch_free as *const () as usize)
}

/// How many atomic read-modify-writes each of the counting floor's functions makes.
static RMW_COUNT: AtomicUsize = AtomicUsize::new(0);
static RMW_TARGET: AtomicUsize = AtomicUsize::new(0);

/// `set_floor_rmw(count)`: the atomic read-modify-writes (uncontended, as a lock's acquire and
/// release are) each of `rmw_torch_alloc` and `rmw_torch_free` makes before doing what the floor
/// does. A diagnostic: what the least bookkeeping a pool needs costs inside PyTorch's hook.
#[pyfunction]
pub(crate) fn set_floor_rmw(count: usize) {
    RMW_COUNT.store(count, Ordering::Relaxed);
}

fn rmw() {
    for _ in 0..RMW_COUNT.load(Ordering::Relaxed) {
        RMW_TARGET.fetch_add(1, Ordering::AcqRel);
    }
}

/// PyTorch's allocation function: `set_floor_rmw`'s count of atomic operations, then the floor's.
#[no_mangle]
pub(crate) extern "C" fn rmw_torch_alloc(_size: usize, _device: c_int, _stream: *mut c_void) -> *mut c_void {
    rmw();
    BLOCK.load(Ordering::Relaxed) as *mut c_void
}

/// PyTorch's free function: `set_floor_rmw`'s count of atomic operations.
#[no_mangle]
pub(crate) extern "C" fn rmw_torch_free(_ptr: *mut c_void, _size: usize, _device: c_int, _stream: *mut c_void) {
    rmw();
}

/// The least a pool that checks its frees does for PyTorch's hook: one lock, a stack of free
/// blocks per power-of-two size class, and a map of the blocks out (address to class; PyTorch's
/// own caching allocator keeps such a map, and its free blocks in sets sorted by size); no
/// streams, no events, no statistics, no bound. A diagnostic for the pool table: what any such
/// pool adds to the hook, against what amso's adds. Blocks are 512-byte slots of the floor's
/// block (never touched).
mod least {
    use std::collections::HashMap;
    use std::ffi::{c_int, c_void};
    use std::hash::{BuildHasherDefault, Hasher};
    use std::sync::atomic::Ordering;
    use std::sync::Mutex;

    /// A device address multiplied by a constant: its zero low bits stay zero, so blocks 512
    /// bytes apart start their probes in one group of the map (amso's `address_hash.rs` rotates
    /// them in; this is the hash the committed report measured).
    #[derive(Default)]
    struct AddressHasher(u64);

    impl Hasher for AddressHasher {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, _: &[u8]) {
            unreachable!("only addresses are hashed")
        }
        fn write_u64(&mut self, address: u64) {
            self.0 = address.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    struct Pool {
        free: [Vec<u64>; 64],
        out: HashMap<u64, u8, BuildHasherDefault<AddressHasher>>,
        slots: u64,
    }

    static POOL: Mutex<Option<Pool>> = Mutex::new(None);

    /// PyTorch's allocation function of the least pool.
    #[no_mangle]
    pub(crate) extern "C" fn least_torch_alloc(size: usize, _device: c_int, _stream: *mut c_void) -> *mut c_void {
        let class = size.max(1).next_power_of_two().trailing_zeros() as u8;
        let mut guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let pool = guard.get_or_insert_with(|| Pool {
            free: std::array::from_fn(|_| Vec::new()),
            out: HashMap::default(),
            slots: 0,
        });
        let ptr = pool.free[usize::from(class)].pop().unwrap_or_else(|| {
            pool.slots += 1;
            super::BLOCK.load(Ordering::Relaxed) as u64 + 512 * (pool.slots - 1)
        });
        pool.out.insert(ptr, class);
        ptr as usize as *mut c_void
    }

    /// PyTorch's free function of the least pool: a block it did not hand out is ignored.
    #[no_mangle]
    pub(crate) extern "C" fn least_torch_free(ptr: *mut c_void, _size: usize, _device: c_int, _stream: *mut c_void) {
        let mut guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pool) = guard.as_mut() {
            if let Some(class) = pool.out.remove(&(ptr as usize as u64)) {
                pool.free[usize::from(class)].push(ptr as usize as u64);
            }
        }
    }
}

/// `least_torch_functions()`: the addresses of the least pool's allocation and free (`least`).
#[pyfunction]
pub(crate) fn least_torch_functions() -> (usize, usize) {
    (least::least_torch_alloc as *const () as usize, least::least_torch_free as *const () as usize)
}

/// PyTorch's allocation function of the least pool that also asks what a stream-ordered pool
/// must (`capture_query`).
#[no_mangle]
pub(crate) extern "C" fn least_capture_torch_alloc(size: usize, device: c_int, stream: *mut c_void) -> *mut c_void {
    capture_query(stream as usize);
    least::least_torch_alloc(size, device, stream)
}

/// `least_torch_capture_functions()`: the least pool through PyTorch's hook, asking the driver
/// whether the stream is capturing at each allocation: the least that a pool which checks its
/// frees and keeps its cached blocks out of captured work adds to the hook.
#[pyfunction]
pub(crate) fn least_torch_capture_functions() -> (usize, usize) {
    (least_capture_torch_alloc as *const () as usize, least::least_torch_free as *const () as usize)
}

/// CuPy's malloc of the least pool that asks CuPy for its current stream and the driver whether
/// it is capturing, as amso's plug-in must.
#[no_mangle]
pub(crate) extern "C" fn least_cupy_malloc(_param: *mut c_void, size: usize, device: c_int) -> *mut c_void {
    let stream = cupy_current_stream(device);
    capture_query(stream as usize);
    least::least_torch_alloc(size, device, stream as *mut c_void)
}

/// CuPy's free of the least pool.
#[no_mangle]
pub(crate) extern "C" fn least_cupy_free(_param: *mut c_void, ptr: *mut c_void, device: c_int) {
    least::least_torch_free(ptr, 0, device, std::ptr::null_mut());
}

/// `least_cupy_functions(capsule)`: the least pool through CuPy's `CFunctionAllocator`, asking
/// what a stream-ordered pool must (CuPy's stream, given the capsule as
/// `floor_cupy_stream_functions` is, and whether it is capturing).
#[pyfunction]
pub(crate) fn least_cupy_functions(stream_function: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    floor_cupy_stream_functions(stream_function)?;
    Ok((least_cupy_malloc as *const () as usize, least_cupy_free as *const () as usize))
}

/// Numba's barrier: an event recorded on the legacy default stream of the current context (one
/// event, made in the context current at the first barrier and kept for the process). A pool
/// that hands a block Numba freed to its next owner at once must queue it at the free, as amso's
/// does (`alloc::legacy_barrier`): Numba's frees name no stream, and work on Numba's streams (all
/// blocking) that still uses the block is ordered before the next owner's only through the
/// legacy stream. Unlike amso's, it neither enters the device's context nor checks for a
/// capture first: a lower bound. A barrier that could not be queued is counted
/// (`numba_barrier_failures`), so that a table timed without its barriers is refused.
fn legacy_barrier() {
    use cudarc::driver::{result, sys};
    static EVENT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let event = *EVENT.get_or_init(|| {
        result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_or(0, |event| event as usize)
    });
    // SAFETY: an event of the context current at the first barrier (the benchmark's one
    // context), never destroyed, recorded on the current context's legacy stream; from another
    // context the driver refuses the record, which is counted.
    let queued = event != 0 && unsafe { result::event::record(event as sys::CUevent, 0x1 as sys::CUstream) }.is_ok();
    if !queued {
        BARRIER_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Numba barriers that could not be queued (`legacy_barrier`).
static BARRIER_FAILURES: AtomicUsize = AtomicUsize::new(0);

/// `numba_barrier_failures()`: how many of the Numba loans' barriers could not be queued.
#[pyfunction]
pub(crate) fn numba_barrier_failures() -> usize {
    BARRIER_FAILURES.load(Ordering::Relaxed)
}

/// A block lent through Numba's plug-in point by the floor (its preallocated block) or by the
/// least pool (`least`), given back when the object goes, behind Numba's barrier: what any
/// plug-in that reuses Numba's blocks at once must do at each free.
#[pyclass(frozen, module = "amso_peers", name = "NumbaLoan")]
pub(crate) struct NumbaLoan {
    /// The device address.
    #[pyo3(get)]
    ptr: u64,
    /// Whether the block is the least pool's (else the floor's).
    pooled: bool,
}

impl Drop for NumbaLoan {
    fn drop(&mut self) {
        legacy_barrier();
        if self.pooled {
            least::least_torch_free(self.ptr as usize as *mut c_void, 0, 0, std::ptr::null_mut());
        }
    }
}

/// `floor_numba_lend(size)`: the floor's block, given back behind Numba's barrier (`NumbaLoan`).
#[pyfunction]
pub(crate) fn floor_numba_lend(_size: usize) -> NumbaLoan {
    NumbaLoan { ptr: BLOCK.load(Ordering::Relaxed) as u64, pooled: false }
}

/// `least_numba_lend(size)`: a block of the least pool, given back to it behind Numba's barrier
/// (`NumbaLoan`).
#[pyfunction]
pub(crate) fn least_numba_lend(size: usize) -> NumbaLoan {
    NumbaLoan { ptr: least::least_torch_alloc(size, 0, std::ptr::null_mut()) as usize as u64, pooled: true }
}
