//! Where device memory comes from. The default is amso's pool: a small-block cache in front
//! of the driver's stream-ordered pool (`cuMemAllocAsync` / `cuMemFreeAsync`, release threshold
//! configurable). Another library's allocator can be plugged in (`set_allocator`); each
//! allocation remembers its allocator and is returned to it. Frees go through the deferred
//! queue (`deferred.rs`); an allocation that fails for lack of memory flushes it and retries.
// The knobs here (allocators, deferral limits) are driven from Python (`amso.set_allocator`,
// `amso.defer_cleanup`, ...); a Rust-only build keeps them for the pool's own use.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use cudarc::driver::sys;

use super::capture;
use super::context::Current;
use super::deferred::{Deferred, Limits};
use super::driver::{cuda_error, map_error};
use super::stream::StreamHandle;
use crate::error::{Error, Result};

/// A source of device memory.
pub trait DeviceAllocator: Send + Sync + 'static {
    /// A name for `memory_info`.
    fn name(&self) -> String;
    /// `bytes` (> 0) of memory on `device_id`, usable in order on `stream`.
    fn allocate(&self, device_id: i32, bytes: usize, stream: StreamHandle) -> Result<u64>;
    /// Return `ptr` (of `bytes`), after the work queued on `stream` so far.
    fn free(&self, device_id: i32, ptr: u64, bytes: usize, stream: StreamHandle);
    /// Bytes this allocator holds cached on `device_id` (for `memory_info`).
    fn cached_bytes(&self, _device_id: i32) -> usize {
        0
    }
}

/// Counters reported by `memory_info`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Bytes of live amso allocations.
    pub in_use: AtomicUsize,
    /// Allocations served from amso's cache.
    pub hits: AtomicU64,
    /// Allocations that went to the driver (or the plugged-in allocator).
    pub misses: AtomicU64,
}

/// The process-wide counters.
pub static STATS: Stats = Stats { in_use: AtomicUsize::new(0), hits: AtomicU64::new(0), misses: AtomicU64::new(0) };

/// Blocks up to this size are cached by amso's pool.
const SMALL_BLOCK: usize = 1 << 20;
/// amso's pool caches at most this many bytes per process.
const CACHE_LIMIT: usize = 256 << 20;

/// amso's default allocator.
#[derive(Default)]
pub struct PoolAllocator {
    cache: Mutex<HashMap<(i32, usize, usize), Vec<u64>>>,
    cached: AtomicUsize,
    release_threshold: AtomicU64,
    configured: Mutex<Vec<i32>>,
}

fn size_class(bytes: usize) -> usize {
    if bytes <= SMALL_BLOCK {
        bytes.next_power_of_two().max(512)
    } else {
        bytes
    }
}

impl PoolAllocator {
    /// Bytes the driver's pool keeps reserved after frees (default: all of them, u64::MAX).
    pub fn set_release_threshold(&self, bytes: u64) {
        self.release_threshold.store(bytes, Ordering::Relaxed);
        self.configured.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn configure(&self, device_id: i32) -> Result<()> {
        let mut configured = self.configured.lock().unwrap_or_else(|e| e.into_inner());
        if configured.contains(&device_id) {
            return Ok(());
        }
        let device = cudarc::driver::result::device::get(device_id).map_err(cuda_error)?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        let mut threshold = match self.release_threshold.load(Ordering::Relaxed) {
            0 => u64::MAX,
            bytes => bytes,
        };
        // SAFETY: valid out-pointer and device; the attribute is a u64.
        unsafe {
            sys::cuDeviceGetDefaultMemPool(&mut pool, device).result().map_err(cuda_error)?;
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
            .result()
            .map_err(cuda_error)?;
        }
        configured.push(device_id);
        Ok(())
    }
}

impl DeviceAllocator for PoolAllocator {
    fn name(&self) -> String {
        "amso pool (cache + cuMemAllocAsync)".into()
    }

    fn allocate(&self, device_id: i32, bytes: usize, stream: StreamHandle) -> Result<u64> {
        let class = size_class(bytes);
        if class <= SMALL_BLOCK {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(ptr) = cache.get_mut(&(device_id, class, stream.as_int() as usize)).and_then(Vec::pop) {
                self.cached.fetch_sub(class, Ordering::Relaxed);
                STATS.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(ptr);
            }
        }
        STATS.misses.fetch_add(1, Ordering::Relaxed);
        // Never on a capturing stream (`DeviceMemory::alloc_for`); relaxed so that neither the
        // pool's configuration nor the allocation invalidates a capture elsewhere.
        let _relaxed = capture::Relaxed::enter();
        self.configure(device_id)?;
        let _ctx = Current::enter(device_id)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; the device's context is current; the stream was checked.
        unsafe { sys::cuMemAllocAsync(&mut ptr, class, stream.raw()) }
            .result()
            .map_err(|e| map_error(e, bytes, "device"))?;
        Ok(ptr)
    }

    fn free(&self, device_id: i32, ptr: u64, bytes: usize, stream: StreamHandle) {
        let class = size_class(bytes);
        if class <= SMALL_BLOCK && self.cached.load(Ordering::Relaxed) + class <= CACHE_LIMIT {
            // Reused only on this same stream, so the new owner's work follows the old one's.
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.entry((device_id, class, stream.as_int() as usize)).or_default().push(ptr);
            self.cached.fetch_add(class, Ordering::Relaxed);
            return;
        }
        if let Ok(_ctx) = Current::enter(device_id) {
            // SAFETY: allocated by cuMemAllocAsync and freed once, after `stream`'s work.
            let _ = unsafe { sys::cuMemFreeAsync(ptr, stream.raw()) };
        }
    }

