//! `MemArrayBase`: the one Python class that carries every method of every instantiation,
//! holding its array as an `ArrayCore` (any element type and rank). Generated classes subclass it and add only their
//! constructor.
//!
//! The class is `frozen`: PyO3 keeps no borrow flag, so no Python user ever sees "Already
//! borrowed". Its state has one discipline, written here:
//! - the array sits behind an `RwLock`. A thread that finds it taken waits with the GIL
//!   released (`py.detach`), so a holder that needs the GIL back (or runs detached, as a
//!   move does) always finishes. No Python code runs while the lock is held.
//! - facts that never change (dtype, shape) and the placement the C header publishes are read
//!   without the lock, so readers see the state from before a long operation, never a
//!   half-updated one (`Header`).
//! - every change goes through `modify` or `modify_detached`, which republish the header
//!   (with the GIL held) once the change is complete.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::element::{DType, Element};
use crate::memarray::core::ArrayCore;
use crate::memarray::MemArray;
use crate::python::header::Header;

/// Base class of every amso array class (Python name `amso._amso.MemArrayBase`).
#[pyclass(subclass, frozen, module = "amso._amso", name = "MemArrayBase")]
pub struct MemArrayBase {
    /// What the C getters read; the placement fields are republished after every change.
    header: Header,
    dtype: &'static DType,
    state: RwLock<ArrayCore>,
    /// Live buffer-protocol exports; while any lives, the data stays where it is.
    pub(super) buffer_exports: AtomicUsize,
    /// The last `__cuda_array_interface__` built, with the (address, stream) it describes;
    /// each access hands out a copy, never this dict itself.
    pub(super) interface_cache: Mutex<Option<CachedInterface>>,
}

/// An interface dict and the (data address, stream) it describes.
pub(super) type CachedInterface = (usize, Option<i64>, Py<PyDict>);

type ReadGuard<'a> = RwLockReadGuard<'a, ArrayCore>;
type WriteGuard<'a> = RwLockWriteGuard<'a, ArrayCore>;

impl MemArrayBase {
    /// Wrap an array.
    pub(crate) fn new(array: ArrayCore) -> Self {
        let view = array.raw_view();
        let (header, dtype) = (Header::of(&view), view.dtype());
        MemArrayBase {
            header,
            dtype,
            state: RwLock::new(array),
            buffer_exports: AtomicUsize::new(0),
            interface_cache: Mutex::new(None),
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

    fn read_guard(&self, py: Python<'_>) -> ReadGuard<'_> {
        loop {
            match self.state.try_read() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                // Wait for the writer without the GIL, then try again.
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.state.read())),
            }
        }
    }

