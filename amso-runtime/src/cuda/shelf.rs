//! One stream's free blocks in amso's pool (`block_cache.rs` files them and says the rules), the
//! shelves of a device by stream, the size classes they are kept in, and the fences that tell
//! another stream when a block is ready.

use std::collections::{HashMap, VecDeque};

use super::address_hash::BuildAddressHasher;
use super::sorted_map::SortedMap;

/// Blocks up to this size come in power-of-two classes (from 512 bytes) and are never split.
pub(super) const SMALL_BLOCK: usize = 1 << 20;
/// Larger blocks are rounded up to a multiple of this.
pub(super) const LARGE_ROUND: usize = 2 << 20;
/// The smallest class, and how many classes there are (512 bytes to `SMALL_BLOCK`).
pub(super) const SMALLEST: usize = 512;
pub(super) const CLASSES: usize = (SMALL_BLOCK / SMALLEST).trailing_zeros() as usize + 1;

/// The slot of small class `size` (a power of two from `SMALLEST` to `SMALL_BLOCK`).
pub(super) fn class_slot(size: usize) -> usize {
    (size / SMALLEST).trailing_zeros() as usize
}

/// The size of the block that serves `bytes` (> 0), or None if it overflows.
#[inline(always)]
pub(crate) fn block_size(bytes: usize) -> Option<usize> {
    if bytes <= SMALL_BLOCK {
        Some(bytes.next_power_of_two().max(SMALLEST))
    } else {
        bytes.checked_next_multiple_of(LARGE_ROUND)
    }
}

/// How the cache learns that another stream's free block is ready: a fence recorded on that
/// stream, queried later. The pool implements it with CUDA events; the tests with counters.
pub(crate) trait Fences {
    /// A recorded fence.
    type Fence;
    /// Record a fence on `stream` now (None: it could not be recorded).
    fn record(&mut self, stream: u64) -> Option<Self::Fence>;
    /// Whether the work queued on its stream before `fence` has finished.
    fn passed(&mut self, fence: &Self::Fence) -> bool;
    /// A fence the cache no longer needs.
    fn recycle(&mut self, fence: Self::Fence);
}

/// The free small blocks of one stream, by class (`class_slot`): (address, free serial), the
/// newest of each class apart from the older ones, which are oldest first. A stream's run of
/// allocations and frees of one size takes and returns the newest, one 16-byte slot of a
/// 64-byte aligned array (so within one cache line), without reading the queue (`switches.rs`
/// says why lines count); another stream takes the oldest, the likeliest to be ready.
#[repr(C, align(64))]
pub(super) struct SmallBlocks {
    /// Address 0 (never a block's): none.
    pub(super) newest: [(u64, u64); CLASSES],
    pub(super) older: [VecDeque<(u64, u64)>; CLASSES],
}

impl SmallBlocks {
    pub(super) fn new() -> SmallBlocks {
        SmallBlocks { newest: [(0, 0); CLASSES], older: std::array::from_fn(|_| VecDeque::new()) }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.newest.iter().all(|&(ptr, _)| ptr == 0) && self.older.iter().all(VecDeque::is_empty)
    }

    /// File a block of class `slot` freed with `serial` (newer than every block filed before).
    #[inline(always)]
    pub(super) fn push(&mut self, slot: usize, block: (u64, u64)) {
        debug_assert_ne!(block.0, 0, "address 0 marks an empty slot");
        let previous = std::mem::replace(&mut self.newest[slot], block);
        if previous.0 != 0 {
            self.older[slot].push_back(previous);
        }
    }

    /// The newest block of class `slot`, taken.
    #[inline(always)]
    pub(super) fn pop_newest(&mut self, slot: usize) -> Option<u64> {
        match std::mem::take(&mut self.newest[slot]) {
            (0, _) => self.older[slot].pop_back().map(|(ptr, _)| ptr),
            (ptr, _) => Some(ptr),
        }
    }

    /// The oldest block of class `slot`.
    pub(super) fn oldest(&self, slot: usize) -> Option<(u64, u64)> {
        self.older[slot].front().copied().or(Some(self.newest[slot]).filter(|&(ptr, _)| ptr != 0))
    }

    /// The oldest block of class `slot`, taken.
    pub(super) fn pop_oldest(&mut self, slot: usize) -> Option<(u64, u64)> {
        match self.older[slot].pop_front() {
            Some(block) => Some(block),
            None => Some(std::mem::take(&mut self.newest[slot])).filter(|&(ptr, _)| ptr != 0),
        }
    }

    /// The serial of the newest block filed (0: none).
    pub(super) fn newest_serial(&self) -> u64 {
        (0..CLASSES).filter_map(|slot| self.iter(slot).last().map(|&(_, serial)| serial)).max().unwrap_or(0)
    }

    /// The blocks of class `slot`, oldest first.
    pub(super) fn iter(&self, slot: usize) -> impl Iterator<Item = &(u64, u64)> {
        self.older[slot].iter().chain(Some(&self.newest[slot]).filter(|(ptr, _)| *ptr != 0))
    }
}

/// The free blocks filed under one stream.
#[repr(C)]
pub(super) struct Shelf<F> {
    /// Whether the stream outlives its blocks, so that a fence may be recorded on it later.
    pub(super) lasting: bool,
    /// The whole segment freed here last, apart from `large`: a stream that allocates and frees
    /// one large size returns it and takes it back without a search (`settle` files it among
    /// the others before one).
    pub(super) whole: Whole,
    /// Large blocks by (size, address).
    pub(super) large: SortedMap<(usize, u64), Filed>,
    /// Blocks freed with a serial up to this are ready on every stream.
    pub(super) ready_upto: u64,
    /// A fence recorded but not yet passed, and the serial it covers.
    pub(super) pending: Option<(F, u64)>,
    pub(super) small: SmallBlocks,
}

