//! Device arrays shared with other processes on the same machine, without a copy:
//! `a.share()` gives a picklable `SharedHandle`; `handle.open()`, in another process, is an amso
//! array over the same device memory (CUDA IPC, `cuda/ipc.rs`). The handle's bytes and the
//! lease protocol of an export's folder in `/dev/shm` are `share/` (pure Rust).
//!
//! **Lifetime.** The exporting process keeps the memory alive while any importer holds it,
//! even after its own array is gone: each export is kept in `EXPORTS`, and each importer holds
//! a locked file in the export's folder while it maps the memory. An export is freed, and its
//! folder removed, once nothing in the exporting process uses the memory and no importer holds
//! it (a killed importer's lock is gone with it). A handle not opened yet holds too, for
//! `AMSO_SHARE_PENDING_SECONDS` (60 by default): it may be on its way to a process when the
//! exporter drops its array. Exports are collected at each `share()`, at
//! `amso.cuda.collect_shared()`, and at exit, where the exporter waits (up to
//! `AMSO_SHARE_EXIT_WAIT` seconds, 10 by default) for its importers, since its memory goes
//! away with it.
//!
//! **Ordering.** `share()` records an interprocess event after the array's work so far; an
//! importer's amso stream waits for it before any work on the memory.
//!
//! **Trust.** A handle is another process's word. `open()` trusts it only once the export's
//! folder, opened as untrusted (`share/folder.rs`), is this user's, its exporter alive (its
//! lock held) and its record the handle's description; then the driver maps the memory, and
//! the mapping's real size must cover what the handle claims. Every refusal before the
//! mapping comes before any driver call. File-system calls run with the GIL released.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyPermissionError, PyRuntimeWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::cuda::device_memory::DeviceMemory;
use crate::cuda::ipc::{self, IpcEvent, HANDLE_BYTES};
use crate::device::{Device, DeviceId, Residence};
use crate::memarray::ForeignMemory;
use crate::python::base::array::MemArrayBase;
use crate::python::base::registry;
use crate::share::folder::{current_uid, Folder};
use crate::share::handle::Handle;
use crate::share::lease::{self, ExportFolder, Hold, ImportFolder, ImportRefusal};

/// How long a handle that was never opened keeps its memory (`AMSO_SHARE_PENDING_SECONDS`, 60
/// by default, clamped to a day); a value that is not a number is a ValueError.
fn pending_lifetime() -> PyResult<Duration> {
    lease::seconds_from_env("AMSO_SHARE_PENDING_SECONDS", 60.0).map_err(PyValueError::new_err)
}

/// One export of this process.
struct Export {
    /// What handles of it say, but for their pending hold, GPU and event (`Handle::record`).
    description: Handle,
    memory: Arc<DeviceMemory>,
    event: Arc<IpcEvent>,
    /// What its folder records.
    record: Vec<u8>,
    folder: Arc<ExportFolder>,
}

static EXPORTS: Mutex<Vec<Export>> = Mutex::new(Vec::new());
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);
static NEXT_PENDING: AtomicU64 = AtomicU64::new(1);

fn exports() -> std::sync::MutexGuard<'static, Vec<Export>> {
    EXPORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Free the exports nothing holds any more; how many. Called with the GIL released.
