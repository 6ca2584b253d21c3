//! Lock ids: a context (Python `with`, or a Rust guard) locks an array with a unique id, and
//! while it is held every access must present that id. Ids are made only by `LockId::next`
//! and kept by their holder, so no caller can forge or release another holder's lock.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::indexer::{HostIndexer, HostIndexerMut};
use crate::memarray::MemArray;

/// A process-unique lock id, held by one context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockId(NonZeroU64);

static NEXT_LOCK: AtomicU64 = AtomicU64::new(1);

impl LockId {
    /// A fresh id, never handed out before in this process.
    pub fn next() -> LockId {
        let id = NEXT_LOCK.fetch_add(1, Ordering::Relaxed);
        LockId(NonZeroU64::new(id).expect("lock ids start at 1 and a u64 does not wrap in practice"))
    }

    /// The id as an integer (what Python and C see).
    pub fn get(self) -> u64 {
        self.0.get()
    }
}

/// Check that an access presenting `requested` may touch an array held by `holder`.
pub(crate) fn check_access(holder: Option<LockId>, requested: Option<LockId>) -> Result<()> {
    match (holder, requested) {
        (None, None) => Ok(()),
        (Some(h), Some(r)) if h == r => Ok(()),
        (Some(h), _) => Err(Error::Locked { holder: h.get() }),
        (None, Some(r)) => Err(Error::StaleLock { id: r.get() }),
    }
}

/// A Rust-side lock: holds the array locked, and borrows it mutably so the borrow checker
/// refuses any other use of the array until the guard is dropped (which unlocks it).
pub struct LockGuard<'a, T: Element, const N: usize> {
    array: &'a mut MemArray<T, N>,
    id: LockId,
}

impl<'a, T: Element, const N: usize> LockGuard<'a, T, N> {
    pub(crate) fn new(array: &'a mut MemArray<T, N>) -> Result<Self> {
        let id = LockId::next();
        array.enter(id)?;
        Ok(LockGuard { array, id })
    }

    /// Read one element.
    pub fn get(&self, index: [usize; N]) -> Result<T> {
        self.array.get_with(index, Some(self.id))
    }

    /// Write one element.
    pub fn write(&mut self, index: [usize; N], value: T) -> Result<()> {
        self.array.write_with(index, value, Some(self.id))
    }

    /// The contents in C order.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.array.to_vec_with(Some(self.id))
    }

    /// Overwrite the contents (C order, exactly `size()` values).
    pub fn copy_from_slice(&mut self, values: &[T]) -> Result<()> {
        self.array.copy_from_slice_with(values, Some(self.id))
    }

    /// A read-only indexer over the locked array, borrowing the guard.
    pub fn indexer(&self) -> Result<HostIndexer<'_, T, N>> {
        self.array.indexer_with(Some(self.id))
    }

    /// A writable indexer over the locked array, borrowing the guard exclusively.
    pub fn indexer_mut(&mut self) -> Result<HostIndexerMut<'_, T, N>> {
        self.array.indexer_mut_with(Some(self.id))
    }

    /// The locked array, for read-only inspection.
    pub fn array(&self) -> &MemArray<T, N> {
        self.array
    }
}

impl<T: Element, const N: usize> Drop for LockGuard<'_, T, N> {
    fn drop(&mut self) {
        // Cannot fail: this guard holds the lock it releases.
        let _ = self.array.exit(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_access_rules_hold() {
        let (a, b) = (LockId::next(), LockId::next());
        assert_ne!(a, b);
        assert_eq!(check_access(None, None), Ok(()));
        assert_eq!(check_access(Some(a), Some(a)), Ok(()));
        assert_eq!(check_access(Some(a), None), Err(Error::Locked { holder: a.get() }));
        assert_eq!(check_access(Some(a), Some(b)), Err(Error::Locked { holder: a.get() }));
        assert_eq!(check_access(None, Some(b)), Err(Error::StaleLock { id: b.get() }));
    }
}