    fn write_guard(&self, py: Python<'_>) -> WriteGuard<'_> {
        loop {
            match self.state.try_write() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.state.write())),
            }
        }
    }

    /// Read the array through `f` (no Python code in `f`).
    pub(crate) fn read<R>(&self, py: Python<'_>, f: impl FnOnce(&ArrayCore) -> R) -> R {
        f(&self.read_guard(py))
    }

    /// Whether no thread is changing the array now (a move, a copy in): what a reader that must
    /// not wait (the repr) looks at first.
    pub(crate) fn idle(&self) -> bool {
        !matches!(self.state.try_read(), Err(TryLockError::WouldBlock))
    }

    /// Read the array through `f` with the GIL released (long reads: copies out).
    pub(crate) fn read_detached<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&ArrayCore) -> R + Send) -> R {
        py.detach(|| f(&self.state.read().unwrap_or_else(|e| e.into_inner())))
    }

    /// Change the array through `f` (no Python code in `f`), then republish the header.
    pub(crate) fn modify<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ArrayCore) -> R) -> R {
        let mut guard = self.write_guard(py);
        let result = f(&mut guard);
        self.header.publish(py, &guard.raw_view());
        result
    }

    /// Change the array through `f` with the GIL released (moves, large copies in), then
    /// republish the header. Other threads meanwhile read the old placement, or wait.
    pub(crate) fn modify_detached<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut ArrayCore) -> R + Send) -> R {
        let result = py.detach(|| f(&mut self.state.write().unwrap_or_else(|e| e.into_inner())));
        self.read(py, |array| self.header.publish(py, &array.raw_view()));
        result
    }

    /// Move `array` (this object's, locked for writing, so no new buffer appears meanwhile) to
    /// `target`: refused while buffer exports describe the host copy, unless the data is there
    /// already. The one check of Python's `move_memory` and Rust's `TypedMut`.
    pub(crate) fn move_locked(
        &self,
        array: &mut ArrayCore,
        target: crate::Device,
        stream: i64,
        async_copy: bool,
    ) -> crate::Result<()> {
        if array.device() != target {
            self.check_unpinned()?;
        }
        array.move_memory(target, stream, async_copy, None)
    }

    /// The add-index kernel on `array` (this object's, locked for writing), which moves the data
    /// to the device first: refused while buffer exports describe the host copy.
    pub(crate) fn add_index_locked(&self, array: &mut ArrayCore, stream: i64) -> crate::Result<()> {
        self.check_unpinned()?;
        array.add_index_tuple(stream, None)
    }

    /// Refuse to change where the data lives (or to overwrite it by a move) while buffer
    /// exports describe the host copy.
    fn check_unpinned(&self) -> crate::Result<()> {
        match self.buffer_exports.load(Ordering::Acquire) {
            0 => Ok(()),
            n => Err(crate::Error::ExportRefused(format!(
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
        self.read(py, |array| MemArray::view(array).map(f))
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
) -> PyResult<Option<super::args::borrow::Borrow<'py>>> {
    let view = array.raw_view();
    if view.host.is_null() || view.nbytes == 0 || (!lasting && crate::process::live_borrows(py) == 0) {
        return Ok(None);
    }
    super::args::borrow::Borrow::for_amso_write(py, view.host as usize, view.nbytes).map(Some)
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
    pub fn write(&mut self, index: [usize; N], value: T) -> crate::Result<()> {
        self.array.write(index, value)
    }

    /// See `MemArray::copy_from_slice`.
    pub fn copy_from_slice(&mut self, values: &[T]) -> crate::Result<()> {
        self.array.copy_from_slice(values)
    }

    /// See `MemArray::indexer_mut`.
    pub fn indexer_mut(&mut self) -> crate::Result<crate::HostIndexerMut<'_, T, N>> {
        self.array.indexer_mut()
    }

    /// See `MemArray::as_mut_ptr`.
    pub fn as_mut_ptr(&mut self) -> crate::Result<*mut T> {
        self.array.as_mut_ptr()
    }

    /// See `MemArray::lock`.
    pub fn lock(&mut self) -> crate::Result<crate::LockGuard<'_, T, N>> {
        self.array.lock()
    }

    /// See `MemArray::make_readonly`.
    pub fn make_readonly(&mut self) {
        self.array.make_readonly();
    }

    /// See `MemArray::move_memory`; refused while buffer exports describe the host data, as
    /// the Python method is.
    pub fn move_memory(&mut self, target: crate::Device, stream: crate::Stream, async_copy: bool) -> crate::Result<()> {
        self.base.move_locked(self.array.core_mut(), target, stream.protocol_value(), async_copy)
    }

    /// See `MemArray::add_index_tuple`; refused while buffer exports describe the host data.
    #[cfg(feature = "cuda")]
    pub fn add_index_tuple(&mut self, stream: crate::Stream) -> crate::Result<()> {
        self.base.add_index_locked(self.array.core_mut(), stream.protocol_value())
    }

    /// See `MemArray::device_indexer`.
    #[cfg(feature = "cuda")]
    pub fn device_indexer(&mut self) -> crate::Result<crate::DeviceIndexer<'_, T, N>> {
        self.array.device_indexer()
    }

    /// See `MemArray::device_indexer_on`.
    ///
    /// # Safety
    /// As `MemArray::device_indexer_on`.
    #[cfg(feature = "cuda")]
    pub unsafe fn device_indexer_on(&mut self, stream: crate::Stream) -> crate::Result<crate::DeviceIndexer<'_, T, N>> {
        // SAFETY: forwarded from the caller.
        unsafe { self.array.device_indexer_on(stream) }
    }

    /// See `MemArray::record_work`.
    ///
    /// # Safety
    /// As `MemArray::record_work`.
    #[cfg(feature = "cuda")]
    pub unsafe fn record_work(&mut self, stream: crate::Stream) -> crate::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.array.record_work(stream) }
    }
}
