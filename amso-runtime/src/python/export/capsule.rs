//! DLPack capsules: an export wrapped in a PyCapsule named "dltensor" or
//! "dltensor_versioned". A consumer renames the capsule ("used_...") and then owns the
//! tensor; the capsule's destructor frees the tensor only if nobody consumed it.

use std::ffi::CStr;

use pyo3::ffi;
use pyo3::prelude::*;

use std::sync::Arc;

use crate::dlpack::{plan_export, DlpackRequest, ManagedTensor, Owner, RawManaged};
use crate::host::HostBuffer;
use crate::lock::LockId;
use crate::memarray::core::ArrayCore;
use crate::python::base::array::MemArrayBase;
use crate::stream::Stream;

const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";

/// The managed tensor of `array` for a `__dlpack__` call with `request`, presenting `lock`
/// (pure Rust: runs under the array's lock).
///
/// Each step of an export is `#[inline]`: the release build's thin LTO otherwise keeps the
/// steps as calls that move their `Result`s, about 7% of a host `__dlpack__()`'s instructions
/// (by callgrind).
#[inline]
pub(crate) fn export_tensor(
    array: &ArrayCore,
    lock: Option<LockId>,
    request: &DlpackRequest,
) -> crate::error::Result<ManagedTensor> {
    export_tensor_with(array, lock, request, Owner::own)
}

/// `export_tensor`, with host memory exported where it is held by `host_owner`'s `Owner`.
#[inline]
fn export_tensor_with(
    array: &ArrayCore,
    lock: Option<LockId>,
    request: &DlpackRequest,
    host_owner: impl FnOnce(&Arc<HostBuffer>) -> Owner,
) -> crate::error::Result<ManagedTensor> {
    let view = array.raw_view();
    let device = view.device();
    let plan = plan_export(device, view.pinned(), request)?;
    crate::dlpack::check_format(&plan, view.dtype.dl_data_type(), view.readonly())?;
    match array.export_source_with(&plan, lock, host_owner) {
        Ok(source) => Ok(ManagedTensor::new(source, plan.format)),
        // A device the producer cannot reach is DLPack's BufferError, whatever the cause.
        Err(crate::error::Error::Unavailable(message)) if plan.target != device => {
            Err(crate::error::Error::ExportRefused(message))
        }
        Err(other) => Err(other),
    }
}

/// A versioned export of a vector array's memory as its lanes (`a.scalar_view()`): the lane
/// dtype, and a last axis of `lanes` (float32x4 `(n,)` is float32 `(n, 4)`), handed to `stream`
/// as `export_for_stream` hands it.
pub(crate) fn export_lanes(array: &ArrayCore, stream: Stream) -> crate::error::Result<ManagedTensor> {
    let view = array.raw_view();
    let device = view.device();
    let request = stream_request(array, stream);
    if array.shape().len() >= crate::shape::MAX_NDIM {
        return Err(crate::error::Error::ExportRefused(format!(
            "the lanes of a {}-D vector array need a {}-D view, and amso arrays have at most {} dimensions",
            array.shape().len(),
            array.shape().len() + 1,
            crate::shape::MAX_NDIM
        )));
    }
    let plan = plan_export(device, view.pinned(), &request)?;
    let source = array.export_source(&plan, None)?;
    let shape: Vec<usize> = source.shape.iter().copied().chain([usize::from(source.dtype.lanes)]).collect();
    let dtype = dlpark::ffi::DLDataType { lanes: 1, ..source.dtype };
    Ok(ManagedTensor::new(crate::dlpack::ExportSource { shape: &shape, dtype, ..source }, plan.format))
}

