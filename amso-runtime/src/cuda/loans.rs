//! Device memory lent to other libraries through their plug-in points (`python/allocators.rs`):
//! Numba, CuPy, PyTorch and RMM allocate from the process's pool (`pool.rs`) and give the
//! memory back by its address. Each loan is kept by device and address, with a serial number:
//! blocks of amso's own pool in its device's ledger (`lent.rs`), under the lock its cache takes
//! anyway, so that a lend its stream's own blocks serve and its give-back take one lock each;
//! other memory (another runtime copy's pool, a plugged-in allocator's, shareable memory) in
//! `LOANS` here. What comes back is checked before anything is freed: a double free, an
//! address amso never lent, one given back on another device, by another client, or after the
//! client's loans were reset, is refused (and counted), never freed twice. A give-back that
//! carries the loan's serial (`_Loan` objects: CuPy's and Numba's) is also told from a later
//! loan of the same address; one by address alone (PyTorch's C functions, RMM's callbacks)
//! cannot be, and relies on its library giving each address back once.
//!
//! Frees are ordered after the work on a stream: the stream the client names at the free
//! (PyTorch's, RMM's), else the one the loan was made for (CuPy's current stream at the
//! allocation, as CuPy's own pool files its blocks). Numba names no stream, and its contract
//! lets a freed block go back to a pool at once (NBEP 7): each Numba free queues a barrier on
//! the legacy default stream (`alloc::legacy_barrier`), behind which every later operation on
//! a blocking stream waits, and the block is filed under the legacy stream. So a kernel on any
//! of Numba's own streams (all blocking) that still uses the block is done before its next
//! owner's work starts; one on a non-blocking stream is not waited for (docs/memory.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::address_hash::BuildAddressHasher;
use super::alloc::{self, default_pool, After};
use super::pool::{self, Grant};
use super::request::{Client, Request, CLIENTS};
use super::stream::{Checked, StreamHandle};
use super::switches::SWITCHES;
use crate::device::DeviceId;
use crate::error::{Error, Result};
use crate::stream::Stream;

/// One loan.
#[derive(Debug)]
struct Loan {
    grant: Grant,
    bytes: usize,
    client: Client,
    /// The stream it was lent for (a protocol value), which its free is ordered after unless
    /// the client names another.
    stream: Stream,
    /// Told apart from later loans of the same address.
    serial: u64,
}

/// The next loan's serial.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Whether this thread is lending: a plugged-in allocator that lends from amso again (amso
    /// plugged into PyTorch while PyTorch is plugged into amso) is a cycle.
    static LENDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The loans out of memory other than amso's own pool's, by (device, address).
static LOANS: Mutex<Option<Ledger>> = Mutex::new(None);

/// The loans by (device, address).
type Ledger = HashMap<(DeviceId, u64), Loan, BuildAddressHasher>;
/// Gives-back refused so far.
static REFUSED: AtomicU64 = AtomicU64::new(0);

fn with_loans<R>(body: impl FnOnce(&mut Ledger) -> R) -> R {
    let mut loans = LOANS.lock().unwrap_or_else(|e| e.into_inner());
    body(loans.get_or_insert_with(Ledger::default))
}

/// The common lend, in few instructions and cache lines (a plug-in's allocation finds amso's
/// data evicted by its library's own work: `switches.rs`): a block of `stream`'s own, lent to
/// `client` on `device` (a raw id) under one lock, when the driver is loaded and lists the
/// device, this copy's own pool serves with no allocator plugged in, and the stream is the
/// legacy default one or a handle that is not capturing. None: `lend` serves the request, and
/// says why it cannot. An error: the block is lent already (a bug, reported as `lend` would).
#[inline(always)]
pub(crate) fn lend_cached(device: i32, bytes: usize, stream: Stream, client: Client) -> Option<Result<(u64, u64)>> {
    let device_id = listed(device)?;
    if bytes == 0 || !SWITCHES.own_pool_serves() {
        return None;
    }
    let handle = StreamHandle::of_value(stream)?;
    let idle = handle == StreamHandle::LEGACY
        || (handle != StreamHandle::PER_THREAD
            && matches!(super::capture::state(handle), Ok(super::capture::Capture::Idle)));
    if !idle {
        return None;
    }
    default_pool().lend_own(device_id, bytes, handle, client)
}

/// The common give-back (`lend_cached`'s other half): a loan of amso's pool returned by its
/// client on `device` (a raw id) to the cache, after the work on its stream, under one lock,
/// when nothing holds the frees and this copy's pool is the process's. Whether it was; false:
/// nothing was done, and `reclaim` takes it (and refuses it, if it must be).
#[inline(always)]
pub(crate) fn reclaim_cached(device: i32, ptr: u64, client: Client, back: GiveBack) -> bool {
    let Some(device_id) = listed(device) else { return false };
    if ptr == 0 || client == Client::Numba || !SWITCHES.frees_unheld() || SWITCHES.joined() {
        return false;
    }
    let returned = default_pool().reclaim(device_id, ptr, |lent| {
        if refusal(client, back, lent.serial, lent.client, lent.bytes).is_some() {
            return Err(());
        }
        match after(lent.client, back.stream, lent.stream) {
            After::Stream(stream) if stream != StreamHandle::PER_THREAD => Ok(Some(stream)),
            _ => Err(()),
        }
    });
    matches!(returned, Some(Ok(None)))
}

