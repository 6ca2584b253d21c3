//! amso's own pool: the block cache (`block_cache.rs`) of each device in front of the driver's
//! stream-ordered pool (`cuMemAllocAsync` / `cuMemFreeAsync`, release threshold configurable).
//!
//! A request the block's own stream can serve takes one lock and makes no driver call, so it
//! runs with the GIL held. The device's figures by client, and its blocks lent to other
//! libraries (`lent.rs`), are kept under the same lock: a lend and a give-back through a
//! plug-in (`loans.rs`) take that lock once each, and nothing else. Everything else (another stream's block behind a fence, the driver)
//! runs with the GIL released. When the driver is out of memory, the pool synchronises the
//! device, gives every cached block back, trims the driver's pool and asks once more
//! (`release_cached`); nothing else on the allocate or free path synchronises.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use cudarc::driver::{result, sys};

use super::alloc::DeviceAllocator;
use super::block_cache::{self, BlockCache, Counts, Fences, Returned, Shelved};
use super::capture;
use super::context::Current;
use super::driver::{cuda_error, map_error};
use super::lent::{Ledger, Lent};
use super::request::{Client, CLIENTS};
use super::stream::StreamHandle;
use crate::device::DeviceId;
use crate::error::{Error, Result};

/// A CUDA event used as a fence (`block_cache::Fences`).
#[derive(Debug)]
pub(crate) struct Event(sys::CUevent);

// SAFETY: a CUDA event handle may be used from any thread; the pool's lock serialises its use.
unsafe impl Send for Event {}

/// One device's cache and its spare events, in the order a lend and a give-back read them
/// (`#[repr(C)]`: the fields they read share few cache lines, `switches.rs` says why).
#[repr(C)]
struct DeviceCache {
    /// Whether the cache's bound was set from the device's memory.
    bounded: bool,
    /// What the pool has out on the device.
    ledger: Ledger,
    cache: BlockCache<Event>,
    spare_events: Vec<Event>,
}

/// The driver's side of `Fences`: events of one device, recorded and queried with its context
/// current and the GIL released.
struct DriverFences<'a> {
    spare: &'a mut Vec<Event>,
}

impl Fences for DriverFences<'_> {
    type Fence = Event;

    fn record(&mut self, stream: u64) -> Option<Event> {
        // Not on a stream being captured into a graph (one amso may not have seen, PyTorch's):
        // the record would become a node of the user's graph and never pass as a fence.
        if !matches!(capture::state(StreamHandle::of_raw(stream)), Ok(capture::Capture::Idle)) {
            return None;
        }
        let event = match self.spare.pop() {
            Some(event) => event,
            None => Event(result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).ok()?),
        };
        // SAFETY: a live event of the current context, on a stream the cache was told outlives
        // its blocks (`lasting`).
        match unsafe { result::event::record(event.0, stream as sys::CUstream) } {
            Ok(()) => Some(event),
            Err(_) => {
                self.spare.push(event);
                None
            }
        }
    }

    fn passed(&mut self, fence: &Event) -> bool {
        // SAFETY: a live, recorded event; the query does not block.
        unsafe { result::event::query(fence.0) }.is_ok()
    }

    fn recycle(&mut self, fence: Event) {
        self.spare.push(fence);
    }
}

/// By default the cache of a device holds at most this share of its memory.
const DEFAULT_LIMIT_SHARE: usize = 2;

/// amso's default allocator. `devices` first, at the start of a cache line: every lend and
/// give-back reads it, and the fields after it are rarely written (`switches.rs` says why lines
/// count).
#[repr(C, align(64))]
pub(crate) struct PoolAllocator {
    devices: OnceLock<Vec<Mutex<DeviceCache>>>,
    /// The cache bound in bytes (0: half of each device's memory).
    limit: AtomicUsize,
    release_threshold: AtomicU64,
    configured: Mutex<Vec<DeviceId>>,
}

/// What the pool reports for one device.
#[derive(Debug, Default, Clone)]
pub(crate) struct PoolReport {
    pub(crate) counts: Counts,
    pub(crate) shelves: Vec<Shelved>,
}

