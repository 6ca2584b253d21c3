//! The one device-memory pool of a process. Every extension module built with amso links its own
//! copy of the runtime (`process.rs`); each allocates through a table of C functions, and every
//! copy uses the same table: the first copy built with CUDA to join publishes its own (in the
//! interpreter's dict, beside the process table), the others find it there. So the bundled
//! module and each user crate draw from one pool, with one allocator setting, one deferred-free
//! queue and one set of statistics, and memory one copy frees another can reuse. No Rust type
//! crosses between copies, which may be different builds: an allocation is an address and an
//! opaque token that only the table that made it reads back (`Grant`).
//!
//! The same table serves other libraries' plug-ins (`python/allocators.rs`), which count as
//! clients of their own in the statistics.
// The knobs are driven from Python (`amso.set_allocator`, `amso.defer_cleanup`, ...); a Rust-only
// build allocates and releases through the table only.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::alloc::{self, After, DeviceAllocator, Source};
use super::block_cache::Shelved;
use super::deferred::Limits;
use super::pool_stats::PoolStats;
use super::request::{Client, Request};
use super::stream::StreamHandle;
use super::switches::SWITCHES;
use crate::device::DeviceId;
use crate::error::{Error, Result};
use crate::stream::Stream;

#[path = "pool_foreign.rs"]
mod foreign;
use foreign::{exported_allocate, exported_drop, exported_free, Foreign};

/// Why an allocation failed, as it crosses the table.
#[repr(C)]
pub(crate) struct Failure {
    /// 1: out of memory; 2: another error, said in `text`.
    code: u32,
    text: [u8; 240],
}

/// `Failure::code` of a driver error: this plus the driver's code.
const DRIVER: u32 = 1000;

impl Failure {
    fn new() -> Failure {
        Failure { code: 0, text: [0; 240] }
    }

    fn write(&mut self, error: &Error) {
        // 1: out of memory; DRIVER + a driver code (copies that predate it read any code but 1
        // as text); 2: anything else.
        self.code = match error {
            Error::OutOfMemory { .. } => 1,
            Error::Cuda { code: Some(code), .. } => DRIVER.saturating_add(*code),
            _ => 2,
        };
        let text = match error {
            Error::Cuda { call, message, .. } => format!("{call}: {message}"),
            other => other.to_string(),
        };
        let n = text.len().min(self.text.len() - 1);
        self.text[..n].copy_from_slice(&text.as_bytes()[..n]);
        self.text[n] = 0;
    }

    /// The error, for an allocation of `bytes` of `what` memory.
    fn error(&self, bytes: usize, what: &'static str) -> Error {
        if self.code == 1 {
            return Error::OutOfMemory { bytes, what };
        }
        let text = CStr::from_bytes_until_nul(&self.text).map_or("unknown".into(), CStr::to_string_lossy);
        let code = self.code.checked_sub(DRIVER);
        Error::Cuda { call: "the pool of another runtime copy", code, message: text.into_owned() }
    }
}

/// An allocator of another copy of the runtime, as it crosses the table (`plug`): the pool
/// calls it through these functions and drops it with `drop`.
#[repr(C)]
pub(crate) struct ForeignAllocator {
    context: *mut c_void,
    name: *const c_char,
    allocate: unsafe extern "C" fn(*mut c_void, DeviceId, usize, Stream, *mut u64, *mut Failure) -> c_int,
    free: unsafe extern "C" fn(*mut c_void, DeviceId, u64, usize, Stream),
    drop: unsafe extern "C" fn(*mut c_void),
}

/// The pool table's layout version: a copy meeting a table of another version refuses to join
/// (`join`). Raise it whenever `PoolTable`, `PoolStats`, `Failure`, `ForeignAllocator` or
/// `Shelved` change.
const TABLE_VERSION: u32 = 3;
/// Where the table is published in the interpreter's dict (the key of version 1, which had no
/// version field, is refused by name).
const TABLE_KEY: &str = "_amso_pool";
const VERSION_1_KEY: &str = "_amso_pool_v1";

