//! What an export holds of the memory it describes (`Owner`), and the hub that in-place host
//! exports of one Python array share: one `Arc` of the buffer for all of them, counted without
//! a locked instruction where the GIL serialises the counting, and with one where it does not.
//!
//! This is biased reference counting (Choi, Shull and Torrellas, PACT 2018) with the GIL as the
//! owning side. An `Arc` clone and drop per export are two locked instructions, several ns
//! each: the whole difference between a host `a.__dlpack__()` of amso and of NumPy (which
//! holds the array object and takes the GIL in its deleter; amso's deleters never take it).
//!
//! - The array holds one reference to its current hub. `acquire` counts an export against it
//!   in `local`, read and written only with the GIL held (plain loads and stores).
//! - A capsule destroyed unconsumed is destroyed with the GIL held, so its export is released
//!   the same way (`release_attached`): a loop of exports and drops runs no locked instruction.
//! - Any other release (a consumer's deleter, on any thread, with or without the GIL) subtracts
//!   one from `shared` atomically: below zero while the array still holds the hub.
//! - When the array lets the hub go (`merge`: when it is freed, or before Rust code reads its
//!   `MemArray`, whose `export_count` counts the buffer's references), the GIL side adds what it
//!   counted to `shared`, and each export left takes a reference to the buffer of its own; from
//!   then on every release is atomic. Whoever brings `shared` to zero frees the hub.
//! - A core keeps its host buffer for life, so a hub describes the array's buffer as long as the
//!   array holds it, across moves and writes.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::host::HostBuffer;

/// What an export holds of the memory it describes, until the consumer calls the deleter.
pub(crate) enum Owner {
    /// A reference of its own.
    Shared(Arc<dyn Any + Send + Sync>),
    /// One reference counted in an array's hub.
    Hub(HubRef),
}

impl Owner {
    /// A host export's own reference to `buffer`.
    pub(crate) fn own(buffer: &Arc<HostBuffer>) -> Owner {
        Owner::Shared(Arc::clone(buffer) as Arc<dyn Any + Send + Sync>)
    }
}

impl<T: Any + Send + Sync> From<Arc<T>> for Owner {
    fn from(owner: Arc<T>) -> Owner {
        Owner::Shared(owner)
    }
}

impl From<Arc<dyn Any + Send + Sync>> for Owner {
    fn from(owner: Arc<dyn Any + Send + Sync>) -> Owner {
        Owner::Shared(owner)
    }
}

impl From<Owner> for Arc<dyn Any + Send + Sync> {
    /// The owner as one `Arc` (what a handover to another framework keeps).
    fn from(owner: Owner) -> Self {
        match owner {
            Owner::Shared(owner) => owner,
            Owner::Hub(hub) => Arc::new(hub),
        }
    }
}

/// The shared owner of one array's in-place host exports (module docs). Freed through the
/// pointer `new` returns, by whoever brings the count to zero.
pub(crate) struct ExportHub {
    /// The buffer the exports describe: one reference while the array holds the hub; after
    /// the merge, one for each export left (as if each had cloned it).
    buffer: Arc<HostBuffer>,
    /// References counted on the GIL side (the array's own, and each `acquire`'s not yet
    /// released there); touched only with the GIL held, and never after `merged`.
    local: AtomicUsize,
    /// Whether the array let the hub go; written and read with the GIL held.
    merged: AtomicBool,
    /// Releases elsewhere (negative) until the merge; after it, the exports left.
    shared: AtomicIsize,
    /// A spare export block (`dlpack::BLOCK`), or NULL: what the last export released on the
    /// GIL side gave back, for the next one (no allocation, no thread-local lookup); touched
    /// with the GIL held, or by whoever frees the hub.
    spare: AtomicPtr<u8>,
}

impl Drop for ExportHub {
    fn drop(&mut self) {
        if let Some(block) = NonNull::new(*self.spare.get_mut()) {
            super::give_block(block.as_ptr());
        }
    }
}

