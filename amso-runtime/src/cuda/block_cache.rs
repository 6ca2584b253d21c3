//! The free blocks of amso's pool (`alloc.rs`), as a plain data structure: no driver calls, so
//! every rule below is tested without a GPU.
//!
//! - **Streams.** A freed block is filed under the stream its last work was queued on, and is
//!   reused on that stream at once: the new owner's work follows the old one's. Another stream
//!   takes it only after a fence (a CUDA event, `Fences`) recorded on the first stream after
//!   the free has passed. Fences are recorded only on streams that outlive their blocks
//!   (`lasting`: the default streams, amso's own, PyTorch's, which are never destroyed); a
//!   block of any other stream (a CuPy or RMM stream, which may be destroyed while its blocks
//!   are cached) is reused on that stream only, as CuPy's own pool does, until a device-wide
//!   synchronisation (`drain`).
//! - **Sizes.** Blocks up to `SMALL_BLOCK` come in power-of-two classes and are reused whole.
//!   Larger ones are rounded up to `LARGE_ROUND`; a request takes the smallest free block that
//!   fits (best fit) and splits off the rest, which stays free; neighbours freed on one stream
//!   merge again. Each large driver allocation (a segment) goes back to the driver only whole.
//! - **Bound.** The cache holds at most `limit` bytes: a block that would exceed it is handed
//!   back (`give`'s answer) for the caller to return to the driver.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::address_hash::BuildAddressHasher;
use super::sorted_map::SortedMap;

/// Blocks up to this size come in power-of-two classes (from 512 bytes) and are never split.
pub(crate) const SMALL_BLOCK: usize = 1 << 20;
/// Larger blocks are rounded up to a multiple of this.
pub(crate) const LARGE_ROUND: usize = 2 << 20;
/// The smallest class, and how many classes there are (512 bytes to `SMALL_BLOCK`).
const SMALLEST: usize = 512;
const CLASSES: usize = (SMALL_BLOCK / SMALLEST).trailing_zeros() as usize + 1;