/// `device` (a raw id) as a device of the loaded driver, if it lists it (the common paths' check:
/// `DeviceId::new` says why not).
#[inline(always)]
fn listed(device: i32) -> Option<DeviceId> {
    SWITCHES.lists(device).then(|| DeviceId::from_driver(device))
}

/// Lend `bytes` on `device_id` to `client`, usable in order on `stream` (a protocol value):
/// the address (0 for zero bytes) and the loan's serial.
pub(crate) fn lend(
    request: Request,
    device_id: DeviceId,
    bytes: usize,
    stream: Stream,
    client: Client,
) -> Result<(u64, u64)> {
    if bytes == 0 {
        return Ok((0, 0));
    }
    // A caller outside amso (PyTorch's C allocator calls) may come before amso's first CUDA
    // call in the process: the driver is loaded here (its device id was checked where it
    // entered, `DeviceId::new`).
    super::driver::require()?;
    let handle = StreamHandle::of(stream)?;
    let checked = handle.check(device_id)?;
    let pooled = request == Request::Current && SWITCHES.own_pool_serves();
    if pooled && !checked.capturing() {
        // The common case: a block of the stream's own, lent and recorded under one lock. No
        // allocator is plugged in, so no other library is asked and no cycle can form.
        if let Some(lent) = default_pool().lend_own(device_id, bytes, handle, client) {
            return lent;
        }
    }
    if LENDING.with(|lending| lending.replace(true)) {
        return Err(Error::InvalidArgument(format!(
            "{} asked amso's pool for memory while amso's pool was asking an allocator plugged into it: the \
             allocators are plugged into each other in a cycle; plug amso into the library, or the library into \
             amso, not both",
            CLIENTS[client as usize]
        )));
    }
    let _lending = Lending;
    lend_new(request, device_id, bytes, checked, client)
}

/// Clears `LENDING` when dropped: after the lend, an error or a panic (which the plug-ins catch,
/// and after which the thread lends again).
struct Lending;

impl Drop for Lending {
    fn drop(&mut self) {
        LENDING.with(|lending| lending.set(false));
    }
}

/// Lend memory the stream's own cached blocks could not serve: from the pool's other blocks or
/// the driver, or from the allocator plugged in (which may be another library's: `LENDING`
/// guards the call).
fn lend_new(
    request: Request,
    device_id: DeviceId,
    bytes: usize,
    checked: Checked,
    client: Client,
) -> Result<(u64, u64)> {
    let handle = checked.handle;
    let grant = if checked.capturing() {
        // A stream being captured into a graph: the memory is allocated outside the capture,
        // on amso's own stream, and ready before it is lent, as amso's arrays' is.
        let own = super::stream::amso_stream(device_id)?;
        let grant = pool::allocate(request, device_id, bytes, own, client)?;
        super::stream::synchronize(device_id, own)?;
        grant
    } else {
        pool::allocate(request, device_id, bytes, handle, client)?
    };
    let ptr = grant.ptr;
    if grant.is_own_pool() {
        let serial = default_pool().record_loan(device_id, (ptr, bytes), handle, client)?;
        return Ok((ptr, serial));
    }
    let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
    let loan = Loan { grant, bytes, client, stream: handle.stream(), serial };
    if with_loans(|loans| loans.insert((device_id, ptr), loan)).is_some() {
        return Err(super::pool_allocator::lent_twice(ptr));
    }
    Ok((ptr, serial))
}

/// Why memory given back was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not an address amso lent on any device: a double free, a foreign pointer, or a loan
    /// already taken back by a reset.
    Unknown,
    /// Lent on another device.
    OtherDevice(DeviceId),
    /// Lent to another client library.
    OtherClient(Client),
    /// Lent with another size.
    OtherSize(usize),
}

impl Refusal {
    /// The message, for the address given back.
    pub(crate) fn message(&self, ptr: u64, device_id: DeviceId) -> String {
        match self {
            Refusal::Unknown => format!(
                "address 0x{ptr:x} on device {device_id} is not memory amso lent (freed twice, never lent, or freed \
                 after a reset); nothing was freed"
            ),
            Refusal::OtherDevice(lent) => format!(
                "address 0x{ptr:x} was lent on device {lent}, not device {device_id}; give it back on device {lent}"
            ),
            Refusal::OtherClient(client) => format!(
                "address 0x{ptr:x} was lent to {}, which gives it back itself; nothing was freed",
                CLIENTS[*client as usize]
            ),
            Refusal::OtherSize(bytes) => {
                format!("address 0x{ptr:x} was lent with {bytes} bytes, not the size given back; nothing was freed")
            }
        }
    }
}

