//! DLPack export: the protocol decision (which capsule kind, copy or not, which device) and
//! the managed tensors themselves, whose deleter frees exactly what the export allocated and
//! releases its hold on the array's memory. ABI structs come from `dlpark::ffi`.

use std::alloc::Layout;
use std::cell::Cell;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use dlpark::ffi::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};
use dlpark::DlpackFlags;

// Pure Rust (and so under Miri), though only the Python layer makes hubs.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) mod export_hub;

pub(crate) use export_hub::Owner;

use crate::device::{Device, DeviceId, DeviceType};
use crate::error::{Error, Result};
use crate::shape::MAX_NDIM;

/// The DLPack version amso produces.
pub(crate) const DLPACK_VERSION: (u32, u32) = (dlpark::ffi::DLPACK_MAJOR_VERSION, dlpark::ffi::DLPACK_MINOR_VERSION);

/// The consumer's `__dlpack__` arguments, as the array API standard defines them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DlpackRequest {
    /// The consumer's stream (`None`, -1, 1, 2 or a handle): the protocol's raw value, whose
    /// -1 ("no synchronisation") and 0 (refused) no `Stream` stands for.
    pub stream: Option<i64>,
    /// The newest DLPack version the consumer reads; `None` means legacy only.
    pub max_version: Option<(u32, u32)>,
    /// The device the consumer wants the data on.
    pub dl_device: Option<(i32, i32)>,
    /// `Some(true)`: always copy; `Some(false)`: never copy; `None`: copy only if needed.
    pub copy: Option<bool>,
}

/// Which managed-tensor struct to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `DLManagedTensor` in a "dltensor" capsule.
    Legacy,
    /// `DLManagedTensorVersioned` in a "dltensor_versioned" capsule, reporting this version.
    Versioned(DLPackVersion),
}

/// What an export will do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportPlan {
    /// Capsule kind.
    pub format: Format,
    /// Whether the consumer gets a copy it owns alone (asked for, or needed to reach `target`).
    pub copy: bool,
    /// The device the consumer gets the data on.
    pub target: Device,
    /// The consumer's stream that must wait for the array's pending work (the protocol's raw
    /// value, as `stream`); `None` when no handshake is needed.
    pub consumer_stream: Option<i64>,
}

/// Decide an export of data living on `current` (`pinned`: in page-locked host memory) for
/// `request`, following the array API standard.
#[inline]
pub fn plan_export(current: Device, pinned: bool, request: &DlpackRequest) -> Result<ExportPlan> {
    let format = match request.max_version {
        Some((major, minor)) if major >= 1 => {
            let minor = if major == DLPACK_VERSION.0 { minor.min(DLPACK_VERSION.1) } else { DLPACK_VERSION.1 };
            Format::Versioned(DLPackVersion { major: DLPACK_VERSION.0, minor })
        }
        _ => Format::Legacy,
    };
    let target = match request.dl_device {
        None => current,
        Some((device_type, device_id)) => match DeviceType::from_code(device_type) {
            Ok(DeviceType::Cpu | DeviceType::CudaHost) if device_id != 0 => {
                return Err(Error::ExportRefused(format!(
                    "host devices have id 0 only, got dl_device=({device_type}, {device_id})"
                )))
            }
            Ok(kind @ (DeviceType::Cpu | DeviceType::CudaHost)) => Device { device_type: kind, id: DeviceId::ZERO },
            // Managed memory is device memory: an export to it is an export from the device
            // (a managed array's says kDLCUDAManaged). A device this machine lacks is one the
            // producer cannot export to (BufferError, as the standard asks).
            Ok(DeviceType::Cuda | DeviceType::CudaManaged) => match DeviceId::new(device_id) {
                Ok(id) => Device::cuda(id),
                Err(error) => {
                    return Err(Error::ExportRefused(format!(
                        "cannot export to dl_device=({device_type}, {device_id}): {error}"
                    )))
                }
            },
            Err(_) => {
                return Err(Error::ExportRefused(format!(
                    "cannot export to dl_device=({device_type}, {device_id}): amso exports to kDLCPU (1), kDLCUDA (2) \
                     and, for pinned arrays, kDLCUDAHost (3)"
                )))
            }
        },
    };
    let host_as_pinned = target.device_type == DeviceType::CudaHost;
    if host_as_pinned && !(current.device_type == DeviceType::Cpu && pinned) {
        return Err(Error::ExportRefused(
            "only arrays created with pinned=True and held on the host export as kDLCUDAHost".into(),
        ));
    }
    let moves = target != current && !host_as_pinned;
    if moves && request.copy == Some(false) {
        return Err(Error::ExportRefused(format!(
            "dl_device=({}, {}) differs from the array's device ({}, {}); that needs a copy, but copy=False",
            target.device_type as i32, target.id, current.device_type as i32, current.id
        )));
    }
    let consumer_stream = match (current.device_type, moves, request.stream) {
        (_, _, Some(s)) if s < -1 => {
            return Err(Error::InvalidArgument(format!(
                "stream {s} is not a valid __dlpack__ stream (None, -1, 1, 2 or a handle)"
            )))
        }
        // Device data for a consumer on the same device: its stream waits for ours.
        (DeviceType::Cuda, false, None | Some(0)) => Some(1),
        (DeviceType::Cuda, false, Some(-1)) => None,
        (DeviceType::Cuda, false, Some(s)) => Some(s),
        // Host data staying on the host: there is no stream to speak of.
        (_, false, None | Some(-1)) => None,
        (_, false, Some(s)) => {
            return Err(Error::InvalidArgument(format!("stream must be None for a host (kDLCPU) array, got {s}")))
        }
        // Copies to another device complete before the capsule is returned.
        (_, true, _) => None,
    };
    Ok(ExportPlan { format, copy: request.copy == Some(true) || moves, target, consumer_stream })
}