impl PoolAllocator {
    /// The cache of `device_id`, locked; None for a device the driver does not list. Every
    /// allocation and free comes here: once the cache is bounded, a read and the lock.
    #[inline(always)]
    fn device(&self, device_id: DeviceId) -> Option<MutexGuard<'_, DeviceCache>> {
        let devices = self.devices.get().map_or_else(|| self.made_devices(), Vec::as_slice);
        let slot = devices.get(device_id.index())?;
        let guard = slot.lock().unwrap_or_else(|e| e.into_inner());
        if guard.bounded {
            return Some(guard);
        }
        Some(self.bound(device_id, slot, guard))
    }

    /// The caches, made at the first request.
    #[cold]
    fn made_devices(&self) -> &[Mutex<DeviceCache>] {
        self.devices.get_or_init(|| {
            let count = super::driver::device_count().unwrap_or(0);
            (0..count)
                .map(|_| {
                    let cache = BlockCache::new(usize::MAX);
                    Mutex::new(DeviceCache {
                        cache,
                        spare_events: Vec::new(),
                        bounded: false,
                        ledger: Ledger::default(),
                    })
                })
                .collect()
        })
    }

    /// Bound the cache of `device_id` (its lock released meanwhile: the device's memory is asked
    /// of the driver, with the GIL released, at most once, before); the lock taken again.
    #[cold]
    fn bound<'a>(
        &self,
        device_id: DeviceId,
        slot: &'a Mutex<DeviceCache>,
        guard: MutexGuard<'a, DeviceCache>,
    ) -> MutexGuard<'a, DeviceCache> {
        drop(guard);
        let limit = self.limit_for(device_id);
        let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
        guard.cache.set_limit(limit);
        guard.bounded = true;
        guard
    }

    fn limit_for(&self, device_id: DeviceId) -> usize {
        match self.limit.load(Ordering::Relaxed) {
            0 => super::alloc::capacity(device_id) / DEFAULT_LIMIT_SHARE,
            bytes => bytes,
        }
    }

    /// Bound every device's cache to `bytes` (0: half of each device's memory); the previous
    /// setting.
    pub(crate) fn set_limit(&self, bytes: usize) -> usize {
        let previous = self.limit.swap(bytes, Ordering::Relaxed);
        for device in 0..super::driver::device_count().unwrap_or(0) {
            let device_id = DeviceId::from_driver(device);
            let limit = self.limit_for(device_id);
            if let Some(mut cache) = self.device(device_id) {
                cache.cache.set_limit(limit);
            }
        }
        previous
    }

    /// Bytes the driver's pool keeps reserved after frees (default: all of them, u64::MAX).
    pub(crate) fn set_release_threshold(&self, bytes: u64) {
        self.release_threshold.store(bytes, Ordering::Relaxed);
        // `configure` holds this lock across driver calls: taken with the GIL released.
        crate::gil::released(|| self.configured.lock().unwrap_or_else(|e| e.into_inner()).clear());
    }

    fn configure(&self, device_id: DeviceId) -> Result<()> {
        let mut configured = self.configured.lock().unwrap_or_else(|e| e.into_inner());
        if configured.contains(&device_id) {
            return Ok(());
        }
        let mut threshold = match self.release_threshold.load(Ordering::Relaxed) {
            0 => u64::MAX,
            bytes => bytes,
        };
        // SAFETY: the device's default pool; the attribute is a u64.
        unsafe {
            result::mem_pool::set_attribute(
                default_mem_pool(device_id)?,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
            .map_err(cuda_error("cuMemPoolSetAttribute"))?;
        }
        configured.push(device_id);
        Ok(())
    }

    /// The driver's side of a request the stream's own blocks could not serve: another
    /// stream's ready block, else the driver, else (out of memory) the driver again after the
    /// cache went back to it. The GIL is released.
    fn allocate_elsewhere(
        &self,
        device_id: DeviceId,
        (size, bytes): (usize, usize),
        stream: StreamHandle,
        client: Client,
    ) -> Result<u64> {
        // Never on a capturing stream (`DeviceMemory::alloc_for`); relaxed so that neither the
        // pool's configuration nor the allocation invalidates a capture elsewhere.
        let _relaxed = capture::Relaxed::enter();
        let _ctx = Current::enter(device_id)?;
        {
            let Some(mut device) = self.device(device_id) else { return Err(not_a_device(device_id)) };
            let DeviceCache { cache, spare_events, ledger, .. } = &mut *device;
            if let Some(ptr) = cache.take_other(size, stream.raw() as u64, &mut DriverFences { spare: spare_events }) {
                ledger.allocated(client, bytes);
                return Ok(ptr);
            }
            cache.count_miss();
        }
        self.configure(device_id)?;
        let ptr = match self.driver_allocate(size, stream) {
            Err(Error::OutOfMemory { .. }) => {
                self.release_cached(device_id)?;
                self.driver_allocate(size, stream)?
            }
            other => other?,
        };
        if let Some(mut device) = self.device(device_id) {
            device.cache.add_segment(ptr, size);
            device.ledger.allocated(client, bytes);
        }
        Ok(ptr)
    }

    fn driver_allocate(&self, size: usize, stream: StreamHandle) -> Result<u64> {
        // SAFETY: the device's context is current; the stream was checked by the caller.
        unsafe { result::malloc_async(stream.raw(), size) }
            .map_err(|e| map_error("cuMemAllocFromPoolAsync", e, size, "device"))
    }

    /// Give every cached block of `device_id` back to the driver and trim the driver's pool:
    /// after a device-wide synchronisation, so every stream's work on them (destroyed streams
    /// included) has finished. The GIL is released and the context current.
    fn release_cached(&self, device_id: DeviceId) -> Result<()> {
        // Blocks freed while the device synchronises (another thread's) may still be in use:
        // only those freed before it began go back.
        let synchronised = self.device(device_id).map_or(0, |device| device.cache.serial());
        result::ctx::synchronize().map_err(cuda_error("cuCtxSynchronize"))?;
        let returned = match self.device(device_id) {
            Some(mut device) => {
                let DeviceCache { cache, spare_events, .. } = &mut *device;
                cache.drain(synchronised, &mut DriverFences { spare: spare_events })
            }
            None => Vec::new(),
        };
        for ptr in returned {
            // SAFETY: a block of the driver's pool, freed once; no work uses it any more.
            let _ = unsafe { result::free_async(ptr, StreamHandle::LEGACY.raw()) };
        }
        // SAFETY: the legacy default stream of the current context.
        unsafe { result::stream::synchronize(StreamHandle::LEGACY.raw()) }
            .map_err(cuda_error("cuStreamSynchronize"))?;
        // SAFETY: the device's default pool.
        unsafe { result::mem_pool::trim_to(default_mem_pool(device_id)?, 0) }.map_err(cuda_error("cuMemPoolTrimTo"))
    }

    /// `amso.empty_cache()`: give every device's cached blocks back to the driver.
    pub(crate) fn empty_cache(&self) -> Result<()> {
        crate::gil::released(|| {
            let _relaxed = capture::Relaxed::enter();
            for device in 0..super::driver::device_count().unwrap_or(0) {
                let device_id = DeviceId::from_driver(device);
                let _ctx = Current::enter(device_id)?;
                self.release_cached(device_id)?;
            }
            Ok(())
        })
    }

    /// What the pool holds and counted on `device_id`.
    pub(crate) fn report(&self, device_id: DeviceId) -> PoolReport {
        self.device(device_id).map_or_else(PoolReport::default, |device| PoolReport {
            counts: device.cache.counts(),
            shelves: device.cache.report(),
        })
    }

    /// Return a block the cache cannot hold to the driver: ordered on its stream when that
    /// stream outlives it, else after the device's work (the deferred queue's synchronise).
    fn return_to_driver(&self, device_id: DeviceId, returned: Returned) {
        if returned.lasting {
            let _ = crate::gil::released(|| -> Result<()> {
                let _relaxed = capture::Relaxed::enter();
                let _ctx = Current::enter(device_id)?;
                // SAFETY: a block of the driver's pool, freed once, after the work on a stream
                // that is alive.
                let _ = unsafe { result::free_async(returned.ptr, returned.stream as sys::CUstream) };
                Ok(())
            });
        } else {
            super::alloc::release_after_device(device_id, returned.ptr);
        }
    }
}