    fn cached_bytes(&self, _device_id: i32) -> usize {
        self.cached.load(Ordering::Relaxed)
    }
}

fn default_pool() -> &'static Arc<PoolAllocator> {
    static POOL: OnceLock<Arc<PoolAllocator>> = OnceLock::new();
    POOL.get_or_init(|| Arc::new(PoolAllocator::default()))
}

static CURRENT: RwLock<Option<Arc<dyn DeviceAllocator>>> = RwLock::new(None);

/// The allocator new device memory comes from.
pub fn current() -> Arc<dyn DeviceAllocator> {
    CURRENT.read().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| default_pool().clone())
}

/// Plug in `allocator` (None: amso's pool). Existing allocations keep the allocator that made them.
pub fn set_allocator(allocator: Option<Arc<dyn DeviceAllocator>>) {
    *CURRENT.write().unwrap_or_else(|e| e.into_inner()) = allocator;
}

/// Set the driver pool's release threshold of amso's default allocator.
pub fn set_release_threshold(bytes: u64) {
    default_pool().set_release_threshold(bytes);
}

/// What a free waits for.
#[derive(Debug, Clone, Copy)]
pub enum After {
    /// The work queued so far on this stream.
    Stream(StreamHandle),
    /// All work on the device (memory handed to consumers whose streams are unknown).
    Device,
}

/// A pending free.
pub enum PendingFree {
    /// Device memory, returned to the allocator that made it.
    Device { allocator: Arc<dyn DeviceAllocator>, device_id: i32, ptr: u64, bytes: usize, after: After },
    /// Page-locked host memory (`cuMemFreeHost` synchronises the device, so it waits out a
    /// capture like the device frees).
    Pinned { ptr: usize },
}

impl PendingFree {
    fn run(self) {
        match self {
            PendingFree::Device { allocator, device_id, ptr, bytes, after } => {
                let stream = match after {
                    After::Stream(stream) => stream,
                    After::Device => {
                        if let Ok(_ctx) = Current::enter(device_id) {
                            // Raw: cudarc's context synchronise binds the context to the thread.
                            // SAFETY: a context is current. Never during a capture amso has seen
                            // (`run_all`), which this would invalidate.
                            let _ = unsafe { sys::cuCtxSynchronize() };
                        }
                        StreamHandle::LEGACY
                    }
                };
                allocator.free(device_id, ptr, bytes, stream);
                STATS.in_use.fetch_sub(bytes, Ordering::Relaxed);
            }
            PendingFree::Pinned { ptr } => {
                if let Ok(_ctx) = Current::enter(0) {
                    // SAFETY: allocated by cuMemHostAlloc and freed once, here.
                    let _ = unsafe { sys::cuMemFreeHost(ptr as *mut std::ffi::c_void) };
                }
            }
        }
    }
}

/// Run `frees` in the relaxed capture mode: a free on a stream that is not capturing leaves a
/// capture elsewhere valid.
fn run_all(frees: Vec<PendingFree>) {
    if frees.is_empty() {
        return;
    }
    let _relaxed = capture::Relaxed::enter();
    for free in frees {
        free.run();
    }
}

/// Whether a capture amso has seen is in progress, which holds every deferred free.
fn capturing() -> bool {
    capture::in_progress(None)
}

/// The deferred-free queue.
pub static DEFERRED: Deferred<PendingFree> = Deferred::new();

fn capacity(device_id: i32) -> usize {
    static TOTALS: Mutex<Vec<(i32, usize)>> = Mutex::new(Vec::new());
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, total)) = totals.iter().find(|(d, _)| *d == device_id) {
        return total;
    }
    let total = super::memory::memory_info(device_id).map(|(_, total)| total).unwrap_or(usize::MAX);
    totals.push((device_id, total));
    total
}

/// `bytes` of device memory from the current allocator; a failure for lack of memory flushes
/// the deferred frees and tries once more.
pub fn allocate(device_id: i32, bytes: usize, stream: StreamHandle) -> Result<(u64, Arc<dyn DeviceAllocator>)> {
    let allocator = current();
    let ptr = match allocator.allocate(device_id, bytes, stream) {
        Err(Error::OutOfMemory { .. }) => {
            run_all(DEFERRED.take_all(capturing()));
            allocator.allocate(device_id, bytes, stream)?
        }
        other => other?,
    };
    STATS.in_use.fetch_add(bytes, Ordering::Relaxed);
    Ok((ptr, allocator))
}

/// Return memory to `allocator` through the deferred queue.
pub fn release(allocator: Arc<dyn DeviceAllocator>, device_id: i32, ptr: u64, bytes: usize, after: After) {
    let pending = PendingFree::Device { allocator, device_id, ptr, bytes, after };
    run_all(DEFERRED.push(pending, bytes, capacity(device_id), capturing()));
}

/// Free pinned host memory at `ptr`: now, or, while a capture amso has seen is in progress,
/// with the deferred frees once it has ended. Host bytes do not count against the device.
pub(crate) fn release_pinned(ptr: *mut u8) {
    let pending = PendingFree::Pinned { ptr: ptr as usize };
    if capturing() {
        run_all(DEFERRED.push(pending, 0, usize::MAX, true));
    } else {
        run_all(vec![pending]);
    }
}

/// Begin a `defer_cleanup` block.
pub fn hold_frees() {
    DEFERRED.hold();
}

/// End a `defer_cleanup` block, running the frees that are due.
pub fn release_frees(device_id: i32) {
    run_all(DEFERRED.release(capacity(device_id), capturing()));
}

/// Run every pending free now (unless a `defer_cleanup` block or a capture holds them).
pub fn flush() {
    run_all(DEFERRED.take_all(capturing()));
}

/// Set the deferred-free limits.
pub fn set_deferred_limits(limits: Limits) {
    DEFERRED.set_limits(limits);
}
