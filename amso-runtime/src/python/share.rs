//! Device arrays shared with other processes on the same machine, without a copy:
//! `a.share()` gives a picklable `SharedHandle`; `handle.open()`, in another process, is an amso
//! array over the same device memory (CUDA IPC, `cuda/ipc.rs`).
//!
//! **Lifetime.** The exporting process keeps the memory alive while any importer holds it,
//! even after its own array is gone: each export is kept in `EXPORTS`, and each importer marks
//! its hold with a file named after it (its pid and start time, so a reused pid is not mistaken
//! for it) in the export's folder (`/dev/shm/amso-shared-PID-SERIAL`). An export is freed, and
//! its folder removed, once nothing in the exporting process uses the memory and no importer
//! that is still running holds it: an importer that closes its array removes its file, one
//! that dies leaves a file of a process that no longer runs, which counts for nothing. A handle
//! not opened yet holds too, for `AMSO_SHARE_PENDING_SECONDS` (60 by default): it may be on its
//! way to a process when the exporter drops its array.
//! Exports are collected at each `share()`, at `amso.cuda.collect_shared()`, and at exit,
//! where the exporter waits (up to `AMSO_SHARE_EXIT_WAIT` seconds, 10 by default) for its
//! importers, since its memory goes away with it.
//!
//! **Ordering.** `share()` records an interprocess event after the array's work so far; an
//! importer's amso stream waits for it before any work on the memory.
//!
//! **Refusals.** A handle opened in the process that shared it is a plain reference to the
//! same memory. A handle whose exporter is gone, one that names no export of its exporter
//! (damaged, forged, or released), and one opened for a GPU that is not the memory's, are
//! clear errors, each before any driver call that could touch memory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRuntimeWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use super::array::MemArrayBase;
use super::registry;
use crate::cuda::device_memory::DeviceMemory;
use crate::cuda::ipc::{self, HandleBytes, IpcEvent, HANDLE_BYTES};
use crate::device::{Device, Residence};
use crate::memarray::ForeignMemory;

const MAGIC: &[u8; 8] = b"AMSOSHR1";

/// What a handle says.
#[derive(Debug, Clone, PartialEq)]
struct Parsed {
    pid: u32,
    start: u64,
    serial: u64,
    /// This handle's pending hold (see `Holds`).
    pending: u64,
    uuid: [u8; 16],
    nbytes: u64,
    memory: HandleBytes,
    event: HandleBytes,
    dtype: String,
    dims: Vec<i64>,
    readonly: bool,
}

impl Parsed {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.serial.to_le_bytes());
        out.extend_from_slice(&self.pending.to_le_bytes());
        out.extend_from_slice(&self.uuid);
        out.extend_from_slice(&self.nbytes.to_le_bytes());
        out.extend_from_slice(&self.memory);
        out.extend_from_slice(&self.event);
        out.push(self.dtype.len() as u8);
        out.extend_from_slice(self.dtype.as_bytes());
        out.push(self.dims.len() as u8);
        for dim in &self.dims {
            out.extend_from_slice(&dim.to_le_bytes());
        }
        out.push(self.readonly as u8);
        out
    }

    /// Read a handle's bytes, refusing anything that is not exactly one.
    fn decode(bytes: &[u8]) -> std::result::Result<Parsed, String> {
        let mut rest = bytes;
        let mut take = |n: usize| -> std::result::Result<&[u8], String> {
            if rest.len() < n {
                return Err(format!("it is truncated ({} bytes)", bytes.len()));
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        if take(8)? != MAGIC {
            return Err("it does not start as an amso handle of this version does".into());
        }
        let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let pid = u32_at(take(4)?);
        let start = u64_at(take(8)?);
        let serial = u64_at(take(8)?);
        let pending = u64_at(take(8)?);
        let uuid: [u8; 16] = take(16)?.try_into().expect("16 bytes");
        let nbytes = u64_at(take(8)?);
        let memory: HandleBytes = take(HANDLE_BYTES)?.try_into().expect("64 bytes");
        let event: HandleBytes = take(HANDLE_BYTES)?.try_into().expect("64 bytes");
        let name_len = take(1)?[0] as usize;
        let dtype = String::from_utf8(take(name_len)?.to_vec()).map_err(|_| "its dtype is not text".to_string())?;
        let ndim = take(1)?[0] as usize;
        if !(1..=crate::MAX_NDIM).contains(&ndim) {
            return Err(format!("its ndim {ndim} is outside 1..={}", crate::MAX_NDIM));
        }
        let mut dims = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            dims.push(i64::from_le_bytes(take(8)?.try_into().expect("8 bytes")));
        }
        let readonly = match take(1)?[0] {
            0 => false,
            1 => true,
            other => return Err(format!("its read-only flag is {other}")),
        };
        if !rest.is_empty() {
            return Err(format!("it has {} bytes after its end", rest.len()));
        }
        Ok(Parsed { pid, start, serial, pending, uuid, nbytes, memory, event, dtype, dims, readonly })
    }
}

