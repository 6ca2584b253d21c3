//! amso's pool as other libraries' allocator: what their plug-in points call from Python (the
//! Python side is `amso.allocators`; PyTorch's and CuPy's C functions are in
//! `c_allocators.rs`). Device memory is lent through `cuda/loans.rs`, which checks every address
//! given back; pinned host memory is owned by a `_PinnedLoan` object.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;

use crate::cuda::device_memory::PinnedMemory;
use crate::cuda::loans;
use crate::cuda::request::{Client, Request, CLIENTS};
use crate::device::DeviceId;
use crate::error::Error;
use crate::python::base::convert::StreamValue;
use crate::stream::Stream;

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
    let (ptr, serial) = lend_holding_gil(py, request, device_id, size, stream, client)?;
    Ok((ptr, serial, client))
}

/// `loans::lend` as a caller holding the GIL makes it: a block the stream's own cache serves is
/// lent without releasing the GIL (`loans::lend_cached`: one lock held for a lookup, and no
/// driver call but the capture query, which never blocks), and every path that calls the driver
/// or waits releases it on its own (`gil::released`).
fn lend_holding_gil(
    _py: Python<'_>,
    request: Request,
    device_id: DeviceId,
    size: usize,
    stream: Stream,
    client: Client,
) -> PyResult<(u64, u64)> {
    let cached = match request {
        Request::Current => loans::lend_cached(device_id.ordinal(), size, stream, client),
        _ => None,
    };
    cached.unwrap_or_else(|| loans::lend(request, device_id, size, stream, client)).map_err(lend_error)
}

/// `loans::reclaim` as a caller holding the GIL makes it: a give-back the cache takes at once
/// (`loans::reclaim_cached`) holding it, any other with it released.
fn reclaim_holding_gil(
    py: Python<'_>,
    device_id: DeviceId,
    ptr: u64,
    client: Client,
    back: loans::GiveBack,
) -> Result<(), loans::Refusal> {
    if loans::reclaim_cached(device_id.ordinal(), ptr, client, back) {
        return Ok(());
    }
    py.detach(|| loans::reclaim(device_id, ptr, client, back))
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
    reclaim_holding_gil(py, device_id, ptr, client, back)
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
        Ok(Loan::lent(ptr, serial, size, device_id, client))
    }

    /// Give the memory back now (once; later calls do nothing). A ValueError if the loan was
    /// taken back already by a reset.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let (ptr, device_id, client) = (self.ptr, self.device_id, self.client);
        reclaim_holding_gil(py, device_id, ptr, client, self.give_back())
            .map_err(|refusal| PyValueError::new_err(refusal.message(ptr, device_id)))
    }
}

/// A lender of one plug-in's loans (its device, stream, client and kind fixed): `lend(size)`
/// makes a `_Loan` with one argument to convert, for Numba's `memalloc`, which runs once per
/// array.
#[pyclass(frozen, module = "amso._amso", name = "_Lender")]
pub struct Lender {
    device_id: DeviceId,
    stream: Stream,
    client: Client,
    request: Request,
}

#[pymethods]
impl Lender {
    #[new]
    #[pyo3(signature = (device_id, stream, client_number, shareable = false))]
    fn new(device_id: DeviceId, stream: StreamValue, client_number: u32, shareable: bool) -> PyResult<Lender> {
        let request = if shareable { Request::Shareable } else { Request::Current };
        Ok(Lender { device_id, stream: stream.0, client: client(client_number)?, request })
    }

    /// A loan of `size` bytes (see `_Loan`).
    fn lend(&self, py: Python<'_>, size: usize) -> PyResult<Loan> {
        let (device_id, client) = (self.device_id, self.client);
        let (ptr, serial) = lend_holding_gil(py, self.request, device_id, size, self.stream, client)?;
        Ok(Loan::lent(ptr, serial, size, device_id, client))
    }
}

impl Loan {
    /// The loan `loans::lend` made: not yet given back.
    fn lent(ptr: u64, serial: u64, size: usize, device_id: DeviceId, client: Client) -> Loan {
        Loan { ptr, serial, size, device_id, client, released: AtomicBool::new(false) }
    }

