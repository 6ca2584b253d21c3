//! `amso.memory`, Python's view of device memory management: plugging in an allocator written in Python
//! (or an adapter to PyTorch's or CuPy's pool), deferred frees, and `memory_info`.

use std::sync::Arc;

use pyo3::exceptions::PyMemoryError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::cuda::alloc::DeviceAllocator;
use crate::cuda::deferred::Limits;
use crate::cuda::pool;
use crate::cuda::stream::StreamHandle;
use crate::device::DeviceId;
use crate::error::{Error, Result};

/// Device memory from Python callables: `malloc(size, device_id, stream) -> int` and
/// `free(ptr, size, device_id, stream)`.
struct PythonAllocator {
    malloc: Py<PyAny>,
    free: Py<PyAny>,
    name: String,
}

impl DeviceAllocator for PythonAllocator {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn allocate(&self, device_id: DeviceId, bytes: usize, stream: StreamHandle) -> Result<u64> {
        Python::attach(|py| match self.malloc.call1(py, (bytes, device_id, stream.stream())) {
            Ok(value) => match value.extract::<u64>(py) {
                Ok(ptr) if ptr != 0 => Ok(ptr),
                _ => Err(Error::Cuda {
                    call: "the allocator's malloc",
                    code: None,
                    message: format!("it returned {value}, not a device address"),
                }),
            },
            Err(error) if error.is_instance_of::<PyMemoryError>(py) => {
                Err(Error::OutOfMemory { bytes, what: "device" })
            }
            Err(error) => {
                Err(Error::Cuda { call: "the allocator's malloc", code: None, message: format!("it raised {error}") })
            }
        })
    }

    fn free(&self, device_id: DeviceId, ptr: u64, bytes: usize, stream: StreamHandle) {
        // Frees can come from any thread (a consumer's deleter); at interpreter shutdown
        // there is no Python left to call, and the process releases the memory anyway.
        let _ = Python::try_attach(|py| {
            if let Err(error) = self.free.call1(py, (ptr, bytes, device_id, stream.stream())) {
                error.write_unraisable(py, None);
            }
        });
    }
}

/// Route new device allocations through `malloc`/`free` (both None: amso's own pool), for
/// every copy of the runtime in the process (`cuda/pool.rs`). Arrays keep the allocator that
/// made them and free through it.
#[pyfunction]
#[pyo3(signature = (malloc = None, free = None, name = None))]
pub(super) fn set_allocator(
    py: Python<'_>,
    malloc: Option<Py<PyAny>>,
    free: Option<Py<PyAny>>,
    name: Option<String>,
) -> PyResult<()> {
    let allocator: Option<Arc<dyn DeviceAllocator>> = match (malloc, free) {
        (None, None) => None,
        (Some(malloc), Some(free)) => {
            if !(malloc.bind(py).is_callable() && free.bind(py).is_callable()) {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "set_allocator(malloc, free) takes two callables: malloc(size, device, stream) -> pointer and \
                     free(pointer, size, device, stream)",
                ));
            }
            let name = name.unwrap_or_else(|| "Python allocator".into());
            Some(Arc::new(PythonAllocator { malloc, free, name }))
        }
        _ => return Err(Error::InvalidArgument("set_allocator needs both malloc and free, or neither".into()).into()),
    };
    // Without the GIL: the previous allocator may be dropped (and its pool's lock waited for).
    py.detach(|| pool::plug(allocator));
    Ok(())
}

/// Set when queued frees are flushed: at `count` pending frees or `fraction` of the device's
/// memory; returns the previous `(count, fraction)`.
#[pyfunction]
#[pyo3(signature = (count = None, fraction = None))]
pub(super) fn deferred_limits(count: Option<usize>, fraction: Option<f64>) -> PyResult<(usize, f64)> {
    if fraction.is_some_and(|f| !(0.0..=1.0).contains(&f)) || count == Some(0) {
        return Err(Error::InvalidArgument("count must be >= 1 and fraction within 0..=1".into()).into());
    }
    let previous = pool::deferred_limits(None);
    pool::deferred_limits(Some(Limits {
        count: count.unwrap_or(previous.count),
        fraction: fraction.unwrap_or(previous.fraction),
    }));
    Ok((previous.count, previous.fraction))
}

