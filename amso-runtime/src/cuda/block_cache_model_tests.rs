//! The block cache (`block_cache.rs`) against a model of its rules, over random work: every
//! byte handed out is free in the model; a stream's own takes are its own memory (small ones its
//! newest block), another stream's only what a finished fence covers, from a stream that outlives
//! its blocks (small ones the oldest); serials increase; `bytes` and `report` agree with the
//! model; a drain returns exactly the blocks freed before the synchronisation began, whole
//! segments only; and with every stream finished, a request that some block fits is served.

use super::super::*;
use std::collections::{BTreeMap, HashMap, VecDeque};

const A: u64 = 0x100;
const B: u64 = 0x200;
const C: u64 = 0x300; // not lasting
const MIB: usize = 1 << 20;
const BASE: u64 = 1 << 40;

fn lasting(s: u64) -> bool {
    s != C
}

#[derive(Default)]
struct World {
    now: u64,
    done: HashMap<u64, u64>,
    refuse: bool,
}
impl World {
    fn tick(&mut self) -> u64 {
        self.now += 1;
        self.now
    }
    fn finish(&mut self, s: u64) {
        let now = self.tick();
        self.done.insert(s, now);
    }
}
impl Fences for World {
    type Fence = (u64, u64);
    fn record(&mut self, s: u64) -> Option<(u64, u64)> {
        assert!(lasting(s), "a fence on a stream that may be destroyed");
        if self.refuse {
            return None;
        }
        let t = self.tick();
        Some((s, t))
    }
    fn passed(&mut self, &(s, t): &(u64, u64)) -> bool {
        self.done.get(&s).is_some_and(|&d| d >= t)
    }
    fn recycle(&mut self, _: (u64, u64)) {}
}

#[derive(Clone, Copy, Debug)]
struct Region {
    len: usize,
    stream: u64,
    time: u64,
    serial: u64,
}

struct Model {
    freed: BTreeMap<u64, Region>,
    small: HashMap<(u64, usize), VecDeque<u64>>,
    segments: BTreeMap<u64, usize>,
}

impl Model {
    fn overlapping(&self, ptr: u64, size: usize) -> Vec<(u64, Region)> {
        let end = ptr + size as u64;
        let mut out = Vec::new();
        if let Some((&p, &r)) = self.freed.range(..ptr).next_back() {
            if p + r.len as u64 > ptr {
                out.push((p, r));
            }
        }
        for (&p, &r) in self.freed.range(ptr..end) {
            out.push((p, r));
        }
        out
    }
    /// Remove [ptr, ptr+size) from freed, checking it was all free; returns the regions.
    fn take(&mut self, ptr: u64, size: usize) -> Vec<(u64, Region)> {
        let end = ptr + size as u64;
        let regions = self.overlapping(ptr, size);
        let covered: u64 = regions.iter().map(|&(p, r)| (p + r.len as u64).min(end) - p.max(ptr)).sum();
        assert_eq!(covered, size as u64, "handed out memory that is not all free: {ptr:#x} {size}");
        for &(p, r) in &regions {
            self.freed.remove(&p);
            if p < ptr {
                self.freed.insert(p, Region { len: (ptr - p) as usize, ..r });
            }
            if p + r.len as u64 > end {
                self.freed.insert(end, Region { len: (p + r.len as u64 - end) as usize, ..r });
            }
        }
        regions
    }
    fn bytes(&self) -> usize {
        self.freed.values().map(|r| r.len).sum()
    }
}

fn check_internal(cache: &BlockCache<(u64, u64)>, model: &Model) {
    for (stream, shelf) in cache.shelves.iter() {
        for slot in 0..CLASSES {
            let all: Vec<(u64, u64)> = shelf.small.iter(slot).copied().collect();
            for w in all.windows(2) {
                assert!(w[0].1 < w[1].1, "serials increase");
            }
            let ptrs: Vec<u64> = all.iter().map(|b| b.0).collect();
            let expect: Vec<u64> =
                model.small.get(&(stream, slot)).map(|d| d.iter().copied().collect()).unwrap_or_default();
            assert_eq!(ptrs, expect, "small blocks of {stream:#x} slot {slot}");
            if shelf.small.newest[slot].0 == 0 {
                assert_eq!(shelf.small.newest[slot].1, 0);
            }
        }
        // newest() is the max filed serial
        let mut max = 0;
        for slot in 0..CLASSES {
            for &(_, s) in shelf.small.iter(slot) {
                max = max.max(s);
            }
        }
        assert!(shelf.newest() >= max);
    }
    // model small blocks all on shelves
    for (&(stream, slot), d) in &model.small {
        if !d.is_empty() {
            let shelf = cache.shelves.iter().find(|(s, _)| *s == stream).expect("shelf").1;
            assert_eq!(shelf.small.iter(slot).count(), d.len());
        }
    }
    assert_eq!(cache.bytes(), model.bytes(), "bytes");
    let shelved: usize = cache.report().iter().map(|r| r.bytes).sum();
    assert_eq!(shelved, cache.bytes());
}

