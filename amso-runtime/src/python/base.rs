//! `MemArrayBase`: the one Python class that carries every method of every instantiation,
//! holding its array behind `ArrayObject`. Generated classes subclass it and add only their
//! constructor.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::capsule::dlpack_capsule;
use super::context::DLPackContext;
use super::convert::{numpy, numpy_dtype, parse_index, scalar_from_py, scalar_to_py};
use crate::capi::Header;
use crate::dlpack::DlpackRequest;
use crate::element::Element;
use crate::lock::LockId;
use crate::memarray::{Device, DeviceType, MemArray, Residence};
use crate::object::ArrayObject;

/// Base class of every amso array class (Python name `amso._amso.MemArrayBase`).
#[pyclass(subclass, module = "amso._amso", name = "MemArrayBase")]
pub struct MemArrayBase {
    array: Box<dyn ArrayObject>,
    /// What the C getters read; refreshed by `update` after every change.
    header: Header,
    /// The last `__cuda_array_interface__` built, with the (address, stream) it describes;
    /// each access hands out a copy, never this dict itself.
    interface_cache: std::sync::Mutex<Option<CachedInterface>>,
}

/// An interface dict and the (data address, stream) it describes.
type CachedInterface = (usize, Option<i64>, Py<PyDict>);

impl MemArrayBase {
    /// Wrap a typed array.
    pub fn new(array: Box<dyn ArrayObject>) -> Self {
        let header = Header::of(&*array);
        MemArrayBase { array, header, interface_cache: std::sync::Mutex::new(None) }
    }

    /// The array, type-erased.
    pub fn array(&self) -> &dyn ArrayObject {
        &*self.array
    }

    /// The C header (valid while this object lives; see generated/amso.h).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Change the array through `f`, then refresh the C header.
    pub fn update<R>(&mut self, f: impl FnOnce(&mut dyn ArrayObject) -> R) -> R {
        let result = f(&mut *self.array);
        self.header = Header::of(&*self.array);
        result
    }

    /// The typed array, if this object holds a `MemArray<T, N>`.
    pub fn typed<T: Element, const N: usize>(&self) -> Option<&MemArray<T, N>> {
        self.array.as_any().downcast_ref()
    }

    /// Change the typed array through `f`, if this object holds a `MemArray<T, N>`.
    pub fn with_typed_mut<T: Element, const N: usize, R>(
        &mut self,
        f: impl FnOnce(&mut MemArray<T, N>) -> R,
    ) -> Option<R> {
        self.update(|array| array.as_any_mut().downcast_mut().map(f))
    }
}

/// Parse a `(device_type, device_id)` request against an array's defaults.
pub(super) fn target_device(
    array: &dyn ArrayObject,
    device_type: Option<i32>,
    device_id: Option<i32>,
) -> PyResult<Device> {
    let device_type = match device_type {
        None => array.device().device_type,
        Some(code) => DeviceType::from_dlpack(code)?,
    };
    Ok(match device_type {
        DeviceType::Cpu => {
            if let Some(id) = device_id.filter(|&id| id != 0) {
                return Err(PyValueError::new_err(format!("kDLCPU has device id 0 only, got {id}")));
            }
            Device::CPU
        }
        DeviceType::Cuda => Device { device_type, id: device_id.unwrap_or(array.device_id()) },
        DeviceType::CudaHost => {
            return Err(PyValueError::new_err(
                "arrays move to kDLCPU or kDLCUDA; for pinned host memory create the array with pinned=True",
            ))
        }
    })
}

