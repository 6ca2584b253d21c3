//! amso's pool as other libraries' allocator: what their plug-in points call (the Python side
//! is `amso.allocators`). Device memory is lent through `cuda/loans.rs`, which checks every
//! address given back; pinned host memory is owned by a `_PinnedLoan` object. PyTorch's
//! `CUDAPluggableAllocator` calls two C functions of this module without Python
//! (`amso_torch_alloc`, `amso_torch_free`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;

use crate::cuda::device_memory::PinnedMemory;
use crate::cuda::loans;
use crate::cuda::pool::{Client, Request, CLIENTS};
use crate::device::{DeviceId, Stream};
use crate::error::Error;
use crate::python::base::convert::StreamValue;

fn client(number: u32) -> PyResult<Client> {
    Client::from_number(number).ok_or_else(|| {
        PyValueError::new_err(format!("client {number} is not one of amso's plug-in clients (0..{})", CLIENTS.len()))
    })
}

fn lend_error(error: Error) -> PyErr {
    match error {
        Error::OutOfMemory { .. } => PyMemoryError::new_err(error.to_string()),
        other => other.into(),
    }
}

/// Lend `size` bytes on `device_id` for work on `stream` to client number `client_number`
/// (memory other processes can map with `shareable`): the address, the loan's serial, the client.
fn lend_to(
    py: Python<'_>,
    size: usize,
    device_id: DeviceId,
    stream: Stream,
    client_number: u32,
    shareable: bool,
) -> PyResult<(u64, u64, Client)> {
    let client = client(client_number)?;
    let request = if shareable { Request::Shareable } else { Request::Current };
    let (ptr, serial) = py.detach(|| loans::lend(request, device_id, size, stream, client)).map_err(lend_error)?;
    Ok((ptr, serial, client))
}

/// `_lend(size, device_id, stream, client, shareable=False)`: `size` bytes of device memory
/// from the process's pool, lent to `client` (a number of `CLIENTS`) for work on `stream` (a
/// protocol value); the address (0 for zero bytes). Give it back with `_reclaim`.
#[pyfunction]
#[pyo3(name = "_lend", signature = (size, device_id, stream, client_number, shareable = false))]
pub(super) fn lend(
    py: Python<'_>,
    size: usize,
    device_id: DeviceId,
    stream: StreamValue,
    client_number: u32,
    shareable: bool,
) -> PyResult<u64> {
    Ok(lend_to(py, size, device_id, stream.0, client_number, shareable)?.0)
}

/// `_reclaim(ptr, device_id, client, stream=None, size=None)`: give back a loan, freed after
/// the work on `stream` (the one it was lent for if `None`). A double free, an address amso
/// never lent, one of another device or client, or of another size, is a ValueError, and
/// nothing is freed.
#[pyfunction]
#[pyo3(name = "_reclaim", signature = (ptr, device_id, client_number, stream = None, size = None))]
pub(super) fn reclaim(
    py: Python<'_>,
    ptr: u64,
    device_id: i32, // a plug-in's; a device this machine lacks is a refused give-back, counted
    client_number: u32,
    stream: Option<StreamValue>,
    size: Option<usize>,
) -> PyResult<()> {
    let client = client(client_number)?;
    let device_id = DeviceId::new(device_id).inspect_err(|_| loans::count_refused())?;
    let back = loans::GiveBack { bytes: size, stream: stream.map(|StreamValue(stream)| stream), serial: None };
    py.detach(|| loans::reclaim(device_id, ptr, client, back))
        .map_err(|refusal| PyValueError::new_err(refusal.message(ptr, device_id)))
}

/// `_reset_loans(client, device_id)`: take back every loan of `client` on `device_id` (its
/// context was reset); how many.
#[pyfunction]
#[pyo3(name = "_reset_loans")]
pub(super) fn reset_loans(py: Python<'_>, client_number: u32, device_id: i32) -> PyResult<usize> {
    let client = client(client_number)?;
    // A device this machine lacks holds no loans (a plug-in's id, raw).
    Ok(DeviceId::new(device_id).map_or(0, |device_id| py.detach(|| loans::reset(client, device_id))))
}

/// `_refused_frees()`: gives-back refused so far (double frees, foreign addresses, ...).
#[pyfunction]
#[pyo3(name = "_refused_frees")]
pub(super) fn refused_frees() -> u64 {
    loans::refused()
}

/// A device loan owned by a Python object (CuPy's `UnownedMemory` owner, Numba's finalizer):
/// given back by `release()`, or when the object is dropped.
#[pyclass(frozen, module = "amso._amso", name = "_Loan")]
pub struct Loan {
    /// The device address (0 for zero bytes).
    #[pyo3(get)]
    ptr: u64,
    /// The ledger's serial of this loan, so that a give-back after a reset cannot return a
    /// later loan of the same address.
    serial: u64,
    /// The size in bytes.
    #[pyo3(get)]
    size: usize,
    device_id: DeviceId,
    client: Client,
    released: AtomicBool,
}

#[pymethods]
impl Loan {
    #[new]
    #[pyo3(signature = (size, device_id, stream, client_number, shareable = false))]
    fn new(
        py: Python<'_>,
        size: usize,
        device_id: DeviceId,
        stream: StreamValue,
        client_number: u32,
        shareable: bool,
    ) -> PyResult<Loan> {
        let (ptr, serial, client) = lend_to(py, size, device_id, stream.0, client_number, shareable)?;
        Ok(Loan { ptr, serial, size, device_id, client, released: AtomicBool::new(false) })
    }