/// A `__dlpack__` call on `array` (the array API's arguments, `max_version` read by
/// `convert::dlpack_version`), presenting `lock`: the one body of `MemArray.__dlpack__` (its
/// PyO3 entry and the fast entry of `hot_methods`) and `DLPackContext.__dlpack__`.
pub(crate) fn dlpack_call<'py>(
    py: Python<'py>,
    array: &MemArrayBase,
    lock: Option<LockId>,
    stream: Option<i64>, // the protocol's raw value (`DlpackRequest::stream`)
    max_version: Option<(u32, u32)>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let request = DlpackRequest { stream, max_version, dl_device, copy };
    warn_ambiguous_stream(py, array, &request)?;
    // Host data exported where it is (no copy, no device named) is a count in the array's
    // hub and a block: no Python code, no driver call, so the GIL stays held and the array's
    // lock can be skipped while no writer is registered. Everything else takes the lock and
    // holds the memory through an `Arc` of its own. (`export_tensor_with` runs in one closure
    // of a function of its own, as under the lock, so that thin LTO inlines its steps.)
    let in_place = request.dl_device.is_none() && request.copy != Some(true);
    let read_unlocked = |core: &ArrayCore| in_place && core.residence() == crate::device::Residence::Host;
    // SAFETY: `export_tensor_with` reads without the lock only host data that stays where it
    // is, which releases nothing and runs no Python code (the hub is counted with the GIL).
    let tensor = unsafe {
        array.read_unlocked_if(py, read_unlocked, |core, unlocked| {
            // Read with the GIL held and no writer registered (the hub's contract), or not.
            let host_owner = |buffer: &Arc<HostBuffer>| match unlocked {
                true => array.hub_owner(py, buffer),
                false => Owner::own(buffer),
            };
            export_tensor_with(core, lock, &request, host_owner)
        })
    }?;
    into_capsule(py, tensor)
}

/// A versioned export of `array` whose device data is handed to `stream` (amso's pending work
/// on it ordered first); host data has no stream. For the exchange API and kernel launches.
pub(crate) fn export_for_stream(array: &ArrayCore, stream: Stream) -> crate::error::Result<ManagedTensor> {
    export_tensor(array, None, &stream_request(array, stream))
}

/// A versioned export's request that hands device data to `stream` (host data has none).
fn stream_request(array: &ArrayCore, stream: Stream) -> DlpackRequest {
    let on_device = array.raw_view().device().device_type == crate::device::DeviceType::Cuda;
    DlpackRequest {
        stream: on_device.then_some(stream.protocol_value()),
        max_version: Some(crate::dlpack::DLPACK_VERSION),
        ..Default::default()
    }
}

/// Warn about `stream=0` for device data: the array API standard forbids it as ambiguous,
/// older consumers still send it, and amso treats it as the legacy default stream.
#[inline]
fn warn_ambiguous_stream(py: Python<'_>, array: &MemArrayBase, request: &DlpackRequest) -> PyResult<()> {
    if request.stream == Some(0) && array.header().placement().on_device() {
        PyErr::warn(
            py,
            &py.get_type::<pyo3::exceptions::PyUserWarning>(),
            c"__dlpack__(stream=0) is ambiguous and not allowed by the array API standard; treating it as the legacy default stream (1)",
            1,
        )?;
    }
    Ok(())
}

/// Hand `tensor` to a new capsule.
#[inline]
pub(crate) fn into_capsule(py: Python<'_>, tensor: ManagedTensor) -> PyResult<Bound<'_, PyAny>> {
    // A vector's capsule has a destructor of its own (`note_lanes_refusal`), so that the others
    // pay nothing for it.
    let dtype = tensor.describe().0.dtype;
    let vector = crate::element::vector_type((dtype.code.0, dtype.bits, dtype.lanes));
    let raw = tensor.into_raw();
    let (pointer, name, destructor): (*mut std::ffi::c_void, &CStr, ffi::PyCapsule_Destructor) = match (raw, vector) {
        (RawManaged::Legacy(p), false) => (p.as_ptr().cast(), LEGACY, destroy_legacy),
        (RawManaged::Legacy(p), true) => (p.as_ptr().cast(), LEGACY, destroy_legacy_vector),
        (RawManaged::Versioned(p), false) => (p.as_ptr().cast(), VERSIONED, destroy_versioned),
        (RawManaged::Versioned(p), true) => (p.as_ptr().cast(), VERSIONED, destroy_versioned_vector),
    };
    // SAFETY: `pointer` is a live managed tensor; the name is a static C string, as the
    // capsule keeps the pointer to it.
    let capsule = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), Some(destructor)) };
    if capsule.is_null() {
        // SAFETY: no capsule took the tensor, so it is still ours to free.
        drop(unsafe { ManagedTensor::from_raw(raw) });
    }
    // SAFETY: `capsule` is a new reference or null with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, capsule) }
}

unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule.
    unsafe { destroy::<false>(capsule, LEGACY, |p| RawManaged::Legacy(p.cast())) }
}

unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule.
    unsafe { destroy::<false>(capsule, VERSIONED, |p| RawManaged::Versioned(p.cast())) }
}

unsafe extern "C" fn destroy_legacy_vector(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule.
    unsafe { destroy::<true>(capsule, LEGACY, |p| RawManaged::Legacy(p.cast())) }
}

unsafe extern "C" fn destroy_versioned_vector(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule.
    unsafe { destroy::<true>(capsule, VERSIONED, |p| RawManaged::Versioned(p.cast())) }
}

/// # Safety
/// `capsule` is a live capsule made by `into_capsule` with `name` as its original name, of a
/// vector's tensor if `VECTOR`.
///
/// The capsule was made with `name`'s own pointer; a consumer that takes the tensor renames
/// the capsule ("used_dltensor", its own string), so comparing the name's pointer tells an
/// unconsumed capsule without comparing strings (`PyCapsule_IsValid` would). The one string
/// compare left is `PyCapsule_GetPointer`'s, of the name with itself.
unsafe fn destroy<const VECTOR: bool>(
    capsule: *mut ffi::PyObject,
    name: &CStr,
    raw: fn(std::ptr::NonNull<std::ffi::c_void>) -> RawManaged,
) {
    // SAFETY: a live capsule whose pointer is not NULL (PyCapsule_New and SetPointer refuse
    // NULL), so this returns its current name without setting an exception.
    if !std::ptr::eq(unsafe { ffi::PyCapsule_GetName(capsule) }, name.as_ptr()) {
        return;
    }
    // SAFETY: the capsule still carries `name`, so this returns its non-null pointer.
    let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) };
    if let Some(pointer) = std::ptr::NonNull::new(pointer) {
        let raw = raw(pointer);
        if VECTOR {
            // SAFETY: an unconsumed capsule still owns its live tensor; Python destroys
            // capsules with the GIL held.
            unsafe { note_lanes_refusal(ManagedTensor::describe_raw(raw).0.dtype) };
        }
        // SAFETY: an unconsumed capsule still owns its tensor; this runs once, at the
        // capsule's destruction, with the GIL held.
        unsafe { crate::dlpack::release_attached(raw) };
    }
}

/// An unconsumed capsule of a vector array (lanes > 1) dropped while an exception about lanes
/// is on its way is a consumer that refused them (NumPy, PyTorch, CuPy and JAX read only
/// lanes == 1, and say so) and dropped the capsule as it raised: the exception gets a note
/// naming `a.scalar_view()`. The exception itself is kept as it was.
///
/// # Safety
/// The GIL is held.
unsafe fn note_lanes_refusal(dtype: dlpark::ffi::DLDataType) {
    // SAFETY: the GIL is held (the caller's contract); the exception fetched is restored
    // (with its note) before returning, so the error indicator is as the caller left it.
    unsafe {
        if ffi::PyErr_Occurred().is_null() {
            return;
        }
        let (mut kind, mut value, mut traceback) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        ffi::PyErr_Fetch(&mut kind, &mut value, &mut traceback);
        ffi::PyErr_NormalizeException(&mut kind, &mut value, &mut traceback);
        if !value.is_null() {
            let name = crate::element::dlpack_type_name((dtype.code.0, dtype.bits, dtype.lanes));
            let note = format!(
                "amso: the DLPack tensor offered was {name}, {} lanes per element, which most consumers refuse \
                 (they read lanes == 1); a.scalar_view() is the same memory as {}-bit lanes with a last axis of {}, \
                 without a copy",
                dtype.lanes, dtype.bits, dtype.lanes
            );
            let py = Python::assume_attached();
            let value = Bound::from_borrowed_ptr(py, value);
            // Only a refusal of the lanes gets it (every consumer's message names them), not
            // an unrelated error raised while a vector's capsule was alive.
            let about_lanes = value.str().is_ok_and(|text| text.to_string().to_lowercase().contains("lane"));
            if about_lanes {
                // A failure to add the note must not replace the consumer's exception.
                let _ = value.call_method1(pyo3::intern!(py, "add_note"), (note,));
            }
            ffi::PyErr_Clear();
        }
        ffi::PyErr_Restore(kind, value, traceback);
    }
}
