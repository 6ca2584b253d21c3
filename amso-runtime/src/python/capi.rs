//! The C ABI: `amso_get_handle` turns a Python object into a handle (a pointer to the array's
//! `Header`, borrowed from the object: valid while the object lives, nothing to free), and
//! read-only getters read its fields. Every function returns an `int` code (0 = success,
//! `error::code`), keeps a per-thread message for `amso_last_error`, allocates no Python
//! object, and catches unwinding. Call them with the GIL held (an attached thread state).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::error::code;
use crate::object::ArrayType;
use crate::python::base::header::{Header, HEADER_MAGIC, HEADER_VERSION};
use crate::python::base::recognize;
use crate::python::base::registry;
use crate::python::base::registry::Instantiation;

/// The opaque handle C sees.
pub type Handle = *const Header;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `message` as this thread's last error and return `code`.
pub(crate) fn fail(code: c_int, message: impl Into<String>) -> c_int {
    let message = CString::new(message.into().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
    code
}

/// Run `body`, turning a panic into `PANIC` (no unwinding crosses into C).
pub(crate) fn guard(body: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
        .unwrap_or_else(|_| fail(code::PANIC, "internal error (panic) inside amso; please report it"))
}

/// The message of this thread's last error ("" if none); valid until the next amso call on
/// this thread.
#[no_mangle]
pub(crate) extern "C" fn amso_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// Offset of `MemArrayBase::header` from the start of a registered class's object, learned on
/// the first slow-path lookup (the base class's fields sit at one offset in every subclass).
static HEADER_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// The registered class seen last (one compare instead of a scan in the common case).
static LAST_TYPE: AtomicUsize = AtomicUsize::new(0);

/// Turn a Python object into a handle. `NOT_AN_AMSO_ARRAY` for anything that is not an amso
/// array (of this module or of any other module built with amso).
///
/// # Safety
/// `object` is NULL or a live Python object; the GIL is held.
#[no_mangle]
pub(crate) unsafe extern "C" fn amso_get_handle(object: *mut ffi::PyObject, out: *mut Handle) -> c_int {
    if object.is_null() || out.is_null() {
        return fail(code::NULL_ARGUMENT, "amso_get_handle: NULL object or output pointer");
    }
    // SAFETY: a live object's type pointer.
    let type_object = unsafe { ffi::Py_TYPE(object) } as usize;
    let offset = HEADER_OFFSET.load(Ordering::Relaxed);
    if offset != 0 && (type_object == LAST_TYPE.load(Ordering::Relaxed) || registry::is_known_type(type_object)) {
        LAST_TYPE.store(type_object, Ordering::Relaxed);
        // SAFETY: objects of registered classes hold MemArrayBase's fields at this offset.
        unsafe { *out = object.cast::<u8>().add(offset).cast::<Header>() };
        return code::OK;
    }
    // SAFETY: forwarded; the GIL is held by contract.
    guard(|| unsafe { slow_handle(object, type_object, out) })
}

unsafe fn slow_handle(object: *mut ffi::PyObject, type_object: usize, out: *mut Handle) -> c_int {
    // SAFETY: the caller holds the GIL (the C ABI's contract).
    let py = unsafe { Python::assume_attached() };
    // SAFETY: `object` is a live object; borrowed, not stolen.
    let object = unsafe { Bound::from_borrowed_ptr(py, object) };
    match recognize::header_of_object(&object) {
        Some(header) => {
            let header = header as *const Header;
            if registry::is_known_type(type_object) {
                HEADER_OFFSET.store(header as usize - object.as_ptr() as usize, Ordering::Relaxed);
            }
            // SAFETY: checked non-null by the caller.
            unsafe { *out = header };
            code::OK
        }
        None => {
            let kind = object.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
            fail(
                code::NOT_AN_AMSO_ARRAY,
                format!("amso_get_handle: {} object is not an amso array", crate::error::with_article(kind)),
            )
        }
    }
}

/// The getters' check: handles come from `amso_get_handle`, which checked the version.
#[inline(always)]
fn plausible(handle: Handle) -> bool {
    // SAFETY: reads the first field of a non-null handle.
    !handle.is_null() && unsafe { (*handle).magic == HEADER_MAGIC }
}

/// Read one field of a handle into `out`.
#[inline(always)]
fn read<T>(handle: Handle, out: *mut T, field: impl FnOnce(&Header) -> T) -> c_int {
    if out.is_null() {
        return fail(code::NULL_ARGUMENT, "NULL output pointer");
    }
    if !plausible(handle) {
        return fail(code::NULL_ARGUMENT, "NULL or invalid amso handle");
    }
    // SAFETY: a valid handle points to a live header (the caller keeps its object alive);
    // `out` is non-null.
    unsafe { *out = field(&*handle) };
    code::OK
}

macro_rules! getter {
    ($(#[doc = $doc:literal] $name:ident: $ty:ty = |$h:ident| $value:expr;)*) => {$(
        #[doc = $doc]
        ///
        /// # Safety
        /// `handle` comes from `amso_get_handle` and its object is alive; `out` is writable.
        #[no_mangle]
        pub(crate) unsafe extern "C" fn $name(handle: Handle, out: *mut $ty) -> c_int {
            guard(|| read(handle, out, |$h| $value))
        }
    )*};
}

getter! {
    /// Address of the first element of the current data (host or device; see amso_device).
    amso_data: *mut c_void = |h| h.placement().data as *mut c_void;
    /// Number of dimensions.
    amso_ndim: i32 = |h| h.ndim;
    /// Number of elements.
    amso_size: i64 = |h| h.dims().iter().product();
    /// Dimensions: a borrowed array of amso_ndim values.
    amso_shape: *const i64 = |h| h.shape.as_ptr();
    /// C-order strides in elements (not bytes): a borrowed array of amso_ndim values.
    amso_strides: *const i64 = |h| h.strides.as_ptr();
    /// DLPack device type of the current data (1 kDLCPU, 2 kDLCUDA).
    amso_device_type: i32 = |h| h.placement().device_type;
    /// Device ordinal of the current data (0 on the host).
    amso_device_id: i32 = |h| h.placement().device_id;
    /// DLPack type code.
    amso_dtype_code: u8 = |h| h.code;
    /// Bits per lane.
    amso_dtype_bits: u8 = |h| h.bits;
    /// Lanes.
    amso_dtype_lanes: u16 = |h| h.lanes;
    /// Bytes per element.
    amso_itemsize: i64 = |h| h.itemsize;
    /// AMSO_FLAG_* bits: read-only, on device, pinned, changing.
    amso_flags: u32 = |h| h.placement().flags;
    /// Id of the context holding the array's lock, 0 when unlocked.
    amso_lock_id: u64 = |h| h.placement().lock_id;
}

/// What a typed export checks an object against: its class, by the class's own lookup.
pub(crate) struct ClassFacts {
    type_object: fn(Python<'_>) -> *mut ffi::PyTypeObject,
    dtype: &'static str,
    ndim: usize,
}

impl ClassFacts {
    /// The facts of class `C`.
    pub(crate) const fn of<C: Instantiation>() -> ClassFacts {
        ClassFacts { type_object: C::type_object_raw, dtype: C::Array::OPS.dtype.name, ndim: C::Array::NDIM }
    }
}

/// The handle of an object of exactly class `C` (a generated typed export's body). The
/// generic part is only `C`'s facts: one body serves every class.
///
/// # Safety
/// As `amso_get_handle`.
#[inline]
pub unsafe fn typed_handle<C: Instantiation>(object: *mut ffi::PyObject, out: *mut Handle) -> c_int {
    // SAFETY: forwarded.
    unsafe { class_handle(object, out, &const { ClassFacts::of::<C>() }) }
}

/// Typed data pointer of an object of exactly class `C`.
///
/// # Safety
/// As `amso_get_handle`; `out` is writable.
#[inline]
pub unsafe fn typed_data<C: Instantiation>(object: *mut ffi::PyObject, out: *mut *mut c_void) -> c_int {
    // SAFETY: forwarded.
    unsafe { class_field(object, out, &const { ClassFacts::of::<C>() }, |h| h.placement().data as *mut c_void) }
}

/// Borrowed shape of an object of exactly class `C`.
///
/// # Safety
/// As `amso_get_handle`; `out` is writable.
#[inline]
pub unsafe fn typed_shape<C: Instantiation>(object: *mut ffi::PyObject, out: *mut *const i64) -> c_int {
    // SAFETY: forwarded.
    unsafe { class_field(object, out, &const { ClassFacts::of::<C>() }, |h| h.shape.as_ptr()) }
}

/// # Safety
/// As `amso_get_handle`.
#[inline(never)] // one body for every class's export
unsafe fn class_handle(object: *mut ffi::PyObject, out: *mut Handle, class: &ClassFacts) -> c_int {
    if object.is_null() || out.is_null() {
        return fail(code::NULL_ARGUMENT, "NULL object or output pointer");
    }
    guard(|| {
        // SAFETY: the caller holds the GIL.
        let py = unsafe { Python::assume_attached() };
        // SAFETY: a live object's type pointer.
        if unsafe { ffi::Py_TYPE(object) } != (class.type_object)(py) {
            return fail(
                code::NOT_AN_AMSO_ARRAY,
                format!("expected an amso {} array with ndim {}", class.dtype, class.ndim),
            );
        }
        // SAFETY: forwarded.
        unsafe { amso_get_handle(object, out) }
    })
}

/// # Safety
/// As `amso_get_handle`; `out` is writable.
#[inline(never)] // one body for every class's export
unsafe fn class_field<T>(
    object: *mut ffi::PyObject,
    out: *mut T,
    class: &ClassFacts,
    field: fn(&Header) -> T,
) -> c_int {
    let mut handle: Handle = std::ptr::null();
    // SAFETY: forwarded.
    match unsafe { class_handle(object, &mut handle, class) } {
        code::OK => guard(|| read(handle, out, field)),
        error => error,
    }
}

/// The table behind generated/amso.h's `amso_import()`; its layout is `amso_c_api` there.
#[repr(C)]
pub(crate) struct CApi {
    version: u32,
    struct_size: u32,
    header_version: u32,
    header_size: u32,
    get_handle: unsafe extern "C" fn(*mut ffi::PyObject, *mut Handle) -> c_int,
    data: unsafe extern "C" fn(Handle, *mut *mut c_void) -> c_int,
    ndim: unsafe extern "C" fn(Handle, *mut i32) -> c_int,
    size_elements: unsafe extern "C" fn(Handle, *mut i64) -> c_int,
    shape: unsafe extern "C" fn(Handle, *mut *const i64) -> c_int,
    strides: unsafe extern "C" fn(Handle, *mut *const i64) -> c_int,
    device_type: unsafe extern "C" fn(Handle, *mut i32) -> c_int,
    device_id: unsafe extern "C" fn(Handle, *mut i32) -> c_int,
    dtype_code: unsafe extern "C" fn(Handle, *mut u8) -> c_int,
    dtype_bits: unsafe extern "C" fn(Handle, *mut u8) -> c_int,
    dtype_lanes: unsafe extern "C" fn(Handle, *mut u16) -> c_int,
    itemsize: unsafe extern "C" fn(Handle, *mut i64) -> c_int,
    flags: unsafe extern "C" fn(Handle, *mut u32) -> c_int,
    lock_id: unsafe extern "C" fn(Handle, *mut u64) -> c_int,
    last_error: extern "C" fn() -> *const c_char,
}

/// Version of the `CApi` table; bumped when functions are added.
pub(crate) const C_API_VERSION: u32 = 1;

static C_API: CApi = CApi {
    version: C_API_VERSION,
    struct_size: size_of::<CApi>() as u32,
    header_version: HEADER_VERSION,
    header_size: size_of::<Header>() as u32,
    get_handle: amso_get_handle,
    data: amso_data,
    ndim: amso_ndim,
    size_elements: amso_size,
    shape: amso_shape,
    strides: amso_strides,
    device_type: amso_device_type,
    device_id: amso_device_id,
    dtype_code: amso_dtype_code,
    dtype_bits: amso_dtype_bits,
    dtype_lanes: amso_dtype_lanes,
    itemsize: amso_itemsize,
    flags: amso_flags,
    lock_id: amso_lock_id,
    last_error: amso_last_error,
};

/// The `amso._amso._C_API` capsule.
pub(crate) fn api_capsule(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // SAFETY: a static table and a static name; no destructor is needed.
    let capsule =
        unsafe { ffi::PyCapsule_New((&C_API as *const CApi).cast_mut().cast(), c"amso._amso._C_API".as_ptr(), None) };
    // SAFETY: a new reference or NULL with an exception set.
    Ok(unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?.unbind())
}

/// One compiled class's typed C exports (`amso_float32_3d_handle`, `_data`, `_shape`), as a row
/// of the typed table: generated/amso.h's `amso_typed_export`.
#[repr(C)]
#[derive(Debug)]
pub struct TypedExport {
    /// `amso_<dtype>_<n>d_handle`.
    pub handle: unsafe extern "C" fn(*mut ffi::PyObject, *mut Handle) -> c_int,
    /// `amso_<dtype>_<n>d_data`.
    pub data: unsafe extern "C" fn(*mut ffi::PyObject, *mut *mut c_void) -> c_int,
    /// `amso_<dtype>_<n>d_shape`.
    pub shape: unsafe extern "C" fn(*mut ffi::PyObject, *mut *const i64) -> c_int,
}

/// The second table `amso_import()` loads (capsule `amso._amso._C_TYPED_API`): the bundled
/// module's typed exports in the spec's order, so that a C extension calls them with the include
/// path only, as it calls the getters. `key` fingerprints that order (generated/amso.h's
/// `AMSO_TYPED_KEY`): a header of another spec is refused at import, never given another class's
/// functions. Its layout is `amso_typed_api` there.
#[repr(C)]
struct TypedApi {
    version: u32,
    count: u32,
    key: u64,
    exports: *const TypedExport,
}

/// Version of the `TypedApi` table.
const TYPED_API_VERSION: u32 = 1;

/// Add the `_C_TYPED_API` capsule of `exports` (the generated module's table, in the spec's
/// order, fingerprinted by `key`) to `module`.
pub fn add_typed_api(module: &Bound<'_, PyModule>, exports: &'static [TypedExport], key: u64) -> PyResult<()> {
    // Made once per module initialisation and kept for the process, as the capsule's users keep
    // the pointer (a module initialised again, in a subinterpreter, makes its own).
    let table: &'static TypedApi = Box::leak(Box::new(TypedApi {
        version: TYPED_API_VERSION,
        count: u32::try_from(exports.len())
            .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("too many classes"))?,
        key,
        exports: exports.as_ptr(),
    }));
    // SAFETY: a table kept for the process and a static name; no destructor is needed.
    let capsule = unsafe {
        ffi::PyCapsule_New((table as *const TypedApi).cast_mut().cast(), c"amso._amso._C_TYPED_API".as_ptr(), None)
    };
    // SAFETY: a new reference or NULL with an exception set.
    let capsule = unsafe { Bound::from_owned_ptr_or_err(module.py(), capsule) }?;
    module.add("_C_TYPED_API", capsule)
}

