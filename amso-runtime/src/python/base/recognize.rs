//! Recognising amso arrays, of this runtime or of another crate's copy of it (each extension
//! module built with amso links its own), without trusting what an object says about itself.
//!
//! Every amso class carries `__amso_type__`, a capsule named `amso.array_type.v2` that points
//! at its runtime's static `ArrayTypeInfo`. Only that runtime's `header_of` turns an object
//! into a header, and only after a real type check against its own base class. So a class
//! that copies the attribute, fakes it, or raises from it is simply not an amso array.
//! (Code that forges a capsule through ctypes can crash anything; that is outside what any
//! library can defend against.)
//!
//! The same table lets a typed argument of one runtime hold an array of another without a
//! managed tensor: `hold` takes a reference to the memory where it is (the array's own
//! runtime keeps it alive), `release` gives it back. A runtime whose header is of version 2
//! or later keeps `FLAG_CHANGING` (`header.rs`), so a typed argument reads its unlocked,
//! unchanging host data in place from the header instead (`source::from_amso`); a table of
//! version 1 (an older amso) has the same layout and is held through `hold`.

use std::ffi::CStr;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;

use crate::device::DeviceId;

use crate::memarray::export::HeldMemory;
use crate::python::base::array::MemArrayBase;
use crate::python::base::header::{Header, HEADER_MAGIC, HEADER_VERSION};
use crate::python::identity_cache::IdentityCache;
use crate::stream::Stream;

/// The oldest header version (and `ArrayTypeInfo` layout) this runtime reads: version 1 has the
/// same layout without `FLAG_CHANGING`.
const OLDEST_HEADER_VERSION: u32 = 1;

const TYPE_CAPSULE: &CStr = c"amso.array_type.v2";

/// What one runtime copy tells the others about its array classes.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct ArrayTypeInfo {
    header_version: u32,
    header_size: u32,
    /// The object's header, or NULL if it is not an array of this runtime. A header is a field
    /// of the runtime's base class, so it lies at one offset in every instance of the runtime's
    /// classes (what `foreign_header` caches).
    pub(crate) header_of: unsafe extern "C" fn(*mut ffi::PyObject) -> *const Header,
    /// 1 if the type is this runtime's base class or a subclass of it, else 0.
    is_array_type: unsafe extern "C" fn(*mut ffi::PyObject) -> std::ffi::c_int,
    /// Hold an array's memory where it is (device data handed to the stream, a protocol
    /// value): 0, or -1 with a Python exception set (a locked array, not an array of this
    /// runtime). The GIL is held.
    pub(crate) hold: unsafe extern "C" fn(*mut ffi::PyObject, Stream, *mut HeldArray) -> std::ffi::c_int,
    /// Give back what `hold` took (any thread, with or without the GIL).
    pub(crate) release: unsafe extern "C" fn(usize),
}

impl ArrayTypeInfo {
    /// Whether this runtime's headers keep `FLAG_CHANGING`, so that host data may be read in
    /// place from them.
    pub(crate) fn reads_in_place(&self) -> bool {
        self.header_version >= 2
    }
}

/// What `hold` hands out.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HeldArray {
    /// The array's header (shape and dtype), alive as long as the array.
    pub(crate) header: usize,
    pub(crate) data: usize,
    pub(crate) device_type: i32,
    pub(crate) device_id: DeviceId,
    pub(crate) readonly: u32,
    /// What `release` takes: the held memory's reference.
    pub(crate) token: usize,
}

pub(crate) static INFO: ArrayTypeInfo = ArrayTypeInfo {
    header_version: HEADER_VERSION,
    header_size: size_of::<Header>() as u32,
    header_of,
    is_array_type,
    hold,
    release,
};

/// Token bit: the held memory is device memory (an `Arc` pointer is aligned, so its low bit is free).
const DEVICE_TOKEN: usize = 1;

/// # Safety
/// `object` is a live object, `out` writable, and the GIL is held (the table's contract).
unsafe extern "C" fn hold(object: *mut ffi::PyObject, stream: Stream, out: *mut HeldArray) -> std::ffi::c_int {
    // SAFETY: the caller holds the GIL (the table's contract).
    unsafe {
        crate::python::base::error::at_c_entry(-1, |py| {
            // SAFETY: a live object, borrowed.
            let object = Bound::from_borrowed_ptr(py, object);
            let array = object.cast::<MemArrayBase>().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(
                    "the object is not an amso array of the runtime asked to hold it",
                )
            })?;
            // Once no writer is registered: a change borrows the memory until it ends, and waiting
            // for its end (not only for its lock) keeps the caller's borrow from meeting that one.
            let held = array.get().read_when_idle(py, |core| core.hold(stream))?;
            let token = match held.memory {
                HeldMemory::Host(buffer) => std::sync::Arc::into_raw(buffer) as usize,
                #[cfg(feature = "cuda")]
                HeldMemory::Device(memory) => std::sync::Arc::into_raw(memory) as usize | DEVICE_TOKEN,
            };
            // SAFETY: the caller's writable output.
            out.write(HeldArray {
                header: array.get().header() as *const Header as usize,
                data: held.data,
                device_type: held.device.device_type as i32,
                device_id: held.device.id,
                readonly: held.readonly as u32,
                token,
            });
            Ok(0)
        })
    }
}

