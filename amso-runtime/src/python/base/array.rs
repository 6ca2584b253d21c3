//! `MemArrayBase`: the one Python class that carries every method of every instantiation,
//! holding its array as an `ArrayCore` (any element type and rank). Generated classes subclass it and add only their
//! constructor.
//!
//! The class is `frozen`: PyO3 keeps no borrow flag, so no Python user ever sees "Already
//! borrowed". Its state has one discipline, written here:
//! - the array sits in a `StateCell` (`state_cell.rs`): an `RwLock` plus a count of registered
//!   writers that only threads holding the GIL change. Every change registers first, with the
//!   GIL held, before it takes the write lock, and ends, with the GIL held, after it released
//!   it and republished the header; the header says so meanwhile (`FLAG_CHANGING`). A reader
//!   that holds the GIL, sees no writer registered and keeps the GIL until it is done reads
//!   without the lock (`read_unlocked_if`); typed arguments of any runtime copy read host data
//!   in place from the header under the same flag (`source::from_amso`).
//! - a thread that finds the lock taken waits with the GIL released (`py.detach`), so a
//!   holder that needs the GIL back (or runs detached, as a move does) always finishes. No
//!   Python code runs while the lock is held.
//! - a change that releases the GIL while it writes host memory (`modify_detached`) first
//!   borrows that memory for writing in the process's borrow registry, with the GIL held: it
//!   is refused (`BufferError`) while a typed argument holds the array, which is what lets a
//!   typed argument read the host data in place without a reference to the buffer.
//! - facts that never change (dtype, shape) and the placement the C header publishes are read
//!   without the lock, so readers see the state from before a long operation, never a
//!   half-updated one (`Header`).
//! - every change goes through `modify` or `modify_detached`, which republish the header
//!   (with the GIL held) once the change is complete.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dlpack::export_hub::ExportHub;
use crate::dlpack::Owner;
use crate::element::{DType, Element};
use crate::host::HostBuffer;
use crate::memarray::core::ArrayCore;
use crate::memarray::MemArray;
use crate::python::base::header::Header;
use crate::state_cell::{ReadGuard, StateCell, WriteGuard};
use crate::stream::Stream;

/// Base class of every amso array class (Python name `amso._amso.MemArrayBase`).
#[pyclass(subclass, frozen, module = "amso._amso", name = "MemArrayBase")]
pub struct MemArrayBase {
    /// What the C getters read; the placement fields are republished after every change.
    header: Header,
    dtype: &'static DType,
    state: StateCell<ArrayCore>,
    /// Threads in `read_when_idle` waiting for the registered writers to end; changed only with
    /// the GIL held (relaxed loads and stores, as `StateCell`'s count). A new writer lets them
    /// through first, so that a thread changing the array over and over does not starve them.
    waiting_readers: AtomicUsize,
    /// Live buffer-protocol exports; while any lives, the data stays where it is.
    pub(in crate::python) buffer_exports: AtomicUsize,
    /// The last `__cuda_array_interface__` built, with the (address, stream) it describes;
    /// each access hands out a copy, never this dict itself.
    pub(in crate::python) interface_cache: Mutex<Option<CachedInterface>>,
    /// The hub that in-place host exports share (`dlpack::export_hub`), or NULL; read and
    /// written with the GIL held.
    export_hub: AtomicPtr<ExportHub>,
}

impl Drop for MemArrayBase {
    fn drop(&mut self) {
        if let Some(hub) = NonNull::new(*self.export_hub.get_mut()) {
            // SAFETY: a hub is only made by `hub_owner`, with the GIL held, for an array that is
            // a Python object; such an array is freed by Python, with the GIL held. The
            // array's reference is given up once, while its core (dropped after this) still
            // holds the buffer.
            unsafe { ExportHub::merge(hub) };
        }
    }
}

/// An interface dict and the (data address, stream) it describes.
pub(in crate::python) type CachedInterface = (usize, Option<Stream>, Py<PyDict>);

/// A registered writer of one array (`MemArrayBase::begin_writing`), ended when it drops, with
/// the GIL held (a change run detached re-attaches before unwinding past `detach`).
struct Writing<'a, 'py> {
    base: &'a MemArrayBase,
    py: Python<'py>,
}

