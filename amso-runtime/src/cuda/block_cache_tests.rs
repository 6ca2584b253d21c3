//! The block cache's rules (`block_cache.rs`), without a GPU: fences are counters.

use super::*;
use std::collections::HashMap;

#[path = "block_cache_model_tests.rs"]
mod model;

/// Fences as counters: `record` notes the stream's progress, `passed` asks whether the
/// test has let that stream run past it.
#[derive(Default)]
struct Clock {
    recorded: Vec<(u64, u64)>,
    finished: HashMap<u64, u64>,
    recycled: usize,
    refuse: bool,
}

impl Clock {
    /// Let `stream`'s work run up to now.
    fn finish(&mut self, stream: u64) {
        let now = self.recorded.len() as u64 + 1;
        self.finished.insert(stream, now);
    }
}

impl Fences for Clock {
    type Fence = (u64, u64);
    fn record(&mut self, stream: u64) -> Option<(u64, u64)> {
        if self.refuse {
            return None;
        }
        self.recorded.push((stream, self.recorded.len() as u64 + 1));
        self.recorded.last().copied()
    }
    fn passed(&mut self, &(stream, at): &(u64, u64)) -> bool {
        self.finished.get(&stream).is_some_and(|&done| done > at)
    }
    fn recycle(&mut self, _: (u64, u64)) {
        self.recycled += 1;
    }
}

const MIB: usize = 1 << 20;
const A: u64 = 0x100;
const B: u64 = 0x200;
const BASE: u64 = 1 << 40;

#[test]
fn sizes_are_classes_then_multiples_of_two_mib() {
    assert_eq!(block_size(1), Some(512));
    assert_eq!(block_size(513), Some(1024));
    assert_eq!(block_size(MIB), Some(MIB));
    assert_eq!(block_size(MIB + 1), Some(2 * MIB));
    assert_eq!(block_size(5 * MIB), Some(6 * MIB));
    assert_eq!(block_size(usize::MAX), None);
}

#[test]
fn a_block_is_reused_on_its_own_stream_at_once() {
    let mut cache = BlockCache::<(u64, u64)>::new(usize::MAX);
    assert_eq!(cache.give(BASE, 4096, A, || false), None);
    assert_eq!(cache.bytes(), 4096);
    assert_eq!(cache.take_own(4096, B), None, "not on another stream's own path");
    assert_eq!(cache.take_own(2048, A), None, "not another class");
    assert_eq!(cache.take_own(4096, A), Some(BASE));
    assert_eq!(cache.bytes(), 0);
    assert_eq!(cache.counts().hits, 1);
}

#[test]
fn another_stream_waits_for_the_fence_recorded_after_the_free() {
    let mut clock = Clock::default();
    let mut cache = BlockCache::new(usize::MAX);
    cache.give(BASE, 4096, A, || true);
    assert_eq!(cache.take_other(4096, B, &mut clock), None, "A's work may still use it");
    assert_eq!(clock.recorded.len(), 1, "a fence was recorded on A");
    assert_eq!(cache.report()[0].waiting, 1);
    assert_eq!(cache.take_other(4096, B, &mut clock), None, "the fence has not passed");
    assert_eq!(clock.recorded.len(), 1, "one fence at a time");
    clock.finish(A);
    assert_eq!(cache.take_other(4096, B, &mut clock), Some(BASE));
    assert_eq!((cache.counts().cross_stream_hits, clock.recycled), (1, 1));
}

#[test]
fn its_own_stream_takes_the_newest_block_back_another_the_oldest() {
    let mut clock = Clock::default();
    let mut cache = BlockCache::new(usize::MAX);
    for at in 0..4 {
        cache.give(BASE + at * 4096, 4096, A, || true);
    }
    assert_eq!(cache.take_own(4096, A), Some(BASE + 3 * 4096), "the newest, whose work ended last on A");
    assert_eq!(cache.take_own(4096, A), Some(BASE + 2 * 4096), "then the newest of the older ones");
    cache.give(BASE + 2 * 4096, 4096, A, || true);
    assert_eq!(cache.report()[0].blocks, 3);
    cache.take_other(4096, B, &mut clock);
    clock.finish(A);
    let others: Vec<_> = (0..3).map(|_| cache.take_other(4096, B, &mut clock)).collect();
    assert_eq!(others, [Some(BASE), Some(BASE + 4096), Some(BASE + 2 * 4096)], "oldest first");
    assert_eq!((cache.take_own(4096, A), cache.bytes()), (None, 0));
    for at in 0..3 {
        cache.give(BASE + at * 4096, 4096, A, || true);
    }
    let synchronised = cache.serial();
    cache.give(BASE + 3 * 4096, 4096, A, || true);
    assert_eq!(cache.drain(synchronised, &mut clock), [BASE, BASE + 4096, BASE + 2 * 4096]);
    assert_eq!(cache.take_own(4096, A), Some(BASE + 3 * 4096), "freed after the synchronisation began");
}

