//! `LockGuard`: an array locked by Rust code, with every access presenting the guard's id.

use crate::element::Element;
use crate::error::Result;
use crate::indexer::{HostIndexer, HostIndexerMut};
use crate::lock::LockId;
use crate::memarray::MemArray;

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