/// # Safety
/// `token` came from this runtime's `hold` and is released once.
unsafe extern "C" fn release(token: usize) {
    let _ = std::panic::catch_unwind(|| {
        if token & DEVICE_TOKEN == 0 {
            // SAFETY: `hold` leaked this `Arc<HostBuffer>`; it comes back once.
            drop(unsafe { std::sync::Arc::from_raw(token as *const crate::host::HostBuffer) });
        } else {
            #[cfg(feature = "cuda")]
            // SAFETY: `hold` leaked this `Arc<DeviceMemory>`; it comes back once.
            drop(unsafe {
                std::sync::Arc::from_raw((token & !DEVICE_TOKEN) as *const crate::cuda::device_memory::DeviceMemory)
            });
        }
    });
}

/// The `__amso_type__` capsule of this runtime's classes.
pub(in crate::python) fn type_capsule(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // SAFETY: a static table and a static name; no destructor is needed.
    let capsule =
        unsafe { ffi::PyCapsule_New((&INFO as *const ArrayTypeInfo).cast_mut().cast(), TYPE_CAPSULE.as_ptr(), None) };
    // SAFETY: a new reference or NULL with an exception set.
    Ok(unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?.unbind())
}

/// # Safety
/// `object` is a live object and the GIL is held (the capsule's contract).
unsafe extern "C" fn header_of(object: *mut ffi::PyObject) -> *const Header {
    std::panic::catch_unwind(|| {
        // SAFETY: the caller holds the GIL.
        let py = unsafe { Python::assume_attached() };
        // SAFETY: a live object, borrowed.
        let object = unsafe { Bound::from_borrowed_ptr(py, object) };
        object.cast::<MemArrayBase>().map_or(std::ptr::null(), |array| array.get().header() as *const Header)
    })
    .unwrap_or(std::ptr::null())
}

/// # Safety
/// `type_object` is a live object and the GIL is held (the capsule's contract).
unsafe extern "C" fn is_array_type(type_object: *mut ffi::PyObject) -> std::ffi::c_int {
    std::panic::catch_unwind(|| {
        // SAFETY: the caller holds the GIL.
        let py = unsafe { Python::assume_attached() };
        // SAFETY: a live object, borrowed.
        let object = unsafe { Bound::from_borrowed_ptr(py, type_object) };
        let base = py.get_type::<MemArrayBase>();
        object.cast::<pyo3::types::PyType>().is_ok_and(|t| t.is_subclass(&base).unwrap_or(false))
    })
    .map_or(0, std::ffi::c_int::from)
}

/// The `ArrayTypeInfo` a class's `__amso_type__` capsule names, if it is a genuine one of this
/// header layout. Only says which runtime to ask: it vouches for nothing about an object.
pub(crate) fn type_info(class: &Bound<'_, PyAny>) -> Option<&'static ArrayTypeInfo> {
    let capsule = class.getattr(intern!(class.py(), "__amso_type__")).ok()?;
    // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
    if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), TYPE_CAPSULE.as_ptr()) } != 1 {
        return None;
    }
    // SAFETY: valid under this name, so this is a non-null pointer to a runtime's static
    // `ArrayTypeInfo`, which lives for the process (extension modules are never unloaded).
    let info = unsafe { &*ffi::PyCapsule_GetPointer(capsule.as_ptr(), TYPE_CAPSULE.as_ptr()).cast::<ArrayTypeInfo>() };
    let known = (OLDEST_HEADER_VERSION..=HEADER_VERSION).contains(&info.header_version);
    (known && info.header_size as usize == size_of::<Header>()).then_some(info)
}