/// Everything a managed tensor describes: the array side of an export.
pub struct ExportSource<'a> {
    /// First element.
    pub data: *mut c_void,
    /// Where `data` lives.
    pub device: Device,
    /// Element type.
    pub dtype: DLDataType,
    /// Dimensions (borrowed from the array; copied into the tensor).
    pub shape: &'a [usize],
    /// Strides in elements; `None` for C order (copied into the tensor).
    pub strides: Option<&'a [isize]>,
    /// Keeps the memory alive until the consumer calls the deleter.
    pub(crate) owner: Owner,
    /// Consumers must not write (DLPack READ_ONLY flag).
    pub readonly: bool,
    /// The memory is a copy made for this export (IS_COPIED flag).
    pub copied: bool,
}

/// A managed tensor plus the storage its pointers refer to, in one allocation. The managed
/// struct comes first, so a pointer to it is a pointer to the whole.
/// Only the first `ndim` entries of `shape` and `strides` are written.
#[repr(C)]
struct Exported<M> {
    managed: M,
    shape: [MaybeUninit<i64>; MAX_NDIM],
    strides: [MaybeUninit<i64>; MAX_NDIM],
    owner: Owner,
}

/// An owned DLPack managed tensor, amso's or a producer's: dropping it calls its deleter
/// exactly once (catching any unwinding), unless it was released with `into_raw` (to a
/// capsule or a C caller, who then owns it).
pub struct ManagedTensor {
    raw: RawManaged,
}

/// A raw managed tensor pointer of either kind.
#[derive(Debug, Clone, Copy)]
pub enum RawManaged {
    /// `DLManagedTensor*`.
    Legacy(NonNull<DLManagedTensor>),
    /// `DLManagedTensorVersioned*`.
    Versioned(NonNull<DLManagedTensorVersioned>),
}

// SAFETY: the tensor's owner is `Send + Sync` and DLPack deleters may run on any thread.
unsafe impl Send for ManagedTensor {}
// SAFETY: a shared `ManagedTensor` exposes nothing but its raw pointer; it only drops.
unsafe impl Sync for ManagedTensor {}

impl ManagedTensor {
    /// Build the managed tensor for `source` in `format`.
    #[inline]
    pub fn new(source: ExportSource<'_>, format: Format) -> ManagedTensor {
        let tensor = dl_tensor(&source);
        let raw = match format {
            Format::Legacy => {
                let managed = DLManagedTensor {
                    dl_tensor: tensor,
                    manager_ctx: std::ptr::null_mut(),
                    deleter: Some(delete_legacy),
                };
                RawManaged::Legacy(boxed(managed, source, |m| &mut m.dl_tensor, |m, ctx| m.manager_ctx = ctx))
            }
            Format::Versioned(version) => {
                let mut flags = DlpackFlags::empty();
                flags.set(DlpackFlags::READ_ONLY, source.readonly);
                flags.set(DlpackFlags::IS_COPIED, source.copied);
                flags.set(DlpackFlags::IS_SUBBYTE_TYPE_PADDED, padded(source.dtype));
                let managed = DLManagedTensorVersioned {
                    version,
                    manager_ctx: std::ptr::null_mut(),
                    deleter: Some(delete_versioned),
                    flags,
                    dl_tensor: tensor,
                };
                RawManaged::Versioned(boxed(managed, source, |m| &mut m.dl_tensor, |m, ctx| m.manager_ctx = ctx))
            }
        };
        ManagedTensor { raw }
    }