    fn give_back(&self) -> loans::GiveBack {
        loans::GiveBack { bytes: Some(self.size), stream: None, serial: Some(self.serial) }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            // A loan a reset took back is counted as refused, and nothing is freed twice. (The
            // ledger's lock is held for a lookup only; a Numba free's barrier is queued without
            // waiting, as a launch is, and every driver call that waits runs with the GIL
            // released inside the pool.)
            let (device_id, ptr, client, back) = (self.device_id, self.ptr, self.client, self.give_back());
            if !loans::reclaim_cached(device_id.ordinal(), ptr, client, back) {
                let _ = loans::reclaim(device_id, ptr, client, back);
            }
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

/// `_clients()`: the pool's client numbers by name (`amso.memory_info()["clients"]`), for the
/// Python plug-ins.
#[pyfunction]
#[pyo3(name = "_clients")]
pub(super) fn clients() -> Vec<(&'static str, u32)> {
    CLIENTS.iter().enumerate().map(|(i, name)| (*name, i as u32)).collect()
}

/// The two callbacks of RMM's `CallbackMemoryResource` for one device, without a Python frame:
/// `allocate(size, stream)` lends from amso's pool on RMM's stream, and `deallocate(ptr, size,
/// stream)` gives back after the work on it (a refused give-back is a `RuntimeWarning`: RMM's
/// callback must not raise).
#[pyclass(frozen, module = "amso._amso", name = "_RmmHooks")]
pub struct RmmHooks {
    device_id: DeviceId,
}

/// The handle of an RMM `Stream` (the CUDA stream protocol, `__cuda_stream__`).
fn rmm_stream(stream: &Bound<'_, PyAny>) -> PyResult<Stream> {
    let (_, handle): (i64, usize) = stream.call_method0(pyo3::intern!(stream.py(), "__cuda_stream__"))?.extract()?;
    // SAFETY: RMM's stream, alive for the call, as RMM's resource contract requires.
    Ok(unsafe { Stream::from_handle(handle) })
}

#[pymethods]
impl RmmHooks {
    #[new]
    fn new(device_id: DeviceId) -> RmmHooks {
        RmmHooks { device_id }
    }

    fn allocate(&self, py: Python<'_>, size: usize, stream: &Bound<'_, PyAny>) -> PyResult<u64> {
        let stream = rmm_stream(stream)?;
        Ok(lend_to(py, size, self.device_id, stream, Client::Rmm as u32, false)?.0)
    }

    fn deallocate(&self, py: Python<'_>, ptr: u64, size: usize, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let back = loans::GiveBack { bytes: Some(size), stream: Some(rmm_stream(stream)?), serial: None };
        let device_id = self.device_id;
        if let Err(refusal) = reclaim_holding_gil(py, device_id, ptr, Client::Rmm, back) {
            PyErr::warn(
                py,
                &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(),
                &std::ffi::CString::new(refusal.message(ptr, device_id)).unwrap_or_default(),
                1,
            )?;
        }
        Ok(())
    }
}

/// `_pool_pair_ns(size, stream, client_number, count)`: the mean time in nanoseconds of one
/// loan and its give-back through amso's pool and ledger, `count` times on `stream` (a
/// diagnostic of the benchmark report: what amso adds to a library's hook).
#[pyfunction]
#[pyo3(name = "_pool_pair_ns")]
pub(super) fn pool_pair_ns(
    py: Python<'_>,
    size: usize,
    stream: StreamValue,
    client_number: u32,
    count: u32,
) -> PyResult<f64> {
    let client = client(client_number)?;
    let device_id = DeviceId::ZERO;
    let back = loans::GiveBack { bytes: Some(size), stream: None, serial: None };
    let start = std::time::Instant::now();
    for _ in 0..count {
        // As the plug-ins call them: the common case first.
        let (ptr, _) = lend_holding_gil(py, Request::Current, device_id, size, stream.0, client)?;
        reclaim_holding_gil(py, device_id, ptr, client, back)
            .map_err(|refusal| PyValueError::new_err(refusal.message(ptr, device_id)))?;
    }
    Ok(start.elapsed().as_nanos() as f64 / f64::from(count.max(1)))
}