impl Drop for Writing<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: the GIL is held (`py`); this writer registered in `begin_writing` and its
        // write guards are gone (they borrow from a scope inside the registration's).
        if unsafe { self.base.state.end_write() } {
            self.base.header.set_changing(self.py, false);
        }
    }
}

impl MemArrayBase {
    /// Wrap an array.
    pub(crate) fn new(array: ArrayCore) -> Self {
        let view = array.raw_view();
        let (header, dtype) = (Header::of(&view), view.dtype());
        MemArrayBase {
            header,
            dtype,
            state: StateCell::new(array),
            waiting_readers: AtomicUsize::new(0),
            buffer_exports: AtomicUsize::new(0),
            interface_cache: Mutex::new(None),
            export_hub: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The C header (valid while this object lives; see generated/amso.h).
    pub(crate) fn header(&self) -> &Header {
        &self.header
    }

    /// The element type.
    pub(crate) fn element_type(&self) -> &'static DType {
        self.dtype
    }

    fn read_guard(&self, py: Python<'_>) -> ReadGuard<'_, ArrayCore> {
        loop {
            if let Some(guard) = self.state.try_read() {
                return guard;
            }
            // Wait for the writer without the GIL, then try again.
            py.detach(|| self.state.wait_for_writer());
        }
    }

    /// Let readers waiting for the last change to end go first (they are quick: a hold), with
    /// the GIL released meanwhile. Called before a change borrows the memory and registers:
    /// those two happen in one hold of the GIL, so no reader sees the borrow without the flag.
    fn let_waiting_readers_in(&self, py: Python<'_>) {
        while self.waiting_readers.load(Ordering::Relaxed) != 0 {
            py.detach(std::thread::yield_now);
        }
    }

    /// Register a writer (see the module docs): the header says the array is changing until
    /// the registration drops.
    fn begin_writing<'py>(&self, py: Python<'py>) -> Writing<'_, 'py> {
        // SAFETY: the GIL is held (`py`); `Writing` ends the registration once, with the GIL,
        // after the caller's write guard (declared after it) dropped.
        if unsafe { self.state.begin_write() } {
            self.header.set_changing(py, true);
        }
        Writing { base: self, py }
    }

    fn write_guard(&self, py: Python<'_>, _writing: &Writing<'_, '_>) -> WriteGuard<'_, ArrayCore> {
        loop {
            // SAFETY: registered (`_writing`), and ended only after this guard drops.
            if let Some(guard) = unsafe { self.state.try_write() } {
                return guard;
            }
            // SAFETY: as above; the guard is dropped at once.
            py.detach(|| drop(unsafe { self.state.write_locked() }));
        }
    }

    /// What an in-place host export of `buffer` (the array's, read with the GIL held and no
    /// writer registered) holds: a count in the array's hub, made at the first such export.
    #[inline]
    pub(crate) fn hub_owner(&self, py: Python<'_>, buffer: &Arc<HostBuffer>) -> Owner {
        let mut hub = NonNull::new(self.export_hub.load(Ordering::Relaxed));
        // SAFETY: the array's current hub, the GIL held (`py`).
        // A core keeps its buffer for life, so this holds; were a change ever to give the array
        // a new buffer, the hub of the old one (which its exports keep) is let go here.
        if hub.is_some_and(|hub| !unsafe { ExportHub::holds(hub, buffer) }) {
            self.let_hub_go(py);
            hub = None;
        }
        let hub = hub.unwrap_or_else(|| {
            let hub = ExportHub::new(Arc::clone(buffer));
            self.export_hub.store(hub.as_ptr(), Ordering::Relaxed);
            hub
        });
        // SAFETY: the array's current hub, the GIL held.
        Owner::Hub(unsafe { ExportHub::acquire(hub) })
    }

    /// Give up the array's reference to its hub, if it has one: the exports counted there hold
    /// the buffer's `Arc` themselves from now on (so that Rust code counting a `MemArray`'s
    /// exports sees each), and are released atomically. The next export makes a new hub.
    pub(crate) fn let_hub_go(&self, _attached: Python<'_>) {
        let hub = self.export_hub.load(Ordering::Relaxed);
        if let Some(hub) = NonNull::new(hub) {
            self.export_hub.store(std::ptr::null_mut(), Ordering::Relaxed);
            // SAFETY: the array's current hub, given up once; the GIL is held (`_attached`).
            unsafe { ExportHub::merge(hub) };
        }
    }

    /// Live exports of the array's memory (`export_count`): the buffer's references beside the
    /// array's own, where the hub's one reference stands for the exports it counts.
    pub(crate) fn live_exports(&self, py: Python<'_>) -> usize {
        self.read(py, |array| {
            let count = array.export_count();
            match NonNull::new(self.export_hub.load(Ordering::Relaxed)) {
                // SAFETY: the array's current hub, the GIL held (`py`, kept: `read`'s `f` runs
                // no Python code).
                Some(hub) => count - 1 + unsafe { ExportHub::outstanding(hub) },
                None => count,
            }
        })
    }

    /// Read the array through `f` (no Python code in `f`).
    pub(crate) fn read<R>(&self, py: Python<'_>, f: impl FnOnce(&ArrayCore) -> R) -> R {
        f(&self.read_guard(py))
    }

    /// Read the array through `f`, without the lock if no writer is registered and `unlocked`
    /// says so of the array, else under it; `f` is told which (true: without the lock, the GIL
    /// held and no writer registered).
    ///
    /// # Safety
    /// When `unlocked` is true, `f` keeps the GIL until it returns: it runs no Python code,
    /// releases nothing (`detach`, `gil::released`: no driver call) and does not reach this
    /// object again.
    pub(crate) unsafe fn read_unlocked_if<R>(
        &self,
        py: Python<'_>,
        unlocked: impl FnOnce(&ArrayCore) -> bool,
        f: impl FnOnce(&ArrayCore, bool) -> R,
    ) -> R {
        let locked;
        // SAFETY: the GIL is held (`py`) and kept while the reference is used, by `unlocked`
        // and (when it says so) by `f` (the caller's contract).
        let (core, unlocked) = match unsafe { self.state.attached() }.filter(|core| unlocked(core)) {
            Some(core) => (core, true),
            None => {
                locked = self.read_guard(py);
                (&*locked, false)
            }
        };
        // One call of `f`, so that it is inlined here (two would keep it a function of its own).
        f(core, unlocked)
    }

    /// Read the array through `f` once no writer is registered (a typed argument's hold: a
    /// change that borrows the memory gives its borrow back before it ends).
    pub(crate) fn read_when_idle<R>(&self, py: Python<'_>, f: impl FnOnce(&ArrayCore) -> R) -> R {
        // SAFETY: the GIL is held (`py`).
        if unsafe { self.state.writers_idle() } {
            return self.read(py, f);
        }
        let waiting = |change: isize| {
            let count = self.waiting_readers.load(Ordering::Relaxed);
            self.waiting_readers.store(count.wrapping_add_signed(change), Ordering::Relaxed);
        };
        waiting(1);
        // SAFETY: the GIL is held (`py`) whenever the condition is read.
        while !unsafe { self.state.writers_idle() } {
            py.detach(|| {
                self.state.wait_for_writer();
                std::thread::yield_now();
            });
        }
        waiting(-1);
        self.read(py, f)
    }

    /// Whether no thread is changing the array now (a move, a copy in): what a reader that must
    /// not wait (the repr) looks at first.
    pub(crate) fn idle(&self, _attached: Python<'_>) -> bool {
        // SAFETY: the GIL is held (`_attached`).
        unsafe { self.state.writers_idle() }
    }

    /// Read the array through `f` with the GIL released (long reads: copies out).
    pub(crate) fn read_detached<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&ArrayCore) -> R + Send) -> R {
        py.detach(|| f(&self.state.read_locked()))
    }

