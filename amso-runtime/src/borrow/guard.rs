//! A hold on host memory in the process's borrow registry (`borrow/registry.rs`, shared by every
//! copy of the runtime through `process.rs`), released when it drops: a typed argument's, and
//! amso's own while Rust code changes an amso array (`MemArrayBase::with_typed_mut`, item
//! assignment). A refused borrow returns the key it conflicts with; the Python wings above say
//! what it means for their caller.

use pyo3::Python;

use crate::borrow::registry::BorrowKey;

/// A registered borrow; released on drop, with the GIL its `'py` says is held.
pub(crate) struct Borrow<'py>(BorrowKey, Python<'py>);

/// The registry key of the elements of a non-empty strided array (strides in elements, bytes
/// from `data + lowest` to `data + end`), shared or `exclusive`. A typed argument read in place
/// makes it again from the same facts to release its borrow (`release`), rather than carrying
/// it.
pub(crate) fn key(
    data: usize,
    (lowest, end): (isize, isize),
    shape: &[usize],
    strides: &[isize],
    itemsize: usize,
    exclusive: bool,
) -> BorrowKey {
    BorrowKey {
        start: data.wrapping_add_signed(lowest),
        end: data.wrapping_add_signed(end),
        data,
        stride_gcd: crate::strided::stride_gcd(shape, strides, itemsize),
        itemsize,
        exclusive: exclusive as u32,
    }
}

impl<'py> Borrow<'py> {
    /// Register `key`, or return the registered borrow it conflicts with.
    pub(crate) fn new(py: Python<'py>, key: BorrowKey) -> Result<Borrow<'py>, BorrowKey> {
        crate::process::acquire_borrow(py, &key)?;
        Ok(Borrow(key, py))
    }

    /// Drop this guard but not the registration: its owner releases it with `release`, from a
    /// key made again from the same facts.
    pub(crate) fn leave_registered(self) {
        std::mem::forget(self);
    }

    /// Borrow `len` contiguous bytes at `data` for writing, on behalf of amso itself changing
    /// an array of its own; refused (with the conflicting borrow) while a typed argument holds
    /// any of them.
    pub(crate) fn for_amso_write(py: Python<'py>, data: usize, len: usize) -> Result<Borrow<'py>, BorrowKey> {
        Borrow::new(py, BorrowKey { start: data, end: data + len, data, stride_gcd: 1, itemsize: 1, exclusive: 1 })
    }
}

/// Release a registration that `Borrow::leave_registered` left (the GIL held: `py`).
pub(crate) fn release(py: Python<'_>, key: &BorrowKey) {
    crate::process::release_borrow(py, key);
}

impl Drop for Borrow<'_> {
    fn drop(&mut self) {
        crate::process::release_borrow(self.1, &self.0);
    }
}
