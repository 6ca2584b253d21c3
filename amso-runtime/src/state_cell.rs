//! `StateCell`: a value behind a reader-writer lock that readers holding the GIL may read
//! without taking the lock. An amso array's state lives in one (`python/base/array.rs`); a read
//! lock and its release are two locked atomic instructions, about a third of what a host
//! `__dlpack__()` costs beyond NumPy's own.
//!
//! The protocol, for one cell:
//! - a writer registers itself (`begin_write`) with the GIL held *before* it takes the write
//!   lock, and ends (`end_write`) with the GIL held *after* it released it. Between the two it
//!   may let the GIL go (a move runs detached; a driver call inside a change releases it too);
//! - `writers` changes only in `begin_write` and `end_write`, so only with the GIL held.
//!
//! The invariant: while `writers` is 0, no thread holds or waits for the write lock, and none
//! can start to before the GIL is next released. So a thread that holds the GIL, sees 0, and
//! keeps the GIL until it has finished reading (`attached`: no Python code, no `detach`,
//! no `gil::released` inside) reads a value nobody changes meanwhile. Threads without the GIL
//! (`read_locked`, long reads run detached) take the read lock as before, which excludes the
//! writers by itself.
//!
//! "The GIL" here is whatever one lock every caller of `begin_write`, `end_write`,
//! `writers_idle` and `attached` holds; the unit tests use a `Mutex`, which is what the
//! GIL is to Rust's memory model (taking it synchronises with its last release), so the count
//! needs no atomic read-modify-write: relaxed loads and stores are ordered by that lock.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

/// A value read without a lock by threads holding the GIL while no writer is registered.
#[derive(Debug)]
pub(crate) struct StateCell<T> {
    lock: RwLock<()>,
    value: UnsafeCell<T>,
    /// Registered writers (between `begin_write` and `end_write`).
    writers: AtomicU32,
}

// SAFETY: the value moves with the cell (`T: Send`); shared access is `&T` from several threads
// (`T: Sync`) under the read lock or the protocol above, and `&mut T` only under the write lock
// while no reader without the lock can exist (the module's invariant).
unsafe impl<T: Send> Send for StateCell<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for StateCell<T> {}

/// Shared access under the read lock. The value is a pointer, not a `&T`, as in std's
/// `Ref`: a guard passed by value into a function that drops it releases the lock before the
/// function returns, and a reference field would stay protected (by the aliasing rules) for
/// the whole call, while a writer may already hold the value (Miri reports it).
pub(crate) struct ReadGuard<'a, T> {
    _lock: RwLockReadGuard<'a, ()>,
    value: NonNull<T>,
    _value: PhantomData<&'a T>,
}

/// Exclusive access under the write lock (a pointer, for the reason `ReadGuard` gives).
pub(crate) struct WriteGuard<'a, T> {
    _lock: RwLockWriteGuard<'a, ()>,
    value: NonNull<T>,
    _value: PhantomData<&'a mut T>,
}

impl<T> std::ops::Deref for ReadGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the read lock, held while the guard lives, excludes every writer.
        unsafe { self.value.as_ref() }
    }
}

impl<T> std::ops::Deref for WriteGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the write lock, held while the guard lives, excludes every other access.
        unsafe { self.value.as_ref() }
    }
}

impl<T> std::ops::DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as `deref`; `&mut self` makes this the one reference the guard gives.
        unsafe { self.value.as_mut() }
    }
}

impl<T> StateCell<T> {
    pub(crate) fn new(value: T) -> Self {
        StateCell { lock: RwLock::new(()), value: UnsafeCell::new(value), writers: AtomicU32::new(0) }
    }

    /// Register a writer; returns whether it is the first (the array publishes that it is
    /// changing).
    ///
    /// # Safety
    /// The caller holds the GIL, and calls `end_write` once, with the GIL held, after its last
    /// `write_locked` guard dropped.
    pub(crate) unsafe fn begin_write(&self) -> bool {
        let writers = self.writers.load(Ordering::Relaxed);
        self.writers.store(writers + 1, Ordering::Relaxed);
        writers == 0
    }

    /// End a writer's registration; returns whether it was the last.
    ///
    /// # Safety
    /// The caller holds the GIL and registered with `begin_write`; its write guards dropped.
    pub(crate) unsafe fn end_write(&self) -> bool {
        let writers = self.writers.load(Ordering::Relaxed);
        debug_assert!(writers > 0, "end_write without begin_write");
        self.writers.store(writers - 1, Ordering::Relaxed);
        writers == 1
    }

    /// Whether no writer is registered.
    ///
    /// # Safety
    /// The caller holds the GIL (the count is the GIL's to change).
    pub(crate) unsafe fn writers_idle(&self) -> bool {
        self.writers.load(Ordering::Relaxed) == 0
    }

    /// The value without the lock, if no writer is registered.
    ///
    /// # Safety
    /// The caller holds the GIL and keeps it for as long as it uses the reference: meanwhile it
    /// runs no Python code, releases nothing (`detach`, `gil::released`) and does not reach
    /// this cell's writers.
    #[inline]
    pub(crate) unsafe fn attached(&self) -> Option<&T> {
        // SAFETY: no writer is registered and none can register while the caller keeps the
        // GIL (the module's invariant), so no `&mut T` exists while the reference is used.
        (self.writers.load(Ordering::Relaxed) == 0).then(|| unsafe { &*self.value.get() })
    }

