//! Where device memory comes from. The default is amso's pool (`pool_allocator.rs`): a cache of
//! blocks of every size and stream in front of the driver's stream-ordered pool. Another
//! library's allocator can be plugged in (`set_allocator`); each allocation remembers its
//! allocator and is returned to it.
//!
//! A free ordered on a stream goes back to amso's pool at once: the pool files it under that
//! stream, with no driver call. Every other free goes through the deferred queue
//! (`deferred.rs`): frees to a plugged-in allocator (whose free may synchronise), frees that
//! must wait for all of the device's work (memory handed to consumers whose streams are
//! unknown: one synchronisation per batch, never one per block), and any free while a
//! `defer_cleanup` block or a graph capture holds them. An allocation that fails for lack of
//! memory flushes the queue and retries.
// The knobs here (allocators, deferral limits) are driven from Python (`amso.set_allocator`,
// `amso.defer_cleanup`, ...); a Rust-only build keeps them for the pool's own use.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use cudarc::driver::{result, sys};

use super::capture;
use super::capture_probes::{CaptureProbe, Probes};
use super::context::Current;
use super::deferred::{Deferred, Limits};
use super::device_waiter::DeviceWaiter;
use super::driver::map_error;
pub(crate) use super::pool_allocator::default_pool;
use super::request::{Client, Request, CLIENTS};
use super::stream::StreamHandle;
use super::switches::SWITCHES;
use crate::device::DeviceId;
use crate::error::{Error, Result};

/// A source of device memory.
pub(crate) trait DeviceAllocator: Send + Sync + 'static {
    /// A name for `memory_info`.
    fn name(&self) -> String;
    /// `bytes` (> 0) of memory on `device_id`, usable in order on `stream`.
    fn allocate(&self, device_id: DeviceId, bytes: usize, stream: StreamHandle) -> Result<u64>;
    /// Return `ptr` (of `bytes`), after the work queued on `stream` so far.
    fn free(&self, device_id: DeviceId, ptr: u64, bytes: usize, stream: StreamHandle);
    /// As `free`, told whether `stream` outlives the memory (`lasting`: a default stream,
    /// amso's own, PyTorch's), which lets a cache order other streams' work after it later.
    fn free_on(&self, device_id: DeviceId, ptr: u64, bytes: usize, stream: StreamHandle, _lasting: bool) {
        self.free(device_id, ptr, bytes, stream);
    }
    /// Bytes this allocator holds cached on `device_id` (for `memory_info`).
    fn cached_bytes(&self, _device_id: DeviceId) -> usize {
        0
    }
}

/// Counters reported by `memory_info`, by client (`pool::Client`), of memory from allocators
/// other than amso's pool, which counts its own (and its hits and misses) under its lock.
#[derive(Debug)]
pub(crate) struct Stats {
    /// Bytes of live allocations.
    pub in_use: [AtomicUsize; CLIENTS.len()],
    /// Allocations served.
    pub allocations: [AtomicU64; CLIENTS.len()],
}

/// This copy's counters of memory from allocators other than its pool.
pub(crate) static STATS: Stats = Stats {
    in_use: [const { AtomicUsize::new(0) }; CLIENTS.len()],
    allocations: [const { AtomicU64::new(0) }; CLIENTS.len()],
};

/// CUDA managed memory (`cuMemAllocManaged`, attached globally): one address for the device
/// and the host, migrated by the driver. Allocated only within the device's free memory, and
/// freed with `cuMemFree` (no stream-ordered free exists for it), after the device's work.
#[derive(Debug, Default)]
pub(crate) struct ManagedAllocator;

impl DeviceAllocator for ManagedAllocator {
    fn name(&self) -> String {
        "cuMemAllocManaged".into()
    }