/// The slot of small class `size` (a power of two from `SMALLEST` to `SMALL_BLOCK`).
fn class_slot(size: usize) -> usize {
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
struct SmallBlocks {
    /// Address 0 (never a block's): none.
    newest: [(u64, u64); CLASSES],
    older: [VecDeque<(u64, u64)>; CLASSES],
}

impl SmallBlocks {
    fn new() -> SmallBlocks {
        SmallBlocks { newest: [(0, 0); CLASSES], older: std::array::from_fn(|_| VecDeque::new()) }
    }

    fn is_empty(&self) -> bool {
        self.newest.iter().all(|&(ptr, _)| ptr == 0) && self.older.iter().all(VecDeque::is_empty)
    }

    /// File a block of class `slot` freed with `serial` (newer than every block filed before).
    #[inline(always)]
    fn push(&mut self, slot: usize, block: (u64, u64)) {
        debug_assert_ne!(block.0, 0, "address 0 marks an empty slot");
        let previous = std::mem::replace(&mut self.newest[slot], block);
        if previous.0 != 0 {
            self.older[slot].push_back(previous);
        }
    }

    /// The newest block of class `slot`, taken.
    #[inline(always)]
    fn pop_newest(&mut self, slot: usize) -> Option<u64> {
        match std::mem::take(&mut self.newest[slot]) {
            (0, _) => self.older[slot].pop_back().map(|(ptr, _)| ptr),
            (ptr, _) => Some(ptr),
        }
    }

    /// The oldest block of class `slot`.
    fn oldest(&self, slot: usize) -> Option<(u64, u64)> {
        self.older[slot].front().copied().or(Some(self.newest[slot]).filter(|&(ptr, _)| ptr != 0))
    }

    /// The oldest block of class `slot`, taken.
    fn pop_oldest(&mut self, slot: usize) -> Option<(u64, u64)> {
        match self.older[slot].pop_front() {
            Some(block) => Some(block),
            None => Some(std::mem::take(&mut self.newest[slot])).filter(|&(ptr, _)| ptr != 0),
        }
    }

    /// The serial of the newest block filed (0: none).
    fn newest_serial(&self) -> u64 {
        (0..CLASSES).filter_map(|slot| self.iter(slot).last().map(|&(_, serial)| serial)).max().unwrap_or(0)
    }

    /// The blocks of class `slot`, oldest first.
    fn iter(&self, slot: usize) -> impl Iterator<Item = &(u64, u64)> {
        self.older[slot].iter().chain(Some(&self.newest[slot]).filter(|(ptr, _)| *ptr != 0))
    }
}

/// The free blocks filed under one stream.
struct Shelf<F> {
    /// Whether the stream outlives its blocks, so that a fence may be recorded on it later.
    lasting: bool,
    /// Blocks freed with a serial up to this are ready on every stream.
    ready_upto: u64,
    /// A fence recorded but not yet passed, and the serial it covers.
    pending: Option<(F, u64)>,
    /// Large blocks by (size, address).
    large: SortedMap<(usize, u64), Filed>,
    small: SmallBlocks,
}

impl<F> Shelf<F> {
    fn new(lasting: bool) -> Shelf<F> {
        Shelf { lasting, small: SmallBlocks::new(), large: SortedMap::default(), ready_upto: 0, pending: None }
    }

    fn is_empty(&self) -> bool {
        self.large.is_empty() && self.small.is_empty()
    }

    /// The newest free serial filed here (0: none).
    fn newest(&self) -> u64 {
        self.large.iter().map(|(_, filed)| filed.serial).max().unwrap_or(0).max(self.small.newest_serial())
    }

    /// Learn whether the pending fence passed, and record one if some blocks are not yet known
    /// ready; the serial up to which blocks are ready.
    fn refresh(&mut self, stream: u64, fences: &mut impl Fences<Fence = F>) -> u64 {
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
struct Filed {
    serial: u64,
    whole: bool,
}

/// A free large block that is part of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LargeFree {
    size: usize,
    stream: u64,
    serial: u64,
}

/// What the cache counts (`amso.memory_info`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Requests served from the cache: from the stream's own blocks, and from another stream's
    /// after a fence passed.
    pub(crate) hits: u64,
    pub(crate) cross_stream_hits: u64,
    /// Requests that went to the driver.
    pub(crate) misses: u64,
    /// Large blocks split to serve a smaller request.
    pub(crate) splits: u64,
    /// Blocks handed back to the driver because the cache was full.
    pub(crate) evictions: u64,
}

/// One line of the cache's report: the blocks of one size class on one stream (`#[repr(C)]`:
/// it crosses the process's pool table, `pool.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shelved {
    /// The stream's handle.
    pub(crate) stream: u64,
    /// The class: the block size for small blocks, else the power of two at or above the sizes.
    pub(crate) class: usize,
    pub(crate) blocks: usize,
    pub(crate) bytes: usize,
    /// Of them, blocks whose fence (for other streams) has been recorded but has not passed.
    pub(crate) waiting: usize,
}

/// A block the cache gives back to the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Returned {
    pub(crate) ptr: u64,
    /// The stream its last work was on, and whether that stream outlives it (else the block may
    /// go back only after a device-wide synchronisation).
    pub(crate) stream: u64,
    pub(crate) lasting: bool,
}

/// The shelves of a cache by stream: a list, its index, and the shelf used last (its stream
/// and position), which a stream's run of allocations and frees finds without hashing or
/// reading the list.
#[repr(C)]
struct Shelves<F> {
    recent: Option<(u64, usize)>,
    list: Vec<(u64, Shelf<F>)>,
    index: HashMap<u64, usize, BuildAddressHasher>,
}

impl<F> Shelves<F> {
    fn new() -> Shelves<F> {
        Shelves { list: Vec::new(), index: HashMap::default(), recent: None }
    }