/// The functions a pool offers every copy of the runtime.
#[repr(C)]
pub(crate) struct PoolTable {
    /// `TABLE_VERSION` and the table's size in bytes, read before anything else.
    version: u32,
    size: u32,
    /// `bytes` (> 0) on a device for `Request` and `Client`, usable in order on a stream
    /// (protocol value): 0 with the address and token written, else -1 with the failure.
    allocate: unsafe extern "C" fn(u32, DeviceId, usize, Stream, u32, *mut u64, *mut u64, *mut Failure) -> c_int,
    /// Give back an allocation (address, bytes and token) of a client on a device, after the
    /// work queued on a stream (protocol value), or -1: after all of the device's work.
    release: unsafe extern "C" fn(u64, DeviceId, u64, usize, i64, u32),
    /// Begin, and end (running what is due on a device), a `defer_cleanup` block.
    hold: extern "C" fn(),
    release_held: extern "C" fn(DeviceId),
    /// Run every pending free now.
    flush: extern "C" fn(),
    /// Set the deferred-free limits (unless NULL) and write the previous ones.
    limits: unsafe extern "C" fn(*const Limits, *mut Limits),
    /// The driver pool's release threshold.
    set_release_threshold: extern "C" fn(u64),
    /// Plug in an allocator (NULL: amso's pool again); the pool owns it from then on.
    plug: unsafe extern "C" fn(*const ForeignAllocator),
    /// Statistics for a device.
    stats: unsafe extern "C" fn(DeviceId, *mut PoolStats),
    /// Add a copy's answer to "is a capture this copy saw in progress?": the pool holds every
    /// deferred free while any copy's capture runs (each copy notes only its own captures).
    add_capture_probe: unsafe extern "C" fn(extern "C" fn() -> c_int),
    /// Give every cached block back to the driver: 0, else -1 with the failure.
    empty_cache: unsafe extern "C" fn(*mut Failure) -> c_int,
    /// Bound the cache of each device (0: half of its memory); the previous bound.
    set_cache_limit: extern "C" fn(u64) -> u64,
    /// Write up to `capacity` lines of a device's cache report; how many there are.
    shelves: unsafe extern "C" fn(DeviceId, *mut Shelved, usize) -> usize,
    /// The pool's count of captures seen that may be in progress, to which every copy that
    /// joins adds its own (`switches.rs`): while it is zero, a free asks no copy's probe.
    watching: &'static AtomicUsize,
}

/// This copy's pool, offered to the others.
static OWN: PoolTable = PoolTable {
    version: TABLE_VERSION,
    size: std::mem::size_of::<PoolTable>() as u32,
    allocate: own_allocate,
    release: own_release,
    hold: own_hold,
    release_held: own_release_held,
    flush: own_flush,
    limits: own_limits,
    set_release_threshold: own_set_release_threshold,
    plug: own_plug,
    stats: own_stats,
    add_capture_probe: own_add_capture_probe,
    empty_cache: own_empty_cache,
    set_cache_limit: own_set_cache_limit,
    shelves: own_shelves,
    watching: &SWITCHES.watching,
};

/// The pool this copy allocates from: the process's, once joined, else its own.
fn pool() -> &'static PoolTable {
    // SAFETY: `home` is null or a static table of another copy (`join`), which stays loaded for
    // the process.
    unsafe { SWITCHES.home.load(Ordering::Acquire).cast::<PoolTable>().as_ref() }.unwrap_or(&OWN)
}

/// Use the process's pool: another copy's, found under `anchor.rs`, or this copy's,
/// published there for the others.
#[cfg(feature = "python")]
pub(crate) fn join(py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
    let refuse = |found: String| {
        pyo3::exceptions::PyImportError::new_err(format!(
            "another amso runtime in this process shares device memory through a pool table of {found}; this module \
             was built with version {TABLE_VERSION}, and the two cannot share one pool: rebuild every amso-based \
             extension module against one amso version"
        ))
    };
    if crate::anchor::published(py, VERSION_1_KEY)? {
        return Err(refuse("version 1".into()));
    }
    let published = crate::anchor::anchor(py, TABLE_KEY, c"_amso_pool.table", (&OWN as *const PoolTable).cast())?;
    if !std::ptr::eq(published.cast::<PoolTable>(), &OWN) {
        // SAFETY: a capsule of amso's name holds a table that starts with its version and size.
        let (version, size) = unsafe {
            let head = published.cast::<u32>();
            (*head, *head.add(1))
        };
        if version != TABLE_VERSION || (size as usize) < std::mem::size_of::<PoolTable>() {
            return Err(refuse(format!("version {version} ({size} bytes)")));
        }
        let home = published.cast_mut().cast::<PoolTable>();
        // SAFETY: a static table of another copy (above), and this copy's static function.
        unsafe { ((*home).add_capture_probe)(capture_probe) };
        // SAFETY: as above.
        super::capture::share_watching(unsafe { (*home).watching });
        SWITCHES.home.store(home.cast(), Ordering::Release);
    }
    Ok(())
}

