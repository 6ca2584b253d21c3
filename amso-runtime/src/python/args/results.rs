//! Results in the caller's framework. A function called with NumPy arrays returns a NumPy
//! array, with torch tensors a torch tensor, with CuPy or JAX arrays theirs; [`Framework`]
//! names one explicitly, as nanobind's return tags do. Two kinds of result:
//! - [`NewArray`]: a zeroed array to fill, allocated where the framework allocates (NumPy's
//!   allocator, the exchange API's `managed_tensor_allocator` of torch and TVM-FFI) or, for
//!   frameworks without one (CuPy, JAX), by amso, then handed over through the framework's
//!   own `from_dlpack`;
//! - [`IntoFramework`]: memory Rust already owns (`Vec`, `ndarray::Array`, `MemArray`) handed to
//!   the framework without a copy, as rust-numpy's `into_pyarray`: Rust keeps the allocation
//!   until the framework's deleter runs.

use std::any::Any;
use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use dlpark::ffi::{DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI, DLPackVersion, DLTensor};
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::{ffi, intern};

use crate::device::{Device, DeviceType};
use crate::dlpack::{ExportSource, Format, ManagedTensor, RawManaged, DLPACK_VERSION};
use crate::element::{ArrayElement, DType, DTypeOf, Element};
use crate::memarray::core::ArrayCore;
use crate::memarray::foreign::check_c_contiguous;
use crate::memarray::{ArrayOptions, MemArray};
use crate::python::base::array::MemArrayBase;
use crate::python::base::identity_cache::IdentityCache;
use crate::python::source::{self, numpy, Protocol};
use crate::strided::Dims;

/// The array library a result goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    /// `numpy.ndarray` (host memory only).
    NumPy,
    /// `torch.Tensor`.
    Torch,
    /// `cupy.ndarray` (CUDA memory only).
    CuPy,
    /// `jax.Array`.
    Jax,
    /// `tvm_ffi.Tensor`.
    TvmFfi,
    /// amso's `MemArray` classes.
    Amso,
    /// Another type with a DLPack C exchange table (one amso does not know by name): results
    /// are made and wrapped through that table.
    Exchange(ExchangeTable),
}