/// A process's start time (clock ticks after boot, `/proc/PID/stat`'s 22nd field), which with
/// its pid names it for good.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// This process's pid and start time.
fn identity() -> (u32, u64) {
    let pid = std::process::id();
    (pid, start_time(pid).unwrap_or(0))
}

/// Whether the process with `pid` that started at `start` still runs.
fn alive(pid: u32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

/// Where export folders live: shared memory where the system has it.
fn base_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// An export's folder, named after its exporter (pid and start time, so that a later process
/// with the same pid never meets it) and serial.
fn export_dir(pid: u32, start: u64, serial: u64) -> PathBuf {
    base_dir().join(format!("amso-shared-{pid}-{start}-{serial}"))
}

/// Remove the export folders of exporters that no longer run (killed, or ended without their
/// exit hook): their memory went with them. Once per process, at its first share.
fn remove_stale_exports() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let Ok(entries) = std::fs::read_dir(base_dir()) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("amso-shared-") else { continue };
            let mut parts = rest.split('-').map(|p| p.parse::<u64>().ok());
            if let (Some(Some(pid)), Some(Some(start)), Some(Some(_)), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            {
                if !alive(pid as u32, start) {
                    let _ = std::fs::remove_dir_all(entry.path()); // another user's: refused, kept
                }
            }
        }
    });
}

/// What an export's folder records, for importers to check a handle against: the handle's
/// encoding without what differs from one `share()` to the next (its pending hold and event)
/// or is checked apart (the GPU's UUID). It names the exporter, the memory (its size and IPC
/// handle) and the array over it (dtype, shape, read-only), so that a handle whose description
/// was altered names no export.
fn record(p: &Parsed) -> Vec<u8> {
    Parsed { pending: 0, uuid: [0; 16], event: [0; ipc::HANDLE_BYTES], ..p.clone() }.encode()
}

/// Refuse a handle that does not match its export's record.
fn check_record(dir: &Path, p: &Parsed) -> PyResult<()> {
    match std::fs::read(dir.join("record")) {
        Ok(recorded) if recorded == record(p) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(PyValueError::new_err(format!(
            "cannot read the record of process {}'s shared array {} in {} ({e}): an export is open to its own user \
             only; open the handle as that user",
            p.pid,
            p.serial,
            dir.display()
        ))),
        _ => Err(no_export(p)),
    }
}

fn no_export(p: &Parsed) -> PyErr {
    PyValueError::new_err(format!(
        "process {} has no shared array {} matching this handle: it was released, or the handle is damaged or forged",
        p.pid, p.serial
    ))
}

