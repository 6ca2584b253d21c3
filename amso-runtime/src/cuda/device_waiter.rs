//! The device waiter: one helper thread that runs the frees of amso's pool which wait for all of
//! a device's work (memory handed to consumers whose streams are unknown; frees on the
//! per-thread default stream; a Numba free whose barrier could not be queued). It takes every free queued since its last
//! turn and hands them to its batch function as one batch (`alloc.rs`: each device synchronised
//! once, the blocks returned to the pool): the thread that frees never waits, and a block is
//! back in the cache as soon as the device has reached it, instead of waiting for a batch to
//! fill.
//!
//! The waiter knows nothing of what a free is: it queues, batches and counts, so its waits
//! (`settle`, `finish_running`) are tested here without a driver.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// A waiter of frees of type `F`, each queued with its bytes.
pub(crate) struct DeviceWaiter<F: Send + 'static> {
    state: Mutex<Waiting<F>>,
    /// Signalled when frees are queued, and when a batch has run.
    wake: Condvar,
    done: Condvar,
    started: OnceLock<bool>,
    /// Runs one batch on the waiter's thread.
    run: fn(Vec<(F, usize)>),
}

/// The waiter's frees: queued (each with its bytes), and the batch it runs now (how many, and
/// their bytes).
struct Waiting<F> {
    queue: Vec<(F, usize)>,
    running: (usize, usize),
}