fn eligible(cache: &BlockCache<(u64, u64)>, size: usize, stream: u64) -> bool {
    cache.shelves.iter().any(|(s, shelf)| {
        s != stream
            && shelf.lasting
            && if size <= SMALL_BLOCK {
                shelf.small.oldest(class_slot(size)).is_some()
            } else {
                shelf.large.range((size, 0)..).next().is_some() || shelf.whole.size >= size
            }
    })
}

/// One random run: the cache, its model, the world of streams, and the blocks lent.
struct Run {
    next: Box<dyn FnMut() -> u64>,
    world: World,
    cache: BlockCache<(u64, u64)>,
    model: Model,
    live: BTreeMap<u64, usize>,
    driver_next: u64,
}

const STREAMS: [u64; 3] = [A, B, C];

impl Run {
    fn new(seed: u64, limit: usize) -> Run {
        Run {
            next: Box::new(crate::cuda::xorshift(seed)),
            world: World::default(),
            cache: BlockCache::new(limit),
            model: Model { freed: BTreeMap::new(), small: HashMap::new(), segments: BTreeMap::new() },
            live: BTreeMap::new(),
            driver_next: BASE,
        }
    }

    fn stream(&mut self) -> u64 {
        STREAMS[((self.next)() % 3) as usize]
    }

    /// A request: the stream's own block, else another stream's, else the driver's.
    fn allocate(&mut self) {
        let size = match (self.next)() % 4 {
            0 => [512usize, 4096, 64 << 10, MIB][((self.next)() % 4) as usize],
            1 => block_size(1 + ((self.next)() % (64 << 10)) as usize).unwrap(),
            _ => block_size(1 + ((self.next)() % (12 * MIB as u64)) as usize).unwrap(),
        };
        let stream = self.stream();
        let small_expect = (size <= SMALL_BLOCK)
            .then(|| self.model.small.get(&(stream, class_slot(size))).and_then(|d| d.back().copied()))
            .flatten();
        let own = self.cache.take_own(size, stream);
        if size <= SMALL_BLOCK {
            assert_eq!(own, small_expect, "own takes the newest");
        }
        let ptr = match own {
            Some(ptr) => {
                for (_, r) in self.model.take(ptr, size) {
                    assert_eq!(r.stream, stream, "own take of another stream's memory");
                }
                if size <= SMALL_BLOCK {
                    self.model.small.get_mut(&(stream, class_slot(size))).unwrap().pop_back();
                }
                ptr
            }
            None => self.allocate_elsewhere(size, stream),
        };
        self.live.insert(ptr, size);
    }

    /// `allocate` beyond the stream's own blocks.
    fn allocate_elsewhere(&mut self, size: usize, stream: u64) -> u64 {
        let could = eligible(&self.cache, size, stream);
        let mut other = self.cache.take_other(size, stream, &mut self.world);
        if other.is_none() && could && !self.world.refuse && (self.next)().is_multiple_of(3) {
            // liveness: with every stream finished, two more tries must succeed
            for _ in 0..2 {
                for s in STREAMS {
                    self.world.finish(s);
                }
                other = self.cache.take_other(size, stream, &mut self.world);
                if other.is_some() {
                    break;
                }
            }
            assert!(other.is_some(), "a ready block was never found (size {size})");
        }
        if let Some(ptr) = other {
            let regions = self.model.take(ptr, size);
            for (_, r) in &regions {
                assert_ne!(r.stream, stream);
                assert!(lasting(r.stream), "took a block of a stream that may be destroyed");
                let done = self.world.done.get(&r.stream).copied().unwrap_or(0);
                assert!(done >= r.time, "took a block whose free has not finished on {:#x}", r.stream);
            }
            if size <= SMALL_BLOCK {
                let d = self.model.small.get_mut(&(regions[0].1.stream, class_slot(size))).unwrap();
                assert_eq!(d.pop_front(), Some(ptr), "another stream takes the oldest");
            }
            return ptr;
        }
        self.cache.count_miss();
        let ptr = self.driver_next;
        self.driver_next += size as u64 + 4096 * (1 + (self.next)() % 2);
        self.cache.add_segment(ptr, size);
        if size > SMALL_BLOCK {
            self.model.segments.insert(ptr, size);
        }
        assert!(self.model.overlapping(ptr, size).is_empty());
        ptr
    }

