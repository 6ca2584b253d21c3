//! What the process's pool reports (`amso.memory_info`), as it crosses the pool's C table
//! (`pool.rs`), and this copy's own figures.

use std::ffi::CStr;
use std::sync::atomic::Ordering;

use super::alloc::{current, default_pool, waiting_for_device, DEFERRED, STATS};
use super::deferred::Limits;
use super::request::CLIENTS;
use crate::device::DeviceId;

/// What the pool reports (`amso.memory_info`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolStats {
    /// Bytes of live allocations, by client.
    pub(crate) in_use: [usize; CLIENTS.len()],
    /// Allocations served, by client.
    pub(crate) allocations: [u64; CLIENTS.len()],
    /// Bytes the current allocator holds cached on the device.
    pub(crate) cached: usize,
    /// Frees queued, and their bytes.
    pub(crate) pending: usize,
    pub(crate) pending_bytes: usize,
    /// amso's pool: allocations served from its cache (of them, from another stream's blocks
    /// after an event), and from the driver.
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    pub(crate) cross_stream_hits: u64,
    /// amso's pool: large blocks split, and blocks handed back because the cache was full.
    pub(crate) splits: u64,
    pub(crate) evictions: u64,
    /// The deferred-free limits.
    pub(crate) limits: Limits,
    /// The current allocator's name, NUL-terminated.
    pub(crate) allocator: [u8; 64],
}

impl PoolStats {
    /// Nothing counted yet (the table fills it in).
    pub(crate) fn empty() -> PoolStats {
        PoolStats {
            in_use: [0; CLIENTS.len()],
            allocations: [0; CLIENTS.len()],
            cached: 0,
            pending: 0,
            pending_bytes: 0,
            hits: 0,
            misses: 0,
            cross_stream_hits: 0,
            splits: 0,
            evictions: 0,
            limits: Limits::default(),
            allocator: [0; 64],
        }
    }

    /// This copy's pool's statistics for `device_id`.
    pub(crate) fn of_this_copy(device_id: DeviceId) -> PoolStats {
        let (deferred, deferred_bytes) = DEFERRED.pending();
        let (waiting, waiting_bytes) = waiting_for_device();
        let (pending, pending_bytes) = (deferred + waiting, deferred_bytes + waiting_bytes);
        let counts = default_pool().report(device_id).counts;
        let allocator = current();
        let mut name = [0u8; 64];
        let text = allocator.allocator().name();
        let n = text.len().min(name.len() - 1);
        name[..n].copy_from_slice(&text.as_bytes()[..n]);
        let (pool_in_use, pool_allocations) = default_pool().client_counts();
        PoolStats {
            in_use: std::array::from_fn(|i| STATS.in_use[i].load(Ordering::Relaxed) + pool_in_use[i]),
            allocations: std::array::from_fn(|i| STATS.allocations[i].load(Ordering::Relaxed) + pool_allocations[i]),
            cached: allocator.allocator().cached_bytes(device_id),
            pending,
            pending_bytes,
            hits: counts.hits,
            misses: counts.misses,
            cross_stream_hits: counts.cross_stream_hits,
            splits: counts.splits,
            evictions: counts.evictions,
            limits: DEFERRED.limits(),
            allocator: name,
        }
    }

    /// The current allocator's name.
    #[cfg_attr(not(feature = "python"), allow(dead_code))] // `memory_info`
    pub(crate) fn allocator_name(&self) -> String {
        CStr::from_bytes_until_nul(&self.allocator).map_or_else(|_| "?".into(), |s| s.to_string_lossy().into_owned())
    }
}