    fn allocate(&self, device_id: DeviceId, bytes: usize, _stream: StreamHandle) -> Result<u64> {
        let (free, _) = super::context::memory_info(device_id)?;
        if bytes > free {
            return Err(Error::OutOfMemory { bytes, what: "managed" });
        }
        crate::gil::released(|| {
            let _ctx = Current::enter(device_id)?;
            // SAFETY: a context is current; the memory is zeroed or written before any read.
            unsafe { result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
                .map_err(|e| map_error("cuMemAllocManaged", e, bytes, "managed"))
        })
    }

    fn free(&self, device_id: DeviceId, ptr: u64, _bytes: usize, _stream: StreamHandle) {
        if let Ok(_ctx) = Current::enter(device_id) {
            // SAFETY: allocated by cuMemAllocManaged and freed once; cuMemFree waits for the
            // device's work on it (the free is queued after it, `After`).
            let _ = unsafe { cudarc::driver::result::free_sync(ptr) };
        }
    }
}

/// Memory another process can map (`cuMemAlloc`: legacy CUDA IPC handles name only such
/// allocations, not a stream-ordered pool's), for `shareable=True` arrays; freed with
/// `cuMemFree` after the device's work.
#[derive(Debug, Default)]
pub(crate) struct ShareableAllocator;

impl DeviceAllocator for ShareableAllocator {
    fn name(&self) -> String {
        "cuMemAlloc (shareable)".into()
    }

    fn allocate(&self, device_id: DeviceId, bytes: usize, _stream: StreamHandle) -> Result<u64> {
        crate::gil::released(|| {
            let _ctx = Current::enter(device_id)?;
            // SAFETY: a context is current; the memory is zeroed or written before any read.
            unsafe { cudarc::driver::result::malloc_sync(bytes) }
                .map_err(|e| map_error("cuMemAlloc", e, bytes, "shareable device"))
        })
    }

    fn free(&self, device_id: DeviceId, ptr: u64, _bytes: usize, _stream: StreamHandle) {
        if let Ok(_ctx) = Current::enter(device_id) {
            // SAFETY: allocated by cuMemAlloc and freed once, after the device's work on it.
            let _ = unsafe { cudarc::driver::result::free_sync(ptr) };
        }
    }
}

/// The allocator an allocation came from, which it is returned to.
#[derive(Clone)]
pub(crate) enum Source {
    /// amso's pool (no reference count to take: it lives for the process).
    Pool,
    /// An allocator plugged in with `set_allocator`.
    Plugged(Arc<dyn DeviceAllocator>),
    /// Managed memory (`managed=True` arrays), whatever allocator is plugged in.
    Managed,
    /// Memory other processes can map (`shareable=True` arrays).
    Shareable,
}

impl Source {
    /// The token a grant of the process's pool carries (`pool.rs`): the kind, or one owned
    /// reference of a plugged-in allocator.
    pub(crate) fn into_token(self) -> u64 {
        match self {
            Source::Pool => 0,
            Source::Managed => 1,
            Source::Shareable => 2,
            Source::Plugged(allocator) => Box::into_raw(Box::new(allocator)) as u64,
        }
    }

    /// The source `into_token` made `token` of.
    ///
    /// # Safety
    /// `token` came from `into_token` in this copy of the runtime and is taken back once.
    pub(crate) unsafe fn from_token(token: u64) -> Source {
        match token {
            0 => Source::Pool,
            1 => Source::Managed,
            2 => Source::Shareable,
            // SAFETY: as the caller guarantees, a box `into_token` leaked, reclaimed once.
            boxed => Source::Plugged(*unsafe { Box::from_raw(boxed as *mut Arc<dyn DeviceAllocator>) }),
        }
    }