    /// Take ownership of a managed tensor (a producer's, or one released by `into_raw`).
    ///
    /// # Safety
    /// `raw` points to a live managed tensor whose deleter has not run and that nobody else
    /// will delete.
    pub unsafe fn from_raw(raw: RawManaged) -> ManagedTensor {
        ManagedTensor { raw }
    }

    /// The tensor, still owned by `self`.
    pub fn raw(&self) -> RawManaged {
        self.raw
    }

    /// The tensor's `DLTensor`, its flags (legacy tensors have none), and the DLPack major
    /// version it declares (legacy: amso's).
    pub fn describe(&self) -> (&DLTensor, DlpackFlags, u32) {
        // SAFETY: a live tensor this value owns, borrowed for as long as `self` is.
        unsafe { Self::describe_raw(self.raw) }
    }

    /// `describe` of a raw tensor.
    ///
    /// # Safety
    /// `raw` is live for `'a`.
    pub(crate) unsafe fn describe_raw<'a>(raw: RawManaged) -> (&'a DLTensor, DlpackFlags, u32) {
        // SAFETY: live for `'a` (the caller's contract).
        unsafe {
            match raw {
                RawManaged::Versioned(p) => {
                    let m: &DLManagedTensorVersioned = &*p.as_ptr();
                    (&m.dl_tensor, m.flags, m.version.major)
                }
                RawManaged::Legacy(p) => (&(*p.as_ptr()).dl_tensor, DlpackFlags::empty(), DLPACK_VERSION.0),
            }
        }
    }

    /// Give up ownership: the caller must call the deleter exactly once.
    pub fn into_raw(self) -> RawManaged {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: this value still owns the tensor (into_raw forgets it), so the deleter has
        // not run yet. A panicking deleter (Rust code behind it) must not unwind further.
        let _ = std::panic::catch_unwind(|| unsafe { call_deleter(raw) });
    }
}

/// Run a managed tensor's own deleter, if it has one.
///
/// # Safety
/// `raw` points to a live managed tensor whose deleter has not run.
unsafe fn call_deleter(raw: RawManaged) {
    // SAFETY: the caller guarantees the pointer is live; the deleter is the producer's.
    unsafe {
        match raw {
            RawManaged::Legacy(p) => {
                if let Some(deleter) = (*p.as_ptr()).deleter {
                    deleter(p.as_ptr())
                }
            }
            RawManaged::Versioned(p) => {
                if let Some(deleter) = (*p.as_ptr()).deleter {
                    deleter(p.as_ptr())
                }
            }
        }
    }
}

#[inline]
/// Whether elements of `dtype` leave bits of their byte unused (one sub-byte lane), which
/// DLPack's padded flag says; without it, DLPack packs sub-byte elements.
pub(crate) fn padded(dtype: DLDataType) -> bool {
    !(dtype.bits as u32 * dtype.lanes as u32).is_multiple_of(8)
}

