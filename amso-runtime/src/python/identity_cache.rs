//! Small caches keyed by a Python object's identity (and a tag), read without a lock on every
//! call: append-only slots that are never rewritten once published. Each key object is held
//! for the process, so its address is never reused by another object.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use pyo3::prelude::*;

/// Up to `SLOTS` entries of (object, tag) -> a word; lookups past a full cache miss.
pub(crate) struct IdentityCache<const SLOTS: usize> {
    objects: [AtomicUsize; SLOTS],
    tags: [AtomicUsize; SLOTS],
    values: [AtomicUsize; SLOTS],
    /// Slots filled; each is written before this count covers it.
    filled: AtomicUsize,
    /// Serialises the writers.
    append: Mutex<()>,
}

impl<const SLOTS: usize> IdentityCache<SLOTS> {
    pub(crate) const fn new() -> Self {
        IdentityCache {
            objects: [const { AtomicUsize::new(0) }; SLOTS],
            tags: [const { AtomicUsize::new(0) }; SLOTS],
            values: [const { AtomicUsize::new(0) }; SLOTS],
            filled: AtomicUsize::new(0),
            append: Mutex::new(()),
        }
    }

    /// The value stored for `object` (by address) and `tag`.
    #[inline]
    pub(crate) fn get(&self, object: &Bound<'_, PyAny>, tag: usize) -> Option<usize> {
        self.find(object.as_ptr() as usize, tag)
    }

    /// The value stored for the object at `address` and `tag` (no reference counting).
    #[inline]
    pub(crate) fn get_raw(&self, address: usize, tag: usize) -> Option<usize> {
        self.find(address, tag)
    }

    /// Entries stored.
    pub(crate) fn len(&self) -> usize {
        self.filled.load(Ordering::Acquire)
    }

    fn find(&self, object: usize, tag: usize) -> Option<usize> {
        let filled = self.filled.load(Ordering::Acquire);
        (0..filled)
            .find(|&i| self.objects[i].load(Ordering::Relaxed) == object && self.tags[i].load(Ordering::Relaxed) == tag)
            .map(|i| self.values[i].load(Ordering::Relaxed))
    }

    /// Remember `value` for (`object`, `tag`), keeping `object` alive for the process; a full
    /// cache keeps nothing (the caller works the value out again next time). Whether it was
    /// stored (not there already, and room left).
    pub(crate) fn insert(&self, object: &Bound<'_, PyAny>, tag: usize, value: usize) -> bool {
        let stored = self.claim(object.as_ptr() as usize, tag, value);
        if stored {
            std::mem::forget(object.clone()); // the key's strong reference, kept for the process
        }
        stored
    }

    /// Remember `value` for the address of something that lives for the process (a static
    /// table: nothing is held for it).
    pub(crate) fn insert_static<T>(&self, object: &'static T, tag: usize, value: usize) {
        self.claim(object as *const T as usize, tag, value);
    }

    /// Whether no entry can be stored any more.
    pub(crate) fn is_full(&self) -> bool {
        self.len() == SLOTS
    }

    /// Store the entry unless it is there already or the cache is full; whether it was stored.
    fn claim(&self, object: usize, tag: usize, value: usize) -> bool {
        let _append = self.append.lock().unwrap_or_else(|e| e.into_inner());
        let filled = self.filled.load(Ordering::Relaxed);
        if filled == SLOTS || self.find(object, tag).is_some() {
            return false;
        }
        self.objects[filled].store(object, Ordering::Relaxed);
        self.tags[filled].store(tag, Ordering::Relaxed);
        self.values[filled].store(value, Ordering::Relaxed);
        self.filled.store(filled + 1, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::python::identity_cache::*;

    #[test]
    fn entries_are_found_by_object_and_tag_and_a_full_cache_stores_no_more() {
        let cache = IdentityCache::<2>::new();
        assert_eq!(cache.find(0x1000, 1), None);
        assert!(cache.claim(0x1000, 1, 10));
        assert!(!cache.claim(0x1000, 1, 11), "an entry is never rewritten");
        assert_eq!(cache.find(0x1000, 1), Some(10));
        assert_eq!(cache.find(0x1000, 2), None);
        assert_eq!(cache.find(0x2000, 1), None);
        assert!(cache.claim(0x2000, 2, 20));
        assert_eq!(cache.find(0x2000, 2), Some(20));
        assert!(!cache.claim(0x1000, 3, 30), "full");
        assert_eq!(cache.find(0x1000, 3), None);
    }
}