#[test]
fn a_block_freed_after_the_fence_waits_for_the_next_one() {
    let mut clock = Clock::default();
    let mut cache = BlockCache::new(usize::MAX);
    cache.give(BASE, 4096, A, || true);
    cache.take_other(4096, B, &mut clock); // records a fence covering the first block
    cache.give(BASE + 4096, 4096, A, || true);
    clock.finish(A);
    assert_eq!(cache.take_other(4096, B, &mut clock), Some(BASE), "the oldest, covered by the fence");
    assert_eq!(cache.take_other(4096, B, &mut clock), None, "the second came after the fence");
    clock.finish(A);
    assert_eq!(cache.take_other(4096, B, &mut clock), Some(BASE + 4096));
}

#[test]
fn streams_that_may_be_destroyed_are_never_fenced() {
    let mut clock = Clock::default();
    let mut cache = BlockCache::new(usize::MAX);
    cache.give(BASE, 4096, A, || false);
    clock.finish(A);
    assert_eq!(cache.take_other(4096, B, &mut clock), None);
    assert!(clock.recorded.is_empty(), "nothing was queued on A after its free");
    assert_eq!(cache.take_own(4096, A), Some(BASE));
}

#[test]
fn large_blocks_take_the_best_fit_and_split() {
    let mut cache = BlockCache::<(u64, u64)>::new(usize::MAX);
    cache.add_segment(BASE, 64 * MIB);
    cache.add_segment(BASE + (1 << 30), 8 * MIB);
    cache.give(BASE, 64 * MIB, A, || true);
    cache.give(BASE + (1 << 30), 8 * MIB, A, || true);
    assert_eq!(cache.take_own(6 * MIB, A), Some(BASE + (1 << 30)), "the 8 MiB block fits best");
    assert_eq!(cache.counts().splits, 1);
    assert_eq!(cache.bytes(), 66 * MIB);
    assert_eq!(cache.take_own(2 * MIB, A), Some(BASE + (1 << 30) + 6 * MIB as u64), "the rest of the split");
    assert_eq!(cache.take_own(16 * MIB, A), Some(BASE));
    assert_eq!(cache.take_own(48 * MIB, A), Some(BASE + 16 * MIB as u64));
    assert_eq!(cache.bytes(), 0);
}

#[test]
fn a_whole_segment_comes_back_for_its_size_and_the_best_fit_is_split_for_a_smaller_one() {
    let mut cache = BlockCache::<(u64, u64)>::new(usize::MAX);
    let (big, small) = (BASE, BASE + (1 << 30));
    cache.add_segment(big, 8 * MIB);
    cache.add_segment(small, 4 * MIB);
    cache.give(big, 8 * MIB, A, || true);
    cache.give(small, 4 * MIB, A, || true);
    assert_eq!(cache.take_own(4 * MIB, A), Some(small), "the segment freed last, of the size asked");
    cache.give(small, 4 * MIB, A, || true);
    assert_eq!(cache.counts().splits, 0);
    assert_eq!(cache.take_own(2 * MIB, A), Some(small), "the best fit of the two, split");
    assert_eq!(cache.counts().splits, 1);
    assert_eq!(cache.take_own(8 * MIB, A), Some(big));
    assert_eq!(cache.take_own(2 * MIB, A), Some(small + 2 * MIB as u64), "the rest of the split one");
    assert_eq!(cache.bytes(), 0);
}

#[test]
fn neighbours_freed_on_one_stream_merge_into_their_segment() {
    let mut clock = Clock::default();
    let mut cache = BlockCache::new(usize::MAX);
    cache.add_segment(BASE, 8 * MIB);
    cache.give(BASE, 8 * MIB, A, || true);
    let first = cache.take_own(4 * MIB, A).unwrap();
    let second = cache.take_own(4 * MIB, A).unwrap();
    cache.give(second, 4 * MIB, A, || true);
    cache.give(first, 4 * MIB, A, || true);
    assert_eq!(cache.report().len(), 1, "one block again: {:?}", cache.report());
    assert_eq!(cache.take_own(8 * MIB, A), Some(BASE));
    cache.give(BASE, 8 * MIB, A, || true);
    assert_eq!(cache.drain(cache.serial(), &mut clock), vec![BASE], "the whole segment goes back");
    assert_eq!(cache.bytes(), 0);
}

#[test]
fn neighbours_of_two_streams_or_two_segments_stay_apart() {
    let mut cache = BlockCache::<(u64, u64)>::new(usize::MAX);
    cache.add_segment(BASE, 4 * MIB);
    cache.add_segment(BASE + 4 * MIB as u64, 4 * MIB);
    cache.give(BASE, 4 * MIB, A, || true);
    cache.give(BASE + 4 * MIB as u64, 4 * MIB, A, || true);
    assert_eq!(cache.take_own(8 * MIB, A), None, "adjacent segments are two driver allocations");
    cache.add_segment(BASE + (1 << 30), 8 * MIB);
    cache.give(BASE + (1 << 30), 8 * MIB, B, || true);
    let ptr = cache.take_own(4 * MIB, B).unwrap();
    cache.give(ptr, 4 * MIB, A, || true);
    assert_eq!(cache.report().iter().map(|r| r.blocks).sum::<usize>(), 4);
}