/// The runtime whose array classes `ty` is one of (this runtime's, or another copy's), if any.
pub(crate) fn runtime_of_type(ty: &Bound<'_, pyo3::types::PyType>) -> Option<&'static ArrayTypeInfo> {
    if ty.is_subclass_of::<MemArrayBase>().unwrap_or(false) {
        return Some(&INFO);
    }
    // SAFETY: a live type object, the GIL held; its runtime checks the type itself.
    type_info(ty.as_any()).filter(|info| unsafe { (info.is_array_type)(ty.as_ptr()) } == 1)
}

/// Where other runtime copies keep the header inside their arrays: the offset from an object's
/// address that the runtime's `header_of` gave for the first instance seen, by runtime. Every
/// class of a runtime has its base class's layout first, and the header is a field of that
/// base, so one offset serves all of them: later calls read the header there, with no call
/// into that runtime (the call, its type check and its `catch_unwind` are about 50
/// instructions, a tenth of a typed argument's cost). `NOT_INLINE` marks a runtime whose
/// header is not inside the fixed-size part of its objects: it is asked every time.
static HEADER_OFFSETS: IdentityCache<8> = IdentityCache::new();

/// `HEADER_OFFSETS`'s mark of a runtime asked every time.
const NOT_INLINE: usize = usize::MAX;

/// The header of `object`, an instance of a class of `runtime` (another copy), borrowed for as
/// long as `object` is.
///
/// # Safety
/// `object`'s type was classified as one of `runtime`'s array classes (`runtime_of_type`),
/// and the GIL is held.
#[inline]
pub(crate) unsafe fn foreign_header<'a>(
    object: &'a Bound<'_, PyAny>,
    runtime: &'static ArrayTypeInfo,
) -> Option<&'a Header> {
    let address = object.as_ptr() as usize;
    let known = HEADER_OFFSETS.get_raw(runtime as *const ArrayTypeInfo as usize, 0);
    if let Some(offset) = known.filter(|&offset| offset != NOT_INLINE) {
        // SAFETY: an instance of a class of `runtime`, whose instances keep a header `offset`
        // bytes in, inside the part of the object every instance has (checked below), alive
        // while it is.
        return Some(unsafe { &*((address + offset) as *const Header) });
    }
    // SAFETY: a live object, the GIL held; that runtime checks the type itself.
    let header = unsafe { (runtime.header_of)(object.as_ptr()).as_ref() }?;
    let version = (OLDEST_HEADER_VERSION..=HEADER_VERSION).contains(&header.version);
    if header.magic != HEADER_MAGIC || !version {
        return None;
    }
    if known.is_none() && !HEADER_OFFSETS.is_full() {
        // Only a header inside the fixed-size part of the object is at one offset for every
        // instance: the type's own `tp_basicsize` (read through `type`'s descriptor, which a
        // metaclass cannot override) bounds it.
        let offset = (header as *const Header as usize).wrapping_sub(address);
        let py = object.py();
        let basicsize = py
            .get_type::<pyo3::types::PyType>()
            .getattr(intern!(py, "__dict__"))
            .and_then(|d| d.get_item(intern!(py, "__basicsize__")))
            .and_then(|descriptor| descriptor.call_method1(intern!(py, "__get__"), (object.get_type(),)))
            .and_then(|size| size.extract::<usize>());
        let inline = basicsize.is_ok_and(|size| offset.checked_add(size_of::<Header>()).is_some_and(|end| end <= size));
        HEADER_OFFSETS.insert_static(runtime, 0, if inline { offset } else { NOT_INLINE });
    }
    Some(header)
}

/// The header of `object` if it is an amso array of any runtime copy, borrowed for as long
/// as `object` is.
pub(crate) fn header_of_object<'a>(object: &'a Bound<'_, PyAny>) -> Option<&'a Header> {
    if let Ok(array) = object.cast::<MemArrayBase>() {
        return Some(array.get().header());
    }
    let info = type_info(object.get_type().as_any())?;
    // SAFETY: a live object, the GIL held; the other runtime checks the type itself.
    let header = unsafe { (info.header_of)(object.as_ptr()) };
    // SAFETY: NULL or a header inside `object`, alive while it is.
    let header = unsafe { header.as_ref() }?;
    let known = (OLDEST_HEADER_VERSION..=HEADER_VERSION).contains(&header.version);
    (header.magic == HEADER_MAGIC && known).then_some(header)
}

/// `isinstance(x, amso.MemArray)`: whether `obj` is an amso array of any crate.
#[pyfunction]
#[pyo3(name = "_is_amso_array")]
pub(in crate::python) fn is_amso_array(obj: &Bound<'_, PyAny>) -> bool {
    header_of_object(obj).is_some()
}

/// `issubclass(cls, amso.MemArray)`: whether `cls` is an amso array class of any crate.
#[pyfunction]
#[pyo3(name = "_is_amso_class")]
pub(in crate::python) fn is_amso_class(cls: &Bound<'_, PyAny>) -> bool {
    if cls.cast::<pyo3::types::PyType>().is_err() {
        return false;
    }
    // SAFETY: a live type object, the GIL held; its runtime checks the type itself.
    type_info(cls).is_some_and(|info| unsafe { (info.is_array_type)(cls.as_ptr()) } == 1)
}