/// Create an export's folder for this process's user alone (mode 0700), refusing one that
/// exists: another user's folder under the same name is never written into.
fn create_export_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// The export's lock, held while the exporter decides to free it and while an importer checks
/// its record and marks its hold: the two never interleave, so an export is freed only when no
/// importer can be about to map it. Each holds it for a few file operations; waiting is bounded
/// (`LOCK_PATIENCE`), so that a lock a forked child inherited mid-hold cannot hang anyone.
/// `NotFound` when the folder is gone (the export was freed).
fn lock_export(dir: &Path) -> std::io::Result<std::fs::File> {
    const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);
    let file = std::fs::OpenOptions::new().read(true).open(dir.join("lock"))?;
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the export stayed locked"));
            }
            Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Write a new file, refusing one that exists (a link planted in its place included).
fn write_new(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::File::create_new(path)?.write_all(contents)
}

/// How long a handle that was never opened keeps its memory, in seconds
/// (`AMSO_SHARE_PENDING_SECONDS`, 60 by default).
fn pending_lifetime() -> std::time::Duration {
    let seconds: f64 = std::env::var("AMSO_SHARE_PENDING_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(60.0);
    std::time::Duration::from_secs_f64(seconds.max(0.0))
}

/// Whether anything holds the export in `dir`: an importer that still runs, or (with
/// `pending`) a handle shared less than `pending_lifetime()` ago and not opened yet, which may
/// be on its way to a process. Files of importers that are gone, and stale pending ones, are
/// removed on the way.
fn held(dir: &Path, pending: bool) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    let mut held = false;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("pending-") {
            let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
            if age.is_some_and(|age| age < pending_lifetime()) {
                held |= pending;
            } else {
                let _ = std::fs::remove_file(entry.path());
            }
            continue;
        }
        let Some(rest) = name.strip_prefix("importer-") else { continue };
        let mut parts = rest.split('-').map(|p| p.parse::<u64>().ok());
        match (parts.next().flatten(), parts.next().flatten()) {
            (Some(pid), Some(start)) if alive(pid as u32, start) => held = true,
            _ => {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    held
}

/// One export of this process.
struct Export {
    serial: u64,
    memory: Arc<DeviceMemory>,
    event: Arc<IpcEvent>,
    handle: HandleBytes,
    /// What its folder records (`record`).
    record: Vec<u8>,
    dir: PathBuf,
}

static EXPORTS: Mutex<Vec<Export>> = Mutex::new(Vec::new());
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);
static NEXT_IMPORT: AtomicU64 = AtomicU64::new(1);
static NEXT_PENDING: AtomicU64 = AtomicU64::new(1);

fn exports() -> std::sync::MutexGuard<'static, Vec<Export>> {
    EXPORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Free the exports nothing holds any more; how many.
pub(crate) fn collect() -> usize {
    let mut all = exports();
    let mut finished = Vec::new();
    for export in std::mem::take(&mut *all) {
        if Arc::strong_count(&export.memory) > 1 {
            all.push(export);
            continue;
        }
        // Decided and removed under the export's lock, which an importer takes to mark its hold;
        // an export whose lock cannot be taken counts as held.
        let free = match lock_export(&export.dir) {
            Ok(_locked) if !held(&export.dir, true) => std::fs::remove_dir_all(&export.dir).is_ok(),
            Ok(_) => false,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        if free {
            finished.push(export);
        } else {
            all.push(export);
        }
    }
    drop(all);
    finished.len() // the memory is freed (deferred) and the event destroyed as they drop here
}

/// `a.share()`.
pub(crate) fn share(array: &Bound<'_, MemArrayBase>) -> PyResult<SharedHandle> {
    let py = array.py();
    let base = array.get();
    let (memory, device_id, stream, dims, readonly) = base.read(py, |core| {
        let raw = core.raw_view();
        let memory = (raw.residence() == Residence::Device).then(|| raw.device.memory().cloned()).flatten();
        (memory, raw.device_id(), raw.device.stream(), raw.shape.to_vec(), raw.readonly())
    });
    let Some(memory) = memory else {
        return Err(PyValueError::new_err(
            "share() shares device memory, and this array's data is on the host: create it with on_device=True, \
             shareable=True",
        ));
    };
    if !memory.shareable() {
        return Err(PyValueError::new_err(
            "share() needs memory another process can map (cuMemAlloc), and this array's comes from amso's \
             stream-ordered pool, which cannot be exported: create the array with shareable=True",
        ));
    }
    // Without the GIL: collecting may wait (briefly) for an importer's lock.
    py.detach(|| {
        remove_stale_exports();
        collect()
    });
    let (pid, start) = identity();
    let found =
        exports().iter().find(|e| Arc::ptr_eq(&e.memory, &memory)).map(|e| (e.serial, Arc::clone(&e.event), e.handle));
    let (serial, event, handle) = match found {
        Some(found) => found,
        None => export(py, &memory, device_id, base.element_type().name, &dims, readonly)?,
    };
    let mut parsed = Parsed {
        pid,
        start,
        serial,
        pending: NEXT_PENDING.fetch_add(1, Ordering::Relaxed),
        uuid: ipc::uuid(device_id)?,
        nbytes: memory.bytes() as u64,
        memory: handle,
        event: [0; ipc::HANDLE_BYTES],
        dtype: base.element_type().name.to_string(),
        dims: dims.iter().map(|&d| d as i64).collect(),
        readonly,
    };
    let dir = export_dir(pid, start, serial);
    memory.mark_shared();
    parsed.event = event.record(stream)?;
    let pending_file = dir.join(format!("pending-{}", parsed.pending));
    write_new(&pending_file, b"")
        .map_err(|e| PyValueError::new_err(format!("cannot record the share in {}: {e}", pending_file.display())))?;
    Ok(SharedHandle { bytes: parsed.encode(), parsed })
}

/// Export `memory` for the first time: its IPC handle, its event and its folder (with the record
/// of the array over it). When another thread exported the same memory meanwhile, its export
/// is used and this one's folder removed. Returns (serial, event, memory handle).
fn export(
    py: Python<'_>,
    memory: &Arc<DeviceMemory>,
    device_id: i32,
    dtype: &str,
    dims: &[usize],
    readonly: bool,
) -> PyResult<(u64, Arc<IpcEvent>, HandleBytes)> {
    let handle = ipc::memory_handle(device_id, memory.ptr())?;
    let event = Arc::new(IpcEvent::new(device_id)?);
    let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
    let (pid, start) = identity();
    let description = Parsed {
        pid,
        start,
        serial,
        pending: 0,
        uuid: [0; 16],
        nbytes: memory.bytes() as u64,
        memory: handle,
        event: [0; ipc::HANDLE_BYTES],
        dtype: dtype.to_string(),
        dims: dims.iter().map(|&d| d as i64).collect(),
        readonly,
    };
    let record = record(&description);
    let dir = export_dir(pid, start, serial);
    create_export_dir(&dir).map_err(|e| {
        PyValueError::new_err(format!(
            "cannot record the export in {} ({e}); a folder of that name that amso did not just create is refused",
            dir.display()
        ))
    })?;
    if let Err(e) = write_new(&dir.join("lock"), b"").and_then(|()| write_new(&dir.join("record"), &record)) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(PyValueError::new_err(format!("cannot record the export in {} ({e})", dir.display())));
    }
    let mut all = exports();
    if let Some(earlier) = all.iter().find(|e| Arc::ptr_eq(&e.memory, memory)) {
        let earlier = (earlier.serial, Arc::clone(&earlier.event), earlier.handle);
        drop(all);
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(earlier);
    }
    all.push(Export { serial, memory: Arc::clone(memory), event: Arc::clone(&event), handle, record, dir });
    drop(all);
    register_exit(py)?;
    Ok((serial, event, handle))
}

/// At exit, wait for importers of this process's memory (which goes away with it).
fn register_exit(py: Python<'_>) -> PyResult<()> {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    let mut result = Ok(());
    REGISTERED.call_once(|| {
        result = pyo3::wrap_pyfunction!(at_exit, py)
            .and_then(|f| py.import("atexit")?.call_method1("register", (f,)).map(drop));
    });
    result
}

#[pyfunction]
#[pyo3(name = "_shared_at_exit")]
fn at_exit(py: Python<'_>) -> PyResult<()> {
    let wait: f64 = std::env::var("AMSO_SHARE_EXIT_WAIT").ok().and_then(|v| v.parse().ok()).unwrap_or(10.0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(wait.max(0.0));
    loop {
        // Nothing in this process uses the memory any more, whatever arrays are left.
        let left = py.detach(|| {
            collect();
            exports().iter().filter(|e| held(&e.dir, false)).count()
        });
        if left == 0 {
            let finished = std::mem::take(&mut *exports());
            py.detach(|| {
                for export in &finished {
                    // Under its lock, so that no importer is between its check and its hold.
                    let _locked = lock_export(&export.dir);
                    let _ = std::fs::remove_dir_all(&export.dir);
                }
            });
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            let message = format!(
                "{left} shared amso array(s) are still open in other processes; their device memory goes away with \
                 this process"
            );
            return PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &std::ffi::CString::new(message)?, 1);
        }
        py.detach(|| std::thread::sleep(std::time::Duration::from_millis(50)));
    }
}

/// Another process's memory mapped into this one; unmapped, and the hold removed, on drop.
/// The driver maps a handle once per process: every array opened from it shares one mapping.
struct Imported {
    device_id: i32,
    ptr: u64,
    hold: PathBuf,
}

/// The mappings this process holds, by exporter (pid, start) and serial. Only `mapping` locks
/// it, with the GIL released; entries whose mapping is gone are pruned there.
static IMPORTS: Mutex<Vec<(ExportKey, std::sync::Weak<Imported>)>> = Mutex::new(Vec::new());

/// An export's exporter (pid, start time) and serial.
type ExportKey = (u32, u64, u64);

impl Drop for Imported {
    fn drop(&mut self) {
        let _ = ipc::close_memory(self.device_id, self.ptr);
        let _ = std::fs::remove_file(&self.hold);
    }
}

/// A device array of another process, or of this one, to open as an amso array without a
/// copy (`amso.cuda.SharedHandle`; pickle it to send it).
#[pyclass(frozen, module = "amso._amso", name = "SharedHandle")]
pub struct SharedHandle {
    bytes: Vec<u8>,
    parsed: Parsed,
}

#[pymethods]
impl SharedHandle {
    /// A handle from its bytes (what its pickle holds); damaged bytes are a ValueError.
    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<SharedHandle> {
        let parsed = Parsed::decode(data)
            .map_err(|why| PyValueError::new_err(format!("not an amso shared-array handle: {why}")))?;
        Ok(SharedHandle { bytes: data.to_vec(), parsed })
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.bytes)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let from_bytes = slf.get_type().getattr("from_bytes")?;
        PyTuple::new(py, [from_bytes, PyTuple::new(py, [PyBytes::new(py, &slf.get().bytes)])?.into_any()])
    }

    fn __repr__(&self) -> String {
        let p = &self.parsed;
        format!("SharedHandle(shape={:?}, dtype={}, exporter={}, serial={})", p.dims, p.dtype, p.pid, p.serial)
    }

    /// The shape of the shared array.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.parsed.dims)
    }

    /// The dtype's name.
    #[getter]
    fn dtype(&self) -> &str {
        &self.parsed.dtype
    }

    /// The exporting process's id.
    #[getter]
    fn exporter_pid(&self) -> u32 {
        self.parsed.pid
    }

    /// An amso array over the shared memory, on this process's device with the memory's GPU
    /// (`device_id`, if given, must be that device). In the exporting process itself, a plain
    /// reference to the same memory.
    #[pyo3(signature = (device_id = None))]
    fn open(&self, py: Python<'_>, device_id: Option<i32>) -> PyResult<Py<PyAny>> {
        open(py, &self.parsed, device_id)
    }
}