/// The device's default memory pool.
fn default_mem_pool(device_id: DeviceId) -> Result<sys::CUmemoryPool> {
    let device = result::device::get(device_id.ordinal()).map_err(cuda_error("cuDeviceGet"))?;
    // SAFETY: a device from `device::get`.
    unsafe { result::device::get_default_mem_pool(device) }.map_err(cuda_error("cuDeviceGetDefaultMemPool"))
}

impl PoolAllocator {
    /// `bytes` (> 0) on `device_id` for `client`, usable in order on `stream`, counted under the
    /// device's lock.
    pub(crate) fn allocate_for(
        &self,
        device_id: DeviceId,
        bytes: usize,
        stream: StreamHandle,
        client: Client,
    ) -> Result<u64> {
        let size = block_size(bytes)?;
        if let Some(ptr) = self.device(device_id).and_then(|mut device| device.take_own(size, bytes, stream, client)) {
            return Ok(ptr);
        }
        crate::gil::released(|| {
            // A block the device waiter is about to return (a free that waits for the device) is
            // taken rather than a new one from the driver.
            if super::alloc::settle_device_waiter() {
                let own = self.device(device_id).and_then(|mut device| device.take_own(size, bytes, stream, client));
                if let Some(ptr) = own {
                    return Ok(ptr);
                }
            }
            self.allocate_elsewhere(device_id, (size, bytes), stream, client)
        })
    }

