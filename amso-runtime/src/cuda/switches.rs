//! What every lend and give-back of the pool reads before it takes its device's lock, side by
//! side in one cache line. A plug-in's allocation comes between its library's own work, which
//! evicts amso's data: each line read is a miss (`benchmarks/pool_instructions.py --cold`
//! counts them), so the switches that the common path asks live together here, each owned and
//! written by the module its comment names.
// The plug-ins that read most of them are driven from Python; a Rust-only build keeps them.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};

/// The switches (one cache line).
#[repr(C, align(64))]
pub(crate) struct Switches {
    /// The loaded driver's device count; -1 until the driver is loaded (`driver.rs`).
    pub(crate) device_count: AtomicI32,
    /// Whether an allocator is plugged into amso (`alloc.rs`).
    pub(crate) plugged: AtomicBool,
    /// The process's pool table when it is another copy's, else null (`pool.rs`, whose
    /// `PoolTable` it is: this file imports nothing of amso's, so that the driver's floor may
    /// read it).
    pub(crate) home: AtomicPtr<()>,
    /// `defer_cleanup` blocks holding the frees (`deferred.rs`, for `alloc::DEFERRED`).
    pub(crate) holds: AtomicUsize,
    /// Captures seen that may still be in progress (`capture.rs`): this copy's, and, when its
    /// pool is the process's, those of every copy that joined it, each of which adds its own
    /// here too (through `joined_watching`, from the pool table, `pool.rs`).
    pub(crate) watching: AtomicUsize,
    /// The `watching` of the copy whose pool this copy joined; null for its own pool.
    pub(crate) joined_watching: AtomicPtr<AtomicUsize>,
}

pub(crate) static SWITCHES: Switches = Switches {
    device_count: AtomicI32::new(-1),
    plugged: AtomicBool::new(false),
    home: AtomicPtr::new(std::ptr::null_mut()),
    holds: AtomicUsize::new(0),
    watching: AtomicUsize::new(0),
    joined_watching: AtomicPtr::new(std::ptr::null_mut()),
};

impl Switches {
    /// Whether this copy's own pool serves new device memory of a loaded driver: no allocator is
    /// plugged in and no other copy's pool was joined.
    #[inline]
    pub(crate) fn own_pool_serves(&self) -> bool {
        !self.plugged.load(Ordering::Acquire) && !self.joined()
    }

    /// Whether `device` (a raw id) is a device of the loaded driver: false before the driver is
    /// loaded, or for an id it does not list (`DeviceId::new` says why).
    #[inline]
    pub(crate) fn lists(&self, device: i32) -> bool {
        (0..self.device_count.load(Ordering::Acquire)).contains(&device)
    }

    /// Whether this copy joined another copy's pool (its own pool then lends nothing).
    #[inline]
    pub(crate) fn joined(&self) -> bool {
        !self.home.load(Ordering::Acquire).is_null()
    }

    /// Whether nothing holds the frees at all: no `defer_cleanup` block, and no capture counted
    /// in `watching` (of the process's pool: every copy's; of a copy that joined another's: its
    /// own). The common case, one line read; `alloc::frees_run_now` asks further when this says
    /// no.
    #[inline]
    pub(crate) fn frees_unheld(&self) -> bool {
        (self.holds.load(Ordering::Acquire) | self.watching.load(Ordering::Acquire)) == 0
    }

    /// Count a capture seen (`delta` 1) or found ended (`delta` -1) in `watching`, and in the
    /// joined pool's. Called under `capture.rs`'s sentinels' lock, as `join_watching` is.
    pub(crate) fn watch(&self, delta: isize) {
        let counters = [Some(&self.watching), self.joined_watching()];
        for counter in counters.into_iter().flatten() {
            if delta > 0 {
                counter.fetch_add(delta.unsigned_abs(), Ordering::AcqRel);
            } else {
                let before = counter.fetch_sub(delta.unsigned_abs(), Ordering::AcqRel);
                debug_assert!(before >= delta.unsigned_abs(), "a capture counted ended more often than seen");
            }
        }
    }

    /// Count the captures this copy saw so far (`seen`) in `home`, the `watching` of the pool it
    /// joins, and every later one there too. Called under `capture.rs`'s sentinels' lock, as
    /// `watch` is, so that no capture is counted in one and not the other.
    #[cfg(feature = "python")]
    pub(crate) fn join_watching(&self, home: &'static AtomicUsize, seen: usize) {
        home.fetch_add(seen, Ordering::AcqRel);
        self.joined_watching.store(std::ptr::from_ref(home).cast_mut(), Ordering::Release);
    }

    fn joined_watching(&self) -> Option<&'static AtomicUsize> {
        // SAFETY: null, or the `watching` of another copy's switches (a static of a copy that
        // stays loaded for the process), set once by `pool::join`.
        unsafe { self.joined_watching.load(Ordering::Acquire).as_ref() }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_switches_fill_one_cache_line() {
        assert_eq!(std::mem::size_of::<super::Switches>(), 64);
        assert_eq!(std::mem::align_of::<super::Switches>(), 64);
    }
}
