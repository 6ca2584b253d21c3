//! Deferred deallocation, as Numba does it: frees are queued and flushed together when the
//! queue holds `count` frees or `fraction` of the device's memory, or when an allocation
//! fails for lack of memory; `defer_cleanup` holds all flushing until its block ends, so a
//! chain of asynchronous work is never broken by a free. A CUDA graph capture in progress
//! holds them too (the caller says so: `capture`). The policy is generic over what a pending
//! free is, so it is tested without a GPU.
// The knobs here (allocators, deferral limits) are driven from Python (`amso.set_allocator`,
// `amso.defer_cleanup`, ...); a Rust-only build keeps them for the pool's own use.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Flush limits (`#[repr(C)]`: they cross the process's pool table, `pool.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits {
    /// Flush when this many frees are pending (Numba's default: 10).
    pub count: usize,
    /// Flush when pending frees hold this share of the device's memory (default 0.2).
    pub fraction: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { count: 10, fraction: 0.2 }
    }
}

/// A queue of pending frees of type `F` with its policy.
pub(crate) struct Deferred<F> {
    state: Mutex<State<F>>,
    /// `State::holds`, readable without the lock (`holding`, on every free's path; the process's
    /// queue keeps it among the pool's switches, `switches.rs`).
    holds: &'static AtomicUsize,
}

struct State<F> {
    pending: Vec<(F, usize)>,
    pending_bytes: usize,
    limits: Limits,
    holds: usize,
}

impl<F> Deferred<F> {
    /// An empty queue with default limits, counting its holds in `holds` (zero; a counter of its
    /// own: the queue stores its count there).
    pub(crate) const fn new(holds: &'static AtomicUsize) -> Self {
        Deferred {
            state: Mutex::new(State {
                pending: Vec::new(),
                pending_bytes: 0,
                limits: Limits { count: 10, fraction: 0.2 },
                holds: 0,
            }),
            holds,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<F>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `free` (of `bytes`); returns the frees to run now, if a limit was reached and
    /// neither a `defer_cleanup` block nor a `capture` in progress holds them. `capacity` is
    /// the device's memory in bytes.
    pub(crate) fn push(&self, free: F, bytes: usize, capacity: usize, capture: bool) -> Vec<F> {
        let mut state = self.lock();
        state.pending.push((free, bytes));
        state.pending_bytes += bytes;
        Self::due(&mut state, capacity, capture)
    }

    fn due(state: &mut State<F>, capacity: usize, capture: bool) -> Vec<F> {
        let over_count = state.pending.len() >= state.limits.count;
        let over_size = state.pending_bytes as f64 >= state.limits.fraction * capacity as f64;
        if state.holds == 0 && !capture && (over_count || over_size) {
            Self::drain(state)
        } else {
            Vec::new()
        }
    }

    fn drain(state: &mut State<F>) -> Vec<F> {
        state.pending_bytes = 0;
        state.pending.drain(..).map(|(f, _)| f).collect()
    }

    /// Every pending free, to run now (after an allocation failed for lack of memory), unless a
    /// `defer_cleanup` block or a `capture` in progress holds them.
    pub(crate) fn take_all(&self, capture: bool) -> Vec<F> {
        let mut state = self.lock();
        if state.holds == 0 && !capture {
            Self::drain(&mut state)
        } else {
            Vec::new()
        }
    }

    /// Whether a `defer_cleanup` block holds the frees.
    pub(crate) fn holding(&self) -> bool {
        self.holds.load(Ordering::Acquire) > 0
    }

    /// Start holding (a `defer_cleanup` block begins).
    pub(crate) fn hold(&self) {
        let mut state = self.lock();
        state.holds += 1;
        self.holds.store(state.holds, Ordering::Release);
    }

    /// Stop holding; returns the frees due once the last hold ends (and no `capture` holds them).
    pub(crate) fn release(&self, capacity: usize, capture: bool) -> Vec<F> {
        let mut state = self.lock();
        state.holds = state.holds.saturating_sub(1);
        self.holds.store(state.holds, Ordering::Release);
        Self::due(&mut state, capacity, capture)
    }

    /// Set the limits.
    pub(crate) fn set_limits(&self, limits: Limits) {
        self.lock().limits = limits;
    }

    /// The limits.
    pub(crate) fn limits(&self) -> Limits {
        self.lock().limits
    }

    /// Pending frees and their bytes.
    pub(crate) fn pending(&self) -> (usize, usize) {
        let state = self.lock();
        (state.pending.len(), state.pending_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_by_count() {
        let queue = Deferred::new(Box::leak(Box::default()));
        for i in 0..9 {
            assert!(queue.push(i, 1, 1 << 30, false).is_empty());
        }
        assert_eq!(queue.push(9, 1, 1 << 30, false), (0..10).collect::<Vec<_>>());
        assert_eq!(queue.pending(), (0, 0));
    }

    #[test]
    fn flushes_by_share_of_memory() {
        let queue = Deferred::new(Box::leak(Box::default()));
        assert!(queue.push("a", 100, 1000, false).is_empty());
        assert_eq!(queue.push("b", 100, 1000, false), vec!["a", "b"], "200 bytes is 20% of 1000");
        queue.set_limits(Limits { count: 100, fraction: 0.5 });
        assert!(queue.push("c", 400, 1000, false).is_empty());
        assert_eq!(queue.push("d", 100, 1000, false), vec!["c", "d"]);
    }

    #[test]
    fn defer_cleanup_holds_everything_until_the_outermost_block_ends() {
        let queue = Deferred::new(Box::leak(Box::default()));
        queue.hold();
        queue.hold();
        for i in 0..25 {
            assert!(queue.push(i, 1, 1000, false).is_empty());
        }
        assert!(queue.take_all(false).is_empty(), "held even under memory pressure");
        assert!(queue.release(1000, false).is_empty(), "the outer block still holds");
        assert_eq!(queue.release(1000, false).len(), 25);
    }

    #[test]
    fn a_capture_in_progress_holds_every_flush_until_it_ends() {
        let queue = Deferred::new(Box::leak(Box::default()));
        for i in 0..12 {
            assert!(queue.push(i, 1, 1 << 30, true).is_empty(), "over the count limit, but capturing");
        }
        assert!(queue.take_all(true).is_empty(), "held even under memory pressure");
        assert_eq!(queue.push(12, 1, 1 << 30, false).len(), 13, "the first push after the capture flushes");
    }

    #[test]
    fn memory_pressure_flushes_below_the_limits() {
        let queue = Deferred::new(Box::leak(Box::default()));
        queue.push(1, 1, 1 << 30, false);
        queue.push(2, 1, 1 << 30, false);
        assert_eq!(queue.take_all(false), vec![1, 2]);
        assert!(queue.take_all(false).is_empty());
    }
}