/// A producer type's DLPack C exchange table, which lives for the process.
#[derive(Debug, Clone, Copy)]
pub struct ExchangeTable(&'static DLPackExchangeAPI);

impl PartialEq for ExchangeTable {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for ExchangeTable {}

impl std::str::FromStr for Framework {
    type Err = PyErr;

    /// `"numpy"`, `"torch"`, `"cupy"`, `"jax"`, `"tvm_ffi"` or `"amso"`.
    fn from_str(name: &str) -> PyResult<Framework> {
        Ok(match name {
            "numpy" => Framework::NumPy,
            "torch" => Framework::Torch,
            "cupy" => Framework::CuPy,
            "jax" => Framework::Jax,
            "tvm_ffi" => Framework::TvmFfi,
            "amso" => Framework::Amso,
            other => {
                return Err(PyValueError::new_err(format!(
                "unknown framework {other:?}; expected one of \"numpy\", \"torch\", \"cupy\", \"jax\", \"tvm_ffi\", \
                     \"amso\""
            )))
            }
        })
    }
}

/// A framework named from Python by its module's name (`"numpy"`, `"torch"`, ...).
impl<'a, 'py> FromPyObject<'a, 'py> for Framework {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let name = obj.extract::<pyo3::pybacked::PyBackedStr>().map_err(|_| {
            PyTypeError::new_err(format!(
                "a framework is named by a str such as \"numpy\" or \"torch\", got {}",
                obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
            ))
        })?;
        name.parse()
    }
}

/// The frameworks of the types seen so far (by type; tag 1 of the cache).
static FRAMEWORKS: IdentityCache<64> = IdentityCache::new();

impl Framework {
    /// The framework of `obj`, an array argument whose data is on `device`: amso arrays of
    /// any crate, NumPy arrays (and subclasses), torch, CuPy, JAX and TVM-FFI by their types,
    /// other producers with an exchange table by that table; anything else gives NumPy arrays
    /// for host data and amso arrays for device data.
    pub(crate) fn of(obj: &Bound<'_, PyAny>, device: Device) -> PyResult<Framework> {
        let ty = obj.get_type();
        if let Some(code) = FRAMEWORKS.get(ty.as_any(), 1) {
            return Ok(Framework::decode(code).unwrap_or(Self::fallback(device)));
        }
        let found = Self::classify(obj)?;
        FRAMEWORKS.insert(ty.as_any(), 1, found.map_or(0, Framework::encode));
        Ok(found.unwrap_or(Self::fallback(device)))
    }

    fn fallback(device: Device) -> Framework {
        if device.device_type == DeviceType::Cuda {
            Framework::Amso
        } else {
            Framework::NumPy
        }
    }

    fn classify(obj: &Bound<'_, PyAny>) -> PyResult<Option<Framework>> {
        match source::protocol_of(obj)? {
            Some(Protocol::Amso(_)) => return Ok(Some(Framework::Amso)),
            Some(Protocol::NumPy) => return Ok(Some(Framework::NumPy)),
            _ => {}
        }
        let module: String = obj.get_type().getattr(intern!(obj.py(), "__module__"))?.extract().unwrap_or_default();
        let named = match module.split('.').next().unwrap_or("") {
            "torch" => Some(Framework::Torch),
            "cupy" | "cupy_backends" => Some(Framework::CuPy),
            "jax" | "jaxlib" => Some(Framework::Jax),
            "tvm_ffi" => Some(Framework::TvmFfi),
            _ => None,
        };
        Ok(match named {
            Some(framework) => Some(framework),
            None => {
                source::exchange_api_of_type(&obj.get_type())?.map(|table| Framework::Exchange(ExchangeTable(table)))
            }
        })
    }

    fn encode(self) -> usize {
        match self {
            Framework::NumPy => 1,
            Framework::Torch => 2,
            Framework::CuPy => 3,
            Framework::Jax => 4,
            Framework::TvmFfi => 5,
            Framework::Amso => 6,
            Framework::Exchange(ExchangeTable(table)) => table as *const DLPackExchangeAPI as usize,
        }
    }

    fn decode(code: usize) -> Option<Framework> {
        Some(match code {
            0 => return None,
            1 => Framework::NumPy,
            2 => Framework::Torch,
            3 => Framework::CuPy,
            4 => Framework::Jax,
            5 => Framework::TvmFfi,
            6 => Framework::Amso,
            // SAFETY: any other code is the address of a static exchange table (`encode`).
            table => Framework::Exchange(ExchangeTable(unsafe { &*(table as *const DLPackExchangeAPI) })),
        })
    }

    /// The framework's DLPack exchange table, if it has one (looked up on its array type).
    /// amso arrays are made by `core_into_framework`, which knows this module's classes.
    fn exchange_table(self, py: Python<'_>) -> PyResult<Option<&'static DLPackExchangeAPI>> {
        let (module, class) = match self {
            Framework::Exchange(ExchangeTable(table)) => return Ok(Some(table)),
            Framework::Torch => ("torch", "Tensor"),
            Framework::TvmFfi => ("tvm_ffi", "Tensor"),
            Framework::NumPy | Framework::CuPy | Framework::Jax | Framework::Amso => return Ok(None),
        };
        let class = py.import(module)?.getattr(class)?;
        source::exchange_api_of_type(class.cast::<pyo3::types::PyType>()?)
    }

    /// The framework's `from_dlpack`, for frameworks without an exchange table.
    fn dlpack_importer(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let (module, function) = match self {
            Framework::NumPy => ("numpy", "from_dlpack"),
            Framework::Torch => ("torch", "from_dlpack"),
            Framework::CuPy => ("cupy", "from_dlpack"),
            Framework::Jax => ("jax.dlpack", "from_dlpack"),
            Framework::TvmFfi => ("tvm_ffi", "from_dlpack"),
            // The bundled module, which may compile (dtype, ndim) pairs this one does not.
            Framework::Amso | Framework::Exchange(_) => ("amso", "from_dlpack"),
        };
        py.import(module)?.getattr(function)
    }

    /// Refuse device data for NumPy and host data for CuPy.
    fn check_device(self, device: Device) -> PyResult<()> {
        let on_device = device.device_type == DeviceType::Cuda;
        match self {
            Framework::NumPy if on_device => Err(PyValueError::new_err(format!(
                "NumPy arrays hold host memory, and this result is on cuda:{}; return it in the caller's framework \
                 or as Framework::Amso, or copy it to the host first",
                device.id
            ))),
            Framework::CuPy if !on_device => Err(PyValueError::new_err(
                "CuPy arrays hold CUDA memory, and this result is on the host; return it as Framework::NumPy, or \
                 move it to the device first",
            )),
            _ => Ok(()),
        }
    }
}

/// Memory handed to a framework: what a DLPack tensor describes, and `owner`, which keeps it
/// alive.
pub(crate) struct Handover<O: Owner> {
    pub(super) data: *mut c_void,
    pub(super) device: Device,
    pub(super) dtype: &'static DType,
    pub(super) shape: Dims<usize>,
    /// Strides in elements; `None` for C order.
    pub(super) strides: Option<Dims<isize>>,
    pub(super) owner: O,
    pub(super) readonly: bool,
    /// For device data: the stream its last work was on, which the consumer is ordered after.
    pub(super) stream: Option<i64>,
}

// SAFETY: `data` addresses memory `owner` (which is Send + Sync) keeps alive; the rest is
// plain data.
unsafe impl<O: Owner> Send for Handover<O> {}

impl<O: Owner> Handover<O> {
    /// Hand the memory to `framework`, as its array object.
    pub(super) fn deliver(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        framework.check_device(self.device)?;
        if self.dtype.numpy_only() && framework != Framework::NumPy {
            return Err(PyValueError::new_err(format!(
                "{} arrays go to NumPy only (DLPack has no such element type, so {framework:?} cannot take them); \
                 hand them to Framework::NumPy",
                self.dtype.name
            )));
        }
        if framework == Framework::NumPy {
            let owner = self.owner.into_capsule(py)?;
            // SAFETY: `data` holds the elements `shape` and `strides` reach, kept alive by the
            // owner, which NumPy holds as the array's base.
            return unsafe {
                numpy::array_over(
                    py,
                    self.dtype,
                    &self.shape,
                    self.strides.as_deref(),
                    self.data,
                    Some(owner),
                    self.readonly,
                )
            };
        }
        if self.shape.len() > crate::shape::MAX_NDIM {
            return Err(PyValueError::new_err(format!(
                "amso hands arrays of at most {} dimensions to DLPack consumers, not {}; NumPy takes more \
                 (Framework::NumPy)",
                crate::shape::MAX_NDIM,
                self.shape.len()
            )));
        }
        if let Some(table) = framework.exchange_table(py)? {
            if let Some(to_object) = table.managed_tensor_to_py_object_no_sync {
                if self.device.device_type == DeviceType::Cuda {
                    let consumer = consumer_stream(py, table, self.device.id)?;
                    order(self.device.id, self.stream, Some(consumer))?;
                }
                let RawManaged::Versioned(raw) = self.into_tensor(VERSIONED).into_raw() else {
                    unreachable!("asked for a versioned tensor")
                };
                let mut out: *mut c_void = std::ptr::null_mut();
                // SAFETY: the function takes ownership of the tensor (deleting it on failure);
                // the GIL is held.
                if unsafe { to_object(raw.as_ptr(), &mut out) } != 0 || out.is_null() {
                    return Err(PyErr::take(py)
                        .unwrap_or_else(|| PyRuntimeError::new_err("the framework could not wrap the tensor")));
                }
                // SAFETY: a new reference from the framework.
                return Ok(unsafe { Bound::from_owned_ptr(py, out.cast()) });
            }
        }
        let from_dlpack = framework.dlpack_importer(py)?;
        let handoff = Bound::new(py, Handoff { handover: Mutex::new(Some(self.shared())) })?;
        from_dlpack.call1((handoff,))
    }

    /// The same handover with its owner shared (what a Python object can hold).
    fn shared(self) -> Handover<Arc<dyn Any + Send + Sync>> {
        Handover {
            data: self.data,
            device: self.device,
            dtype: self.dtype,
            shape: self.shape,
            strides: self.strides,
            owner: self.owner.into_arc(),
            readonly: self.readonly,
            stream: self.stream,
        }
    }

    fn into_tensor(self, format: Format) -> ManagedTensor {
        let source = ExportSource {
            data: self.data,
            device: self.device,
            dtype: self.dtype.dl_data_type(),
            shape: &self.shape,
            strides: self.strides.as_deref(),
            owner: self.owner.into_arc(),
            readonly: self.readonly,
            copied: false,
        };
        ManagedTensor::new(source, format)
    }
}

/// The versioned format amso writes.
const VERSIONED: Format = Format::Versioned(DLPackVersion { major: DLPACK_VERSION.0, minor: DLPACK_VERSION.1 });

/// What keeps a handed-over result's memory alive, whichever way it goes: as a capsule NumPy
/// holds for an array's base, or as a DLPack tensor's owner.
pub(crate) trait Owner: Send + Sync + 'static {
    /// A capsule that drops the owner with itself.
    fn into_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>>;
    /// The owner, shared.
    fn into_arc(self) -> Arc<dyn Any + Send + Sync>;
}

/// The capsule name of result owners.
const OWNER: &CStr = c"amso.result_owner";

/// A new capsule over `pointer` (with `context`), whose `release` frees what it points at; if
/// no capsule can be made, `release_now` frees it at once.
fn capsule<'py>(
    py: Python<'py>,
    pointer: *mut c_void,
    context: *mut c_void,
    release: unsafe extern "C" fn(*mut ffi::PyObject),
    release_now: impl FnOnce(),
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: a live, non-NULL pointer, a static name and a destructor that frees it.
    let capsule = unsafe { ffi::PyCapsule_New(pointer, OWNER.as_ptr(), Some(release)) };
    // SAFETY: a valid capsule takes any context.
    if capsule.is_null() || unsafe { ffi::PyCapsule_SetContext(capsule, context) } != 0 {
        if capsule.is_null() {
            release_now();
        } else {
            // SAFETY: our new reference; its destructor frees the pointer.
            unsafe { ffi::Py_DecRef(capsule) };
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}

/// A `Vec` goes into its capsule as its raw parts (the buffer, and its capacity as the
/// capsule's context): no allocation beyond the vector's own.
impl<T: ArrayElement> Owner for Vec<T> {
    fn into_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        if std::mem::needs_drop::<T>() {
            // Elements that own something (`Py<PyAny>`: one reference each) drop with the
            // vector, when the framework lets go of it (the GIL held, as NumPy frees arrays).
            return self.into_arc().into_capsule(py);
        }
        unsafe extern "C" fn release<T>(capsule: *mut ffi::PyObject) {
            // SAFETY: a capsule made below: the vector's buffer and, as context, its capacity.
            let (pointer, capacity) = unsafe {
                (ffi::PyCapsule_GetPointer(capsule, OWNER.as_ptr()), ffi::PyCapsule_GetContext(capsule) as usize)
            };
            if !pointer.is_null() {
                // SAFETY: the buffer of a vector of that capacity, given up below and freed once,
                // here; its elements need no drop (checked before the capsule was made).
                drop(unsafe { Vec::from_raw_parts(pointer.cast::<T>(), 0, capacity) });
            }
        }
        let mut vector = std::mem::ManuallyDrop::new(self);
        let (pointer, capacity) = (vector.as_mut_ptr(), vector.capacity());
        let free = || {
            // SAFETY: the parts just taken from the vector, freed once (no capsule took them).
            drop(unsafe { Vec::from_raw_parts(pointer, 0, capacity) })
        };
        capsule(py, pointer.cast(), capacity as *mut c_void, release::<T>, free)
    }

    fn into_arc(self) -> Arc<dyn Any + Send + Sync> {
        Arc::new(self)
    }
}

/// An amso array's memory (any kind) goes into its capsule boxed.
impl Owner for Arc<dyn Any + Send + Sync> {
    fn into_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        unsafe extern "C" fn release(capsule: *mut ffi::PyObject) {
            // SAFETY: a capsule made below, holding a leaked box.
            let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule, OWNER.as_ptr()) };
            if !pointer.is_null() {
                // No panic may cross into NumPy; a panicking drop leaks instead.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // SAFETY: leaked below, released once, here.
                    let owner = unsafe { Box::from_raw(pointer.cast::<Arc<dyn Any + Send + Sync>>()) };
                    // Attached (the caller holds the GIL), so that Python references the owner
                    // holds (`Vec<Py<PyAny>>`) are released now rather than at PyO3's next call.
                    Python::attach(|_| drop(owner));
                }));
            }
        }
        let pointer = Box::into_raw(Box::new(self));
        let free = || {
            // SAFETY: leaked just above, freed once (no capsule took it).
            drop(unsafe { Box::from_raw(pointer) })
        };
        capsule(py, pointer.cast(), std::ptr::null_mut(), release, free)
    }

    fn into_arc(self) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// The framework's current stream on CUDA device `device_id` (NULL: the legacy default).
