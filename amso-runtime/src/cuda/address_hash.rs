//! A hasher for maps keyed by device addresses, stream handles and size classes (the pool's
//! ledger and cache): such keys are already spread over their bits, so one multiplication
//! mixes them enough, where std's SipHash (built against untrusted keys) costs several times
//! as much on the allocate and free paths. The keys come from the driver and from amso, not
//! from a caller who could choose them to collide.

use std::hash::{BuildHasherDefault, Hasher};

/// Mixes each integer written into it with a multiplication by a 64-bit odd constant.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        // A product keeps its factors' trailing zeros (aligned addresses have nine or more):
        // rotated, the low bits hashbrown indexes by come from the product's well-mixed top.
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        // Fibonacci hashing: the golden ratio's 64-bit constant; the high bits carry the mix,
        // and hashbrown reads the high 7 bits as well as the low ones.
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }

    fn write_i32(&mut self, value: i32) {
        self.write_u64(value as u32 as u64);
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }
}

/// `HashMap<K, V, BuildAddressHasher>`.
pub(crate) type BuildAddressHasher = BuildHasherDefault<AddressHasher>;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, Hash};

    use super::*;

    fn hash(value: impl Hash) -> u64 {
        BuildAddressHasher::default().hash_one(value)
    }

    #[test]
    fn aligned_addresses_spread_over_the_high_and_low_bits() {
        let hashes: Vec<u64> = (0..4096u64).map(|i| hash(0x7f00_0000_0000 + i * 512)).collect();
        let low: HashSet<u64> = hashes.iter().map(|h| h & 0xfff).collect();
        let high: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(low.len() > 2000, "{} distinct low 12-bit values of 4096", low.len());
        assert_eq!(high.len(), 128, "every top-7-bit value is used");
    }

    #[test]
    fn a_pair_is_not_its_swap() {
        assert_ne!(hash((1u64, 2u64)), hash((2u64, 1u64)));
    }
}
