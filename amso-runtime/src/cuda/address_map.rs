//! A map from device addresses (never 0) to small records, for the pool's ledger of loans
//! (`lent.rs`): every lend inserts and every give-back removes, so both are one short probe.
//! Open addressing with linear probing over a power-of-two table kept at most a quarter full, and
//! removal by shifting the following entries back (no tombstones, so a table churned by
//! millions of lends stays as short to probe as a fresh one). A general hash map (hashbrown)
//! costs about twice as much per insert and remove here (`locked_cost`, `pool_allocator_tests.rs`).
//! The keys come from the driver and from amso, not from a caller who could choose them to
//! collide. The table never shrinks: it keeps four slots per loan of the most ever out at once.
//! Address 0 is never a key (it is never lent): it is never found and never inserted.

/// The smallest table.
const SMALLEST_TABLE: usize = 16;

/// One slot of the table: an address (0: empty) and its record, side by side, so that a lookup
/// reads one place (a cache line, mostly: `switches.rs` says why lines count).
#[derive(Debug)]
struct Slot<V> {
    key: u64,
    value: Option<V>,
}

/// Records of `V` by address.
#[derive(Debug)]
pub(crate) struct AddressMap<V> {
    slots: Vec<Slot<V>>,
    /// 64 minus log2 of the table's size: a hash's top bits index it.
    shift: u32,
    len: usize,
}

impl<V> Default for AddressMap<V> {
    fn default() -> AddressMap<V> {
        AddressMap { slots: Vec::new(), shift: 64, len: 0 }
    }
}

impl<V> AddressMap<V> {
    /// The slot an address is looked for from (Fibonacci hashing: the product's top bits mix
    /// every bit of the address, aligned low zeros included).
    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The slot holding `key`.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        if self.len == 0 || key == 0 {
            return None;
        }
        let mask = self.mask();
        let mut slot = self.home(key);
        loop {
            match self.slots[slot].key {
                k if k == key => return Some(slot),
                0 => return None,
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    /// Insert `value` at `key` (non-zero) unless the key is present: whether it was inserted.
    #[inline(always)]
    pub(crate) fn insert(&mut self, key: u64, value: V) -> bool {
        if key == 0 {
            return false; // address 0 is never lent; 0 marks an empty slot
        }
        if (self.len + 1) * 4 > self.slots.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut slot = self.home(key);
        loop {
            let entry = &mut self.slots[slot];
            match entry.key {
                0 => {
                    *entry = Slot { key, value: Some(value) };
                    self.len += 1;
                    return true;
                }
                k if k == key => return false,
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    /// The record at `key`.
    #[cfg(test)]
    pub(crate) fn get(&self, key: u64) -> Option<&V> {
        self.find(key).and_then(|slot| self.slots[slot].value.as_ref())
    }

    /// Whether `key` is present.
    pub(crate) fn contains(&self, key: u64) -> bool {
        self.find(key).is_some()
    }

    /// Remove and return the record at `key`.
    pub(crate) fn remove(&mut self, key: u64) -> Option<V> {
        let slot = self.find(key)?;
        Some(self.remove_slot(slot))
    }

    /// Remove the record at `key` if `decide`, shown it, agrees (`Ok`; an error leaves the record
    /// where it is); None when `key` is absent. One lookup.
    #[inline(always)]
    pub(crate) fn remove_if<D, E>(
        &mut self,
        key: u64,
        decide: impl FnOnce(&V) -> Result<D, E>,
    ) -> Option<Result<(V, D), E>> {
        let slot = self.find(key)?;
        let decided = decide(self.slots[slot].value.as_ref().expect("an occupied slot holds a record"));
        Some(decided.map(|decided| (self.remove_slot(slot), decided)))
    }

    /// Empty `slot` and shift back every following entry of its run that may move there (one
    /// whose home is not between the hole and its slot), so that no lookup meets a gap early.
    #[inline(always)]
    fn remove_slot(&mut self, mut hole: usize) -> V {
        let mask = self.mask();
        let removed = self.slots[hole].value.take().expect("an occupied slot holds a record");
        let mut next = hole;
        loop {
            next = (next + 1) & mask;
            let key = self.slots[next].key;
            if key == 0 {
                break;
            }
            let home = self.home(key);
            // Distances back from `next`: its home's, and the hole's. The entry may fill the
            // hole when its home is no nearer to it than the hole is.
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                let value = self.slots[next].value.take();
                self.slots[hole] = Slot { key, value };
                hole = next;
            }
        }
        self.slots[hole].key = 0;
        self.len -= 1;
        removed
    }

    /// The addresses whose records `pick` selects, removed with their records.
    pub(crate) fn remove_where(&mut self, mut pick: impl FnMut(&V) -> bool) -> Vec<(u64, V)> {
        let keys: Vec<u64> =
            self.slots.iter().filter(|slot| slot.value.as_ref().is_some_and(&mut pick)).map(|slot| slot.key).collect();
        keys.into_iter().filter_map(|key| Some((key, self.remove(key)?))).collect()
    }

    /// How many records it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(SMALLEST_TABLE);
        let slots = std::mem::replace(
            &mut self.slots,
            std::iter::repeat_with(|| Slot { key: 0, value: None }).take(size).collect(),
        );
        self.shift = 64 - size.trailing_zeros();
        self.len = 0;
        for slot in slots {
            if let Some(value) = slot.value {
                self.insert(slot.key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::AddressMap;

    #[test]
    fn agrees_with_a_hash_map_over_a_million_random_operations() {
        let (mut map, mut reference) = (AddressMap::default(), HashMap::new());
        let mut next = crate::cuda::xorshift(0x2545_f491_4f6c_dd1d);
        for step in 0..1_000_000u64 {
            let x = next();
            // Aligned addresses over a few pages, so that runs collide and wrap the table.
            let key = (x % 3000 + 1) * 512;
            match x >> 62 {
                0 | 1 => {
                    let fresh = !reference.contains_key(&key);
                    if fresh {
                        reference.insert(key, step);
                    }
                    assert_eq!(map.insert(key, step), fresh, "insert {key:#x}");
                }
                2 => assert_eq!(map.remove(key), reference.remove(&key), "remove {key:#x}"),
                _ => assert_eq!(map.get(key), reference.get(&key), "get {key:#x}"),
            }
            assert_eq!(map.len(), reference.len());
        }
        let odd = map.remove_where(|step| step % 2 == 1);
        assert!(odd.iter().all(|(key, step)| reference.remove(key) == Some(*step)));
        assert!(reference.iter().all(|(&key, step)| map.get(key) == Some(step)), "the even ones stay");
    }

    #[test]
    fn an_empty_map_finds_nothing_and_address_0_is_never_a_key() {
        let mut map = AddressMap::<u8>::default();
        assert!(!map.contains(0x1000));
        assert_eq!(map.remove(0x1000), None);
        assert!(map.insert(0x1000, 1));
        assert!(!map.insert(0x1000, 2), "a present key is not replaced");
        assert_eq!(map.get(0x1000), Some(&1));
        assert!(!map.insert(0, 3), "0 marks an empty slot");
        assert!(!map.contains(0));
        assert_eq!(map.remove(0), None);
        assert!(map.remove_if(0, |_| Ok::<_, ()>(())).is_none());
        assert_eq!(map.len(), 1);
    }
}