    /// The allocator itself.
    pub(crate) fn allocator(&self) -> &dyn DeviceAllocator {
        match self {
            Source::Managed => &ManagedAllocator,
            Source::Shareable => &ShareableAllocator,
            Source::Pool => default_pool(),
            Source::Plugged(allocator) => allocator.as_ref(),
        }
    }
}

/// The allocator plugged in, if any; `SWITCHES.plugged` says whether it holds one, so that
/// while it does not (the common case) an allocation takes neither its lock nor a reference
/// count.
static CURRENT: RwLock<Option<Arc<dyn DeviceAllocator>>> = RwLock::new(None);

/// The allocator new device memory comes from.
pub(crate) fn current() -> Source {
    if !SWITCHES.plugged.load(Ordering::Acquire) {
        return Source::Pool;
    }
    CURRENT.read().unwrap_or_else(|e| e.into_inner()).clone().map_or(Source::Pool, Source::Plugged)
}

/// Plug in `allocator` (None: amso's pool). Existing allocations keep the allocator that made them.
pub(crate) fn set_allocator(allocator: Option<Arc<dyn DeviceAllocator>>) {
    let mut current = CURRENT.write().unwrap_or_else(|e| e.into_inner());
    SWITCHES.plugged.store(allocator.is_some(), Ordering::Release);
    *current = allocator;
}

/// Set the driver pool's release threshold of amso's default allocator.
pub(crate) fn set_release_threshold(bytes: u64) {
    default_pool().set_release_threshold(bytes);
}

/// What a free waits for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum After {
    /// The work queued so far on this stream.
    Stream(StreamHandle),
    /// All work on the device (memory handed to consumers whose streams are unknown).
    Device,
    /// The work queued so far on every stream that synchronises with the legacy default stream
    /// (all but non-blocking ones): a barrier is queued on the legacy stream at the free, and
    /// the block is filed under it. Numba's frees, which name no stream (`loans.rs`).
    Barrier,
}

/// Queue a barrier on `device_id`'s legacy default stream: an event recorded there, which every
/// later operation on a blocking stream waits behind, as the legacy stream's implicit
/// synchronisation orders it after every earlier one. amso's own stream is non-blocking, and
/// amso works on it for arrays that arrive without a stream (a Numba array), so it is joined
/// both ways: the barrier waits for its work so far, and its later work waits for the barrier.
/// False when it could not be queued (a capture amso has seen, or a driver error): the free must
/// wait for the device. The records and waits are queued without waiting, as a launch is.
pub(crate) fn legacy_barrier(device_id: DeviceId) -> bool {
    /// Per device, two events recorded again at each barrier and never queried (the legacy
    /// stream's, amso's stream's): their records are the barrier.
    static EVENTS: OnceLock<Vec<OnceLock<[usize; 2]>>> = OnceLock::new();
    if capturing() {
        return false; // the legacy stream may not be used while a capture is in progress
    }
    let Ok(_ctx) = Current::enter(device_id) else { return false };
    let slots =
        EVENTS.get_or_init(|| (0..super::driver::device_count().unwrap_or(0)).map(|_| OnceLock::new()).collect());
    let Ok(slot) = super::driver::per_device(slots, device_id) else { return false };
    let [legacy, amso] = match slot.get() {
        Some(&events) => events,
        None => {
            let create = || result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).ok();
            let (Some(legacy), Some(amso)) = (create(), create()) else { return false };
            // Kept for the process (a lost race leaks two events).
            *slot.get_or_init(|| [legacy as usize, amso as usize])
        }
    };
    let (legacy, amso) = (legacy as sys::CUevent, amso as sys::CUevent);
    let own = super::stream::existing_amso_stream(device_id);
    let wait = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
    // SAFETY: events of the device's primary context (current here), never destroyed, on the
    // legacy stream and amso's stream, which lives for the process. A record from several
    // threads at once is allowed: a wait sees the latest record of its event, which on one
    // stream covers the earlier ones.
    unsafe {
        if let Some(own) = own {
            if result::event::record(amso, own.raw()).is_err()
                || result::stream::wait_event(StreamHandle::LEGACY.raw(), amso, wait).is_err()
            {
                return false;
            }
        }
        if result::event::record(legacy, StreamHandle::LEGACY.raw()).is_err() {
            return false;
        }
        own.is_none_or(|own| result::stream::wait_event(own.raw(), legacy, wait).is_ok())
    }
}

/// A pending free.
pub(crate) enum PendingFree {
    /// Device memory, returned to the allocator that made it.
    Device { source: Source, device_id: DeviceId, ptr: u64, bytes: usize, after: After, client: Client },
    /// A block of the driver's pool that amso's pool could not keep, freed after all of the
    /// device's work (its stream may be gone).
    Driver { device_id: DeviceId, ptr: u64 },
    /// Page-locked host memory (`cuMemFreeHost` synchronises the device, so it waits out a
    /// capture like the device frees).
    Pinned { ptr: usize },
}

