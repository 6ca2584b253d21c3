//! The host side of a staged transfer (`cuda/transfer.rs`): a crew of threads copies the
//! transfer's chunks piece by piece, while the calling thread drives the copy engine.
//!
//! The calling thread releases chunks (a chunk may be copied once its staging slot is free),
//! and waits for a chunk to be copied before it hands the chunk to the engine. Workers take
//! pieces in order from a shared counter and move on to the next released chunk as soon as
//! the current one has no pieces left, so neither a slow thread nor the engine's hand-off
//! stalls the others: the host copies without pause while chunks are released.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread::Thread;

use crate::error::Result;

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
    /// The calling thread, woken when a chunk's last piece is copied.
    driver: Thread,
}

impl Crew<'_> {
    /// Let the workers copy the chunks below `end`.
    pub(crate) fn release(&self, end: usize) {
        let mut gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        *gate = (*gate).max(end.min(self.chunks.len()));
        self.released.store(*gate, Ordering::Release);
        self.opened.notify_all();
    }

    /// Block until every piece of chunk `index` (released earlier) is copied.
    pub(crate) fn wait_copied(&self, index: usize) {
        while self.copied[index].load(Ordering::Acquire) < self.pieces(index) {
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
                // Release: the driver, acquiring the count, sees the piece's bytes.
                if self.copied[index].fetch_add(1, Ordering::AcqRel) + 1 == pieces {
                    self.driver.unpark();
                }
            }
        }
    }
}

/// Copy `chunks` (offset, length) on `workers` threads, `piece` bytes at a time, calling
/// `copy(chunk, offset in the chunk, length)` once for every piece of every chunk the driver
/// releases, while `drive` runs on the calling thread. The workers stop when `drive` returns
/// (an error included) and are joined before this returns; `drive` waits for what it needs
/// copied.
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
        driver: std::thread::current(),
    };
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            let (crew, copy) = (&crew, &copy);
            scope.spawn(move || crew.work(copy));
        }
        let outcome = drive(&crew);
        crew.stop();
        outcome
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// A host-to-device transfer with a fake engine: chunks are copied into `depth` slots, the
    /// "engine" (the driver) moves a copied slot to the destination, and a slot is released
    /// for the chunk `depth` places later only after that.
    fn staged(bytes: usize, chunk: usize, piece: usize, workers: usize, depth: usize) {
        let source: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
        let chunks: Vec<(usize, usize)> =
            (0..bytes).step_by(chunk).map(|offset| (offset, chunk.min(bytes - offset))).collect();
        let slots: Vec<Mutex<Vec<u8>>> = (0..depth).map(|_| Mutex::new(vec![0; chunk])).collect();
        let released = AtomicUsize::new(0);
        let mut destination = vec![0u8; bytes];
        let copies = AtomicUsize::new(0);
        run(
            &chunks,
            workers,
            piece,
            |index, offset, len| {
                assert!(index < released.load(Ordering::Acquire), "chunk {index} copied before its release");
                let start = chunks[index].0 + offset;
                slots[index % depth].lock().unwrap()[offset..offset + len].copy_from_slice(&source[start..start + len]);
                copies.fetch_add(1, Ordering::Relaxed);
            },
            |crew| {
                released.store(depth.min(chunks.len()), Ordering::Release);
                crew.release(depth);
                for (index, &(offset, len)) in chunks.iter().enumerate() {
                    crew.wait_copied(index);
                    destination[offset..offset + len].copy_from_slice(&slots[index % depth].lock().unwrap()[..len]);
                    released.store((index + depth + 1).min(chunks.len()), Ordering::Release);
                    crew.release(index + depth + 1);
                }
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(destination, source);
        let pieces: usize = chunks.iter().map(|c| c.1.div_ceil(piece)).sum();
        assert_eq!(copies.load(Ordering::Relaxed), pieces, "every piece copied exactly once");
    }

    #[test]
    fn every_piece_is_copied_once_after_its_release() {
        staged(1000, 64, 16, 3, 3); // a short last chunk and a short last piece
        staged(960, 64, 64, 4, 2); // a piece per chunk
        staged(100, 64, 7, 1, 4); // one worker, fewer chunks than slots
        staged(0, 64, 16, 2, 2); // nothing to copy
    }

    #[test]
    fn a_driver_error_stops_the_crew_and_is_returned() {
        let chunks = [(0, 64), (64, 64), (128, 64)];
        let copied = AtomicUsize::new(0);
        let outcome = run(
            &chunks,
            3,
            16,
            |index, _, _| {
                assert_eq!(index, 0, "only the released chunk is copied");
                copied.fetch_add(1, Ordering::Relaxed);
            },
            |crew| {
                crew.release(1);
                crew.wait_copied(0);
                Err(Error::Cuda("the engine failed".into()))
            },
        );
        assert_eq!(outcome, Err(Error::Cuda("the engine failed".into())));
        assert_eq!(copied.load(Ordering::Relaxed), 4);
    }
}