/// Memory of the process's pool, given back when dropped is not an option: `release` takes it.
#[derive(Debug)]
pub(crate) struct Grant {
    /// The address.
    pub(crate) ptr: u64,
    token: u64,
    table: &'static PoolTable,
}

impl Grant {
    /// A block of this copy's own pool at `ptr` (a loan its ledger kept, `lent.rs`).
    pub(crate) fn own_pool(ptr: u64) -> Grant {
        Grant { ptr, token: Source::Pool.into_token(), table: &OWN }
    }

    /// Whether it is a block of this copy's own pool (not another copy's, nor memory of a
    /// plugged-in allocator, managed or shareable).
    pub(crate) fn is_own_pool(&self) -> bool {
        std::ptr::eq(self.table, &OWN) && self.token == Source::Pool.into_token()
    }
}

impl std::fmt::Debug for PoolTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if std::ptr::eq(self, &OWN) { "PoolTable(own)" } else { "PoolTable(another copy's)" })
    }
}

/// `bytes` (> 0) on `device_id` for `request`, usable in order on `stream`, counted for `client`.
pub(crate) fn allocate(
    request: Request,
    device_id: DeviceId,
    bytes: usize,
    stream: StreamHandle,
    client: Client,
) -> Result<Grant> {
    let table = pool();
    if std::ptr::eq(table, &OWN) {
        // This copy's own pool: a direct call, without the table's C crossing.
        let (ptr, source) = alloc::allocate_for(request, device_id, bytes, stream, client)?;
        return Ok(Grant { ptr, token: source.into_token(), table });
    }
    let (mut ptr, mut token, mut failure) = (0u64, 0u64, Failure::new());
    // Each allocator releases the GIL around its own driver calls (amso's pool serves a block
    // of the stream's own without one). SAFETY: valid out-pointers, alive for the call.
    let code = unsafe {
        (table.allocate)(
            request as u32,
            device_id,
            bytes,
            stream.stream(),
            client as u32,
            &mut ptr,
            &mut token,
            &mut failure,
        )
    };
    if code != 0 {
        let what = match request {
            Request::Current => "device",
            Request::Managed => "managed",
            Request::Shareable => "shareable device",
        };
        return Err(failure.error(bytes, what));
    }
    Ok(Grant { ptr, token, table })
}

/// Give `grant` (of `bytes` on `device_id`, for `client`) back to the pool that made it, after
/// `after`.
pub(crate) fn release(grant: Grant, device_id: DeviceId, bytes: usize, after: After, client: Client) {
    if std::ptr::eq(grant.table, &OWN) {
        // SAFETY: a token this copy's `allocate_for` made, given back once (the grant is consumed).
        let source = unsafe { Source::from_token(grant.token) };
        alloc::release(source, device_id, grant.ptr, bytes, after, client);
        return;
    }
    let after = match after {
        After::Stream(stream) => stream.stream().protocol_value(),
        After::Device => -1,
        After::Barrier => -2, // a copy that predates it waits for the device instead
    };
    // SAFETY: a grant of this table, given back once (it is consumed).
    unsafe { (grant.table.release)(grant.token, device_id, grant.ptr, bytes, after, client as u32) }
}

/// Begin a `defer_cleanup` block.
pub(crate) fn hold_frees() {
    (pool().hold)()
}

/// End a `defer_cleanup` block, running the frees that are due on `device_id`.
pub(crate) fn release_frees(device_id: DeviceId) {
    (pool().release_held)(device_id)
}

/// Run every pending free now (unless a `defer_cleanup` block or a capture holds them).
pub(crate) fn flush() {
    (pool().flush)()
}