fn consumer_stream(py: Python<'_>, table: &DLPackExchangeAPI, device_id: i32) -> PyResult<i64> {
    let Some(current) = table.current_work_stream else { return Ok(1) };
    let mut stream: *mut c_void = std::ptr::null_mut();
    // SAFETY: the framework's function with a writable output; the GIL is held.
    if unsafe { current(DLDeviceType::CUDA, device_id, &mut stream) } != 0 {
        return Err(PyErr::take(py).unwrap_or_else(|| PyRuntimeError::new_err("current_work_stream failed")));
    }
    Ok(if stream.is_null() { 1 } else { stream as i64 })
}

/// Order work on `later` after the producer's work on `earlier` (device `device_id`).
fn order(device_id: i32, earlier: Option<i64>, later: Option<i64>) -> PyResult<()> {
    let (Some(earlier), Some(later)) = (earlier, later) else { return Ok(()) };
    if later == -1 || earlier == later {
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    {
        use crate::cuda::stream::StreamHandle;
        let later = StreamHandle::from_int(later)?.check(device_id)?;
        crate::cuda::stream::order(device_id, StreamHandle::from_int(earlier)?, later)?;
        Ok(())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device_id;
        Err(PyRuntimeError::new_err("device memory needs amso's CUDA layer, which this build does not include"))
    }
}

/// A result on its way to a framework without an exchange table: the object its `from_dlpack`
/// reads, once.
#[pyclass(frozen, module = "amso._amso", name = "_Handoff")]
struct Handoff {
    handover: Mutex<Option<Handover<Arc<dyn Any + Send + Sync>>>>,
}

#[pymethods]
impl Handoff {
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut slot = self.handover.lock().unwrap_or_else(|e| e.into_inner());
        let handover = slot.as_ref().ok_or_else(|| PyBufferError::new_err("this result was handed over already"))?;
        let here = (handover.device.device_type as i32, handover.device.id);
        if dl_device.is_some_and(|wanted| wanted != here) || copy == Some(true) {
            return Err(PyBufferError::new_err(format!(
                "a result is handed over once, where it is ({here:?}), without a copy; asked for dl_device={dl_device:?}, \
                 copy={copy:?}"
            )));
        }
        let format = match max_version {
            Some((major, minor)) if major >= 1 => {
                let minor = if major == DLPACK_VERSION.0 { minor.min(DLPACK_VERSION.1) } else { DLPACK_VERSION.1 };
                Format::Versioned(DLPackVersion { major: DLPACK_VERSION.0, minor })
            }
            _ if handover.readonly => {
                return Err(PyBufferError::new_err(
                    "the result is read-only, which a legacy (unversioned) DLPack capsule cannot say: call \
                     __dlpack__(max_version=(1, 0)) or later (its READ_ONLY flag)",
                ))
            }
            _ if crate::dlpack::padded(handover.dtype.dl_data_type()) => {
                return Err(PyBufferError::new_err(
                    "a sub-byte element padded to a byte needs a versioned DLPack tensor (its padded flag): call \
                     __dlpack__(max_version=(1, 0)) or later",
                ))
            }
            _ => Format::Legacy,
        };
        // Out of the slot before the ordering lets the GIL go, so that no other thread waits
        // for the slot's lock holding the GIL; back in if the ordering fails.
        let handover = slot.take().expect("checked above");
        drop(slot);
        if handover.device.device_type == DeviceType::Cuda {
            if let Err(error) = order(handover.device.id, handover.stream, Some(stream.unwrap_or(1))) {
                *self.handover.lock().unwrap_or_else(|e| e.into_inner()) = Some(handover);
                return Err(error);
            }
        }
        crate::python::export::capsule::into_capsule(py, handover.into_tensor(format))
    }

    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        let slot = self.handover.lock().unwrap_or_else(|e| e.into_inner());
        let handover = slot.as_ref().ok_or_else(|| PyBufferError::new_err("this result was handed over already"))?;
        Ok((handover.device.device_type as i32, handover.device.id))
    }
}

