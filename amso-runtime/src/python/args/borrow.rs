//! Borrows of host memory by typed arguments, checked across every argument alive in this
//! process (this runtime copy): a writable argument excludes any other argument over the same
//! bytes, so safe Rust never holds a `&mut [T]` and another reference to the same element
//! (`deposit(a, a)` is refused, not undefined behaviour). Python code touching the memory
//! through its own views meanwhile is outside what a borrow check can see, as in rust-numpy.

use std::sync::Mutex;

use pyo3::exceptions::PyBufferError;
use pyo3::PyResult;

struct Active {
    start: usize,
    end: usize,
    exclusive: bool,
}

static ACTIVE: Mutex<Vec<Active>> = Mutex::new(Vec::new());

/// A registered borrow of `[start, end)`; released on drop.
pub(super) struct Borrow {
    start: usize,
    end: usize,
    exclusive: bool,
}

impl Borrow {
    /// Borrow `[start, end)`, shared or `exclusive`. Empty ranges borrow nothing.
    pub(super) fn new(start: usize, end: usize, exclusive: bool) -> PyResult<Option<Borrow>> {
        if start >= end {
            return Ok(None);
        }
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        let clash = active.iter().find(|a| a.start < end && start < a.end && (a.exclusive || exclusive));
        if let Some(other) = clash {
            return Err(PyBufferError::new_err(format!(
                "the array overlaps another array argument that is borrowed {} (bytes 0x{:x}..0x{:x}); \
                 a writable argument cannot share memory with any other argument",
                if other.exclusive { "for writing" } else { "for reading" },
                other.start,
                other.end
            )));
        }
        active.push(Active { start, end, exclusive });
        Ok(Some(Borrow { start, end, exclusive }))
    }
}

impl Drop for Borrow {
    fn drop(&mut self) {
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(index) =
            active.iter().position(|a| a.start == self.start && a.end == self.end && a.exclusive == self.exclusive)
        {
            active.swap_remove(index);
        }
    }
}