    /// Change the array through `f` (no Python code in `f`), then republish the header.
    pub(crate) fn modify<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ArrayCore) -> R) -> R {
        self.let_waiting_readers_in(py);
        let writing = self.begin_writing(py);
        let mut guard = self.write_guard(py, &writing);
        let result = f(&mut guard);
        self.header.publish(py, &guard.raw_view());
        drop(guard);
        result
    }

    /// Change the array through `f` with the GIL released (moves, large copies in), then
    /// republish the header. Other threads meanwhile read the old placement, or wait. Refused
    /// (`BufferError`, `f` not called) while a typed argument holds the host memory, which is
    /// borrowed for writing until the change ends.
    pub(crate) fn modify_detached<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ArrayCore) -> R + Send,
    ) -> PyResult<R> {
        // Changes of one array take turns: another one's borrow would refuse this one's.
        loop {
            self.let_waiting_readers_in(py);
            // SAFETY: the GIL is held (`py`).
            if unsafe { self.state.writers_idle() } {
                break;
            }
            py.detach(|| {
                self.state.wait_for_writer();
                std::thread::yield_now();
            });
        }
        // The borrow and the registration in one hold of the GIL: with no writer registered,
        // `read` takes the lock at once, without letting the GIL go.
        let _borrow = self.read(py, |array| write_borrow(py, array, true))?;
        let writing = self.begin_writing(py);
        // SAFETY: registered (`writing`), which ends after the guard, dropped inside.
        let result = py.detach(|| f(&mut *unsafe { self.state.write_locked() }));
        self.read(py, |array| self.header.publish(py, &array.raw_view()));
        drop(writing);
        Ok(result)
    }

    /// Move `array` (this object's, locked for writing, so no new buffer appears meanwhile) to
    /// `target`: refused while buffer exports describe the host copy, unless the data is there
    /// already. The one check of Python's `move_memory` and Rust's `TypedMut`.
    pub(crate) fn move_locked(
        &self,
        array: &mut ArrayCore,
        target: crate::device::Device,
        stream: Stream,
        async_copy: bool,
    ) -> crate::error::Result<()> {
        if array.device() != target {
            self.check_unpinned()?;
        }
        array.move_memory(target, stream, async_copy, None)
    }

    /// The add-index kernel on `array` (this object's, locked for writing), which moves the data
    /// to the device first: refused while buffer exports describe the host copy.
    pub(crate) fn add_index_locked(&self, array: &mut ArrayCore, stream: Stream) -> crate::error::Result<()> {
        self.check_unpinned()?;
        array.add_index_tuple(stream, None)
    }

    /// Refuse to change where the data lives (or to overwrite it by a move) while buffer
    /// exports describe the host copy.
    fn check_unpinned(&self) -> crate::error::Result<()> {
        match self.buffer_exports.load(Ordering::Acquire) {
            0 => Ok(()),
            n => Err(crate::error::Error::ExportRefused(format!(
                "{n} live buffer export{} (a memoryview, np.frombuffer, an out-of-band pickle buffer...) \
                 describe this array's host memory; release them before moving the data",
                if n == 1 { "" } else { "s" }
            ))),
        }
    }

    /// Read the typed array through `f`, if this object holds a `MemArray<T, N>`. `f` runs with
    /// the array locked: it must not reach this same object again (through a captured `Py`
    /// and `Python::attach`, say), or it waits for itself. `Send` keeps borrowed Python
    /// objects out of it.
    pub fn with_typed<T: Element, const N: usize, R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&MemArray<T, N>) -> R + Send,
    ) -> Option<R> {
        self.read(py, |array| {
            self.let_hub_go(py); // so that `f` sees each export in `export_count`
            MemArray::view(array).map(f)
        })
    }

    /// Change the typed array through `f`, if this object holds a `MemArray<T, N>` (`Send`, as
    /// for `with_typed`). `f` gets every changing method of the array but not the array
    /// itself: replacing it would free memory that buffer exports still describe, and change
    /// a shape that C readers read without a lock.
    ///
    /// Meanwhile the array's host memory is borrowed for writing in the process's borrow
    /// registry: while a typed argument of any extension module holds it, this returns
    /// `Some(Err(..))` without calling `f`, and typed arguments over it are refused while `f`
    /// runs.
    pub fn with_typed_mut<T: Element, const N: usize, R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut TypedMut<'_, T, N>) -> R + Send,
    ) -> Option<PyResult<R>> {
        self.modify(py, |array| {
            self.let_hub_go(py); // so that `f` sees each export in `export_count`
            let array = MemArray::view_mut(array)?;
            Some(write_borrow(py, array.core(), true).map(|_borrow| f(&mut TypedMut { array, base: self })))
        })
    }
}