impl PendingFree {
    /// The device whose work this free waits for, if it waits for all of it.
    fn waits_for_device(&self) -> Option<DeviceId> {
        match self {
            PendingFree::Device { device_id, after: After::Device, .. } | PendingFree::Driver { device_id, .. } => {
                Some(*device_id)
            }
            _ => None,
        }
    }

    /// Run the free; a free that waits for the device's work runs after `run_all` synchronised it.
    fn run(self) {
        match self {
            PendingFree::Device { source, device_id, ptr, bytes, after, client } => {
                let (stream, lasting) = match after {
                    After::Stream(stream) => (stream, lasting(client, stream)),
                    After::Device => (StreamHandle::LEGACY, true), // the device's work is done
                    After::Barrier if legacy_barrier(device_id) => (StreamHandle::LEGACY, true),
                    After::Barrier => {
                        let free = PendingFree::Device { source, device_id, ptr, bytes, after: After::Device, client };
                        return wait_for_device(free, bytes);
                    }
                };
                match &source {
                    // Counted under the pool's lock.
                    Source::Pool => default_pool().free_for(device_id, (ptr, bytes), stream, lasting, client),
                    other => {
                        other.allocator().free_on(device_id, ptr, bytes, stream, lasting);
                        STATS.in_use[client as usize].fetch_sub(bytes, Ordering::Relaxed);
                    }
                }
            }
            PendingFree::Driver { device_id, ptr } => {
                if let Ok(_ctx) = Current::enter(device_id) {
                    // SAFETY: a block of the driver's pool, freed once; the device is idle.
                    let _ = unsafe { result::free_async(ptr, StreamHandle::LEGACY.raw()) };
                }
            }
            PendingFree::Pinned { ptr } => {
                if let Ok(_ctx) = Current::enter(DeviceId::ZERO) {
                    // SAFETY: allocated by cuMemHostAlloc and freed once, here.
                    let _ = unsafe { result::free_host(ptr as *mut std::ffi::c_void) };
                }
            }
        }
    }
}

/// Whether `stream` outlives memory `client` frees on it, so that amso's pool may later record
/// an event on it: the default streams, amso's own, and PyTorch's (which PyTorch never
/// destroys). A CuPy, RMM or user stream may be destroyed while its blocks are cached.
#[inline]
pub(crate) fn lasting(client: Client, stream: StreamHandle) -> bool {
    client == Client::Torch || stream == StreamHandle::LEGACY || super::stream::is_amso_stream(stream)
}

/// Run `frees` in the relaxed capture mode (a free on a stream that is not capturing leaves a
/// capture elsewhere valid), synchronising each device once first if a free waits for its work.
fn run_all(frees: Vec<PendingFree>) {
    // Without a driver there is no device memory to free (nothing was allocated).
    if frees.is_empty() || super::driver::require().is_err() {
        return;
    }
    // With the GIL released: a free may synchronise the device. A Python allocator's `free`
    // takes the GIL back itself; no amso lock is held meanwhile (`DEFERRED` handed the frees
    // over).
    crate::gil::released(|| {
        let _relaxed = capture::Relaxed::enter();
        let mut synchronised: Vec<DeviceId> = Vec::new();
        for device_id in frees.iter().filter_map(PendingFree::waits_for_device) {
            if !synchronised.contains(&device_id) {
                synchronised.push(device_id);
                if let Ok(_ctx) = Current::enter(device_id) {
                    // Never during a capture amso has seen (the queue holds frees then).
                    let _ = result::ctx::synchronize();
                }
            }
        }
        for free in frees {
            free.run();
        }
    })
}