fn open(py: Python<'_>, p: &Parsed, device_id: Option<i32>) -> PyResult<Py<PyAny>> {
    let registration = registry::find_name(&p.dtype, p.dims.len()).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "the shared array is {} with ndim {}, which this module does not compile; compiled: {}",
            p.dtype,
            p.dims.len(),
            registry::compiled()
        ))
    })?;
    let itemsize = registration.dtype().itemsize();
    let described = crate::shape::checked_shape(&p.dims, p.dims.len(), itemsize).ok().map(|(_, bytes)| bytes as u64);
    if described.is_none_or(|bytes| bytes > p.nbytes) {
        return Err(PyValueError::new_err(format!(
            "the handle describes a {} array of shape {:?}, more than the {} bytes it shares: it is damaged or forged",
            p.dtype, p.dims, p.nbytes
        )));
    }
    let (pid, start) = identity();
    let memory = if (p.pid, p.start) == (pid, start) {
        // This process shared it: the same memory, referenced, after the work its handle
        // was shared after (the event `share()` recorded).
        let (export, event) = exports()
            .iter()
            .find(|e| e.serial == p.serial && e.record == record(p))
            .map(|e| (Arc::clone(&e.memory), Arc::clone(&e.event)))
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "this process shared no array {} matching this handle any more (released, or the handle is \
                     damaged or forged)",
                    p.serial
                ))
            })?;
        if let Some(wanted) = device_id.filter(|&d| d != export.device_id()) {
            return Err(PyValueError::new_err(format!(
                "the shared memory is on device {}, not on device {wanted}; open it there, or copy it afterwards",
                export.device_id()
            )));
        }
        event.wait_on(crate::cuda::stream::amso_stream(export.device_id())?)?;
        ForeignMemory {
            address: export.ptr() as usize,
            device: Device::cuda(export.device_id()),
            owner: Box::new(Arc::clone(&export)),
        }
    } else {
        if !alive(p.pid, p.start) {
            return Err(PyValueError::new_err(format!(
                "the process that shared this array (pid {}) is gone, and its device memory with it",
                p.pid
            )));
        }
        let dir = export_dir(p.pid, p.start, p.serial);
        check_record(&dir, p)?; // before any driver call; again under the lock when mapping
        let local = ipc::device_with_uuid(&p.uuid)?.ok_or_else(|| {
            PyValueError::new_err(format!(
                "the shared memory is on GPU {}, which this process does not see (CUDA_VISIBLE_DEVICES?)",
                uuid_text(&p.uuid)
            ))
        })?;
        if let Some(wanted) = device_id.filter(|&d| d != local) {
            return Err(PyValueError::new_err(format!(
                "the shared memory is on device {local} of this process (GPU {}), not on device {wanted}; open it \
                 there, or copy it afterwards",
                uuid_text(&p.uuid)
            )));
        }
        // Without the GIL: the mapping's lock is never waited for by a thread holding it.
        let imported = py.detach(|| mapping(local, p, &dir, (pid, start)))?;
        let stream = crate::cuda::stream::amso_stream(local)?;
        ipc::wait_for(local, &p.event, stream)?;
        ForeignMemory { address: imported.ptr as usize, device: Device::cuda(local), owner: Box::new(imported) }
    };
    // The handle arrived: its pending hold gives way to the mapping's (or the exporter's own).
    let _ = std::fs::remove_file(export_dir(p.pid, p.start, p.serial).join(format!("pending-{}", p.pending)));
    let stream = crate::cuda::stream::amso_stream(memory.device.id)?.as_int();
    // SAFETY: the memory holds the exporter's array of `nbytes` (its record says so), C
    // contiguous elements of this dtype, mapped while `memory.owner` lives.
    let mut array = unsafe { registration.wrap(&p.dims, memory, p.readonly) }?;
    // SAFETY: amso's stream of the device, where the wait for the exporter's work was queued.
    unsafe { array.record_work(stream) }?;
    (registration.instance)(py, MemArrayBase::new(array))
}