    /// The position of `stream`'s shelf.
    #[inline(always)]
    fn position(&mut self, stream: u64) -> Option<usize> {
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
    fn get_mut(&mut self, stream: u64) -> Option<&mut Shelf<F>> {
        let at = self.position(stream)?;
        Some(&mut self.list[at].1)
    }

    /// `stream`'s shelf, made (`lasting` as given) if it has none.
    #[inline(always)]
    fn get_or_insert(&mut self, stream: u64, lasting: impl Fn() -> bool) -> &mut Shelf<F> {
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
    fn iter(&self) -> impl Iterator<Item = (u64, &Shelf<F>)> {
        self.list.iter().map(|(stream, shelf)| (*stream, shelf))
    }

    /// `iter`, writable.
    fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut Shelf<F>)> {
        self.list.iter_mut().map(|(stream, shelf)| (*stream, shelf))
    }

    /// Keep the shelves `keep` selects.
    fn retain(&mut self, keep: impl Fn(&Shelf<F>) -> bool) {
        self.list.retain(|(_, shelf)| keep(shelf));
        self.index = self.list.iter().enumerate().map(|(at, (stream, _))| (*stream, at)).collect();
        self.recent = None;
    }
}

/// The free blocks of one device (`#[repr(C)]`: what every request and free reads first).
#[repr(C)]
pub(crate) struct BlockCache<F> {
    bytes: usize,
    limit: usize,
    serial: u64,
    counts: Counts,
    shelves: Shelves<F>,
    /// Free large blocks that are parts of a segment, by address (for merging neighbours).
    parts: SortedMap<u64, LargeFree>,
    /// Large driver allocations, by base address: their sizes.
    segments: SortedMap<u64, usize>,
}

impl<F> BlockCache<F> {
    /// An empty cache holding at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> BlockCache<F> {
        BlockCache {
            shelves: Shelves::new(),
            parts: SortedMap::default(),
            segments: SortedMap::default(),
            bytes: 0,
            limit,
            serial: 0,
            counts: Counts::default(),
        }
    }

    /// Bytes cached.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// What it counted.
    pub(crate) fn counts(&self) -> Counts {
        self.counts
    }

    /// Change the bound (blocks over it go back at their next free, or at `drain`).
    pub(crate) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// A block of `size` (from `block_size`) for work on `stream`, from that stream's own free
    /// blocks: no driver call. Counts a hit; a miss is counted by `count_miss`.
    #[inline(always)]
    pub(crate) fn take_own(&mut self, size: usize, stream: u64) -> Option<u64> {
        let shelf = self.shelves.get_mut(stream)?;
        let ptr = if size <= SMALL_BLOCK {
            shelf.small.pop_newest(class_slot(size))?
        } else {
            self.take_own_large(size, stream)?
        };
        self.bytes -= size;
        self.counts.hits += 1;
        Some(ptr)
    }

    /// `take_own`'s best fit among `stream`'s large blocks, split to `size`.
    fn take_own_large(&mut self, size: usize, stream: u64) -> Option<u64> {
        let shelf = self.shelves.get_mut(stream)?;
        let ((found, ptr), filed) = shelf.large.remove_first_from(&(size, 0))?;
        self.take_large(ptr, (found, size), stream, filed);
        Some(ptr)
    }

    /// A block of `size` for `stream` from another stream whose fence after the block's free
    /// has passed; records fences (through `fences`) where none covers a block yet.
    pub(crate) fn take_other(&mut self, size: usize, stream: u64, fences: &mut impl Fences<Fence = F>) -> Option<u64> {
        let mut best: Option<(usize, u64, u64)> = None; // (size, address, its stream)
        for (other, shelf) in self.shelves.iter_mut().filter(|(s, shelf)| *s != stream && shelf.lasting) {
            let has_fit = if size <= SMALL_BLOCK {
                shelf.small.oldest(class_slot(size)).is_some()
            } else {
                shelf.large.range((size, 0)..).next().is_some()
            };
            if !has_fit {
                continue;
            }
            let ready = shelf.refresh(other, fences);
            let candidate = if size <= SMALL_BLOCK {
                shelf.small.oldest(class_slot(size)).filter(|(_, serial)| *serial <= ready).map(|(ptr, _)| (size, ptr))
            } else {
                shelf.large.range((size, 0)..).find(|(_, filed)| filed.serial <= ready).map(|(&key, _)| key)
            };
            if let Some((found, ptr)) = candidate {
                if best.is_none_or(|(best_size, ..)| found < best_size) {
                    best = Some((found, ptr, other));
                }
            }
        }
        let (found, ptr, other) = best?;
        let shelf = self.shelves.get_mut(other).expect("found above");
        if size <= SMALL_BLOCK {
            shelf.small.pop_oldest(class_slot(size));
        } else {
            let filed = shelf.large.remove(&(found, ptr)).expect("found above");
            self.take_large(ptr, (found, size), other, filed);
        }
        self.bytes -= size;
        self.counts.hits += 1;
        self.counts.cross_stream_hits += 1;
        Some(ptr)
    }