    /// Give a random lent block back on a random stream.
    fn free(&mut self) {
        let &ptr = self.live.keys().nth(((self.next)() % self.live.len() as u64) as usize).unwrap();
        let size = self.live.remove(&ptr).unwrap();
        let stream = self.stream();
        let time = self.world.tick();
        let returned = self.cache.give(ptr, size, stream, || lasting(stream));
        let serial = self.cache.serial();
        self.model.freed.insert(ptr, Region { len: size, stream, time, serial });
        match returned {
            None if size <= SMALL_BLOCK => {
                self.model.small.entry((stream, class_slot(size))).or_default().push_back(ptr);
            }
            None => {}
            Some(ret) => {
                assert_eq!((ret.stream, ret.lasting), (stream, lasting(stream)));
                if size <= SMALL_BLOCK {
                    assert_eq!(ret.ptr, ptr);
                    self.model.freed.remove(&ptr);
                } else {
                    let seg = *self.model.segments.get(&ret.ptr).expect("a whole segment back");
                    for (_, r) in self.model.take(ret.ptr, seg) {
                        assert_eq!(r.stream, stream);
                    }
                    self.model.segments.remove(&ret.ptr);
                }
            }
        }
    }

    /// A drain: the serial read, maybe more frees meanwhile, then the device synchronises.
    fn drain(&mut self) {
        let synchronised = self.cache.serial();
        let t_sync = self.world.tick();
        for _ in 0..((self.next)() % 3) {
            if !self.live.is_empty() {
                self.free();
            }
        }
        for s in STREAMS {
            let d = self.world.done.entry(s).or_insert(0);
            *d = (*d).max(t_sync);
        }
        for base in self.cache.drain(synchronised, &mut self.world) {
            if let Some(&seg) = self.model.segments.get(&base) {
                for (_, r) in self.model.take(base, seg) {
                    assert!(r.serial <= synchronised, "drained a block freed after the sync began");
                }
                self.model.segments.remove(&base);
            } else {
                let r = self.model.freed.remove(&base).expect("a drained small block is free");
                assert!(r.len <= SMALL_BLOCK && r.serial <= synchronised);
                let d = self.model.small.get_mut(&(r.stream, class_slot(r.len))).unwrap();
                assert_eq!(d.pop_front(), Some(base), "drained oldest first");
            }
        }
        // Completeness: nothing freed before the synchronisation stays.
        for (&p, r) in &self.model.freed {
            let in_segment = self.model.segments.range(..=p).next_back().is_some_and(|(&b, &s)| p < b + s as u64);
            if r.len <= SMALL_BLOCK && !in_segment {
                assert!(r.serial > synchronised, "a small block freed before the sync stayed");
            }
        }
        for (&base, &seg) in &self.model.segments {
            let regions = self.model.overlapping(base, seg);
            let free: usize = regions.iter().map(|(_, r)| r.len).sum();
            let all_before = regions.iter().all(|(_, r)| r.serial <= synchronised);
            assert!(!(free == seg && all_before), "a wholly free segment freed before the sync stayed: {base:#x}");
        }
    }
}

fn run(seed: u64, limit: usize, steps: usize, refuse_sometimes: bool) {
    let mut run = Run::new(seed, limit);
    for _ in 0..steps {
        run.world.refuse = refuse_sometimes && (run.next)().is_multiple_of(7);
        match (run.next)() % 100 {
            _ if run.live.is_empty() => run.allocate(),
            0..45 => run.allocate(),
            45..95 => run.free(),
            _ => run.drain(),
        }
        if (run.next)().is_multiple_of(10) {
            let stream = run.stream();
            run.world.finish(stream);
        }
        check_internal(&run.cache, &run.model);
    }
}

#[test]
fn the_cache_agrees_with_a_model_of_its_rules() {
    for seed in 1..40u64 {
        run(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0x1234_5678_9abc_def1), usize::MAX, 3000, false);
    }
}

#[test]
fn the_cache_agrees_with_a_model_of_its_rules_bounded_with_refused_fences() {
    for seed in 1..40u64 {
        run(0xdead_beef_cafe_f00d ^ seed.wrapping_mul(0x0123_4567_89ab_cdef), 48 * MIB, 3000, true);
    }
}