    /// Give the memory back now (once; later calls do nothing). A ValueError if the loan was
    /// taken back already by a reset.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let (ptr, device_id, client) = (self.ptr, self.device_id, self.client);
        py.detach(|| loans::reclaim(device_id, ptr, client, self.give_back()))
            .map_err(|refusal| PyValueError::new_err(refusal.message(ptr, device_id)))
    }
}

impl Loan {
    fn give_back(&self) -> loans::GiveBack {
        loans::GiveBack { bytes: Some(self.size), stream: None, serial: Some(self.serial) }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            // A loan a reset took back is counted as refused, and nothing is freed twice. (The
            // ledger's lock is held for a lookup only, and the free's driver calls run with the
            // GIL released inside the pool.)
            let _ = loans::reclaim(self.device_id, self.ptr, self.client, self.give_back());
        }
    }
}

/// Pinned host memory from amso for another library (Numba's `memhostalloc`, CuPy's pinned
/// memory pool): freed by `release()` or when dropped.
#[pyclass(frozen, module = "amso._amso", name = "_PinnedLoan")]
pub struct PinnedLoan {
    memory: std::sync::Mutex<Option<PinnedMemory>>,
    /// The host address (0 for zero bytes).
    #[pyo3(get)]
    ptr: usize,
    /// The size in bytes.
    #[pyo3(get)]
    size: usize,
}

#[pymethods]
impl PinnedLoan {
    #[new]
    #[pyo3(signature = (size, mapped = false, write_combined = false))]
    fn new(py: Python<'_>, size: usize, mapped: bool, write_combined: bool) -> PyResult<PinnedLoan> {
        let memory = py.detach(|| PinnedMemory::alloc_for_loan(size, mapped, write_combined)).map_err(lend_error)?;
        let ptr = memory.as_ptr() as usize;
        Ok(PinnedLoan { memory: std::sync::Mutex::new(Some(memory)), ptr, size })
    }

    /// Free the memory now (once).
    fn release(&self, py: Python<'_>) {
        let memory = self.memory.lock().unwrap_or_else(|e| e.into_inner()).take();
        py.detach(|| drop(memory));
    }
}

/// The client number of PyTorch's loans, and how many refusals were reported on stderr.
const TORCH: Client = Client::Torch;
static REPORTED: AtomicU32 = AtomicU32::new(0);

/// PyTorch's `CUDAPluggableAllocator` allocation function: `size` bytes on `device` for work on
/// `stream` (a `cudaStream_t`; NULL is the legacy default stream). NULL when the pool is out
/// of memory (PyTorch then reports it; see docs/memory.md for its limits). Never unwinds.
///
/// # Safety
/// Called by PyTorch with a device it manages and one of its streams. (`device` is PyTorch's C
/// ABI, a raw id: checked here with `DeviceId::new`.)
#[no_mangle]
pub(crate) unsafe extern "C" fn amso_torch_alloc(size: usize, device: c_int, stream: *mut c_void) -> *mut c_void {
    // SAFETY: PyTorch's stream of `device` (NULL: the legacy default stream), alive for the call.
    let stream = unsafe { Stream::from_handle(stream as usize) };
    let lent = std::panic::catch_unwind(|| loans::lend(Request::Current, DeviceId::new(device)?, size, stream, TORCH));
    match lent {
        Ok(Ok((ptr, _))) => ptr as usize as *mut c_void,
        Ok(Err(error)) => {
            report(&format!("amso_torch_alloc: cannot lend {size} bytes on device {device}: {error}"));
            std::ptr::null_mut()
        }
        Err(_) => std::ptr::null_mut(),
    }
}

/// PyTorch's `CUDAPluggableAllocator` free function: give back `ptr` (of `size` bytes, on
/// `device`) after the work on `stream`. A double free or an address amso never lent is
/// refused and reported on stderr (the first 10), never freed. Never unwinds.
///
/// # Safety
/// Called by PyTorch with what `amso_torch_alloc` returned and the same size and device. (A
/// `device` this machine lacks is a refused give-back, counted.)
#[no_mangle]
pub(crate) unsafe extern "C" fn amso_torch_free(ptr: *mut c_void, size: usize, device: c_int, stream: *mut c_void) {
    // SAFETY: as in `amso_torch_alloc`.
    let stream = unsafe { Stream::from_handle(stream as usize) };
    let back = loans::GiveBack { bytes: Some(size), stream: Some(stream), serial: None };
    let outcome = std::panic::catch_unwind(|| match DeviceId::new(device) {
        Ok(id) => loans::reclaim(id, ptr as usize as u64, TORCH, back).map_err(|r| r.message(ptr as usize as u64, id)),
        Err(error) => {
            loans::count_refused();
            Err(error.to_string())
        }
    });
    if let Ok(Err(message)) = outcome {
        report(&format!("amso_torch_free: {message}"));
    }
}

/// Say `message` on stderr, for the first 10 refusals of a process (PyTorch's allocator
/// functions have no error channel).
fn report(message: &str) {
    use std::io::Write;
    if REPORTED.fetch_add(1, Ordering::Relaxed) < 10 {
        let _ = writeln!(std::io::stderr(), "{message}"); // never a panic: stderr may be closed
    }
}