/// Memory Rust owns, handed to a Python framework without a copy: the framework's array
/// object holds the Rust value until its deleter runs (rust-numpy's `into_pyarray`, for every
/// framework). Implemented for `Vec<T>` (one dimension), `ndarray::Array` (the `ndarray`
/// feature) and `MemArray` (host or device).
pub trait IntoFramework: Sized {
    /// `self` as `framework`'s array object.
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>>;
}

impl<T: ArrayElement> IntoFramework for Vec<T> {
    fn into_framework(mut self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let (data, len) = (self.as_mut_ptr(), self.len());
        Handover {
            data: data.cast(),
            device: Device::CPU,
            dtype: DTypeOf::<T>::REF,
            shape: Dims::from_slice(&[len]),
            strides: None,
            owner: self,
            readonly: false,
            stream: None,
        }
        .deliver(py, framework)
    }
}

#[cfg(feature = "ndarray")]
impl<T: ArrayElement, D: ndarray::Dimension> IntoFramework for ndarray::Array<T, D> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let shape = Dims::from_slice(self.shape());
        let strides = Dims::from_slice(self.strides());
        let (mut elements, offset) = self.into_raw_vec_and_offset();
        // SAFETY: the offset of the first element inside the vector (none when it is empty).
        let data = unsafe { elements.as_mut_ptr().add(offset.unwrap_or(0)) };
        Handover {
            data: data.cast(),
            device: Device::CPU,
            dtype: DTypeOf::<T>::REF,
            shape,
            strides: Some(strides),
            owner: elements,
            readonly: false,
            stream: None,
        }
        .deliver(py, framework)
    }
}