/// This process's mapping of the export `p` names: the one it holds already, or a new one
/// (its hold marked in the export's folder `dir` first, so the exporter keeps the memory).
/// Called with the GIL released.
fn mapping(device_id: i32, p: &Parsed, dir: &Path, (pid, start): (u32, u64)) -> PyResult<Arc<Imported>> {
    let key = (p.pid, p.start, p.serial);
    let mut imports = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    // Upgrades only the entry with this key: the `Arc` made here is returned, never dropped
    // under the lock (a last reference dropped here would unmap with the lock held).
    imports.retain(|(_, weak)| weak.strong_count() > 0);
    if let Some(found) = imports.iter().find(|(k, _)| *k == key).and_then(|(_, weak)| weak.upgrade()) {
        return Ok(found);
    }
    // The record is checked and the hold marked under the export's lock, so the exporter
    // cannot free the memory in between.
    let locked = match lock_export(dir) {
        Ok(locked) => locked,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(no_export(p)),
        Err(e) => {
            return Err(PyValueError::new_err(format!(
                "cannot lock process {}'s shared array {} ({e}); try again",
                p.pid, p.serial
            )))
        }
    };
    check_record(dir, p)?;
    let hold = dir.join(format!("importer-{pid}-{start}-{}", NEXT_IMPORT.fetch_add(1, Ordering::Relaxed)));
    std::fs::File::create_new(&hold)
        .map_err(|e| PyValueError::new_err(format!("cannot hold the export ({}): {e}", hold.display())))?;
    drop(locked);
    let ptr = match ipc::open_memory(device_id, &p.memory) {
        Ok(ptr) => ptr,
        Err(error) => {
            let _ = std::fs::remove_file(&hold);
            return Err(error.into());
        }
    };
    let imported = Arc::new(Imported { device_id, ptr, hold });
    imports.push((key, Arc::downgrade(&imported)));
    Ok(imported)
}

