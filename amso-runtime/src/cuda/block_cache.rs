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
//!   The newest small block of each class and the whole segment a stream freed last are kept
//!   apart on its shelf (`shelf.rs`): a request of their size takes them without a search.
//! - **Bound.** The cache holds at most `limit` bytes: a block that would exceed it is handed
//!   back (`give`'s answer) for the caller to return to the driver.

use std::collections::BTreeMap;

use super::shelf::{class_slot, Filed, Shelves, Whole, CLASSES, SMALLEST, SMALL_BLOCK};
use super::sorted_map::SortedMap;

pub(crate) use super::shelf::{block_size, Fences};

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
        } else if let Some(ptr) = shelf.take_whole(size) {
            ptr
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
        shelf.settle();
        let ((found, ptr), filed) = shelf.large.remove_first_from(&(size, 0))?;
        self.take_large(ptr, (found, size), stream, filed);
        Some(ptr)
    }

    /// A block of `size` for `stream` from another stream whose fence after the block's free
    /// has passed; records fences (through `fences`) where none covers a block yet.
    pub(crate) fn take_other(&mut self, size: usize, stream: u64, fences: &mut impl Fences<Fence = F>) -> Option<u64> {
        let mut best: Option<(usize, u64, u64)> = None; // (size, address, its stream)
        for (other, shelf) in self.shelves.iter_mut().filter(|(s, shelf)| *s != stream && shelf.lasting) {
            shelf.settle();
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
            // A whole segment (a request the driver served, given back whole) has no neighbour
            // to merge with: it is kept apart on its shelf, to be taken back without a search.
            if self.segments.get(&ptr) == Some(&size) && self.bytes + size <= self.limit {
                self.shelves.get_or_insert(stream, lasting).keep_whole(Whole { ptr, size, serial });
                self.bytes += size;
                return None;
            }
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
            shelf.settle();
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
            if shelf.whole.ptr != 0 {
                add(shelf.whole.size.next_power_of_two(), shelf.whole.size, shelf.whole.serial);
            }
        }
        rows.into_values().filter(|row| row.blocks > 0).collect()
    }
}

#[cfg(test)]
#[path = "block_cache_tests.rs"]
mod tests;