/// Set the deferred-free limits (unless `None`); the previous ones.
pub(crate) fn deferred_limits(set: Option<Limits>) -> Limits {
    let mut previous = Limits::default();
    let set = set.as_ref().map_or(std::ptr::null(), |l| l as *const Limits);
    // SAFETY: NULL or a live value, and a valid out-pointer.
    unsafe { (pool().limits)(set, &mut previous) };
    previous
}

/// Set the driver pool's release threshold of amso's default allocator.
pub(crate) fn set_release_threshold(bytes: u64) {
    (pool().set_release_threshold)(bytes)
}

/// Plug in `allocator` (None: amso's pool) for new allocations of every copy.
pub(crate) fn plug(allocator: Option<Arc<dyn DeviceAllocator>>) {
    let table = pool();
    if std::ptr::eq(table, &OWN) {
        alloc::set_allocator(allocator);
        return;
    }
    let Some(allocator) = allocator else {
        // SAFETY: NULL asks for amso's pool.
        return unsafe { (table.plug)(std::ptr::null()) };
    };
    let name = std::ffi::CString::new(allocator.name().replace('\0', " ")).unwrap_or_default();
    let context = Box::into_raw(Box::new((allocator, name)));
    let foreign = ForeignAllocator {
        context: context.cast(),
        // SAFETY: `context` is a live box.
        name: unsafe { (*context).1.as_ptr() },
        allocate: exported_allocate,
        free: exported_free,
        drop: exported_drop,
    };
    // SAFETY: a live vtable over a boxed allocator, which the pool owns from now on.
    unsafe { (table.plug)(&foreign) }
}

/// The pool's statistics for `device_id`.
pub(crate) fn stats(device_id: DeviceId) -> PoolStats {
    let mut stats = PoolStats::empty();
    // SAFETY: a valid out-pointer.
    unsafe { (pool().stats)(device_id, &mut stats) };
    stats
}

/// Give every cached block of amso's pool back to the driver (`amso.empty_cache()`): after a
/// device-wide synchronisation.
pub(crate) fn empty_cache() -> Result<()> {
    let mut failure = Failure::new();
    // SAFETY: a valid out-pointer.
    match unsafe { (pool().empty_cache)(&mut failure) } {
        0 => Ok(()),
        _ => Err(failure.error(0, "device")),
    }
}

/// Bound each device's cache to `bytes` (0: half of its memory); the previous bound.
pub(crate) fn set_cache_limit(bytes: u64) -> u64 {
    (pool().set_cache_limit)(bytes)
}

/// The cached blocks of `device_id` by stream and size class.
pub(crate) fn shelves(device_id: DeviceId) -> Vec<Shelved> {
    let mut rows: Vec<Shelved> = Vec::new();
    loop {
        // SAFETY: room for `capacity` lines; the pool writes at most that many.
        let count = unsafe { (pool().shelves)(device_id, rows.as_mut_ptr(), rows.capacity()) };
        if count <= rows.capacity() {
            // SAFETY: the pool wrote `count` lines.
            unsafe { rows.set_len(count) };
            return rows;
        }
        rows.reserve(count);
    }
}

/// Run `body` for the table, never unwinding across it.
fn guarded<R>(fallback: R, body: impl FnOnce() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// A failure for an allocation that panicked inside the pool.
fn panicked(failure: *mut Failure) -> c_int {
    // SAFETY: the caller's out-pointer.
    unsafe {
        (*failure).write(&Error::Cuda {
            call: "amso's pool",
            code: None,
            message: "internal error (panic); please report it".into(),
        })
    };
    -1
}

unsafe extern "C" fn own_allocate(
    request: u32,
    device_id: DeviceId,
    bytes: usize,
    stream: Stream,
    client: u32,
    ptr: *mut u64,
    token: *mut u64,
    failure: *mut Failure,
) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let request = match request {
            1 => Request::Managed,
            2 => Request::Shareable,
            _ => Request::Current,
        };
        let stream = StreamHandle::of(stream).unwrap_or(StreamHandle::LEGACY);
        match alloc::allocate_for(
            request,
            device_id,
            bytes,
            stream,
            Client::from_number(client).unwrap_or(Client::Amso),
        ) {
            Ok((address, source)) => {
                // SAFETY: the caller's out-pointers.
                unsafe {
                    *ptr = address;
                    *token = source.into_token();
                }
                0
            }
            Err(error) => {
                // SAFETY: the caller's out-pointer.
                unsafe { (*failure).write(&error) };
                -1
            }
        }
    }))
    .unwrap_or_else(|_| panicked(failure))
}