#[test]
fn drain_returns_whole_segments_and_keeps_parts_in_use() {
    let mut clock = Clock::default();
    let mut cache = BlockCache::new(usize::MAX);
    cache.add_segment(BASE, 8 * MIB);
    cache.give(BASE, 8 * MIB, A, || true);
    let held = cache.take_own(2 * MIB, A).unwrap();
    cache.give(BASE + (1 << 30), 4096, B, || false);
    assert_eq!(
        cache.drain(cache.serial(), &mut clock),
        vec![BASE + (1 << 30)],
        "the small block; the segment is in use"
    );
    assert_eq!(cache.bytes(), 6 * MIB);
    cache.give(held, 2 * MIB, B, || true);
    assert_eq!(
        cache.drain(cache.serial(), &mut clock),
        vec![BASE],
        "after a synchronisation, parts of two streams are one"
    );
    assert_eq!(cache.bytes(), 0);
}

#[test]
fn the_bound_hands_blocks_back() {
    let mut cache = BlockCache::<(u64, u64)>::new(4 * MIB);
    assert_eq!(cache.give(BASE, 512, A, || true), None);
    cache.add_segment(BASE + (1 << 30), 8 * MIB);
    assert_eq!(
        cache.give(BASE + (1 << 30), 8 * MIB, A, || false),
        Some(Returned { ptr: BASE + (1 << 30), stream: A, lasting: false })
    );
    assert_eq!(cache.bytes(), 512);
    assert_eq!(cache.counts().evictions, 1);
    cache.set_limit(512);
    assert!(cache.give(BASE + 512, 512, A, || true).is_some());
}

#[test]
fn a_fence_that_cannot_be_recorded_keeps_the_block_home() {
    let mut clock = Clock { refuse: true, ..Clock::default() };
    let mut cache = BlockCache::new(usize::MAX);
    cache.give(BASE, 4096, A, || true);
    assert_eq!(cache.take_other(4096, B, &mut clock), None);
    assert_eq!(cache.take_own(4096, A), Some(BASE));
}

/// A seeded random workload over one stream: every block handed out is disjoint from every
/// other live one, and the cache's byte count matches its blocks.
#[test]
fn random_work_never_hands_out_overlapping_blocks() {
    let mut clock = Clock::default();
    let mut cache = BlockCache::new(usize::MAX);
    let mut next = crate::cuda::xorshift(0x2545_f491_4f6c_dd1d);
    let mut live: BTreeMap<u64, usize> = BTreeMap::new();
    let mut driver_next = BASE;
    for _ in 0..5000 {
        if live.is_empty() || next().is_multiple_of(2) {
            let bytes = 1 + (next() % (40 * MIB as u64)) as usize;
            let size = block_size(bytes).unwrap();
            let stream = if next().is_multiple_of(3) { B } else { A };
            let ptr = cache
                .take_own(size, stream)
                .or_else(|| cache.take_other(size, stream, &mut clock))
                .unwrap_or_else(|| {
                    cache.count_miss();
                    let ptr = driver_next;
                    driver_next += size as u64 + 4096;
                    cache.add_segment(ptr, size);
                    ptr
                });
            if let Some((&before, &len)) = live.range(..=ptr).next_back() {
                assert!(before + len as u64 <= ptr, "overlaps the block at {before:x}");
            }
            if let Some((&after, _)) = live.range(ptr + 1..).next() {
                assert!(ptr + size as u64 <= after, "overlaps the block at {after:x}");
            }
            live.insert(ptr, size);
        } else {
            let &ptr = live.keys().nth((next() % live.len() as u64) as usize).unwrap();
            let size = live.remove(&ptr).unwrap();
            cache.give(ptr, size, if next().is_multiple_of(3) { B } else { A }, || true);
            if next().is_multiple_of(50) {
                clock.finish(A);
                clock.finish(B);
            }
        }
        let shelved: usize = cache.report().iter().map(|r| r.bytes).sum();
        assert_eq!(shelved, cache.bytes());
    }
}

#[test]
fn drain_keeps_blocks_freed_after_the_synchronisation_began() {
    let mut clock = Clock::default();
    let mut cache = BlockCache::new(usize::MAX);
    cache.give(BASE, 4096, A, || true);
    cache.add_segment(BASE + (1 << 30), 8 * MIB);
    cache.give(BASE + (1 << 30), 8 * MIB, A, || true);
    let synchronised = cache.serial(); // read, then the device synchronises
    cache.give(BASE + 4096, 4096, A, || true); // another thread's free meanwhile: its work may run on
    cache.add_segment(BASE + (2 << 30), 4 * MIB);
    cache.give(BASE + (2 << 30), 4 * MIB, A, || true);
    let mut returned = cache.drain(synchronised, &mut clock);
    returned.sort_unstable();
    assert_eq!(returned, vec![BASE, BASE + (1 << 30)]);
    assert_eq!(cache.bytes(), 4096 + 4 * MIB);
    assert_eq!(cache.take_other(4096, B, &mut clock), None, "the later block is not known ready elsewhere");
    assert_eq!(cache.take_own(4096, A), Some(BASE + 4096));
}
