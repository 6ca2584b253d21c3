use std::collections::VecDeque;
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{receive, run, send, Engine};
use crate::error::{Error, Result};

/// One staging slot: its bytes, and the chunk whose engine copy through it is queued but not
/// done.
struct Slot {
    bytes: Vec<u8>,
    in_flight: Option<usize>,
}

/// An engine whose copies complete as late as a real one's may: only when a wait covers them,
/// in queue order. A slot the crew touches while a copy through it is in flight fails a check;
/// a chunk sent before it was filled, or drained before it arrived, shows as wrong bytes.
struct LateEngine<'a> {
    sending: bool,
    chunks: &'a [(usize, usize)],
    ring: &'a [Mutex<Slot>],
    device: Mutex<Vec<u8>>,
    queued: Mutex<VecDeque<usize>>,
    /// `queue` of this chunk fails.
    fail_at: Option<usize>,
}

impl LateEngine<'_> {
    fn complete(&self, index: usize) {
        let (offset, len) = self.chunks[index];
        let mut slot = self.ring[index % self.ring.len()].lock().unwrap();
        let mut device = self.device.lock().unwrap();
        if self.sending {
            device[offset..offset + len].copy_from_slice(&slot.bytes[..len]);
        } else {
            slot.bytes[..len].copy_from_slice(&device[offset..offset + len]);
        }
        slot.in_flight = None;
    }
}

impl Engine for LateEngine<'_> {
    fn queue(&self, index: usize) -> Result<()> {
        if self.fail_at == Some(index) {
            return Err(Error::Cuda {
                call: "cuMemcpyHtoDAsync",
                code: Some(700),
                message: "the engine failed".into(),
            });
        }
        let slot = index % self.ring.len();
        {
            let mut state = self.ring[slot].lock().unwrap();
            assert_eq!(
                state.in_flight, None,
                "chunk {index} queued through slot {slot} while a copy through it is in flight"
            );
            state.in_flight = Some(index);
        }
        self.queued.lock().unwrap().push_back(index);
        Ok(())
    }

    fn wait(&self, slot: usize) -> Result<()> {
        let mut queued = self.queued.lock().unwrap();
        if let Some(last) = queued.iter().rposition(|&index| index % self.ring.len() == slot) {
            for index in queued.drain(..=last).collect::<Vec<_>>() {
                self.complete(index);
            }
        }
        Ok(())
    }
}

/// A transfer of `bytes` through `depth` slots of `chunk` bytes, sending or receiving, with the
/// engine failing at `fail_at`. Returns the outcome, the destination, the source, and the
/// number of pieces the crew copied.
fn transfer(
    sending: bool,
    bytes: usize,
    chunk: usize,
    piece: usize,
    workers: usize,
    depth: usize,
    fail_at: Option<usize>,
) -> (Result<()>, Vec<u8>, Vec<u8>, usize) {
    let source: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
    let chunks: Vec<(usize, usize)> =
        (0..bytes).step_by(chunk).map(|offset| (offset, chunk.min(bytes - offset))).collect();
    let ring: Vec<Mutex<Slot>> =
        (0..depth).map(|_| Mutex::new(Slot { bytes: vec![0; chunk], in_flight: None })).collect();
    let host = Mutex::new(if sending { source.clone() } else { vec![0; bytes] });
    let engine = LateEngine {
        sending,
        chunks: &chunks,
        ring: &ring,
        device: Mutex::new(if sending { vec![0; bytes] } else { source.clone() }),
        queued: Mutex::new(VecDeque::new()),
        fail_at,
    };
    let pieces = AtomicUsize::new(0);
    let outcome = run(
        &chunks,
        workers,
        piece,
        |index, offset, len| {
            let slot_index = index % depth;
            let mut slot = ring[slot_index].lock().unwrap();
            assert_eq!(
                slot.in_flight, None,
                "the crew used slot {slot_index} for chunk {index} during a copy through it"
            );
            let start = chunks[index].0 + offset;
            let mut host = host.lock().unwrap();
            if sending {
                slot.bytes[offset..offset + len].copy_from_slice(&host[start..start + len]);
            } else {
                host[start..start + len].copy_from_slice(&slot.bytes[offset..offset + len]);
            }
            pieces.fetch_add(1, Ordering::Relaxed);
        },
        |crew| if sending { send(crew, depth, &engine) } else { receive(crew, depth, &engine) },
    );
    if sending {
        // What the engine still has queued completes, as the stream would.
        let pending: Vec<usize> = engine.queued.lock().unwrap().drain(..).collect();
        pending.into_iter().for_each(|index| engine.complete(index));
    }
    let destination = if sending { engine.device.into_inner().unwrap() } else { host.into_inner().unwrap() };
    (outcome, destination, source, pieces.load(Ordering::Relaxed))
}

#[test]
fn both_schedules_move_every_byte_once_and_never_share_a_slot_with_the_engine() {
    // (bytes, chunk, piece, workers, depth): short last chunks and pieces, a piece per chunk,
    // one worker, fewer chunks than slots, nothing at all, the transfer's own ring of 4.
    let shapes =
        [(1000, 64, 16, 3, 3), (960, 64, 64, 4, 2), (100, 64, 7, 1, 4), (0, 64, 16, 2, 2), (64 * 20 + 5, 64, 10, 4, 4)];
    for sending in [true, false] {
        for (bytes, chunk, piece, workers, depth) in shapes {
            let (outcome, destination, source, pieces) = transfer(sending, bytes, chunk, piece, workers, depth, None);
            let what = format!("sending {sending}, {bytes} bytes, chunks of {chunk}, pieces of {piece}, {workers} workers, {depth} slots");
            outcome.unwrap();
            assert!(destination == source, "{what}: the bytes arrived wrong");
            let expected: usize =
                (0..bytes).step_by(chunk).map(|offset| chunk.min(bytes - offset).div_ceil(piece)).sum();
            assert_eq!(pieces, expected, "{what}: every piece copied exactly once");
        }
    }
}

#[test]
fn an_engine_error_stops_the_crew_and_is_returned() {
    for sending in [true, false] {
        let (outcome, ..) = transfer(sending, 64 * 10, 64, 16, 3, 3, Some(5));
        assert_eq!(
            outcome,
            Err(Error::Cuda { call: "cuMemcpyHtoDAsync", code: Some(700), message: "the engine failed".into() }),
            "sending {sending}"
        );
    }
}

/// `body`'s outcome, or a test failure if it has not finished within a minute (a hang).
fn within_a_minute<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(body()));
    receiver.recv_timeout(std::time::Duration::from_secs(60)).expect("hung")
}

#[test]
fn a_panic_in_a_worker_or_the_driver_unwinds_instead_of_hanging() {
    const CHUNKS: [(usize, usize); 3] = [(0, 64), (64, 64), (128, 64)];
    let worker = within_a_minute(|| {
        catch_unwind(|| {
            run(
                &CHUNKS,
                2,
                16,
                |index, _, _| assert_ne!(index, 1, "a worker fails"),
                |crew| {
                    crew.release_through(2);
                    (0..3).for_each(|index| crew.wait_copied(index));
                    Ok(())
                },
            )
        })
    });
    assert!(worker.is_err(), "the driver's wait ends in a panic");
    let driver = within_a_minute(|| catch_unwind(|| run(&CHUNKS, 2, 16, |_, _, _| {}, |_| panic!("the driver fails"))));
    assert!(driver.is_err(), "the workers, waiting for a release, are stopped");
}