/// Bytes the driver's pool keeps after frees (amso's default allocator).
#[pyfunction]
pub(super) fn set_release_threshold(py: Python<'_>, bytes: u64) {
    py.detach(|| pool::set_release_threshold(bytes));
}

/// Begin holding frees (`amso.defer_cleanup()`).
#[pyfunction]
pub(super) fn defer_hold() {
    pool::hold_frees();
}

/// Stop holding frees; runs the ones that are due.
#[pyfunction]
#[pyo3(signature = (device_id = DeviceId::ZERO), text_signature = "(device_id=0)")]
pub(super) fn defer_release(py: Python<'_>, device_id: DeviceId) {
    py.detach(|| pool::release_frees(device_id));
}

/// Run every pending free now (unless a `defer_cleanup` block holds them).
#[pyfunction]
pub(super) fn flush_frees(py: Python<'_>) {
    py.detach(pool::flush);
}

/// Give every block amso's pool caches back to the driver, after a device-wide synchronisation
/// (PyTorch's `torch.cuda.empty_cache()`).
#[pyfunction]
pub(super) fn empty_cache(py: Python<'_>) -> PyResult<()> {
    py.detach(pool::empty_cache)?;
    Ok(())
}

/// Bound the bytes amso's pool caches per device (0: half of the device's memory); the previous
/// bound (0 for the default).
#[pyfunction]
pub(super) fn set_cache_limit(py: Python<'_>, bytes: u64) -> u64 {
    py.detach(|| pool::set_cache_limit(bytes))
}

/// Device memory and the process pool's statistics for `device_id`: totals, and per client
/// library under `clients` (bytes in use and allocations served).
#[pyfunction]
#[pyo3(signature = (device_id = DeviceId::ZERO), text_signature = "(device_id=0)")]
pub(super) fn memory_info(py: Python<'_>, device_id: DeviceId) -> PyResult<Bound<'_, PyDict>> {
    let (free, total) = crate::cuda::context::memory_info(device_id)?;
    let stats = py.detach(|| pool::stats(device_id));
    let info = PyDict::new(py);
    info.set_item("free", free)?;
    info.set_item("total", total)?;
    info.set_item("allocator", stats.allocator_name())?;
    info.set_item("in_use", stats.in_use.iter().sum::<usize>())?;
    info.set_item("cached", stats.cached)?;
    info.set_item("pending_frees", stats.pending)?;
    info.set_item("pending_bytes", stats.pending_bytes)?;
    info.set_item("hits", stats.hits)?;
    info.set_item("misses", stats.misses)?;
    info.set_item("cross_stream_hits", stats.cross_stream_hits)?;
    info.set_item("splits", stats.splits)?;
    info.set_item("evictions", stats.evictions)?;
    let shelves = py.detach(|| pool::shelves(device_id));
    info.set_item("waiting_on_events", shelves.iter().map(|row| row.waiting).sum::<usize>())?;
    let cache = pyo3::types::PyList::empty(py);
    for row in shelves {
        let line = PyDict::new(py);
        line.set_item("stream", row.stream)?;
        line.set_item("size_class", row.class)?;
        line.set_item("blocks", row.blocks)?;
        line.set_item("bytes", row.bytes)?;
        line.set_item("waiting_on_events", row.waiting)?;
        cache.append(line)?;
    }
    info.set_item("cache", cache)?;
    let (hits, misses) = (stats.hits, stats.misses);
    info.set_item("hit_rate", if hits + misses == 0 { 0.0 } else { hits as f64 / (hits + misses) as f64 })?;
    info.set_item("deferred_count_limit", stats.limits.count)?;
    info.set_item("deferred_fraction_limit", stats.limits.fraction)?;
    let clients = PyDict::new(py);
    for (i, name) in crate::cuda::request::CLIENTS.iter().enumerate() {
        let client = PyDict::new(py);
        client.set_item("in_use", stats.in_use[i])?;
        client.set_item("allocations", stats.allocations[i])?;
        clients.set_item(name, client)?;
    }
    info.set_item("clients", clients)?;
    Ok(info)
}
