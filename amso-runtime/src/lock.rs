//! Lock ids: a context (Python `with`, or a Rust guard) locks an array with a unique id, and
//! while it is held every access must present that id.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::indexer::ArrayIndexer;
use crate::memarray::MemArray;

/// A process-unique lock id.
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

    /// The id for an integer from Python or C; `None` for 0.
    pub fn from_raw(id: u64) -> Option<LockId> {
        NonZeroU64::new(id).map(LockId)
    }
}

/// Check that an access presenting `requested` may touch an array held by `holder`.
pub fn check_access(holder: Option<LockId>, requested: Option<LockId>) -> Result<()> {
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

    /// The id this guard holds.
    pub fn id(&self) -> LockId {
        self.id
    }

    /// Read one element.
    pub fn get(&self, index: [usize; N]) -> Result<T> {
        self.array.get(index, Some(self.id))
    }

    /// Write one element.
    pub fn write(&mut self, index: [usize; N], value: T) -> Result<()> {
        self.array.write(index, value, Some(self.id))
    }

    /// An indexer over the locked array, borrowing the guard.
    pub fn indexer(&mut self) -> Result<ArrayIndexer<'_, T, N>> {
        self.array.indexer(Some(self.id))
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
        assert_eq!(LockId::from_raw(0), None);
    }
}
