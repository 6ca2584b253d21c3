//! The host side of a staged transfer (`cuda/transfer.rs`): a crew of threads copies the
//! transfer's chunks piece by piece through a ring of staging slots, while the calling thread
//! drives the copy engine in one of two schedules, [`send`] (host to device) or [`receive`]
//! (device to host). The engine is a trait, so both schedules are tested on the host against
//! an engine that checks every slot's use.
//!
//! The calling thread releases chunks: a chunk may be copied once its slot holds nothing the
//! engine still needs (sending) or once the engine has filled it (receiving). Workers take
//! pieces in order from a shared counter and move on to the next released chunk as soon as
//! the current one has none left, so neither a slow thread nor the engine's hand-off stalls
//! the others.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread::Thread;

use crate::error::Result;

/// The copy engine's side of a staged transfer. Chunk `index` goes through slot
/// `index % depth`.
pub(crate) trait Engine {
    /// Queue the engine's copy of chunk `index`: from its slot to the device (sending), or
    /// from the device into its slot (receiving).
    fn queue(&self, index: usize) -> Result<()>;
    /// Block until the copy last queued through `slot` is done.
    fn wait(&self, slot: usize) -> Result<()>;
}

/// Host to device: the crew fills chunk i's slot once the engine has sent chunk i - depth out
/// of it; the engine sends each chunk once it is filled.
pub(crate) fn send(crew: &Crew<'_>, depth: usize, engine: &impl Engine) -> Result<()> {
    assert!(depth >= 2, "a staging ring needs two slots: one filling while the other is sent");
    crew.release_through(depth - 1);
    for index in 0..crew.chunks.len() {
        crew.wait_copied(index);
        engine.queue(index)?;
        // The previous chunk's copy, queued a chunk's fill ago, frees its slot for the chunk
        // `depth` places after it. (Waiting for this chunk's copy instead would hold the next
        // one back until the engine had gone idle.)
        if let Some(previous) = index.checked_sub(1) {
            engine.wait(previous % depth)?;
            crew.release_through(previous + depth);
        }
    }
    Ok(())
}

/// Device to host: the engine fills the first `depth` slots; the crew drains each chunk once
/// its copy is done, and a drained slot takes the chunk `depth` places later.
pub(crate) fn receive(crew: &Crew<'_>, depth: usize, engine: &impl Engine) -> Result<()> {
    assert!(depth >= 2, "a staging ring needs two slots: one draining while the other is filled");
    let chunks = crew.chunks.len();
    for index in 0..chunks.min(depth) {
        engine.queue(index)?;
    }
    for index in 0..chunks {
        // Chunk `index` was queued `depth - 1` iterations ago (or before the loop).
        engine.wait(index % depth)?;
        crew.release_through(index);
        if let Some(previous) = index.checked_sub(1) {
            crew.wait_copied(previous);
            if previous + depth < chunks {
                engine.queue(previous + depth)?;
            }
        }
    }
    if let Some(last) = chunks.checked_sub(1) {
        crew.wait_copied(last);
    }
    Ok(())
}

/// What the calling thread uses to drive the crew.
pub(crate) struct Crew<'a> {
    chunks: &'a [(usize, usize)],
    piece: usize,
    /// Per chunk: pieces handed out, and pieces copied.
    claimed: Vec<AtomicUsize>,
    copied: Vec<AtomicUsize>,
    /// Chunks below this may be copied (`gate` holds the same value for the workers that
    /// wait for it).
    released: AtomicUsize,
    gate: Mutex<usize>,
    opened: Condvar,
    /// Set when the driver is done, or gave up: workers stop taking pieces.
    stopped: AtomicBool,
    /// Set when a worker panicked: the driver stops waiting for pieces that will not come.
    abandoned: AtomicBool,
    /// The calling thread, woken when a chunk's last piece is copied.
    driver: Thread,
}