    /// Serve `size` of the free large block at `ptr` (of `found` bytes), just taken off
    /// `stream`'s shelf, where it was `filed`: the rest stays free there, a part.
    #[inline(always)]
    fn take_large(&mut self, ptr: u64, (found, size): (usize, usize), stream: u64, filed: Filed) {
        if !filed.whole {
            self.parts.remove(&ptr).expect("a shelved part is in the address map");
        }
        if found > size {
            let rest = LargeFree { size: found - size, stream, serial: filed.serial };
            let rest_ptr = ptr + size as u64;
            self.parts.insert(rest_ptr, rest);
            if let Some(shelf) = self.shelves.get_mut(stream) {
                shelf.large.insert((rest.size, rest_ptr), Filed { serial: rest.serial, whole: false });
            }
            self.counts.splits += 1;
        }
    }

    /// Count a request the cache could not serve.
    pub(crate) fn count_miss(&mut self) {
        self.counts.misses += 1;
    }

    /// Note a large block of `size` the driver just allocated at `ptr` (a segment).
    pub(crate) fn add_segment(&mut self, ptr: u64, size: usize) {
        if size > SMALL_BLOCK {
            self.segments.insert(ptr, size);
        }
    }

    /// The segment holding `ptr`: its base and size.
    fn segment_of(&self, ptr: u64) -> Option<(u64, usize)> {
        self.segments
            .range(..=ptr)
            .next_back()
            .map(|(&base, &size)| (base, size))
            .filter(|&(base, size)| ptr < base + size as u64)
    }

    /// File the block at `ptr` (of `size`, from `block_size`) freed after the work queued on
    /// `stream` (`lasting`: whether the stream outlives its blocks, asked only when the stream's
    /// shelf is made or the block comes back). What the cache cannot hold comes back, for the
    /// caller to return to the driver.
    #[inline(always)]
    pub(crate) fn give(&mut self, ptr: u64, size: usize, stream: u64, lasting: impl Fn() -> bool) -> Option<Returned> {
        self.serial += 1;
        let serial = self.serial;
        if size > SMALL_BLOCK {
            return self.give_large(ptr, size, stream, lasting);
        }
        if self.bytes + size > self.limit {
            self.counts.evictions += 1;
            return Some(Returned { ptr, stream, lasting: lasting() });
        }
        let shelf = self.shelves.get_or_insert(stream, lasting);
        shelf.small.push(class_slot(size), (ptr, serial));
        self.bytes += size;
        None
    }

    /// `give` of a large block (`give` advanced `self.serial` for it): merged with free neighbours of its segment
    /// freed on the same stream.
    fn give_large(&mut self, ptr: u64, size: usize, stream: u64, lasting: impl Fn() -> bool) -> Option<Returned> {
        let serial = self.serial;
        let (mut start, mut merged) = (ptr, LargeFree { size, stream, serial });
        let segment = self.segment_of(ptr);
        let same =
            |free: &LargeFree, at: u64, this: &BlockCache<F>| free.stream == stream && this.segment_of(at) == segment;
        let mut shelf_removals = Vec::new();
        // A whole segment has no neighbours to merge with (the common case: a request the
        // driver served, given back whole): its neighbours are not looked for.
        if segment != Some((ptr, size)) {
            if let Some(&next) = self.parts.get(&(ptr + size as u64)) {
                if same(&next, ptr + size as u64, self) {
                    shelf_removals.push((next.size, ptr + size as u64));
                    merged.size += next.size;
                }
            }
            if let Some((&prev_ptr, &prev)) = self.parts.range(..ptr).next_back() {
                if prev_ptr + prev.size as u64 == ptr && same(&prev, prev_ptr, self) {
                    shelf_removals.push((prev.size, prev_ptr));
                    merged.size += prev.size;
                    merged.serial = merged.serial.max(prev.serial);
                    start = prev_ptr;
                }
            }
        }
        let shelf = self.shelves.get_or_insert(stream, &lasting);
        for (removed_size, removed_ptr) in shelf_removals {
            shelf.large.remove(&(removed_size, removed_ptr));
            self.parts.remove(&removed_ptr);
        }
        self.bytes += size;
        let whole = segment == Some((start, merged.size));
        if whole && self.bytes > self.limit {
            self.bytes -= merged.size;
            self.segments.remove(&start);
            self.counts.evictions += 1;
            return Some(Returned { ptr: start, stream, lasting: lasting() });
        }
        if !whole {
            self.parts.insert(start, merged);
        }
        shelf.large.insert((merged.size, start), Filed { serial: merged.serial, whole });
        None
    }