impl<T: Element, const N: usize> IntoFramework for MemArray<T, N> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        core_into_framework(py, self.into_core(), framework)
    }
}

/// An amso array's core as `framework`'s object: an instance of this module's class for
/// amso when one is registered, else its memory handed over through DLPack.
fn core_into_framework(py: Python<'_>, core: ArrayCore, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
    if framework == Framework::Amso {
        let dtype = core.dtype();
        if let Some(registration) =
            crate::python::base::registry::find(dtype.code, dtype.bits, dtype.lanes, core.ndim())
        {
            return Ok((registration.instance)(py, MemArrayBase::new(core))?.into_bound(py));
        }
    }
    let device = core.device();
    let request = crate::dlpack::DlpackRequest { max_version: Some(DLPACK_VERSION), ..Default::default() };
    let plan = crate::dlpack::plan_export(device, core.pinned(), &request)?;
    let source = core.export_source(&plan, None)?;
    let owner: Arc<dyn Any + Send + Sync> = source.owner;
    Handover {
        data: source.data,
        device: source.device,
        dtype: core.dtype(),
        shape: Dims::from_slice(core.shape()),
        strides: None,
        owner,
        readonly: source.readonly,
        stream: core.stream(),
    }
    .deliver(py, framework)
}

/// A new array of `T` with `N` dimensions, zeroed, owned until `into_object` hands it to
/// Python as its framework's array object.
pub struct NewArray<'py, T: Element, const N: usize> {
    py: Python<'py>,
    framework: Framework,
    storage: Storage<'py>,
    data: usize,
    shape: [usize; N],
    device: Device,
    stream: Option<i64>,
    _element: PhantomData<T>,
}