/// amso's own borrow of `array`'s host memory while Rust code changes it, if it has any; with
/// `lasting` false (a change that runs no other code meanwhile), taken only when some borrow
/// is live, to see that none conflicts.
pub(crate) fn write_borrow<'py>(
    py: Python<'py>,
    array: &crate::memarray::core::ArrayCore,
    lasting: bool,
) -> PyResult<Option<crate::borrow::guard::Borrow<'py>>> {
    let view = array.raw_view();
    if view.host.is_null() || view.nbytes == 0 || (!lasting && crate::process::live_borrows(py) == 0) {
        return Ok(None);
    }
    crate::borrow::guard::Borrow::for_amso_write(py, view.host as usize, view.nbytes).map(Some).map_err(|other| {
        pyo3::exceptions::PyBufferError::new_err(format!(
            "cannot change the array: a typed argument of a Rust function still running holds its memory for {} \
             (bytes 0x{:x}..0x{:x}); change it after that call returns, or through that argument",
            if other.exclusive != 0 { "writing" } else { "reading" },
            other.start,
            other.end
        ))
    })
}

/// Mutable access to an amso object's typed array (`MemArrayBase::with_typed_mut`): reads
/// through `Deref`, changes through the methods here, which are `MemArray`'s own.
pub struct TypedMut<'a, T: Element, const N: usize> {
    array: &'a mut MemArray<T, N>,
    base: &'a MemArrayBase,
}