/// Free `ptr`, a block of the driver's pool that amso's pool could not keep, after all of the
/// device's work (by the device waiter, or with the deferred queue's next batch).
pub(crate) fn release_after_device(device_id: DeviceId, ptr: u64) {
    let pending = PendingFree::Driver { device_id, ptr };
    if DEFERRED.holding() || capturing() {
        run_all(DEFERRED.push(pending, 0, capacity(device_id), capturing()));
    } else {
        wait_for_device(pending, 0);
    }
}

/// The device waiter of amso's pool (`device_waiter.rs`): `defer_cleanup` blocks and captures
/// keep such frees in the deferred queue instead.
static WAITER: DeviceWaiter<PendingFree> = DeviceWaiter::new(run_waited);

/// One batch of the device waiter, on its thread.
fn run_waited(batch: Vec<(PendingFree, usize)>) {
    if capturing() {
        // A capture began since: the deferred queue holds them until it has ended.
        for (free, bytes) in batch {
            defer(free, bytes, true);
        }
    } else {
        run_all(batch.into_iter().map(|(free, _)| free).collect());
    }
}

/// Hand `free` (of `bytes`) to the device waiter; to the deferred queue when its thread could
/// not start.
fn wait_for_device(free: PendingFree, bytes: usize) {
    if let Err(free) = WAITER.submit(free, bytes) {
        defer(free, bytes, capturing());
    }
}

/// Queue `free` (of `bytes`) in the deferred queue, running what is due.
fn defer(free: PendingFree, bytes: usize, capture: bool) {
    let capacity = free.waits_for_device().map_or(usize::MAX, capacity);
    run_all(DEFERRED.push(free, bytes, capacity, capture));
}

/// Before a request the cache cannot serve goes to the driver: give the device waiter's frees
/// up to 200 µs to come back (the GIL released by the caller); whether there were any.
pub(crate) fn settle_device_waiter() -> bool {
    WAITER.settle(std::time::Duration::from_micros(200))
}

/// Frees queued for the device waiter, and their bytes (`memory_info`'s pending frees count them).
pub(crate) fn waiting_for_device() -> (usize, usize) {
    WAITER.pending()
}

/// Every free that is pending and may run now: the deferred queue's (unless held) and the
/// device waiter's.
fn take_pending() -> Vec<PendingFree> {
    let capture = capturing();
    let mut frees = DEFERRED.take_all(capture);
    if !capture {
        frees.extend(WAITER.take_all());
    }
    frees
}

/// The other runtime copies' probes (`pool.rs`), when this copy's pool is the process's.
static CAPTURE_PROBES: Probes = Probes::new();

/// Count another copy's captures in `capturing` (each copy notes only the captures it saw).
pub(crate) fn add_capture_probe(probe: CaptureProbe) {
    CAPTURE_PROBES.add(probe);
}

/// Whether a capture any copy of the runtime has seen is in progress, which holds every
/// deferred free.
#[inline]
fn capturing() -> bool {
    capture::in_progress(None) || CAPTURE_PROBES.any()
}

/// The deferred-free queue.
pub(crate) static DEFERRED: Deferred<PendingFree> = Deferred::new(&SWITCHES.holds);

/// `device_id`'s memory in bytes, asked of the driver until it answers, then kept (every free
/// reads it: after the first answer, without a lock). Unknown, it counts as unlimited: only
/// the count limit then flushes the deferred frees.
pub(crate) fn capacity(device_id: DeviceId) -> usize {
    static TOTALS: OnceLock<Vec<OnceLock<usize>>> = OnceLock::new();
    let totals =
        TOTALS.get_or_init(|| (0..super::driver::device_count().unwrap_or(0)).map(|_| OnceLock::new()).collect());
    let slot = totals.get(device_id.index());
    if let Some(&total) = slot.and_then(OnceLock::get) {
        return total;
    }
    match (super::context::memory_info(device_id), slot) {
        (Ok((_, total)), Some(slot)) => *slot.get_or_init(|| total),
        (Ok((_, total)), None) => total,
        (Err(_), _) => usize::MAX,
    }
}