/// Where a new array's memory came from.
enum Storage<'py> {
    /// A NumPy array NumPy allocated.
    NumPy(Bound<'py, PyAny>),
    /// A tensor from an exchange table's allocator, wrapped by the same table.
    Tensor(ManagedTensor, &'static DLPackExchangeAPI),
    /// amso's own array, handed over at the end.
    Amso(ArrayCore),
}

/// What the producer's allocator reported through `set_error`.
#[derive(Default)]
struct AllocatorError(Option<(String, String)>);

unsafe extern "C" fn set_error(context: *mut c_void, kind: *const c_char, message: *const c_char) {
    let text = |p: *const c_char| -> String {
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string from the producer, read during the call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    // SAFETY: `context` is the `AllocatorError` `allocate` passed for this call.
    unsafe { (*context.cast::<AllocatorError>()).0 = Some((text(kind), text(message))) };
}

impl<'py, T: Element, const N: usize> NewArray<'py, T, N> {
    /// A new zeroed array of `shape` on `device`, for `framework` (device data zeroed on
    /// `stream`, else the stream rule's).
    pub fn zeros(py: Python<'py>, framework: Framework, shape: [usize; N], device: Device) -> PyResult<Self> {
        crate::borrow::process::join(py)?;
        let stream =
            (device.device_type == DeviceType::Cuda).then(|| source::work_stream(None, device.id)).transpose()?;
        Self::zeros_in(py, framework, shape, device, stream)
    }

    pub(super) fn zeros_in(
        py: Python<'py>,
        framework: Framework,
        shape: [usize; N],
        device: Device,
        stream: Option<i64>,
    ) -> PyResult<Self> {
        framework.check_device(device)?;
        let dims: [i64; N] = shape.map(|d| i64::try_from(d).unwrap_or(i64::MAX));
        crate::shape::checked_shape(&dims, N, size_of::<T>())?;
        let bytes = shape.iter().product::<usize>() * size_of::<T>();
        let (storage, data) = if framework == Framework::NumPy {
            // SAFETY: NULL data: NumPy allocates the array.
            let array = unsafe { numpy::array_over(py, &T::DTYPE, &shape, None, std::ptr::null_mut(), None, false) }?;
            let data = numpy::data_address(&array);
            // SAFETY: NumPy's fresh allocation of `bytes`, reached by nothing else yet.
            unsafe { std::ptr::write_bytes(data as *mut u8, 0, bytes) };
            (Storage::NumPy(array), data)
        } else if let Some(table) = framework.exchange_table(py)?.filter(|t| t.managed_tensor_allocator.is_some()) {
            let (tensor, data) = allocate::<T, N>(table, &shape, device)?;
            zero(data, bytes, device, stream)?;
            (Storage::Tensor(tensor, table), data)
        } else {
            let options = ArrayOptions {
                device_id: device.id,
                on_device: device.device_type == DeviceType::Cuda,
                ..Default::default()
            };
            let core = ArrayCore::from_dims(&dims, N, crate::element::ElementOps::of::<T>(), options)?;
            #[cfg(feature = "cuda")]
            if let Some(stream) = stream.filter(|_| device.device_type == DeviceType::Cuda) {
                let handle = crate::cuda::stream::StreamHandle::from_int(stream)?;
                core.device_side().hand_to(device.id, handle)?; // the zero fill comes first
            }
            let data = if device.device_type == DeviceType::Cuda {
                #[cfg(feature = "cuda")]
                {
                    core.device_address() as usize
                }
                #[cfg(not(feature = "cuda"))]
                0
            } else {
                core.host_ptr() as usize
            };
            (Storage::Amso(core), data)
        };
        Ok(NewArray { py, framework, storage, data, shape, device, stream, _element: PhantomData })
    }

    /// The shape.
    pub fn shape(&self) -> [usize; N] {
        self.shape
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The framework the array goes to.
    pub fn framework(&self) -> Framework {
        self.framework
    }

    /// For device data: the stream it was zeroed on, which work on it should use (a stream of
    /// the result's framework, alive while the result is: use it within the call).
    pub fn stream(&self) -> Option<crate::device::Stream> {
        self.stream.map(crate::device::Stream::reported)
    }

    /// The address of the first element (host or device).
    pub fn data_address(&self) -> usize {
        self.data
    }

    fn host_ptr(&self) -> PyResult<*mut T> {
        if self.device.device_type == DeviceType::Cuda {
            return Err(PyValueError::new_err("the new array is in CUDA device memory; host views need host data"));
        }
        let size: usize = self.shape.iter().product();
        Ok(if size == 0 { NonNull::dangling().as_ptr() } else { self.data as *mut T })
    }

    /// What a CUDA kernel receives for the new array's device data; launch it on `stream()`.
    #[cfg(feature = "cuda")]
    pub fn device_indexer(&mut self) -> PyResult<crate::indexer::DeviceIndexer<'_, T, N>> {
        if self.device.device_type != DeviceType::Cuda {
            return Err(PyValueError::new_err("a device indexer needs CUDA device data; the new array is on the host"));
        }
        Ok(crate::indexer::DeviceIndexer::new(self.data as u64, self.shape))
    }

    /// The elements, writable, in C order (host data).
    pub fn as_slice_mut(&mut self) -> PyResult<&mut [T]> {
        let data = self.host_ptr()?;
        // SAFETY: a fresh, zeroed (valid for every element type), C-contiguous allocation
        // that only this value reaches until `into_object`.
        Ok(unsafe { std::slice::from_raw_parts_mut(data, self.shape.iter().product()) })
    }

    /// A writable `ndarray` view (host data).
    #[cfg(feature = "ndarray")]
    pub fn as_array_mut(&mut self) -> PyResult<ndarray::ArrayViewMut<'_, T, ndarray::Dim<[usize; N]>>>
    where
        ndarray::Dim<[usize; N]>: ndarray::Dimension,
    {
        use crate::python::args::NdDimensions;
        let data = self.host_ptr()?;
        // SAFETY: as `as_slice_mut`, in C order.
        Ok(unsafe { ndarray::ArrayViewMut::from_shape_ptr(crate::python::args::Rank::<N>::nd(&self.shape), data) })
    }

    /// The array as its framework's Python object.
    pub fn into_object(self) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        match self.storage {
            Storage::NumPy(array) => Ok(array),
            Storage::Tensor(tensor, table) => {
                let to_object = table
                    .managed_tensor_to_py_object_no_sync
                    .ok_or_else(|| PyTypeError::new_err("the framework's exchange API cannot wrap tensors"))?;
                let RawManaged::Versioned(raw) = tensor.into_raw() else { unreachable!("allocated as versioned") };
                let mut out: *mut c_void = std::ptr::null_mut();
                // SAFETY: the function takes ownership of the tensor (deleting it on failure);
                // the GIL is held.
                if unsafe { to_object(raw.as_ptr(), &mut out) } != 0 || out.is_null() {
                    return Err(PyErr::take(py)
                        .unwrap_or_else(|| PyRuntimeError::new_err("the framework could not wrap the tensor")));
                }
                // SAFETY: a new reference from the framework.
                let object = unsafe { Bound::from_owned_ptr(py, out.cast()) };
                // An amso array of this runtime learns the stream its contents were written on,
                // so amso's later work on it, and its consumers, wait for that work.
                if let (Ok(array), Some(stream)) = (object.cast::<MemArrayBase>(), self.stream) {
                    // SAFETY: the stream the array was zeroed on and handed out for its work.
                    array.get().modify(py, |array| unsafe { array.record_work(stream) })?;
                }
                Ok(object)
            }
            Storage::Amso(mut core) => {
                if let Some(stream) = self.stream {
                    // SAFETY: the stream the array was zeroed on and handed out for its work.
                    unsafe { core.record_work(stream) }?;
                }
                core_into_framework(py, core, self.framework)
            }
        }
    }
}

/// A new tensor from `table`'s allocator, shaped like the prototype; its first element's address.
fn allocate<T: Element, const N: usize>(
    table: &DLPackExchangeAPI,
    shape: &[usize; N],
    device: Device,
) -> PyResult<(ManagedTensor, usize)> {
    let allocator = table.managed_tensor_allocator.expect("checked by the caller");
    let mut dims = shape.map(|d| d as i64);
    let mut prototype = DLTensor {
        data: std::ptr::null_mut(),
        device: DLDevice { device_type: DLDeviceType(device.device_type as u32), device_id: device.id },
        ndim: N as i32,
        dtype: T::DTYPE.dl_data_type(),
        shape: dims.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let mut out: *mut DLManagedTensorVersioned = std::ptr::null_mut();
    let mut error = AllocatorError::default();
    // SAFETY: a prototype with `N` dims, a writable output and an error callback with its
    // context, all alive for the call; the GIL is held.
    let status =
        unsafe { allocator(&mut prototype, &mut out, (&mut error as *mut AllocatorError).cast(), Some(set_error)) };
    let Some(raw) = NonNull::new(out).filter(|_| status == 0) else {
        let (kind, message) = error.0.unwrap_or_else(|| ("RuntimeError".into(), "allocation failed".into()));
        return Err(match kind.as_str() {
            "MemoryError" => PyMemoryError::new_err(message),
            "TypeError" => PyTypeError::new_err(message),
            "ValueError" => PyValueError::new_err(message),
            "BufferError" => PyBufferError::new_err(message),
            _ => PyRuntimeError::new_err(message),
        });
    };
    // SAFETY: the allocator hands the new tensor over.
    let tensor = unsafe { ManagedTensor::from_raw(RawManaged::Versioned(raw)) };
    // SAFETY: a live versioned tensor we own.
    let t = unsafe { &raw.as_ref().dl_tensor };
    let bytes = shape.iter().product::<usize>() * size_of::<T>();
    // SAFETY: a DLTensor's shape and (non-NULL) strides hold ndim entries, checked to be N
    // before either is read.
    let same_shape = t.ndim == N as i32 && unsafe { std::slice::from_raw_parts(t.shape, N) } == &dims[..];
    let contiguous = same_shape
        && (t.strides.is_null()
            // SAFETY: as above.
            || check_c_contiguous(&dims, unsafe { std::slice::from_raw_parts(t.strides, N) }, 1).is_ok());
    let same_place = t.device.device_type.0 == device.device_type as u32 && t.device.device_id == device.id;
    let same_type = (t.dtype.code.0, t.dtype.bits, t.dtype.lanes) == T::DTYPE.dlpack();
    let address = (t.data as usize).checked_add(t.byte_offset as usize);
    let usable = address.is_some_and(|a| bytes == 0 || (a != 0 && a % align_of::<T>() == 0));
    if !(same_shape && same_place && same_type && contiguous && usable) {
        return Err(PyRuntimeError::new_err(
            "the framework's allocator returned a tensor unlike the prototype (shape, dtype, device, layout or \
             alignment)",
        ));
    }
    Ok((tensor, address.unwrap_or(0)))
}

/// Zero `bytes` at `data` on `device` (on `stream` for device memory).
fn zero(data: usize, bytes: usize, device: Device, stream: Option<i64>) -> PyResult<()> {
    if bytes == 0 {
        return Ok(());
    }
    if device.device_type != DeviceType::Cuda {
        // SAFETY: a fresh host allocation of `bytes` that nothing else reaches yet.
        unsafe { std::ptr::write_bytes(data as *mut u8, 0, bytes) };
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    {
        let stream = crate::cuda::stream::StreamHandle::from_int(stream.unwrap_or(1))?;
        // SAFETY: a fresh device allocation of `bytes`; queued on the stream work will use.
        Ok(unsafe { crate::cuda::transfer::zero(device.id, data as u64, bytes, stream) }?)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = stream;
        Err(PyRuntimeError::new_err("device memory needs amso's CUDA layer, which this build does not include"))
    }
}