#[cfg(feature = "python")]
/// Refuse an export in the legacy format, which has no flags, of what only flags can say: a
/// padded sub-byte `dtype` (its consumer would read the bytes as packed elements), or
/// `readonly` memory (its consumer could write it; NumPy refuses the same request).
pub(crate) fn check_format(plan: &ExportPlan, dtype: DLDataType, readonly: bool) -> Result<()> {
    if plan.format != Format::Legacy {
        return Ok(());
    }
    if padded(dtype) {
        return Err(Error::ExportRefused(format!(
            "a {}-bit element is stored padded to a byte, which only a versioned DLPack tensor can say (its \
             padded flag); ask for one with __dlpack__(max_version=(1, 0)) or later",
            dtype.bits
        )));
    }
    if readonly {
        return Err(Error::ExportRefused(
            "the array is read-only, which a legacy (unversioned) DLPack capsule cannot say: its consumer could \
             write it; ask for a versioned capsule with __dlpack__(max_version=(1, 0)) or later (its READ_ONLY \
             flag), or export a writable copy"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(feature = "python")]
/// Why a producer's sub-byte layout cannot be read, if it cannot: amso stores one sub-byte lane
/// padded to a byte, and a padded flag on any other type is a contradiction.
pub(crate) fn check_subbyte_layout(dtype: DLDataType, flags: DlpackFlags) -> std::result::Result<(), String> {
    let flagged = flags.contains(DlpackFlags::IS_SUBBYTE_TYPE_PADDED);
    match (padded(dtype), flagged) {
        (true, false) => Err(format!(
            "the producer's tensor packs {}-bit elements ({} lane{}, no padded flag); amso reads sub-byte elements \
             stored one per byte (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) or as packed vectors that fill their \
             bytes (e.g. float4_e2m1fn_x2: 2 lanes of 4 bits)",
            dtype.bits,
            dtype.lanes,
            if dtype.lanes == 1 { "" } else { "s" }
        )),
        (false, true) => Err(format!(
            "the producer's tensor sets the sub-byte padded flag on {} x {}-bit elements, which fill their bytes",
            dtype.lanes, dtype.bits
        )),
        _ => Ok(()),
    }
}

fn dl_tensor(source: &ExportSource) -> DLTensor {
    DLTensor {
        data: source.data,
        device: DLDevice {
            device_type: DLDeviceType(source.device.device_type as u32),
            device_id: source.device.id.ordinal(),
        },
        ndim: source.shape.len() as i32,
        dtype: source.dtype,
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

#[inline]
fn boxed<M>(
    managed: M,
    mut source: ExportSource<'_>,
    tensor: fn(&mut M) -> &mut DLTensor,
    set_ctx: fn(&mut M, *mut c_void),
) -> NonNull<M> {
    // Built in place: an export is a block (its hub's spare, the thread's, else a malloc) and a few
    // stores, with no struct moved after.
    let block = match &mut source.owner {
        Owner::Hub(hub) => hub.take_block().map(NonNull::as_ptr),
        Owner::Shared(_) => None,
    };
    let raw = block.unwrap_or_else(take_block).cast::<Exported<M>>();
    // SAFETY: `raw` is a live, exclusive block that fits an `Exported<M>`; every field is
    // written before anything reads it (the shape and strides up to `ndim`, which is all a
    // consumer reads). The shape and strides pointers are derived from `raw` itself, so no
    // later retag of a box invalidates them (Miri's Stacked Borrows check).
    unsafe {
        std::ptr::addr_of_mut!((*raw).managed).write(managed);
        std::ptr::addr_of_mut!((*raw).owner).write(source.owner);
        let shape = std::ptr::addr_of_mut!((*raw).shape).cast::<i64>();
        let strides = std::ptr::addr_of_mut!((*raw).strides).cast::<i64>();
        // Dimensions and strides in elements (C order unless given); DLPack >= 1.2 asks
        // producers not to leave strides NULL.
        crate::shape::for_each_c_stride(source.shape, |axis, dim, stride| {
            shape.add(axis).write(dim);
            strides.add(axis).write(source.strides.map_or(stride, |given| given[axis] as i64));
        });
        let t = tensor(&mut (*raw).managed);
        t.shape = shape;
        t.strides = strides;
        set_ctx(&mut (*raw).managed, raw.cast());
    }
    NonNull::new(raw.cast::<M>()).expect("blocks are never null")
}

/// The layout of every export's block, legacy or versioned, so that one spare serves both.
const BLOCK: Layout = {
    let (legacy, versioned) =
        (Layout::new::<Exported<DLManagedTensor>>(), Layout::new::<Exported<DLManagedTensorVersioned>>());
    assert!(legacy.align() == versioned.align() && legacy.size() <= versioned.size());
    versioned
};

/// A thread's spare export block. A deleter keeps the block it frees for the thread's next
/// export, so a loop of exports and releases on one thread (a consumer importing and dropping)
/// allocates nothing. One slot per thread needs no atomics: a process-wide slot, swapped
/// atomically on both sides, measured slower than malloc and free.
struct Spare(Cell<*mut u8>);

impl Drop for Spare {
    fn drop(&mut self) {
        let block = self.0.get();
        if !block.is_null() {
            // SAFETY: a block of `BLOCK`'s layout, owned by the slot alone.
            unsafe { std::alloc::dealloc(block, BLOCK) }
        }
    }
}

thread_local! {
    static SPARE: Spare = const { Spare(Cell::new(std::ptr::null_mut())) };
}

/// An uninitialised block of `BLOCK`'s layout, owned by the caller.
#[inline]
fn take_block() -> *mut u8 {
    let spare = SPARE.try_with(|spare| spare.0.replace(std::ptr::null_mut())).unwrap_or(std::ptr::null_mut());
    if !spare.is_null() {
        return spare;
    }
    // SAFETY: `BLOCK` has a non-zero size.
    let block = unsafe { std::alloc::alloc(BLOCK) };
    if block.is_null() {
        std::alloc::handle_alloc_error(BLOCK);
    }
    block
}

/// Give back a block from `take_block` (its contents already dropped or moved out): kept as the
/// thread's spare if it has none (and its slot still lives: a deleter may run while the thread
/// ends), else freed.
#[inline]
fn give_block(block: *mut u8) {
    let kept = SPARE
        .try_with(|spare| {
            let empty = spare.0.get().is_null();
            if empty {
                spare.0.set(block);
            }
            empty
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: a block of `BLOCK`'s layout from `take_block`, owned by the caller.
        unsafe { std::alloc::dealloc(block, BLOCK) }
    }
}

/// The deleter of every legacy tensor amso exports. (Not generic, so that it has one address:
/// `release_attached` recognises amso's tensors by it.)
unsafe extern "C" fn delete_legacy(managed: *mut DLManagedTensor) {
    // SAFETY: the deleter's contract, passed on.
    unsafe { delete_exported(managed) }
}

/// The deleter of every versioned tensor amso exports (one address, as `delete_legacy`).
unsafe extern "C" fn delete_versioned(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: the deleter's contract, passed on.
    unsafe { delete_exported(managed) }
}

/// What amso's deleters do: give the block back and drop the owner.
///
/// # Safety
/// `managed` is NULL or a tensor amso made with `boxed`, whose deleter has not run.
unsafe fn delete_exported<M>(managed: *mut M) {
    if managed.is_null() {
        return;
    }
    // No panic may cross into the consumer's C code; dropping an Arc does not panic, and
    // if it ever did (a foreign owner's drop), leaking that owner is the safe outcome.
    let exported = managed.cast::<Exported<M>>();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: amso made `managed` with `boxed`, as the first field of an `Exported<M>`
        // in a block of its own, and the consumer calls the deleter once. The owner is the
        // one field with a destructor (the managed struct and the shape are plain data).
        let owner = unsafe { std::ptr::read(std::ptr::addr_of!((*exported).owner)) };
        give_block(exported.cast()); // first: an owner whose drop panics loses nothing more
        drop(owner);
    }));
}

/// Free a managed tensor nobody consumed, with the GIL held (a capsule's destructor): one of
/// amso's exports releases its hub reference without a locked instruction
/// (`export_hub`); any other tensor is dropped through its deleter.
///
/// # Safety
/// `raw` points to a live managed tensor whose deleter has not run and that nobody else will
/// delete, and the GIL is held.
#[cfg(feature = "python")]
pub(crate) unsafe fn release_attached(raw: RawManaged) {
    // SAFETY: a live tensor (the caller's contract), released once here or by its deleter.
    let taken = unsafe {
        match raw {
            RawManaged::Legacy(p) => take_owner(p.as_ptr(), (*p.as_ptr()).deleter, delete_legacy),
            RawManaged::Versioned(p) => take_owner(p.as_ptr(), (*p.as_ptr()).deleter, delete_versioned),
        }
    };
    let Some((owner, block)) = taken else {
        // SAFETY: not one of amso's: dropped through its own deleter, as the contract allows.
        drop(unsafe { ManagedTensor::from_raw(raw) });
        return;
    };
    // Dropping an owner may drop the buffer's last reference, and with it Rust code of a user's
    // (a foreign buffer's owner): inside a capsule's destructor, it must not unwind out.
    let release = std::panic::AssertUnwindSafe(|| match owner {
        // SAFETY: the GIL is held (the caller's contract); the block is ours, its contents
        // moved out.
        Owner::Hub(hub) => unsafe { hub.release_attached(NonNull::new(block)) },
        shared => {
            give_block(block);
            drop(shared);
        }
    });
    drop(std::panic::catch_unwind(release));
}

/// The owner and block of `managed` if amso made it (its deleter is `ours`, compared by
/// address: each of amso's deleters is one non-generic function), moved out instead of the
/// deleter dropping it; `None` for another producer's tensor, left as it is.
///
/// # Safety
/// `managed` is a live tensor whose deleter is `deleter` and has not run; if this returns the
/// owner, the caller gives the block back and releases the owner, once.
#[cfg(feature = "python")]
unsafe fn take_owner<M>(
    managed: *mut M,
    deleter: Option<unsafe extern "C" fn(*mut M)>,
    ours: unsafe extern "C" fn(*mut M),
) -> Option<(Owner, *mut u8)> {
    (deleter.map(|d| d as usize) == Some(ours as usize)).then(|| {
        // SAFETY: amso's deleter, so amso made the tensor with `boxed`: the first field of an
        // `Exported<M>` in a block of its own, whose owner is the one field with a destructor.
        let owner = unsafe { std::ptr::read(std::ptr::addr_of!((*managed.cast::<Exported<M>>()).owner)) };
        (owner, managed.cast::<u8>())
    })
}

#[cfg(test)]
mod tests;