#[cfg(test)]
mod tests {
    use crate::object::ArrayObject;
    use crate::python::capi::*;

    #[test]
    fn a_forced_panic_becomes_an_error_code_with_a_message() {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {})); // keep the test output quiet
        let code = guard(|| panic!("forced internal error"));
        std::panic::set_hook(previous);
        assert_eq!(code, code::PANIC);
        // SAFETY: amso_last_error returns a NUL-terminated string owned by this thread.
        let message = unsafe { std::ffi::CStr::from_ptr(amso_last_error()) }.to_string_lossy().into_owned();
        assert!(message.contains("internal error (panic)"), "{message}");
    }

    #[test]
    fn getters_refuse_null_handles_and_outputs() {
        let mut ndim = 0i32;
        // SAFETY: NULL handles and outputs are exactly what is being tested.
        unsafe {
            assert_eq!(amso_ndim(std::ptr::null(), &mut ndim), code::NULL_ARGUMENT);
            assert_eq!(amso_get_handle(std::ptr::null_mut(), std::ptr::null_mut()), code::NULL_ARGUMENT);
        }
        let header = Header::of(&crate::memarray::MemArray::<f32, 2>::new([2, 3]).unwrap().raw_view());
        // SAFETY: a live header; a NULL output.
        assert_eq!(unsafe { amso_ndim(&header, std::ptr::null_mut()) }, code::NULL_ARGUMENT);
        // SAFETY: a live header and a writable output.
        assert_eq!(unsafe { amso_ndim(&header, &mut ndim) }, code::OK);
        assert_eq!(ndim, 2);
    }
}