/// One export's reference to a hub, released atomically when dropped (from any thread), with
/// the hub's spare block if it had one, until the export takes it (`take_block`).
pub(crate) struct HubRef {
    hub: NonNull<ExportHub>,
    block: Option<NonNull<u8>>,
}

// SAFETY: a reference to a hub whose atomic side may be released from any thread, and whose
// GIL side is only reached through the `unsafe` functions that require the GIL.
unsafe impl Send for HubRef {}
// SAFETY: as above; a shared `HubRef` exposes nothing.
unsafe impl Sync for HubRef {}

impl ExportHub {
    /// A hub over `buffer`, holding the array's reference.
    pub(crate) fn new(buffer: Arc<HostBuffer>) -> NonNull<ExportHub> {
        let hub = ExportHub {
            buffer,
            local: AtomicUsize::new(1),
            merged: AtomicBool::new(false),
            shared: 0.into(),
            spare: AtomicPtr::new(std::ptr::null_mut()),
        };
        NonNull::from(Box::leak(Box::new(hub)))
    }

    /// Whether `hub` describes `buffer`.
    ///
    /// # Safety
    /// `hub` is an array's current hub (not merged), and the GIL is held.
    pub(crate) unsafe fn holds(hub: NonNull<ExportHub>, buffer: &Arc<HostBuffer>) -> bool {
        // SAFETY: the array's reference keeps the hub alive (the caller's contract).
        Arc::ptr_eq(&unsafe { hub.as_ref() }.buffer, buffer)
    }

    /// Count one export against `hub`, handing it the hub's spare block if there is one.
    ///
    /// # Safety
    /// `hub` is an array's current hub (not merged), and the GIL is held.
    #[inline]
    pub(crate) unsafe fn acquire(hub: NonNull<ExportHub>) -> HubRef {
        // SAFETY: alive while the array holds it; `local` and `spare` are the GIL's (the
        // caller's contract).
        let inner = unsafe { hub.as_ref() };
        inner.local.store(inner.local.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let block = NonNull::new(inner.spare.load(Ordering::Relaxed));
        inner.spare.store(std::ptr::null_mut(), Ordering::Relaxed);
        HubRef { hub, block }
    }

    /// The exports counted against `hub` and not yet released.
    ///
    /// # Safety
    /// `hub` is an array's current hub (not merged), and the GIL is held.
    pub(crate) unsafe fn outstanding(hub: NonNull<ExportHub>) -> usize {
        // SAFETY: alive while the array holds it; `local` is the GIL's (the caller's contract).
        let hub = unsafe { hub.as_ref() };
        let released_elsewhere = hub.shared.load(Ordering::Acquire);
        (hub.local.load(Ordering::Relaxed) - 1).saturating_add_signed(released_elsewhere)
    }

    /// The array lets `hub` go. Each export left then holds a reference to the buffer of its
    /// own, as a cloned `Arc` would (so the buffer's count is the array's plus its exports'),
    /// and every later release is atomic; the last one frees the hub.
    ///
    /// # Safety
    /// `hub` is an array's current hub, given up once here, and the GIL is held.
    pub(crate) unsafe fn merge(hub: NonNull<ExportHub>) {
        let (counted, buffer) = {
            // SAFETY: alive until `shared` below publishes the count; the GIL side's fields
            // are touched for the last time.
            let hub = unsafe { hub.as_ref() };
            hub.merged.store(true, Ordering::Relaxed);
            (hub.local.load(Ordering::Relaxed) - 1, Arc::as_ptr(&hub.buffer))
        };
        if counted == 0 {
            // SAFETY: no export was ever counted, so none can release it; from `Box::leak`.
            drop(unsafe { Box::from_raw(hub.as_ptr()) });
            return;
        }
        // One reference for each export counted, taken before the count is published (so
        // that a release right after it has one to give back); the hub's own is the first.
        for _ in 1..counted {
            // SAFETY: the hub's reference keeps the buffer alive.
            unsafe { Arc::increment_strong_count(buffer) };
        }
        // `shared` held minus the exports released elsewhere before now.
        // SAFETY: alive until `shared` reaches zero, which only this step or a later release does.
        let left = unsafe { hub.as_ref() }.shared.fetch_add(counted as isize, Ordering::AcqRel) + counted as isize;
        if left == 0 {
            // SAFETY: every export was released; from `Box::leak`. Its `Arc` is one of the
            // `counted` references; the rest are given back below.
            drop(unsafe { Box::from_raw(hub.as_ptr()) });
        }
        // The references of the exports released before the merge (the hub may be gone now).
        for _ in 0..(counted as isize - left.max(1)) {
            // SAFETY: one of the references taken above, each given back once. Releases after
            // the merge give back at most `left` of them, so the count stays above zero
            // until the last reference goes.
            unsafe { Arc::decrement_strong_count(buffer) };
        }
    }
}

impl HubRef {
    /// The spare block handed over by `acquire`, if any, for the export's tensor.
    pub(crate) fn take_block(&mut self) -> Option<NonNull<u8>> {
        self.block.take()
    }