unsafe extern "C" fn own_release(token: u64, device_id: DeviceId, ptr: u64, bytes: usize, after: i64, client: u32) {
    guarded((), || {
        let after = match StreamHandle::of(Stream::reported(after)) {
            Ok(stream) if after >= 0 => After::Stream(stream),
            _ if after == -2 => After::Barrier,
            _ => After::Device,
        };
        // SAFETY: a token this table's `allocate` wrote, given back once (`release` consumes
        // its grant).
        let source = unsafe { Source::from_token(token) };
        alloc::release(source, device_id, ptr, bytes, after, Client::from_number(client).unwrap_or(Client::Amso));
    })
}

extern "C" fn own_hold() {
    guarded((), alloc::hold_frees)
}

extern "C" fn own_release_held(device_id: DeviceId) {
    guarded((), || alloc::release_frees(device_id))
}

extern "C" fn own_flush() {
    guarded((), alloc::flush)
}

unsafe extern "C" fn own_limits(set: *const Limits, previous: *mut Limits) {
    guarded((), || {
        // SAFETY: the caller's out-pointer, and NULL or its value.
        unsafe {
            *previous = alloc::DEFERRED.limits();
            if let Some(limits) = set.as_ref() {
                alloc::set_deferred_limits(*limits);
            }
        }
    })
}

extern "C" fn own_set_release_threshold(bytes: u64) {
    guarded((), || alloc::set_release_threshold(bytes))
}

unsafe extern "C" fn own_plug(foreign: *const ForeignAllocator) {
    guarded((), || {
        // SAFETY: NULL, or a vtable whose allocator this pool owns from now on.
        let allocator = unsafe { foreign.as_ref() }.map(|f| {
            Arc::new(Foreign(ForeignAllocator {
                context: f.context,
                name: f.name,
                allocate: f.allocate,
                free: f.free,
                drop: f.drop,
            })) as Arc<dyn DeviceAllocator>
        });
        alloc::set_allocator(allocator);
    })
}

unsafe extern "C" fn own_stats(device_id: DeviceId, out: *mut PoolStats) {
    guarded((), || {
        let stats = PoolStats::of_this_copy(device_id);
        // SAFETY: the caller's out-pointer.
        unsafe { *out = stats };
    })
}

unsafe extern "C" fn own_add_capture_probe(probe: extern "C" fn() -> c_int) {
    guarded((), || alloc::add_capture_probe(probe))
}

unsafe extern "C" fn own_empty_cache(failure: *mut Failure) -> c_int {
    std::panic::catch_unwind(|| match super::pool_allocator::default_pool().empty_cache() {
        Ok(()) => 0,
        Err(error) => {
            // SAFETY: the caller's out-pointer.
            unsafe { (*failure).write(&error) };
            -1
        }
    })
    .unwrap_or_else(|_| panicked(failure))
}

extern "C" fn own_set_cache_limit(bytes: u64) -> u64 {
    guarded(0, || super::pool_allocator::default_pool().set_limit(usize::try_from(bytes).unwrap_or(usize::MAX)) as u64)
}

unsafe extern "C" fn own_shelves(device_id: DeviceId, out: *mut Shelved, capacity: usize) -> usize {
    guarded(0, || {
        let rows = super::pool_allocator::default_pool().report(device_id).shelves;
        if rows.len() <= capacity {
            for (i, row) in rows.iter().enumerate() {
                // SAFETY: the caller's room for `capacity` lines.
                unsafe { out.add(i).write(*row) };
            }
        }
        rows.len()
    })
}

/// This copy's answer to the pool's "is a capture in progress?" (`add_capture_probe`).
extern "C" fn capture_probe() -> c_int {
    if !super::capture::watching() {
        return 0; // every free asks: one read when this copy saw no capture
    }
    guarded(1, || super::capture::in_progress(None) as c_int) // a panic counts as capturing: frees wait
}