impl Crew<'_> {
    /// Let the workers copy the chunks up to and including `index`.
    pub(crate) fn release_through(&self, index: usize) {
        let mut gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        *gate = (*gate).max(index.saturating_add(1).min(self.chunks.len()));
        self.released.store(*gate, Ordering::Release);
        self.opened.notify_all();
    }

    /// Block until every piece of chunk `index` (released earlier) is copied. Only the thread
    /// that called [`run`] may wait: it is the one the workers wake.
    ///
    /// # Panics
    /// If a worker panicked, rather than wait for ever.
    pub(crate) fn wait_copied(&self, index: usize) {
        debug_assert_eq!(std::thread::current().id(), self.driver.id(), "only run's caller waits");
        while self.copied[index].load(Ordering::Acquire) < self.pieces(index) {
            assert!(!self.abandoned.load(Ordering::Acquire), "a thread copying a staged transfer panicked");
            std::thread::park();
        }
    }

    fn pieces(&self, index: usize) -> usize {
        self.chunks[index].1.div_ceil(self.piece)
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        self.opened.notify_all();
    }

    /// Wait until chunk `index` is released; false once the crew is stopped.
    fn wait_released(&self, index: usize) -> bool {
        if self.released.load(Ordering::Acquire) > index {
            return true;
        }
        let mut gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        while *gate <= index && !self.stopped.load(Ordering::Acquire) {
            gate = self.opened.wait(gate).unwrap_or_else(|e| e.into_inner());
        }
        *gate > index
    }

    /// One worker's part: pieces of each chunk in turn, until all are taken or the crew stops.
    fn work(&self, copy: &(impl Fn(usize, usize, usize) + Sync)) {
        let _abandon = Abandon(self);
        for index in 0..self.chunks.len() {
            if !self.wait_released(index) {
                return;
            }
            let (len, pieces) = (self.chunks[index].1, self.pieces(index));
            loop {
                if self.stopped.load(Ordering::Acquire) {
                    return;
                }
                let piece = self.claimed[index].fetch_add(1, Ordering::Relaxed);
                if piece >= pieces {
                    break;
                }
                let offset = piece * self.piece;
                copy(index, offset, self.piece.min(len - offset));
                // Release: the driver, acquiring the count, sees the piece's bytes (a copy with
                // non-temporal stores fences them itself, before it returns).
                if self.copied[index].fetch_add(1, Ordering::AcqRel) + 1 == pieces {
                    self.driver.unpark();
                }
            }
        }
    }
}

/// Marks the crew abandoned if its worker unwinds, and wakes the driver to notice.
struct Abandon<'a>(&'a Crew<'a>);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abandoned.store(true, Ordering::Release);
            self.0.stop();
            self.0.driver.unpark();
        }
    }
}

/// Stops the crew when the driver is done, returns early or unwinds.
struct StopOnExit<'a>(&'a Crew<'a>);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Copy `chunks` (offset, length) on `workers` threads, `piece` bytes at a time, calling
/// `copy(chunk, offset in the chunk, length)` once for every piece of every chunk the driver
/// releases, while `drive` runs on the calling thread (at least one worker, and pieces of
/// at least a byte). The workers stop when `drive` returns
/// (an error included) or unwinds, and are joined before this returns.
pub(crate) fn run(
    chunks: &[(usize, usize)],
    workers: usize,
    piece: usize,
    copy: impl Fn(usize, usize, usize) + Sync,
    drive: impl FnOnce(&Crew<'_>) -> Result<()>,
) -> Result<()> {
    let crew = Crew {
        chunks,
        piece: piece.max(1),
        claimed: chunks.iter().map(|_| AtomicUsize::new(0)).collect(),
        copied: chunks.iter().map(|_| AtomicUsize::new(0)).collect(),
        released: AtomicUsize::new(0),
        gate: Mutex::new(0),
        opened: Condvar::new(),
        stopped: AtomicBool::new(false),
        abandoned: AtomicBool::new(false),
        driver: std::thread::current(),
    };
    std::thread::scope(|scope| {
        // First, so that the workers started are stopped even if a later spawn fails (panics).
        let _stop = StopOnExit(&crew);
        for _ in 0..workers.max(1) {
            let (crew, copy) = (&crew, &copy);
            scope.spawn(move || crew.work(copy));
        }
        drive(&crew)
    })
}

#[cfg(test)]
#[path = "crew_tests.rs"]
mod tests;
