//! Lock ids: a context (Python `with`, or a Rust `LockGuard`) locks an array with a unique id,
//! and while it is held every access must present that id. Ids are made only by
//! `LockId::next` and kept by their holder, so no caller can forge or release another holder's
//! lock.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

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