impl<T: Element, const N: usize> std::ops::Deref for TypedMut<'_, T, N> {
    type Target = MemArray<T, N>;

    fn deref(&self) -> &MemArray<T, N> {
        self.array
    }
}

impl<T: Element, const N: usize> TypedMut<'_, T, N> {
    /// See `MemArray::write`.
    pub fn write(&mut self, index: [usize; N], value: T) -> crate::error::Result<()> {
        self.array.write(index, value)
    }

    /// See `MemArray::copy_from_slice`.
    pub fn copy_from_slice(&mut self, values: &[T]) -> crate::error::Result<()> {
        self.array.copy_from_slice(values)
    }

    /// See `MemArray::indexer_mut`.
    pub fn indexer_mut(&mut self) -> crate::error::Result<crate::indexer::HostIndexerMut<'_, T, N>> {
        self.array.indexer_mut()
    }

    /// See `MemArray::as_mut_ptr`.
    pub fn as_mut_ptr(&mut self) -> crate::error::Result<*mut T> {
        self.array.as_mut_ptr()
    }

    /// See `MemArray::lock`.
    pub fn lock(&mut self) -> crate::error::Result<crate::memarray::LockGuard<'_, T, N>> {
        self.array.lock()
    }

    /// See `MemArray::make_readonly`.
    pub fn make_readonly(&mut self) {
        self.array.make_readonly();
    }

    /// See `MemArray::move_memory`; refused while buffer exports describe the host data, as
    /// the Python method is.
    pub fn move_memory(
        &mut self,
        target: crate::device::Device,
        stream: crate::stream::Stream,
        async_copy: bool,
    ) -> crate::error::Result<()> {
        self.base.move_locked(self.array.core_mut(), target, stream, async_copy)
    }

    /// See `MemArray::add_index_tuple`; refused while buffer exports describe the host data.
    #[cfg(feature = "cuda")]
    pub fn add_index_tuple(&mut self, stream: crate::stream::Stream) -> crate::error::Result<()> {
        self.base.add_index_locked(self.array.core_mut(), stream)
    }

    /// See `MemArray::device_indexer`.
    #[cfg(feature = "cuda")]
    pub fn device_indexer(&mut self) -> crate::error::Result<crate::indexer::DeviceIndexer<'_, T, N>> {
        self.array.device_indexer()
    }

    /// See `MemArray::device_indexer_on`.
    ///
    /// # Safety
    /// As `MemArray::device_indexer_on`.
    #[cfg(feature = "cuda")]
    pub unsafe fn device_indexer_on(
        &mut self,
        stream: crate::stream::Stream,
    ) -> crate::error::Result<crate::indexer::DeviceIndexer<'_, T, N>> {
        // SAFETY: forwarded from the caller.
        unsafe { self.array.device_indexer_on(stream) }
    }

    /// See `MemArray::record_work`.
    ///
    /// # Safety
    /// As `MemArray::record_work`.
    #[cfg(feature = "cuda")]
    pub unsafe fn record_work(&mut self, stream: crate::stream::Stream) -> crate::error::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.array.record_work(stream) }
    }
}
