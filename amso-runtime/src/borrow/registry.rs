//! The borrow registry: which host memory typed arguments hold right now, and whether a new
//! one may join them. A writable borrow excludes every other borrow that can reach one of its
//! bytes, so safe Rust never holds a `&mut T` and another reference to the same element, in
//! one extension or across several (`process.rs` shares one registry between every copy of
//! the runtime in a process).
//!
//! Two borrows conflict when their byte ranges overlap, one of them is writable, and their
//! element lattices can meet: interleaved views such as `x[::2]` and `x[1::2]` do not conflict,
//! as in rust-numpy. Python code writing the memory through its own views meanwhile is outside
//! what a registry can see.
//!
//! The GIL is the registry's lock. Typed arguments are bound to the GIL's lifetime (`'py`):
//! they are made and dropped by a thread that holds it, and so is every call of the shared
//! table, in this copy and in the others. (amso extensions are built for the stable ABI, which
//! free-threaded Pythons do not load.) Each borrow costs no atomic operation: a mutex would add
//! four per argument, more than the rest of the bookkeeping together.

use std::cell::UnsafeCell;
use std::ffi::c_int;

use crate::strided::gcd;

/// One borrow of host memory, as it crosses between runtime copies (`#[repr(C)]`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BorrowKey {
    /// The lowest byte address reached.
    pub(crate) start: usize,
    /// One past the highest byte address reached.
    pub(crate) end: usize,
    /// The first element's address: the origin of the element lattice.
    pub(crate) data: usize,
    /// The greatest common divisor of the byte strides of the axes that step; 0 for one element.
    pub(crate) stride_gcd: usize,
    /// Bytes per element.
    pub(crate) itemsize: usize,
    /// 1 for a writable borrow.
    pub(crate) exclusive: u32,
}

impl BorrowKey {
    /// Whether `self` and `other` may not be held at once.
    pub(crate) fn conflicts(&self, other: &BorrowKey) -> bool {
        let overlap = self.start < other.end && other.start < self.end;
        overlap && (self.exclusive != 0 || other.exclusive != 0) && self.lattices_meet(other)
    }

    /// Whether an element of `self` and one of `other` can share a byte. Element starts lie at
    /// `data + k * g` for `g` the gcd of both lattices' strides (an over-approximation: every
    /// combination of strides counts); two elements overlap when their starts differ by less
    /// than the other's itemsize.
    fn lattices_meet(&self, other: &BorrowKey) -> bool {
        let g = gcd(self.stride_gcd, other.stride_gcd);
        if g == 0 {
            return true; // two single elements whose ranges overlap
        }
        let d = self.data.wrapping_sub(other.data) as isize;
        let d = d.rem_euclid(g as isize) as usize; // self's starts minus other's, modulo g
        d < other.itemsize || g - d < self.itemsize
    }
}

/// Live borrows.
#[derive(Default)]
pub(crate) struct Registry(Vec<BorrowKey>);

impl Registry {
    /// Register `key` unless it conflicts with a live borrow, which is returned.
    pub(crate) fn acquire(&mut self, key: &BorrowKey) -> Result<(), BorrowKey> {
        if let Some(clash) = self.0.iter().find(|live| live.conflicts(key)) {
            return Err(*clash);
        }
        self.0.push(*key);
        Ok(())
    }

    /// Drop one registration equal to `key`.
    pub(crate) fn release(&mut self, key: &BorrowKey) {
        if let Some(index) = self.0.iter().position(|live| live == key) {
            self.0.swap_remove(index);
        }
    }
}

/// This copy's registry, behind the GIL (see the module docs).
struct GilGuarded(UnsafeCell<Registry>);

// SAFETY: only reached through the functions below, whose callers hold the GIL.
unsafe impl Sync for GilGuarded {}

static ACTIVE: GilGuarded = GilGuarded(UnsafeCell::new(Registry(Vec::new())));

/// This copy's registry.
///
/// # Safety
/// The caller holds the GIL, and drops the reference before anything else could reach the
/// registry (no Python code runs meanwhile).
unsafe fn registry<'a>() -> &'a mut Registry {
    // SAFETY: the GIL serialises every caller (the caller's contract).
    unsafe { &mut *ACTIVE.0.get() }
}

/// Register `key`: 0, or 1 with the conflicting borrow in `other`.
///
/// # Safety
/// The GIL is held; `key` points at a valid `BorrowKey`, `other` at a writable one.
pub(crate) unsafe extern "C" fn acquire_shared(key: *const BorrowKey, other: *mut BorrowKey) -> c_int {
    // SAFETY: the caller holds the GIL, and passes a valid key.
    match unsafe { registry().acquire(&*key) } {
        Ok(()) => 0,
        Err(clash) => {
            // SAFETY: the caller's writable output.
            unsafe { other.write(clash) };
            1
        }
    }
}

/// Release `key`.
///
/// # Safety
/// The GIL is held; `key` points at a valid `BorrowKey`.
pub(crate) unsafe extern "C" fn release_shared(key: *const BorrowKey) {
    // SAFETY: the caller holds the GIL, and passes a valid key.
    unsafe { registry().release(&*key) }
}

/// The number of live borrows.
///
/// # Safety
/// The GIL is held.
pub(crate) unsafe extern "C" fn live_shared() -> usize {
    // SAFETY: the caller holds the GIL.
    unsafe { registry().0.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(data: usize, len: usize, stride: usize, itemsize: usize, exclusive: bool) -> BorrowKey {
        BorrowKey {
            start: data,
            end: data + (len - 1) * stride + itemsize,
            data,
            stride_gcd: if len > 1 { stride } else { 0 },
            itemsize,
            exclusive: exclusive as u32,
        }
    }

    #[test]
    fn writers_exclude_whatever_can_reach_their_bytes() {
        let whole = key(0x1000, 8, 8, 8, true);
        assert!(whole.conflicts(&key(0x1000, 8, 8, 8, false)), "the same memory, read");
        assert!(!key(0x1000, 8, 8, 8, false).conflicts(&key(0x1000, 8, 8, 8, false)), "two readers");
        assert!(!whole.conflicts(&key(0x1040, 8, 8, 8, true)), "the next 64 bytes");
        assert!(whole.conflicts(&key(0x1038, 1, 8, 8, true)), "its last element");
    }

    #[test]
    fn interleaved_views_do_not_conflict_but_reinterpreted_ones_do() {
        let even = key(0x1000, 4, 16, 8, true); // x[::2] of float64
        let odd = key(0x1008, 4, 16, 8, true); // x[1::2]
        assert!(!even.conflicts(&odd) && !odd.conflicts(&even));
        let float32_view = key(0x1004, 4, 16, 4, true); // the high halves of x[::2], as float32
        assert!(even.conflicts(&float32_view) && float32_view.conflicts(&even));
        let every_third = key(0x1000, 3, 24, 8, true); // meets x[1::2] at 0x1018
        assert!(every_third.conflicts(&odd));
    }

    #[test]
    fn the_registry_admits_and_releases() {
        let mut registry = Registry::default();
        let writer = key(0x7000_0000, 4, 4, 4, true);
        let reader = key(0x7000_0008, 1, 4, 4, false);
        registry.acquire(&writer).unwrap();
        assert_eq!(registry.acquire(&reader), Err(writer));
        registry.release(&writer);
        registry.acquire(&reader).unwrap();
        registry.acquire(&reader).unwrap(); // two readers of the same memory
        registry.release(&reader);
        assert_eq!(registry.0, [reader]);
        registry.release(&reader);
        assert!(registry.0.is_empty());
    }
}