    /// Return `ptr` (of `bytes`, of `client`) after the work queued on `stream`, which outlives
    /// the memory if `lasting` (`DeviceAllocator::free_on`).
    pub(crate) fn free_for(
        &self,
        device_id: DeviceId,
        (ptr, bytes): (u64, usize),
        stream: StreamHandle,
        lasting: bool,
        client: Client,
    ) {
        let Some(size) = block_cache::block_size(bytes) else { return };
        let returned = match self.device(device_id) {
            Some(mut device) => {
                device.ledger.freed(client, bytes);
                device.cache.give(ptr, size, stream.raw() as u64, || lasting)
            }
            None => return,
        };
        if let Some(returned) = returned {
            self.return_to_driver(device_id, returned);
        }
    }

    /// Lend `bytes` to `client` from `stream`'s own blocks, taking the device's lock once: the
    /// address and the loan's serial; None when the stream has no block of the size (nothing
    /// was taken), an error when the block is lent already.
    #[inline(always)]
    pub(crate) fn lend_own(
        &self,
        device_id: DeviceId,
        bytes: usize,
        stream: StreamHandle,
        client: Client,
    ) -> Option<Result<(u64, u64)>> {
        let size = block_cache::block_size(bytes)?;
        let mut device = self.device(device_id)?;
        let ptr = device.take_own(size, bytes, stream, client)?;
        Some(match device.ledger.lend(ptr, bytes, client, stream.stream()) {
            Some(serial) => Ok((ptr, serial)),
            None => {
                // An address the ledger holds as lent (a bug): the block stays with its loan,
                // and this request is not counted.
                device.ledger.freed(client, bytes);
                Err(lent_twice(ptr))
            }
        })
    }

    /// Record the loan of `ptr`, memory of this pool allocated for `client` on `stream`: its
    /// serial.
    pub(crate) fn record_loan(
        &self,
        device_id: DeviceId,
        (ptr, bytes): (u64, usize),
        stream: StreamHandle,
        client: Client,
    ) -> Result<u64> {
        let mut device = self.device(device_id).ok_or_else(|| not_a_device(device_id))?;
        device.ledger.lend(ptr, bytes, client, stream.stream()).ok_or_else(|| lent_twice(ptr))
    }

    /// Take back the loan of `ptr` on `device_id`, taking the device's lock once; None when
    /// this pool did not lend it there. `decide` sees the loan: an error refuses the give-back
    /// (the loan stays), `Some(stream)` returns the block to the cache at once, after the work
    /// queued on that stream, and `None` hands the loan back, still counted in use, for the
    /// deferred frees (`pool::release` with `Grant::own_pool`).
    #[inline(always)]
    pub(crate) fn reclaim<E>(
        &self,
        device_id: DeviceId,
        ptr: u64,
        decide: impl FnOnce(&Lent) -> std::result::Result<Option<StreamHandle>, E>,
    ) -> Option<std::result::Result<Option<Lent>, E>> {
        let mut device = self.device(device_id)?;
        let (lent, decided) = match device.ledger.take_if(ptr, decide)? {
            Ok(taken) => taken,
            Err(refusal) => return Some(Err(refusal)),
        };
        let Some(stream) = decided else { return Some(Ok(Some(lent))) };
        let returned = block_cache::block_size(lent.bytes).and_then(|size| {
            device.ledger.freed(lent.client, lent.bytes);
            device.cache.give(ptr, size, stream.raw() as u64, || super::alloc::lasting(lent.client, stream))
        });
        drop(device);
        if let Some(returned) = returned {
            self.return_to_driver(device_id, returned);
        }
        Some(Ok(None))
    }

