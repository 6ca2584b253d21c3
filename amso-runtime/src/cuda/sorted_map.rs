//! An ordered map over one sorted vector, for the block cache's large free blocks and segments
//! (`block_cache.rs`). In steady state a stream's cache holds a handful of large blocks, and a
//! pair of allocate and free takes one out and puts it back: a `BTreeMap` then allocates a node
//! whenever it goes from empty to one entry and frees it when it goes back, which cost more than
//! the rest of the path together. The vector keeps its capacity, finds by binary search and
//! moves at most its length on an insert or removal, which for the few hundred blocks a
//! fragmented cache holds is less than a node allocation.

use std::ops::{Bound, Index, RangeBounds};

/// Entries kept sorted by key; each key at most once.
#[derive(Debug, Clone)]
pub(crate) struct SortedMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap { entries: Vec::new() }
    }
}

impl<K: Ord + Copy, V> SortedMap<K, V> {
    /// Where `key` is, or where it would go.
    fn search(&self, key: &K) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.cmp(key))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.search(key).ok().map(|i| &self.entries[i].1)
    }

    /// Insert `value` at `key`; the value it replaced.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.search(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let i = self.search(key).ok()?;
        Some(self.remove_at(i).1)
    }

    /// Remove the first entry whose key is at least `key` (one search): the best fit, where the
    /// keys begin with a size.
    pub(crate) fn remove_first_from(&mut self, key: &K) -> Option<(K, V)> {
        let i = self.entries.partition_point(|(k, _)| k < key);
        (i < self.entries.len()).then(|| self.remove_at(i))
    }

    /// The entry at `i` (< len), removed: the last one (a cache of one block per stream, the
    /// common case) by a pop.
    fn remove_at(&mut self, i: usize) -> (K, V) {
        if i + 1 == self.entries.len() {
            self.entries.pop().expect("an entry at i")
        } else {
            self.entries.remove(i)
        }
    }

    /// The entries with keys in `range`, in order.
    pub(crate) fn range(&self, range: impl RangeBounds<K>) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        let start = match range.start_bound() {
            Bound::Included(key) => self.entries.partition_point(|(k, _)| k < key),
            Bound::Excluded(key) => self.entries.partition_point(|(k, _)| k <= key),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(key) => self.entries.partition_point(|(k, _)| k <= key),
            Bound::Excluded(key) => self.entries.partition_point(|(k, _)| k < key),
            Bound::Unbounded => self.entries.len(),
        };
        self.entries[start..end.max(start)].iter().map(|(k, v)| (k, v))
    }

    /// Every entry, in order.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

impl<K: Ord + Copy, V> Index<&K> for SortedMap<K, V> {
    type Output = V;

    /// The value at `key`, which must be present (as `BTreeMap`'s index).
    fn index(&self, key: &K) -> &V {
        self.get(key).expect("a key of the map")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::SortedMap;

    /// A seeded sequence of inserts, removals and range queries agrees with `BTreeMap`'s.
    #[test]
    fn agrees_with_btreemap() {
        let (mut ours, mut reference) = (SortedMap::default(), BTreeMap::new());
        let mut next = crate::cuda::xorshift(0x9E37_79B9_7F4A_7C15);
        for step in 0..20_000u64 {
            let key = next() % 64;
            match next() % 4 {
                0 | 1 => assert_eq!(ours.insert(key, step), reference.insert(key, step)),
                2 if step % 2 == 0 => assert_eq!(ours.remove(&key), reference.remove(&key)),
                2 => {
                    let first = reference.range(key..).next().map(|(&k, &v)| (k, v));
                    if let Some((k, _)) = first {
                        reference.remove(&k);
                    }
                    assert_eq!(ours.remove_first_from(&key), first);
                }
                _ => {
                    let end = key + next() % 16;
                    let got: Vec<_> = ours.range(key..end).collect();
                    let want: Vec<_> = reference.range(key..end).collect();
                    assert_eq!(got, want);
                    assert_eq!(ours.range(..=key).next_back(), reference.range(..=key).next_back());
                    assert_eq!(
                        ours.range((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded)).next(),
                        reference.range((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded)).next()
                    );
                }
            }
            assert_eq!(ours.get(&key), reference.get(&key));
            if let Some(value) = reference.get(&key) {
                assert_eq!(&ours[&key], value);
            }
            assert_eq!(ours.is_empty(), reference.is_empty());
        }
        assert!(ours.iter().eq(reference.iter()));
    }
}