    /// Release this reference on the GIL side, with `block` (the export's, its contents
    /// dropped) kept as the hub's spare if it has none: no locked instruction and no
    /// thread-local lookup unless the array let the hub go.
    ///
    /// # Safety
    /// The GIL is held, and `block` is NULL or a block of `dlpack::BLOCK`'s layout that the
    /// caller owns.
    #[inline]
    pub(crate) unsafe fn release_attached(mut self, block: Option<NonNull<u8>>) {
        let block = match (block, self.block.take()) {
            (Some(given), Some(unused)) => {
                super::give_block(unused.as_ptr());
                Some(given)
            }
            (given, unused) => given.or(unused),
        };
        // SAFETY: this reference keeps the hub alive; the GIL is held (the caller's contract).
        let hub = unsafe { self.hub.as_ref() };
        let merged = hub.merged.load(Ordering::Relaxed);
        if let Some(block) = block {
            match !merged && hub.spare.load(Ordering::Relaxed).is_null() {
                true => hub.spare.store(block.as_ptr(), Ordering::Relaxed),
                false => super::give_block(block.as_ptr()),
            }
        }
        if merged {
            return; // dropped here, as anywhere
        }
        // Never the last: the array still holds its own.
        hub.local.store(hub.local.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        std::mem::forget(self);
    }
}

impl Drop for HubRef {
    /// Release this reference from any thread: before the merge, one more release counted in
    /// `shared`; after it, this export's reference to the buffer given back, or, by the last
    /// export, the hub with its own.
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            super::give_block(block.as_ptr()); // (an export that failed before its tensor)
        }
        // SAFETY: this reference keeps the hub alive until the step below.
        let (shared, buffer) = unsafe {
            let hub = self.hub.as_ref();
            (&hub.shared as *const AtomicIsize, Arc::as_ptr(&hub.buffer))
        };
        // SAFETY: as above.
        let before = unsafe { &*shared }.fetch_sub(1, Ordering::AcqRel);
        if before == 1 {
            // SAFETY: the last reference; the hub came from `Box::leak` in `new`.
            drop(unsafe { Box::from_raw(self.hub.as_ptr()) });
        } else if before > 1 {
            // SAFETY: after the merge each export left holds a reference to the buffer.
            unsafe { Arc::decrement_strong_count(buffer) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer() -> Arc<HostBuffer> {
        Arc::new(HostBuffer::zeroed(64).unwrap())
    }

    /// The test thread stands for the GIL's holder: every `unsafe` call below is made on it.
    #[test]
    fn exports_released_on_the_gil_side_leave_the_buffer_to_the_array() {
        let array = buffer();
        let hub = ExportHub::new(Arc::clone(&array));
        // SAFETY: the array's current hub; this thread is the only GIL side.
        unsafe {
            let exports: Vec<HubRef> = (0..3).map(|_| ExportHub::acquire(hub)).collect();
            assert_eq!(Arc::strong_count(&array), 2, "one reference for the hub, whatever it counts");
            exports.into_iter().for_each(|export| export.release_attached(None));
            ExportHub::merge(hub);
        }
        assert_eq!(Arc::strong_count(&array), 1, "the hub and its count are gone");
    }

    #[test]
    fn after_the_merge_each_export_holds_the_buffer_and_the_last_frees_the_hub() {
        let array = buffer();
        let hub = ExportHub::new(Arc::clone(&array));
        // SAFETY: as above.
        let mut exports: Vec<HubRef> = unsafe { (0..4).map(|_| ExportHub::acquire(hub)).collect() };
        // One released elsewhere before the merge, one on the GIL side.
        drop(exports.pop());
        // SAFETY: as above.
        unsafe { exports.pop().unwrap().release_attached(None) };
        // SAFETY: as above; the array gives the hub up once.
        unsafe { ExportHub::merge(hub) };
        assert_eq!(Arc::strong_count(&array), 1 + 2, "the array's and one for each export left");
        // SAFETY: the GIL side, after the merge: an atomic release.
        unsafe { exports.pop().unwrap().release_attached(None) };
        assert_eq!(Arc::strong_count(&array), 2);
        drop(exports.pop());
        assert_eq!(Arc::strong_count(&array), 1);
    }

    #[test]
    fn exports_outlive_the_array_and_the_last_release_frees_the_buffer() {
        let array = buffer();
        let weak = Arc::downgrade(&array);
        let hub = ExportHub::new(array);
        // SAFETY: as above.
        let exports: Vec<HubRef> = unsafe { (0..2).map(|_| ExportHub::acquire(hub)).collect() };
        // SAFETY: the array gives the hub up (it is freed) and only the exports hold the buffer.
        unsafe { ExportHub::merge(hub) };
        assert_eq!(weak.strong_count(), 2);
        drop(exports);
        assert_eq!(weak.strong_count(), 0, "freed with the last export");
    }

    #[test]
    fn a_block_released_on_the_gil_side_is_the_next_exports_and_none_is_lost() {
        let array = buffer();
        let hub = ExportHub::new(Arc::clone(&array));
        // SAFETY: the GIL side, as above; blocks come from `take_block` and are given once.
        unsafe {
            let mut first = ExportHub::acquire(hub);
            assert!(first.take_block().is_none(), "a new hub has no spare");
            let block = NonNull::new(super::super::take_block()).unwrap();
            first.release_attached(Some(block));
            let mut second = ExportHub::acquire(hub);
            assert_eq!(second.take_block(), Some(block), "the spare goes to the next export");
            let third = ExportHub::acquire(hub); // the spare is taken: none for this one
            second.release_attached(Some(block)); // kept again
            let fourth = ExportHub::acquire(hub); // holds the spare, never takes it
            drop(fourth); // released elsewhere: its block is given back
            third.release_attached(NonNull::new(super::super::take_block())); // kept as the spare
            ExportHub::merge(hub); // no export left: the hub and its spare are freed
        }
        assert_eq!(Arc::strong_count(&array), 1);
    }

    #[test]
    fn releases_on_other_threads_race_the_merge_without_losing_a_count() {
        for round in 0..50 {
            let array = buffer();
            let hub = ExportHub::new(Arc::clone(&array));
            // SAFETY: as above.
            let exports: Vec<HubRef> = unsafe { (0..8).map(|_| ExportHub::acquire(hub)).collect() };
            let threads: Vec<_> = exports
                .into_iter()
                .map(|export| {
                    std::thread::spawn(move || {
                        std::thread::yield_now();
                        drop(export);
                    })
                })
                .collect();
            if round % 2 == 0 {
                std::thread::yield_now();
            }
            // SAFETY: the array gives the hub up once, on the GIL side, while the threads release.
            unsafe { ExportHub::merge(hub) };
            threads.into_iter().for_each(|thread| thread.join().unwrap());
            assert_eq!(Arc::strong_count(&array), 1, "round {round}");
        }
    }
}