fn uuid_text(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// `amso.cuda.collect_shared()`: free this process's exports nothing holds any more.
#[pyfunction]
pub(crate) fn collect_shared(py: Python<'_>) -> usize {
    py.detach(collect)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Parsed {
        Parsed {
            pid: 42,
            start: 7,
            serial: 3,
            pending: 5,
            uuid: [9; 16],
            nbytes: 4096,
            memory: [1; HANDLE_BYTES],
            event: [2; HANDLE_BYTES],
            dtype: "float32".into(),
            dims: vec![32, 32],
            readonly: false,
        }
    }

    #[test]
    fn handles_round_trip_and_every_damage_is_refused() {
        let bytes = sample().encode();
        assert_eq!(Parsed::decode(&bytes), Ok(sample()));
        for cut in 0..bytes.len() {
            assert!(Parsed::decode(&bytes[..cut]).is_err(), "a handle cut at {cut} reads");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Parsed::decode(&longer).unwrap_err().contains("after its end"));
        let mut wrong = bytes.clone();
        wrong[0] ^= 1;
        assert!(Parsed::decode(&wrong).unwrap_err().contains("amso handle"));
        let mut flag = bytes;
        *flag.last_mut().unwrap() = 2;
        assert!(Parsed::decode(&flag).unwrap_err().contains("read-only flag"));
    }

    #[test]
    fn this_process_is_alive_and_a_different_start_is_not() {
        let (pid, start) = identity();
        assert!(alive(pid, start));
        assert!(!alive(pid, start + 1), "a reused pid with another start time is another process");
    }
}