    /// The read lock, if no writer holds the write lock (a poisoned lock is taken anyway: a
    /// panicking writer left a value that is still valid, if not the one it meant).
    pub(crate) fn try_read(&self) -> Option<ReadGuard<'_, T>> {
        let lock = match self.lock.try_read() {
            Ok(lock) => lock,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(self.read_guard(lock))
    }

    /// The read lock, waiting for it (without the GIL: callers detach first).
    pub(crate) fn read_locked(&self) -> ReadGuard<'_, T> {
        let lock = self.lock.read().unwrap_or_else(|e| e.into_inner());
        self.read_guard(lock)
    }

    /// Shared access under `lock`: no write guard exists under the read lock, and readers
    /// without the lock only share.
    fn read_guard<'a>(&'a self, lock: RwLockReadGuard<'a, ()>) -> ReadGuard<'a, T> {
        ReadGuard { _lock: lock, value: NonNull::from(&self.value).cast(), _value: PhantomData }
    }

    /// Exclusive access under `lock`: the write lock excludes every locked reader, and the
    /// registration every reader without the lock.
    ///
    /// # Safety
    /// The caller registered with `begin_write` and ends only after the guard dropped.
    unsafe fn write_guard<'a>(&'a self, lock: RwLockWriteGuard<'a, ()>) -> WriteGuard<'a, T> {
        // From the `UnsafeCell` itself, as `UnsafeCell::get` makes it: writes through it are allowed.
        WriteGuard { _lock: lock, value: NonNull::from(&self.value).cast(), _value: PhantomData }
    }

    /// Wait, without taking it, until no writer holds the write lock.
    pub(crate) fn wait_for_writer(&self) {
        drop(self.lock.read());
    }

    /// The write lock, if free.
    ///
    /// # Safety
    /// The caller registered with `begin_write` and ends only after the guard dropped.
    pub(crate) unsafe fn try_write(&self) -> Option<WriteGuard<'_, T>> {
        let lock = match self.lock.try_write() {
            Ok(lock) => lock,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // SAFETY: the caller's contract, passed on.
        Some(unsafe { self.write_guard(lock) })
    }

    /// The write lock, waiting for it (without the GIL: callers detach first).
    ///
    /// # Safety
    /// As `try_write`.
    pub(crate) unsafe fn write_locked(&self) -> WriteGuard<'_, T> {
        let lock = self.lock.write().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the caller's contract, passed on.
        unsafe { self.write_guard(lock) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Two words a writer changes together; a reader must never see them differ.
    struct Pair([u64; 2]);

    /// Writers that let "the GIL" (a mutex) go while they change the value, and readers that
    /// read without the lock while they hold it: Miri reports any data race, and the pair is
    /// never seen half-written.
    #[test]
    fn readers_holding_the_gil_never_see_a_change_in_progress() {
        let gil = Arc::new(Mutex::new(()));
        let cell = Arc::new(StateCell::new(Pair([0, 0])));
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        let writer = {
            let (gil, cell) = (Arc::clone(&gil), Arc::clone(&cell));
            std::thread::spawn(move || {
                for round in 1..=rounds {
                    let attached = gil.lock().unwrap();
                    // SAFETY: "the GIL" is held; `end_write` follows below, after the guard.
                    unsafe { cell.begin_write() };
                    drop(attached); // the change runs detached
                    {
                        // SAFETY: registered above.
                        let mut value = unsafe { cell.write_locked() };
                        value.0[0] = round;
                        std::thread::yield_now();
                        value.0[1] = round;
                    }
                    let _attached = gil.lock().unwrap();
                    // SAFETY: "the GIL" is held; the guard dropped.
                    unsafe { cell.end_write() };
                }
            })
        };
        let reader = {
            let (gil, cell) = (Arc::clone(&gil), Arc::clone(&cell));
            std::thread::spawn(move || {
                let mut seen = 0;
                while seen < rounds {
                    let _attached = gil.lock().unwrap();
                    // SAFETY: "the GIL" is held for the whole read, which releases nothing.
                    let read = unsafe { cell.attached() }.map(|pair| pair.0);
                    let pair = match read {
                        Some(pair) => pair,
                        // A writer is registered: read under the lock if it is free.
                        None => cell.try_read().map_or([seen, seen], |guard| guard.0),
                    };
                    assert_eq!(pair[0], pair[1], "a reader saw a change in progress");
                    seen = seen.max(pair[0]);
                    std::thread::yield_now();
                }
            })
        };
        writer.join().unwrap();
        reader.join().unwrap();
    }

    #[test]
    fn the_count_says_first_and_last() {
        let cell = StateCell::new(0u8);
        // SAFETY: one thread: every call is serialised.
        unsafe {
            assert!(cell.writers_idle());
            assert!(cell.begin_write());
            assert!(!cell.begin_write());
            assert!(cell.attached().is_none());
            assert!(!cell.end_write());
            assert!(cell.end_write());
            assert_eq!(cell.attached(), Some(&0));
            *cell.try_write().unwrap() = 7;
        }
        assert_eq!(*cell.try_read().unwrap(), 7);
    }
}