    /// The serial of the newest free so far: a device-wide synchronisation begun after reading
    /// it covers the work on every block freed up to it (`drain`).
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// Empty the cache of the blocks freed up to serial `synchronised` (`serial` read before a
    /// device-wide synchronisation: every stream's work on them has finished): every such small
    /// block and every wholly free segment whose parts are all such, to give back to the
    /// driver. Blocks freed since (another thread's, during the synchronisation) and free parts
    /// of segments still partly in use stay cached.
    pub(crate) fn drain(&mut self, synchronised: u64, fences: &mut impl Fences<Fence = F>) -> Vec<u64> {
        let mut returned = Vec::new();
        for (_, shelf) in self.shelves.iter_mut() {
            let newest = shelf.newest();
            for slot in 0..CLASSES {
                while shelf.small.oldest(slot).is_some_and(|(_, serial)| serial <= synchronised) {
                    let (ptr, _) = shelf.small.pop_oldest(slot).expect("checked above");
                    self.bytes -= SMALLEST << slot;
                    returned.push(ptr);
                }
            }
            let whole: Vec<(usize, u64)> = shelf
                .large
                .iter()
                .filter(|(_, filed)| filed.whole && filed.serial <= synchronised)
                .map(|(&key, _)| key)
                .collect();
            for (size, base) in whole {
                shelf.large.remove(&(size, base));
                self.segments.remove(&base);
                self.bytes -= size;
                returned.push(base);
            }
            shelf.ready_upto = shelf.ready_upto.max(synchronised.min(newest));
            if shelf.pending.as_ref().is_some_and(|&(_, covers)| covers <= shelf.ready_upto) {
                let (fence, _) = shelf.pending.take().expect("checked above");
                fences.recycle(fence);
            }
        }
        let segments: Vec<(u64, usize)> = self.segments.iter().map(|(&b, &s)| (b, s)).collect();
        for (base, size) in segments {
            let end = base + size as u64;
            let parts: Vec<(u64, LargeFree)> = self.parts.range(base..end).map(|(&p, &f)| (p, f)).collect();
            let free: usize = parts.iter().map(|(_, f)| f.size).sum();
            if free != size || parts.iter().any(|(_, f)| f.serial > synchronised) {
                continue;
            }
            for (part, block) in parts {
                self.parts.remove(&part);
                if let Some(shelf) = self.shelves.get_mut(block.stream) {
                    shelf.large.remove(&(block.size, part));
                }
            }
            self.segments.remove(&base);
            self.bytes -= size;
            returned.push(base);
        }
        self.shelves.retain(|shelf| shelf.lasting || !shelf.is_empty());
        returned
    }

    /// The cached blocks by stream and size class.
    pub(crate) fn report(&self) -> Vec<Shelved> {
        let mut rows: BTreeMap<(u64, usize), Shelved> = BTreeMap::new();
        for (stream, shelf) in self.shelves.iter() {
            let waiting_above = shelf.ready_upto;
            let waiting_upto = shelf.pending.as_ref().map_or(0, |(_, covers)| *covers);
            let waiting = |serial: u64| serial > waiting_above && serial <= waiting_upto;
            let mut add = |class: usize, size: usize, serial: u64| {
                let row =
                    rows.entry((stream, class)).or_insert(Shelved { stream, class, blocks: 0, bytes: 0, waiting: 0 });
                row.blocks += 1;
                row.bytes += size;
                row.waiting += usize::from(waiting(serial));
            };
            for slot in 0..CLASSES {
                for &(_, serial) in shelf.small.iter(slot) {
                    add(SMALLEST << slot, SMALLEST << slot, serial);
                }
            }
            for (&(size, _), filed) in shelf.large.iter() {
                add(size.next_power_of_two(), size, filed.serial);
            }
        }
        rows.into_values().filter(|row| row.blocks > 0).collect()
    }
}

#[cfg(test)]
#[path = "block_cache_tests.rs"]
mod tests;