/// `bytes` (> 0) on `device_id` for `request` (the current allocator, managed or shareable
/// memory), usable in order on `stream`, counted for `client`; when the allocator is out of
/// memory, the deferred frees run and it is asked once more. This copy's pool: other code
/// allocates through `pool::allocate`, the process's.
pub(crate) fn allocate_for(
    request: Request,
    device_id: DeviceId,
    bytes: usize,
    stream: StreamHandle,
    client: Client,
) -> Result<(u64, Source)> {
    let source = match request {
        Request::Current => current(),
        Request::Managed => Source::Managed,
        Request::Shareable => Source::Shareable,
    };
    let allocate = || match &source {
        // Counted under the pool's lock.
        Source::Pool => default_pool().allocate_for(device_id, bytes, stream, client),
        other => other.allocator().allocate(device_id, bytes, stream),
    };
    let ptr = match allocate() {
        Err(Error::OutOfMemory { .. }) => {
            run_all(take_pending());
            allocate()?
        }
        other => other?,
    };
    if !matches!(source, Source::Pool) {
        STATS.in_use[client as usize].fetch_add(bytes, Ordering::Relaxed);
        STATS.allocations[client as usize].fetch_add(1, Ordering::Relaxed);
    }
    Ok((ptr, source))
}

/// Whether a free ordered on a stream may go back to amso's pool now: no `defer_cleanup` block
/// or capture holds the frees.
#[inline]
pub(crate) fn frees_run_now() -> bool {
    SWITCHES.frees_unheld() || (!DEFERRED.holding() && !capturing())
}

/// Return memory to the allocator it came from through the deferred queue (this copy's pool:
/// other code releases through `pool::release`).
pub(crate) fn release(source: Source, device_id: DeviceId, ptr: u64, bytes: usize, after: After, client: Client) {
    // The per-thread default stream names another stream in each thread, and a free may run in
    // another thread than the work (a consumer's deleter, the deferred queue): such a free
    // waits for the device's work, as one of an unknown stream does.
    let after = match after {
        After::Stream(stream) if stream == StreamHandle::PER_THREAD => After::Device,
        other => other,
    };
    let free_now = matches!(source, Source::Pool) && frees_run_now();
    let pending = PendingFree::Device { source, device_id, ptr, bytes, after, client };
    match after {
        After::Stream(_) | After::Barrier if free_now => pending.run(), // into amso's pool, no wait
        After::Device if free_now => wait_for_device(pending, bytes),
        _ => run_all(DEFERRED.push(pending, bytes, capacity(device_id), capturing())),
    }
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
pub(crate) fn hold_frees() {
    DEFERRED.hold();
}

/// End a `defer_cleanup` block, running the frees that are due.
pub(crate) fn release_frees(device_id: DeviceId) {
    run_all(DEFERRED.release(capacity(device_id), capturing()));
}

/// Run every pending free now, and wait for the device waiter's batch (unless a `defer_cleanup`
/// block or a capture holds them).
pub(crate) fn flush() {
    run_all(take_pending());
    if !capturing() {
        WAITER.finish_running();
    }
}

/// Set the deferred-free limits.
pub(crate) fn set_deferred_limits(limits: Limits) {
    DEFERRED.set_limits(limits);
}

#[cfg(test)]
mod tests {
    use super::{flush, wait_for_device, waiting_for_device, PendingFree};
    use crate::device::DeviceId;

    #[test]
    fn the_device_waiter_runs_its_frees_and_a_flush_waits_for_them() {
        if crate::cuda::driver::require().is_ok() {
            return; // the frees below name no real memory: only where no driver can run them
        }
        for ptr in [0x1000, 0x2000, 0x3000] {
            wait_for_device(PendingFree::Driver { device_id: DeviceId::ZERO, ptr }, 4096);
        }
        flush();
        assert_eq!(waiting_for_device(), (0, 0), "a flush leaves nothing queued or running");
        wait_for_device(PendingFree::Driver { device_id: DeviceId::ZERO, ptr: 0x4000 }, 4096);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while waiting_for_device() != (0, 0) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(waiting_for_device(), (0, 0), "the waiter's thread runs a free without a flush");
    }
}