/// A wholly free segment kept apart on its shelf (`Shelf::whole`); address 0: none.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Whole {
    pub(super) ptr: u64,
    pub(super) size: usize,
    pub(super) serial: u64,
}

impl<F> Shelf<F> {
    pub(super) fn new(lasting: bool) -> Shelf<F> {
        Shelf {
            lasting,
            whole: Whole::default(),
            large: SortedMap::default(),
            ready_upto: 0,
            pending: None,
            small: SmallBlocks::new(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.whole.ptr == 0 && self.large.is_empty() && self.small.is_empty()
    }

    /// The newest free serial filed here (0: none).
    pub(super) fn newest(&self) -> u64 {
        let large = self.large.iter().map(|(_, filed)| filed.serial).max().unwrap_or(0);
        large.max(self.whole.serial).max(self.small.newest_serial())
    }

    /// Keep the wholly free segment `whole` apart, filing the one kept before among the others.
    #[inline(always)]
    pub(super) fn keep_whole(&mut self, whole: Whole) {
        self.settle();
        self.whole = whole;
    }

    /// The whole segment kept apart, taken if it is of `size`.
    #[inline(always)]
    pub(super) fn take_whole(&mut self, size: usize) -> Option<u64> {
        (self.whole.ptr != 0 && self.whole.size == size).then(|| std::mem::take(&mut self.whole).ptr)
    }

    /// File the whole segment kept apart among the large blocks, before they are searched.
    #[inline(always)]
    pub(super) fn settle(&mut self) {
        let whole = std::mem::take(&mut self.whole);
        if whole.ptr != 0 {
            self.large.insert((whole.size, whole.ptr), Filed { serial: whole.serial, whole: true });
        }
    }

    /// Learn whether the pending fence passed, and record one if some blocks are not yet known
    /// ready; the serial up to which blocks are ready.
    pub(super) fn refresh(&mut self, stream: u64, fences: &mut impl Fences<Fence = F>) -> u64 {
        if let Some((fence, covers)) = self.pending.take() {
            if fences.passed(&fence) {
                self.ready_upto = self.ready_upto.max(covers);
                fences.recycle(fence);
            } else {
                self.pending = Some((fence, covers));
            }
        }
        if self.pending.is_none() {
            let newest = self.newest();
            if self.ready_upto < newest {
                self.pending = fences.record(stream).map(|fence| (fence, newest));
            }
        }
        self.ready_upto
    }
}

/// A free large block on its shelf: its free serial, and whether it is a whole segment (which
/// has no neighbour to merge with, so that it is on its shelf alone, not in
/// `BlockCache::parts`: a request the driver served, given back whole and taken again whole,
/// touches one map).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Filed {
    pub(super) serial: u64,
    pub(super) whole: bool,
}

/// The shelves of a cache by stream: a list, its index, and the shelf used last (its stream
/// and position), which a stream's run of allocations and frees finds without hashing or
/// reading the list.
#[repr(C)]
pub(super) struct Shelves<F> {
    pub(super) recent: Option<(u64, usize)>,
    pub(super) list: Vec<(u64, Shelf<F>)>,
    pub(super) index: HashMap<u64, usize, BuildAddressHasher>,
}

impl<F> Shelves<F> {
    pub(super) fn new() -> Shelves<F> {
        Shelves { list: Vec::new(), index: HashMap::default(), recent: None }
    }

    /// The position of `stream`'s shelf.
    #[inline(always)]
    pub(super) fn position(&mut self, stream: u64) -> Option<usize> {
        if let Some((recent, at)) = self.recent {
            if recent == stream {
                return Some(at);
            }
        }
        let at = *self.index.get(&stream)?;
        self.recent = Some((stream, at));
        Some(at)
    }

    #[inline(always)]
    pub(super) fn get_mut(&mut self, stream: u64) -> Option<&mut Shelf<F>> {
        let at = self.position(stream)?;
        Some(&mut self.list[at].1)
    }

    /// `stream`'s shelf, made (`lasting` as given) if it has none.
    #[inline(always)]
    pub(super) fn get_or_insert(&mut self, stream: u64, lasting: impl Fn() -> bool) -> &mut Shelf<F> {
        let at = match self.position(stream) {
            Some(at) => at,
            None => {
                self.list.push((stream, Shelf::new(lasting())));
                let at = self.list.len() - 1;
                self.index.insert(stream, at);
                self.recent = Some((stream, at));
                at
            }
        };
        &mut self.list[at].1
    }

    /// Each stream's shelf, in the order the streams first gave a block back.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Shelf<F>)> {
        self.list.iter().map(|(stream, shelf)| (*stream, shelf))
    }

    /// `iter`, writable.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut Shelf<F>)> {
        self.list.iter_mut().map(|(stream, shelf)| (*stream, shelf))
    }

    /// Keep the shelves `keep` selects.
    pub(super) fn retain(&mut self, keep: impl Fn(&Shelf<F>) -> bool) {
        self.list.retain(|(_, shelf)| keep(shelf));
        self.index = self.list.iter().enumerate().map(|(at, (stream, _))| (*stream, at)).collect();
        self.recent = None;
    }
}