#[pymethods]
impl MemArrayBase {
    /// The dimensions.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.array.shape())
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.array.shape().len()
    }

    /// The number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.array.shape().iter().product()
    }

    /// Bytes of element data.
    #[getter]
    fn nbytes(&self) -> usize {
        self.size() * self.array.dtype().itemsize()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.array.dtype().itemsize()
    }

    /// The element type as a NumPy dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_dtype(py, self.array.dtype())
    }

    /// The CUDA device this array moves to.
    #[getter]
    fn device_id(&self) -> i32 {
        self.array.device_id()
    }

    /// Whether the current data is in device memory.
    #[getter]
    fn on_device(&self) -> bool {
        self.array.residence() == Residence::Device
    }

    /// Whether a `get_dlpack()` context holds the array.
    #[getter]
    fn locked(&self) -> bool {
        self.array.lock_id().is_some()
    }

    /// How many DLPack exports (capsules and the views made from them) hold the memory.
    #[getter]
    fn export_count(&self) -> usize {
        self.array.export_count()
    }

    /// Whether writes are refused.
    #[getter]
    fn readonly(&self) -> bool {
        self.array.readonly()
    }

    fn __len__(&self) -> usize {
        self.array.shape()[0]
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let index = parse_index(key)?;
        scalar_to_py(py, self.array.get_scalar(&index, None)?)
    }

    fn __setitem__(&mut self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let index = parse_index(key)?;
        let scalar = scalar_from_py(value, self.array.dtype())?;
        Ok(self.array.set_scalar(&index, scalar, None)?)
    }

    /// Address of the C header (what `amso_get_handle` returns), for arrays of other modules.
    #[getter]
    fn _amso_header(&self) -> usize {
        &self.header as *const Header as usize
    }

    /// The DLPack C exchange API (DLPack >= 1.2): a "dlpack_exchange_api" capsule.
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Py<PyAny>> {
        super::exchange::api_capsule(py)
    }

    /// The same table's address as an integer (the DLPack 1.2 name, for older consumers).
    #[classattr]
    fn __c_dlpack_exchange_api__() -> usize {
        super::exchange::api_address()
    }

    /// Export through DLPack, as the Python array API standard specifies.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let max_version = max_version.map(super::convert::dlpack_version).transpose()?;
        let request = DlpackRequest { stream, max_version, dl_device, copy };
        dlpack_capsule(py, &*self.array, None, &request)
    }

    /// `(device type, device id)` of the current data, as DLPack codes.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let device = self.array.device();
        (device.device_type as i32, device.id)
    }

    /// A context manager that moves the data to the requested device, locks the array for
    /// the `with` block and exports it through DLPack.
    #[pyo3(signature = (device_type = None, device_id = None, stream = None))]
    fn get_dlpack(
        mut slf: PyRefMut<'_, Self>,
        device_type: Option<i32>,
        device_id: Option<i32>,
        stream: Option<i64>,
    ) -> PyResult<DLPackContext> {
        let target = target_device(&*slf.array, device_type, device_id)?;
        let stream = crate::stream_context::resolve(stream);
        slf.update(|array| array.move_memory(target, stream, false, None))?;
        let array: Py<MemArrayBase> = slf.into();
        Ok(DLPackContext::new(array, LockId::next()))
    }

    /// Move the current data to `device_type` (kDLCPU or kDLCUDA) on `stream` (0 or 1: legacy
    /// default stream, 2: per-thread default stream, else a stream handle); returns at once
    /// when it is already there, and without waiting for the copy when `async_copy`.
    #[pyo3(signature = (device_type, device_id = None, stream = None, async_copy = false))]
    fn move_memory(
        &mut self,
        py: Python<'_>,
        device_type: i32,
        device_id: Option<i32>,
        stream: Option<i64>,
        async_copy: bool,
    ) -> PyResult<()> {
        let target = target_device(&*self.array, Some(device_type), device_id)?;
        let stream = crate::stream_context::resolve(stream);
        Ok(self.update(|array| py.detach(|| array.move_memory(target, stream, async_copy, None)))?)
    }

    /// The MemArray design's kernel: add the sum of each element's indices to it, on the GPU
    /// (moving the data there first), queued on `stream`.
    #[pyo3(signature = (stream = None))]
    fn add_index_tuple(&mut self, stream: Option<i64>) -> PyResult<()> {
        let stream = crate::stream_context::resolve(stream);
        Ok(self.update(|array| array.add_index_tuple(stream, None))?)
    }

    /// Whether the host buffer is page-locked (pinned=True at construction).
    #[getter]
    fn pinned(&self) -> bool {
        self.array.pinned()
    }

    /// The CUDA Array Interface (version 3) of device-resident data; AttributeError while the
    /// data is on the host, so consumers fall back to other protocols.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.array.residence() != Residence::Device {
            return Err(PyAttributeError::new_err(
                "__cuda_array_interface__: the data is in host memory; call move_memory(kDLCUDA) first",
            ));
        }
        let address = self.array.data_address(None)?;
        self.array.share_device_memory();
        let stream = self.array.stream();
        let mut cache = self.interface_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((cached_address, cached_stream, interface)) = cache.as_ref() {
            if *cached_address == address && *cached_stream == stream {
                return interface.bind(py).copy();
            }
        }
        let interface = PyDict::new(py);
        interface.set_item(intern!(py, "shape"), self.shape(py)?)?;
        interface.set_item(intern!(py, "typestr"), self.array.dtype().typestr)?;
        interface.set_item(intern!(py, "data"), (address, self.array.readonly()))?;
        interface.set_item(intern!(py, "version"), 3)?;
        interface.set_item(intern!(py, "strides"), py.None())?;
        interface.set_item(intern!(py, "stream"), stream)?;
        *cache = Some((address, stream, interface.clone().unbind()));
        interface.copy()
    }

    /// Copy `array` in: same shape; values cast as NumPy's `same_kind` rule allows.
    fn read_numpy_array(&mut self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let np = numpy(py)?;
        let source = np.call_method1(intern!(py, "asarray"), (array,))?;
        let shape = self.shape(py)?;
        if !source.getattr(intern!(py, "shape"))?.eq(&shape)? {
            return Err(PyValueError::new_err(format!(
                "shape mismatch: the input has shape {}, the MemArray has shape {}",
                source.getattr(intern!(py, "shape"))?.repr()?,
                shape.repr()?
            )));
        }
        let target = self.dtype(py)?;
        let source_dtype = source.getattr(intern!(py, "dtype"))?;
        let castable: bool =
            np.call_method1(intern!(py, "can_cast"), (&source_dtype, &target, "same_kind"))?.extract()?;
        if !castable {
            return Err(PyTypeError::new_err(format!(
                "cannot cast {} to {} under the 'same_kind' rule; convert it first, e.g. with .astype()",
                source_dtype.str()?,
                target.str()?
            )));
        }
        let contiguous = np.call_method1(intern!(py, "ascontiguousarray"), (&source, &target))?;
        let bytes = raw_bytes(py, &contiguous)?;
        let buffer = PyBuffer::<u8>::get(&bytes)?;
        // SAFETY: the buffer is a live C-contiguous run of `len_bytes` bytes owned by a NumPy
        // array distinct from ours; it stays alive while `buffer` is held.
        unsafe { self.array.copy_from(buffer.buf_ptr().cast::<u8>(), buffer.len_bytes(), None) }?;
        Ok(())
    }

    /// A NumPy array holding a copy of the data.
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let np = numpy(py)?;
        let out = np.call_method1(intern!(py, "empty"), (self.shape(py)?, self.dtype(py)?))?;
        let bytes = raw_bytes(py, &out)?;
        let buffer = PyBuffer::<u8>::get(&bytes)?;
        // SAFETY: `out` is a fresh, writable, C-contiguous NumPy array of `nbytes` bytes that
        // nothing else references yet.
        unsafe { self.array.copy_to(buffer.buf_ptr().cast::<u8>(), buffer.len_bytes(), None) }?;
        Ok(out)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let this = slf.borrow();
        let device = this.array.device();
        let place = match device.device_type {
            DeviceType::Cpu | DeviceType::CudaHost => "cpu".to_string(),
            DeviceType::Cuda => format!("cuda:{}", device.id),
        };
        let shape = this.shape(slf.py())?.repr()?.to_string();
        let mut flags = String::new();
        if this.array.readonly() {
            flags.push_str(", readonly=True");
        }
        if this.array.pinned() {
            flags.push_str(", pinned=True");
        }
        if this.array.lock_id().is_some() {
            flags.push_str(", locked=True");
        }
        Ok(format!(
            "{}(shape={shape}, dtype={}, device='{place}'{flags})",
            slf.get_type().name()?,
            this.array.dtype().name
        ))
    }
}

/// A flat uint8 view of a C-contiguous NumPy array, for byte copies of any dtype (NumPy's
/// buffer export refuses some, such as ml_dtypes' bfloat16).
fn raw_bytes<'py>(py: Python<'py>, array: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let flat = array.call_method1(intern!(py, "reshape"), (-1,))?;
    flat.call_method1(intern!(py, "view"), (numpy(py)?.getattr(intern!(py, "uint8"))?,))
}