/// What a give-back says of the loan it returns, beyond its address.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct GiveBack {
    /// The size, when the client says.
    pub(crate) bytes: Option<usize>,
    /// The stream to free after (a protocol value; `None`: the stream it was lent for).
    pub(crate) stream: Option<Stream>,
    /// The loan's serial, when the client kept it.
    pub(crate) serial: Option<u64>,
}

/// Take back the loan of `ptr` on `device_id` from `client`.
pub(crate) fn reclaim(
    device_id: DeviceId,
    ptr: u64,
    client: Client,
    back: GiveBack,
) -> std::result::Result<(), Refusal> {
    if ptr == 0 {
        return Ok(()); // the zero-byte loan
    }
    // A block of amso's pool (the common case): checked and, ordered on a stream, returned to
    // the cache under one lock.
    let now = alloc::frees_run_now();
    // Numba's barrier is queued before the lock is taken (a refused give-back leaves a harmless
    // one); a block whose barrier could not be queued waits for the device.
    let barrier = now && client == Client::Numba && alloc::legacy_barrier(device_id);
    let from_pool = default_pool().reclaim(device_id, ptr, |lent| {
        refusal(client, back, lent.serial, lent.client, lent.bytes).map_or(Ok(()), Err)?;
        Ok(match after(lent.client, back.stream, lent.stream) {
            After::Stream(stream) if now && stream != StreamHandle::PER_THREAD => Some(stream),
            After::Barrier if barrier => Some(StreamHandle::LEGACY),
            _ => None,
        })
    });
    match from_pool {
        Some(Ok(None)) => return Ok(()),
        Some(Ok(Some(lent))) => {
            let after = after(lent.client, back.stream, lent.stream);
            pool::release(pool::Grant::own_pool(ptr), device_id, lent.bytes, after, lent.client);
            return Ok(());
        }
        Some(Err(refused)) => {
            count_refused();
            return Err(refused);
        }
        None => {}
    }
    let loan = with_loans(|loans| {
        // Taken out at once (one lookup), and put back when the give-back is refused.
        let Some(loan) = loans.remove(&(device_id, ptr)) else {
            let lent = loans.keys().find(|(_, address)| *address == ptr).map(|(device, _)| *device);
            return Err(lent.map_or(Refusal::Unknown, Refusal::OtherDevice));
        };
        match refusal(client, back, loan.serial, loan.client, loan.bytes) {
            None => Ok(loan),
            Some(refusal) => {
                loans.insert((device_id, ptr), loan);
                Err(refusal)
            }
        }
    });
    let loan = loan
        .map_err(|refused| match refused {
            Refusal::Unknown => default_pool().lent_on(ptr).map_or(Refusal::Unknown, Refusal::OtherDevice),
            other => other,
        })
        .inspect_err(|_| count_refused())?;
    let after = after(loan.client, back.stream, loan.stream);
    pool::release(loan.grant, device_id, loan.bytes, after, loan.client);
    Ok(())
}

/// Why `client`'s give-back of a loan (its serial, client and size) is refused, if it is.
fn refusal(client: Client, back: GiveBack, serial: u64, lent_to: Client, bytes: usize) -> Option<Refusal> {
    if back.serial.is_some_and(|given| given != serial) {
        Some(Refusal::Unknown) // a give-back of an earlier loan of this address
    } else if lent_to != client {
        Some(Refusal::OtherClient(lent_to))
    } else if back.bytes.is_some_and(|given| given != bytes) {
        Some(Refusal::OtherSize(bytes))
    } else {
        None
    }
}

/// What the free of a loan to `client`, lent for `lent` and given back naming `named`, waits
/// for: Numba's, every blocking stream's work (module doc); the others', the named stream's,
/// else the one it was lent for.
fn after(client: Client, named: Option<Stream>, lent: Stream) -> After {
    match client {
        Client::Numba => After::Barrier,
        _ => After::Stream(
            named
                .and_then(StreamHandle::of_value)
                .unwrap_or_else(|| StreamHandle::of_value(lent).unwrap_or(StreamHandle::LEGACY)),
        ),
    }
}

/// Take back every loan of `client` on `device_id` (its context was reset, so nothing of it
/// runs any more): freed after all of the device's work; how many.
pub(crate) fn reset(client: Client, device_id: DeviceId) -> usize {
    let taken: Vec<Loan> = with_loans(|loans| {
        let keys: Vec<_> = loans
            .iter()
            .filter(|((device, _), loan)| *device == device_id && loan.client == client)
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter().filter_map(|key| loans.remove(&key)).collect()
    });
    let pooled = default_pool().take_loans(device_id, client);
    let count = taken.len() + pooled.len();
    for loan in taken {
        pool::release(loan.grant, device_id, loan.bytes, After::Device, loan.client);
    }
    for (ptr, lent) in pooled {
        pool::release(pool::Grant::own_pool(ptr), device_id, lent.bytes, After::Device, lent.client);
    }
    count
}

/// Count a give-back refused (here, or where its device id was refused on the way in).
pub(crate) fn count_refused() {
    REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// Gives-back refused so far.
pub(crate) fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}