fn collect(pending: Duration) -> usize {
    let mut all = exports();
    let mut finished = Vec::new();
    for export in std::mem::take(&mut *all) {
        if Arc::strong_count(&export.memory) > 1 {
            all.push(export);
            continue;
        }
        // Decided and removed under the export's lock, which an importer takes to mark its hold;
        // an export whose lock cannot be taken counts as held.
        let free = match export.folder.lock() {
            Ok(_locked) if !export.folder.held(pending, true) => {
                export.folder.remove();
                true
            }
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

/// Remove the folders of this user's exporters that are gone, then free this process's exports
/// nothing holds. Called with the GIL released.
fn collect_all(pending: Duration) -> usize {
    if let Ok(base) = Folder::shared_memory() {
        lease::remove_stale(&base);
    }
    collect(pending)
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
    let pending = pending_lifetime()?;
    // Without the GIL: collecting reads files and may wait (briefly) for an importer's lock.
    py.detach(|| collect_all(pending));
    // The exports' lock is waited for without the GIL: `collect` holds it across file calls.
    let found = py.detach(|| {
        exports()
            .iter()
            .find(|e| Arc::ptr_eq(&e.memory, &memory))
            .map(|e| (e.description.clone(), Arc::clone(&e.event), Arc::clone(&e.folder)))
    });
    let (description, event, folder) = match found {
        Some(found) => found,
        None => export(py, &memory, device_id, base.element_type().name, &dims, readonly)?,
    };
    let mut handle =
        Handle { pending: NEXT_PENDING.fetch_add(1, Ordering::Relaxed), uuid: ipc::uuid(device_id)?, ..description };
    memory.mark_shared();
    handle.event = event.record(stream)?;
    py.detach(|| folder.mark_pending(handle.pending))
        .map_err(|e| PyValueError::new_err(format!("cannot record the share in {}: {e}", folder.path().display())))?;
    Ok(SharedHandle { bytes: handle.encode(), handle })
}

/// Export `memory` for the first time: its IPC handle, its event and its folder (with the record
/// of the array over it). When another thread exported the same memory meanwhile, its export
/// is used and this one's folder removed. Returns the description, event and folder.
fn export(
    py: Python<'_>,
    memory: &Arc<DeviceMemory>,
    device_id: DeviceId,
    dtype: &str,
    dims: &[usize],
    readonly: bool,
) -> PyResult<(Handle, Arc<IpcEvent>, Arc<ExportFolder>)> {
    let memory_handle = ipc::memory_handle(device_id, memory.ptr())?;
    let event = Arc::new(IpcEvent::new(device_id)?);
    let mut description = Handle {
        uid: current_uid(),
        pid: std::process::id(),
        serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
        token: [0; 16],
        pending: 0,
        uuid: [0; 16],
        nbytes: memory.bytes() as u64,
        memory: memory_handle,
        event: [0; HANDLE_BYTES],
        dtype: dtype.to_string(),
        dims: dims.iter().map(|&d| d as i64).collect(),
        readonly,
    };
    let made = py.detach(|| {
        ExportFolder::create(&Folder::shared_memory()?, |token| Handle { token, ..description.clone() }.record())
    });
    let (folder, token) = made.map_err(|e| {
        let message = format!("cannot record the export in /dev/shm ({e})");
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            PyPermissionError::new_err(message)
        } else {
            PyValueError::new_err(message)
        }
    })?;
    description.token = token;
    let folder = Arc::new(folder);
    let earlier = py.detach(|| {
        let mut all = exports();
        if let Some(earlier) = all.iter().find(|e| Arc::ptr_eq(&e.memory, memory)) {
            let earlier = (earlier.description.clone(), Arc::clone(&earlier.event), Arc::clone(&earlier.folder));
            drop(all);
            folder.remove();
            return Some(earlier);
        }
        let record = description.record();
        all.push(Export {
            description: description.clone(),
            memory: Arc::clone(memory),
            event: Arc::clone(&event),
            record,
            folder: Arc::clone(&folder),
        });
        None
    });
    if let Some(earlier) = earlier {
        return Ok(earlier);
    }
    register_exit(py)?;
    Ok((description, event, folder))
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
    // A bad setting is reported, not raised: the exports must still be ended.
    let setting = |name: &str, default: f64| {
        lease::seconds_from_env(name, default).or_else(|why| {
            let message = std::ffi::CString::new(format!("{why}; using {default} s"))?;
            PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &message, 1)?;
            PyResult::Ok(Duration::from_secs_f64(default))
        })
    };
    let wait = setting("AMSO_SHARE_EXIT_WAIT", 10.0)?;
    let pending = setting("AMSO_SHARE_PENDING_SECONDS", 60.0)?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        // Nothing in this process uses the memory any more, whatever arrays are left.
        let left = py.detach(|| {
            collect(pending);
            // Under each export's lock, as in `collect`: no importer is between its hold's file
            // and its lock while the files are read (and stale ones removed).
            exports().iter().filter(|e| e.folder.lock().map_or(true, |_locked| e.folder.held(pending, false))).count()
        });
        if left == 0 {
            py.detach(|| {
                let finished = std::mem::take(&mut *exports());
                for export in &finished {
                    // Under its lock, so that no importer is between its check and its hold.
                    let _locked = export.folder.lock();
                    export.folder.remove();
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
        py.detach(|| std::thread::sleep(Duration::from_millis(50)));
    }
}

/// Another process's memory mapped into this one; unmapped, and the hold ended, on drop.
/// The driver maps a handle once per process: every array opened from it shares one mapping.
struct Imported {
    device_id: DeviceId,
    ptr: u64,
    hold: Option<Hold>,
}

/// The mappings this process holds, by export (its user and token) and local device. Only
/// `mapping` locks it, with the GIL released; entries whose mapping is gone are pruned there.
static IMPORTS: Mutex<Vec<(ExportKey, std::sync::Weak<Imported>)>> = Mutex::new(Vec::new());

/// An export's user and random name, and the device it is mapped on here.
type ExportKey = (u32, [u8; 16], DeviceId);

impl Drop for Imported {
    fn drop(&mut self) {
        let _ = ipc::close_memory(self.device_id, self.ptr);
        if let Some(hold) = self.hold.take() {
            crate::gil::released(|| hold.release()); // a file-system call: never with the GIL held
        }
    }
}

/// A device array of another process, or of this one, to open as an amso array without a
/// copy (`amso.cuda.SharedHandle`; pickle it to send it).
#[pyclass(frozen, module = "amso._amso", name = "SharedHandle")]
pub struct SharedHandle {
    bytes: Vec<u8>,
    handle: Handle,
}

#[pymethods]
impl SharedHandle {
    /// A handle from its bytes (what its pickle holds); damaged bytes are a ValueError.
    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<SharedHandle> {
        let handle = Handle::decode(data)
            .map_err(|why| PyValueError::new_err(format!("not an amso shared-array handle: {why}")))?;
        Ok(SharedHandle { bytes: data.to_vec(), handle })
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
        let h = &self.handle;
        format!("SharedHandle(shape={:?}, dtype={}, exporter={}, serial={})", h.dims, h.dtype, h.pid, h.serial)
    }

    /// The shape of the shared array.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.handle.dims)
    }

    /// The dtype's name.
    #[getter]
    fn dtype(&self) -> &str {
        &self.handle.dtype
    }

    /// The exporting process's id.
    #[getter]
    fn exporter_pid(&self) -> u32 {
        self.handle.pid
    }

    /// An amso array over the shared memory, on this process's device with the memory's GPU
    /// (`device_id`, if given, must be that device). In the exporting process itself, a plain
    /// reference to the same memory. (`device_id` stays the caller's raw id: see `open` below.)
    #[pyo3(signature = (device_id = None))]
    fn open(&self, py: Python<'_>, device_id: Option<i32>) -> PyResult<Py<PyAny>> {
        open(py, &self.handle, device_id)
    }
}

/// `device_id` is the caller's raw id: only compared with the device the memory is on, so an
/// id this process lacks is refused as any other mismatch is.
fn open(py: Python<'_>, h: &Handle, device_id: Option<i32>) -> PyResult<Py<PyAny>> {
    let registration = registry::find_name(&h.dtype, h.dims.len()).ok_or_else(|| {
        PyTypeError::new_err(format!("cannot open the shared array: {}", registry::uncompiled(&h.dtype, h.dims.len())))
    })?;
    let itemsize = registration.dtype().itemsize();
    if let Some(negative) = h.dims.iter().find(|&&d| d < 0) {
        return Err(PyValueError::new_err(format!(
            "the handle describes {} array of shape {:?}, with a negative dimension ({negative}): no export has \
             one, so the handle is damaged or forged",
            crate::error::with_article(&h.dtype),
            h.dims
        )));
    }
    let described = crate::shape::checked_shape(&h.dims, h.dims.len(), itemsize).ok().map(|(_, bytes)| bytes as u64);
    if described.is_none_or(|bytes| bytes > h.nbytes) {
        return Err(PyValueError::new_err(format!(
            "the handle describes {} array of shape {:?}, more than the {} bytes it shares: it is damaged or forged",
            crate::error::with_article(&h.dtype),
            h.dims,
            h.nbytes
        )));
    }
    let record = h.record();
    let own = py.detach(|| {
        exports()
            .iter()
            .find(|e| e.description.token == h.token && e.record == record)
            .map(|e| (Arc::clone(&e.memory), Arc::clone(&e.event), Arc::clone(&e.folder)))
    });
    let memory = if let Some((export, event, folder)) = own {
        // This process shared it: the same memory, referenced, after the work its handle
        // was shared after (the event `share()` recorded).
        if let Some(wanted) = device_id.filter(|&d| d != export.device_id().ordinal()) {
            return Err(PyValueError::new_err(format!(
                "the shared memory is on device {}, not on device {wanted}; open it there, or copy it afterwards",
                export.device_id()
            )));
        }
        event.wait_on(crate::cuda::stream::amso_stream(export.device_id())?)?;
        // The handle arrived: its pending hold gives way to the exporter's own.
        py.detach(|| folder.remove_pending(h.pending));
        ForeignMemory {
            address: export.ptr() as usize,
            device: Device::cuda(export.device_id()),
            owner: Box::new(Arc::clone(&export)),
        }
    } else {
        // Every check of the export's folder comes before any driver call; without the GIL.
        let folder = py.detach(|| {
            Folder::shared_memory().map_err(ImportRefusal::Io).and_then(|base| ImportFolder::open(&base, h))
        });
        let folder = folder.map_err(|refusal| import_error(h, refusal))?;
        let local = ipc::device_with_uuid(&h.uuid)?.ok_or_else(|| {
            PyValueError::new_err(format!(
                "the shared memory is on GPU {}, which this process does not see (CUDA_VISIBLE_DEVICES?)",
                uuid_text(&h.uuid)
            ))
        })?;
        if let Some(wanted) = device_id.filter(|&d| d != local.ordinal()) {
            return Err(PyValueError::new_err(format!(
                "the shared memory is on device {local} of this process (GPU {}), not on device {wanted}; open it \
                 there, or copy it afterwards",
                uuid_text(&h.uuid)
            )));
        }
        // Without the GIL: the mapping's lock is never waited for by a thread holding it.
        let imported = py.detach(|| mapping(local, h, &folder))?;
        let stream = crate::cuda::stream::amso_stream(local)?;
        ipc::wait_for(local, &h.event, stream)?;
        // The handle arrived: its pending hold gives way to the mapping's.
        py.detach(|| folder.remove_pending(h.pending));
        ForeignMemory { address: imported.ptr as usize, device: Device::cuda(local), owner: Box::new(imported) }
    };
    let stream = crate::cuda::stream::amso_stream(memory.device.id)?.stream();
    // SAFETY: the memory holds the exporter's array, C contiguous elements of this dtype
    // within `nbytes` (the shape check above), mapped while `memory.owner` lives; the mapping
    // covers `nbytes` (the driver's allocation range, checked in `mapping`).
    let mut array = unsafe { registration.wrap(&h.dims, memory, h.readonly) }?;
    // SAFETY: amso's stream of the device, where the wait for the exporter's work was queued.
    unsafe { array.record_work(stream) }?;
    (registration.instance)(py, MemArrayBase::new(array))
}

/// The Python error of an importer's refusal of `h`.
fn import_error(h: &Handle, refusal: ImportRefusal) -> PyErr {
    let export = format!("process {}'s shared array {}", h.pid, h.serial);
    match refusal {
        ImportRefusal::OtherUser => PyPermissionError::new_err(format!(
            "the handle names an export of user {}, and this process runs as user {}: amso opens only its own \
             user's shares; open it as user {}",
            h.uid,
            current_uid(),
            h.uid
        )),
        ImportRefusal::NoExport | ImportRefusal::Mismatch => PyValueError::new_err(format!(
            "process {} has no shared array {} matching this handle: it was released, or the handle is damaged or \
             forged",
            h.pid, h.serial
        )),
        ImportRefusal::ExporterGone => PyValueError::new_err(format!(
            "the process that shared this array (pid {}) is gone, and its device memory with it",
            h.pid
        )),
        ImportRefusal::Untrusted(why) => PyValueError::new_err(format!(
            "refused {export}: its export folder /dev/shm/{} is not one amso made ({why}); another user may have \
             planted it. Nothing was opened",
            h.folder_name()
        )),
        ImportRefusal::Io(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            PyPermissionError::new_err(format!("cannot read the export folder of {export} ({e})"))
        }
        ImportRefusal::Io(e) => PyValueError::new_err(format!("cannot read the export folder of {export} ({e})")),
    }
}

/// This process's mapping of the export `h` names: the one it holds already, or a new one (its
/// hold marked in the export's `folder` first, so the exporter keeps the memory), whose real
/// size must cover the handle's. Called with the GIL released.
fn mapping(device_id: DeviceId, h: &Handle, folder: &ImportFolder) -> PyResult<Arc<Imported>> {
    let key = (h.uid, h.token, device_id);
    let mut imports = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    // Upgrades only the entry with this key: the `Arc` made here is returned, never dropped
    // under the lock (a last reference dropped here would unmap with the lock held).
    imports.retain(|(_, weak)| weak.strong_count() > 0);
    if let Some(found) = imports.iter().find(|(k, _)| *k == key).and_then(|(_, weak)| weak.upgrade()) {
        return Ok(found);
    }
    // The record is checked again and the hold marked under the export's lock, so the exporter
    // cannot free the memory in between.
    let hold = folder.hold(h).map_err(|refusal| import_error(h, refusal))?;
    let ptr = match ipc::open_memory(device_id, &h.memory) {
        Ok(ptr) => ptr,
        Err(error) => {
            hold.release();
            return Err(error.into());
        }
    };
    let imported = Arc::new(Imported { device_id, ptr, hold: Some(hold) });
    // What the driver mapped must cover what the handle claims: a handle forged over a real,
    // smaller export's memory would otherwise reach past it.
    let range = ipc::allocation_range(device_id, ptr);
    if range.as_ref().map_or(true, |&(start, size)| start != ptr || (size as u64) < h.nbytes) {
        drop(imports); // unmapped as `imported` drops, not under the lock
        drop(imported);
        let (_, size) = range?;
        return Err(PyValueError::new_err(format!(
            "the shared memory the handle names is {size} bytes, but the handle claims {}: it is damaged or forged; \
             unmapped",
            h.nbytes
        )));
    }
    imports.push((key, Arc::downgrade(&imported)));
    Ok(imported)
}

fn uuid_text(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// `amso.cuda.collect_shared()`: remove the export folders of this user's exporters that are
/// gone, and free this process's exports nothing holds any more.
#[pyfunction]
pub(crate) fn collect_shared(py: Python<'_>) -> PyResult<usize> {
    let pending = pending_lifetime()?;
    Ok(py.detach(|| collect_all(pending)))
}