    /// Take every loan of `client` on `device_id` out of the ledger (still counted in use).
    pub(crate) fn take_loans(&self, device_id: DeviceId, client: Client) -> Vec<(u64, Lent)> {
        self.device(device_id).map_or_else(Vec::new, |mut device| device.ledger.take_client(client))
    }

    /// The device on which this pool lent `ptr`, if any.
    pub(crate) fn lent_on(&self, ptr: u64) -> Option<DeviceId> {
        self.used_devices().find(|(_, device)| device.ledger.holds(ptr)).map(|(device_id, _)| device_id)
    }

    /// Bytes in use and allocations served by client, over every device.
    pub(crate) fn client_counts(&self) -> ([usize; CLIENTS.len()], [u64; CLIENTS.len()]) {
        let (mut in_use, mut allocations) = ([0; CLIENTS.len()], [0; CLIENTS.len()]);
        for (_, device) in self.used_devices() {
            let (bytes, count) = device.ledger.counts();
            for client in 0..CLIENTS.len() {
                in_use[client] += bytes[client];
                allocations[client] += count[client];
            }
        }
        (in_use, allocations)
    }

    /// The caches of the devices this pool has served, each locked in turn: a device it never
    /// served is not touched (`device` would bound its cache, which asks the driver, and so
    /// makes its context).
    fn used_devices(&self) -> impl Iterator<Item = (DeviceId, MutexGuard<'_, DeviceCache>)> {
        let slots = self.devices.get().map_or(&[][..], Vec::as_slice);
        slots.iter().enumerate().filter_map(|(index, slot)| {
            let device = slot.lock().unwrap_or_else(|e| e.into_inner());
            device.bounded.then(|| (DeviceId::from_driver(index as i32), device))
        })
    }
}

impl DeviceCache {
    /// A block of `size` (for `bytes`) from `stream`'s own blocks, counted for `client`.
    #[inline(always)]
    fn take_own(&mut self, size: usize, bytes: usize, stream: StreamHandle, client: Client) -> Option<u64> {
        let ptr = self.cache.take_own(size, stream.raw() as u64)?;
        self.ledger.allocated(client, bytes);
        Some(ptr)
    }
}

/// The block size of a request of `bytes`, or out of memory.
fn block_size(bytes: usize) -> Result<usize> {
    block_cache::block_size(bytes).ok_or(Error::OutOfMemory { bytes, what: "device" })
}

/// The error for a loan of an address still lent.
pub(crate) fn lent_twice(ptr: u64) -> Error {
    // The pool handed out an address still lent: a loan was freed behind the ledger's back.
    Error::Cuda {
        call: "amso's pool",
        code: None,
        message: format!("it lent address 0x{ptr:x} twice; please report it"),
    }
}

fn not_a_device(device_id: DeviceId) -> Error {
    Error::InvalidArgument(format!("device {device_id} is not one of this machine's"))
}

/// The pool as a `DeviceAllocator` (its name and cached bytes for `memory_info`): allocations
/// and frees through it are counted as amso's own; amso's paths call `allocate_for` and
/// `free_for`, which name the client.
impl DeviceAllocator for PoolAllocator {
    fn name(&self) -> String {
        "amso pool (cache + cuMemAllocAsync)".into()
    }

    fn allocate(&self, device_id: DeviceId, bytes: usize, stream: StreamHandle) -> Result<u64> {
        self.allocate_for(device_id, bytes, stream, Client::Amso)
    }

    fn free(&self, device_id: DeviceId, ptr: u64, bytes: usize, stream: StreamHandle) {
        self.free_for(device_id, (ptr, bytes), stream, false, Client::Amso);
    }

    fn free_on(&self, device_id: DeviceId, ptr: u64, bytes: usize, stream: StreamHandle, lasting: bool) {
        self.free_for(device_id, (ptr, bytes), stream, lasting, Client::Amso);
    }

    fn cached_bytes(&self, device_id: DeviceId) -> usize {
        self.device(device_id).map_or(0, |device| device.cache.bytes())
    }
}

/// amso's pool, for the process.
#[inline]
pub(crate) fn default_pool() -> &'static PoolAllocator {
    static POOL: PoolAllocator = PoolAllocator {
        devices: OnceLock::new(),
        limit: AtomicUsize::new(0),
        release_threshold: AtomicU64::new(0),
        configured: Mutex::new(Vec::new()),
    };
    &POOL
}

#[cfg(test)]
#[path = "pool_allocator_tests.rs"]
mod locked_cost;