impl<F: Send + 'static> DeviceWaiter<F> {
    /// A waiter whose thread runs each batch with `run` (started at the first `submit`).
    pub(crate) const fn new(run: fn(Vec<(F, usize)>)) -> DeviceWaiter<F> {
        DeviceWaiter {
            state: Mutex::new(Waiting { queue: Vec::new(), running: (0, 0) }),
            wake: Condvar::new(),
            done: Condvar::new(),
            started: OnceLock::new(),
            run,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiting<F>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `free` (of `bytes`) for the waiter's thread, or give it back when no thread could
    /// start (the caller then runs it another way).
    pub(crate) fn submit(&'static self, free: F, bytes: usize) -> std::result::Result<(), F> {
        let started = *self.started.get_or_init(|| {
            std::thread::Builder::new().name("amso-device-waiter".into()).spawn(move || self.serve()).is_ok()
        });
        if !started {
            return Err(free);
        }
        self.lock().queue.push((free, bytes));
        self.wake.notify_one();
        Ok(())
    }

    /// The frees queued or running, and their bytes.
    pub(crate) fn pending(&self) -> (usize, usize) {
        let waiting = self.lock();
        let queued: usize = waiting.queue.iter().map(|(_, bytes)| bytes).sum();
        (waiting.queue.len() + waiting.running.0, queued + waiting.running.1)
    }

    /// Everything queued, taken now (a flush, or an allocation out of memory).
    pub(crate) fn take_all(&self) -> Vec<F> {
        std::mem::take(&mut self.lock().queue).into_iter().map(|(free, _)| free).collect()
    }

    fn serve(&self) {
        loop {
            let batch = {
                let mut waiting = self.lock();
                while waiting.queue.is_empty() {
                    waiting = self.wake.wait(waiting).unwrap_or_else(|e| e.into_inner());
                }
                let batch = std::mem::take(&mut waiting.queue);
                waiting.running = (batch.len(), batch.iter().map(|(_, bytes)| bytes).sum());
                batch
            };
            // A panic (none is expected) loses this batch's blocks, never the waiter: a flush
            // waiting for it must not wait forever.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.run)(batch)));
            self.lock().running = (0, 0);
            self.done.notify_all();
        }
    }

    /// Whether the waiter had frees queued or running, after waiting at most `timeout` for them
    /// to run (the GIL released by the caller): a block about to come back is worth that much
    /// of a wait before asking the driver, and the wait stays short when the device is busy.
    pub(crate) fn settle(&self, timeout: Duration) -> bool {
        let waiting = self.lock();
        if waiting.queue.is_empty() && waiting.running.0 == 0 {
            return false;
        }
        let _ = self
            .done
            .wait_timeout_while(waiting, timeout, |w| !w.queue.is_empty() || w.running.0 != 0)
            .unwrap_or_else(|e| e.into_inner());
        true
    }

    /// Wait (with the GIL released) until the batch the waiter runs now, if any, has run.
    pub(crate) fn finish_running(&self) {
        crate::gil::released(|| {
            let mut waiting = self.lock();
            while waiting.running.0 != 0 {
                waiting = self.done.wait(waiting).unwrap_or_else(|e| e.into_inner());
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceWaiter;
    use std::sync::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    /// A gate each test batch waits at (a device that is busy until the test opens it), and
    /// what the batches ran.
    static GATE: (Mutex<bool>, Condvar) = (Mutex::new(true), Condvar::new());
    static RAN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

    fn gated_batch(batch: Vec<(u32, usize)>) {
        let (open, opened) = &GATE;
        let mut guard = open.lock().unwrap();
        while !*guard {
            guard = opened.wait(guard).unwrap();
        }
        drop(guard);
        RAN.lock().unwrap().extend(batch.into_iter().map(|(free, _)| free));
    }

    fn set_gate(open: bool) {
        *GATE.0.lock().unwrap() = open;
        GATE.1.notify_all();
    }

    fn wait_until(done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "the waiter never got there");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    // One waiter and one test: the statics above are shared by every step.
    static WAITER: DeviceWaiter<u32> = DeviceWaiter::new(gated_batch);

    fn running() -> usize {
        WAITER.lock().running.0
    }

    #[test]
    fn the_waiter_batches_and_its_waits_end_when_they_should() {
        // Nothing queued: a miss does not wait at all.
        assert!(!WAITER.settle(Duration::from_secs(5)));

        // A busy device (a batch held at the gate): a miss waits for its timeout, not the batch.
        set_gate(false);
        WAITER.submit(1, 100).unwrap();
        wait_until(|| running() == 1);
        assert_eq!(WAITER.pending(), (1, 100));
        let start = Instant::now();
        assert!(WAITER.settle(Duration::from_millis(50)), "a free was running");
        assert!(start.elapsed() >= Duration::from_millis(50) && running() == 1, "the batch still runs");

        // Frees queued while a batch runs go in the next batch, together; `take_all` takes those
        // not yet running, and `pending` counts both.
        for free in [3, 4, 5] {
            WAITER.submit(free, 10).unwrap();
        }
        assert_eq!(WAITER.pending(), (4, 130));
        assert_eq!(WAITER.take_all(), [3, 4, 5]);

        // A flush waits for the running batch, and then nothing is left.
        let flusher = std::thread::spawn(|| WAITER.finish_running());
        std::thread::sleep(Duration::from_millis(20));
        assert!(!flusher.is_finished(), "a flush returned while the batch ran");
        set_gate(true);
        flusher.join().unwrap();
        assert_eq!(WAITER.pending(), (0, 0));
        assert_eq!(*RAN.lock().unwrap(), [1]);

        // Many threads submitting while the waiter runs and others flush: every free runs once.
        std::thread::scope(|scope| {
            for thread in 0..8u32 {
                scope.spawn(move || {
                    for k in 0..200 {
                        WAITER.submit(1000 + thread * 1000 + k, 1).unwrap();
                        if k % 50 == 0 {
                            WAITER.finish_running();
                        }
                    }
                });
            }
        });
        wait_until(|| WAITER.pending() == (0, 0));
        let mut ran = RAN.lock().unwrap().clone();
        ran.sort_unstable();
        let expected: Vec<u32> =
            std::iter::once(1).chain((0..8u32).flat_map(|t| (0..200).map(move |k| 1000 + t * 1000 + k))).collect();
        assert_eq!(ran, expected);
    }
}
