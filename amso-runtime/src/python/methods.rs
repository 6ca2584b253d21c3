//! The Python methods of `MemArrayBase`, written once for every instantiation. Each is a thin
//! delegation, grouped by concern: facts, items and iteration, DLPack, moves and kernels, the
//! CUDA array interface, NumPy and the buffer protocol, pickle and copy.

use std::ffi::c_int;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyDict, PyTuple};

use crate::device::{Device, DeviceId, DeviceType};
use crate::lock::LockId;
use crate::memarray::access::RawView;
use crate::python::base::array::MemArrayBase;
use crate::python::base::convert::{parse_key, scalar_from_py, scalar_to_py, DeviceArg, Key, StreamArg};
use crate::python::base::header::{FLAG_ON_DEVICE, FLAG_PINNED, FLAG_READONLY};
use crate::python::export::capsule::dlpack_call;
use crate::python::export::dlpack_context::DLPackContext;
use crate::python::npyffi::dtype::numpy_dtype;
use crate::python::views::ArrayIterator;

/// Parse a `(device_type, device_id)` request against an array's defaults. The caller's raw
/// id is checked here, after the device type's own rule (kDLCPU has id 0 only).
fn target_device(array: &RawView<'_>, device_type: Option<i32>, device_id: Option<i32>) -> PyResult<Device> {
    let device_type = match device_type {
        None => array.device().device_type,
        Some(code) => DeviceType::from_code(code)?,
    };
    Ok(match device_type {
        DeviceType::Cpu => {
            if let Some(id) = device_id.filter(|&id| id != 0) {
                return Err(pyo3::exceptions::PyValueError::new_err(format!("kDLCPU has device id 0 only, got {id}")));
            }
            Device::CPU
        }
        // Managed memory is device memory: the array stays (or goes) there.
        DeviceType::Cuda | DeviceType::CudaManaged => {
            Device::cuda(device_id.map_or(Ok(array.device_id()), DeviceId::new)?)
        }
        DeviceType::CudaHost => {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "arrays move to kDLCPU or kDLCUDA; for pinned host memory create the array with pinned=True",
            ))
        }
    })
}

/// Parse `move_memory`'s `(device_type, device_id)`, where the device may be named (`'cpu'`,
/// `'cuda'`, `'cuda:N'`) as well as given as a DLPack code. The raw id (the caller's) is
/// checked by `target_device`, after the conflict with a named device.
fn named_target(array: &RawView<'_>, device: DeviceArg, device_id: Option<i32>) -> PyResult<Device> {
    match device {
        DeviceArg::Code(code) => target_device(array, Some(code), device_id),
        DeviceArg::Cpu => target_device(array, Some(DeviceType::Cpu as i32), device_id),
        DeviceArg::Cuda(None) => target_device(array, Some(DeviceType::Cuda as i32), device_id),
        DeviceArg::Cuda(Some(named)) => match device_id {
            Some(given) if given != named => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "'cuda:{named}' names device {named}, but device_id={given} was given; pass one of them"
            ))),
            _ => target_device(array, Some(DeviceType::Cuda as i32), Some(named)),
        },
    }
}

impl MemArrayBase {
    fn has_flag(&self, flag: u32) -> bool {
        self.header().placement().flags & flag != 0
    }

    fn dims(&self) -> &[i64] {
        self.header().dims()
    }
}

#[pymethods]
impl MemArrayBase {
    // ---- facts: read from the header, without waiting for a move in progress ----

    /// The dimensions.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.dims())
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.dims().len()
    }

    /// The number of elements.
    #[getter]
    fn size(&self) -> i64 {
        self.dims().iter().product()
    }

    /// Bytes of element data.
    #[getter]
    fn nbytes(&self) -> i64 {
        self.size() * self.element_type().itemsize() as i64
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.element_type().itemsize()
    }

    /// The element type as a NumPy dtype. A record's is a copy of amso's descriptor each time:
    /// NumPy lets any descriptor's field names be set in place, and the record's names are the
    /// spec's, shared by every array of it (renaming the copy renames nothing of amso's).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let dtype = numpy_dtype(py, self.element_type())?;
        match self.element_type().is_record() {
            true => dtype.call_method1(pyo3::intern!(py, "newbyteorder"), (pyo3::intern!(py, "="),)),
            false => Ok(dtype),
        }
    }

    /// The CUDA device this array moves to.
    #[getter]
    fn device_id(&self, py: Python<'_>) -> DeviceId {
        self.read(py, |array| array.raw_view().device_id())
    }

    /// Where the data is: `'cpu'` (pinned memory too) or `'cuda:N'` (managed memory too), as the
    /// repr shows it; `move_memory` takes the same names.
    #[getter]
    fn device(&self) -> String {
        self.header().placement().device_name()
    }

    /// Whether the current data is in CUDA managed memory (`managed=True`, or imported from a
    /// kDLCUDAManaged producer).
    #[getter]
    fn managed(&self) -> bool {
        self.header().placement().device_type == DeviceType::CudaManaged as i32
    }

    /// Whether the data is in CUDA device memory (its own, or managed memory).
    #[getter]
    fn on_device(&self) -> bool {
        self.has_flag(FLAG_ON_DEVICE)
    }

    /// Whether a `get_dlpack()` context holds the array.
    #[getter]
    fn locked(&self) -> bool {
        self.header().placement().lock_id != 0
    }

    /// How many exports (DLPack capsules, the views made from them, buffer-protocol views) hold
    /// the memory.
    #[getter]
    fn export_count(&self, py: Python<'_>) -> usize {
        self.live_exports(py)
    }

    /// Whether writes are refused.
    #[getter]
    fn readonly(&self) -> bool {
        self.has_flag(FLAG_READONLY)
    }

    /// Whether the host buffer is page-locked (pinned=True at construction).
    #[getter]
    fn pinned(&self) -> bool {
        self.has_flag(FLAG_PINNED)
    }

    fn __len__(&self) -> usize {
        self.dims()[0] as usize
    }

    /// NumPy's truth value: one element's, else NumPy's `ValueError` (see `views::convert`).
    fn __bool__(slf: &Bound<'_, Self>) -> PyResult<bool> {
        crate::python::views::convert(slf, "__bool__")?.extract()
    }

    /// NumPy's `float(x)` of an array of this shape and values (the installed NumPy's rule).
    fn __float__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::python::views::convert(slf, "__float__")
    }

    /// NumPy's `int(x)` of an array of this shape and values (the installed NumPy's rule).
    fn __int__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::python::views::convert(slf, "__int__")
    }

    /// NumPy's `complex(x)` of an array of this shape and values (the installed NumPy's rule).
    fn __complex__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::python::views::convert(slf, "__complex__")
    }

    /// NumPy's `operator.index(x)`: an array is no index (NumPy's `TypeError`).
    fn __index__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::python::views::convert(slf, "__index__")
    }

    /// `value in a`: NumPy's elementwise test of the host data, at every rank.
    fn __contains__(slf: &Bound<'_, Self>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        crate::python::views::contains(slf, value)
    }

    /// The values as NumPy prints them (host data), then dtype, device and flags.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        crate::python::repr::repr(slf)
    }

    /// Elementwise, as NumPy's: a NumPy bool array of the host data (device data is a TypeError;
    /// `np.array_equal(a, b)` gives one bool).
    fn __richcmp__<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
        op: CompareOp,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::python::views::compare(slf, other, op)
    }

    /// NumPy's ufuncs over the host data (`np.sin(a)`, `np.add(a, 1, out=a)`), and through them
    /// the arithmetic operators (see `views::array_ufunc`).
    #[pyo3(signature = (ufunc, method, *inputs, **kwargs))]
    fn __array_ufunc__<'py>(
        &self,
        ufunc: &Bound<'py, PyAny>,
        method: &str,
        inputs: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::python::views::array_ufunc(ufunc, method, inputs, kwargs)
    }

    /// Unhashable, as NumPy arrays are: `==` compares values.
    #[classattr]
    const __hash__: Option<Py<PyAny>> = None;

    // ---- items ----

    /// One element (a Python scalar) for one integer per dimension; otherwise NumPy's basic
    /// indexing of host data (a NumPy view; see `views`).
    fn __getitem__<'py>(slf: &Bound<'py, Self>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let (py, this) = (slf.py(), slf.get());
        if this.element_type().is_compound() {
            // A record or a vector is several values: NumPy's view gives records (`np.void`)
            // and fields (`a["mass"]`, a strided view of the same memory), or lanes (a row).
            return crate::python::views::get_item(slf, key);
        }
        match parse_key(key)? {
            // Too many integers: the element path's IndexError, on any device.
            Key::Integers(index) if index.len() >= this.dims().len() => {
                let value = this.read(py, |array| array.get_scalar(&index, None))?;
                scalar_to_py(py, value)
            }
            _ => crate::python::views::get_item(slf, key),
        }
    }

    /// One element for one integer per dimension; otherwise assignment through NumPy's basic
    /// indexing of host data (broadcasting as NumPy does).
    fn __setitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let (py, this) = (slf.py(), slf.get());
        if this.element_type().is_compound() {
            return crate::python::views::set_item(slf, key, value);
        }
        match parse_key(key)? {
            Key::Integers(index) if index.len() >= this.dims().len() => {
                let scalar = scalar_from_py(value, this.element_type())?;
                crate::python::base::convert::warn_overflow(py, &scalar, this.element_type())?;
                this.modify(py, |array| {
                    let _borrow = crate::python::base::array::write_borrow(py, array, false)?;
                    Ok(array.set_scalar(&index, scalar, None)?)
                })
            }
            _ => crate::python::views::set_item(slf, key, value),
        }
    }

    /// The elements of a 1-D array; the rows (NumPy views) of a host array of higher rank.
    fn __iter__(slf: &Bound<'_, Self>) -> PyResult<ArrayIterator> {
        crate::python::views::iterate(slf)
    }

    // ---- DLPack ----

    /// How other amso runtimes (other crates' extension modules) recognise this class: a
    /// capsule naming the function that finds an object's header (see `recognize`).
    #[classattr]
    fn __amso_type__(py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::python::base::recognize::type_capsule(py)
    }

    /// The DLPack C exchange API (DLPack >= 1.2): a "dlpack_exchange_api" capsule.
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::python::export::exchange::api_capsule(py)
    }

    /// The same table's address as an integer (the DLPack 1.2 name, for older consumers).
    #[classattr]
    fn __c_dlpack_exchange_api__() -> usize {
        crate::python::export::exchange::api_address()
    }

    /// Export through DLPack, as the Python array API standard specifies.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>, // the protocol's raw value (`DlpackRequest::stream`)
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let max_version = max_version.map(crate::python::base::convert::dlpack_version).transpose()?;
        dlpack_call(py, self, None, stream, max_version, dl_device, copy)
    }

    /// A vector array (float32x4) as an array of its lanes, without a copy: float32 with a last
    /// axis of 4, for DLPack consumers that refuse lanes (PyTorch, NumPy, CuPy, JAX). It holds
    /// the memory where it is now, as a DLPack export does; a TypeError for scalar dtypes.
    fn scalar_view(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        crate::python::source::import::scalar_view(slf)
    }

    /// `(device type, device id)` of the current data, as DLPack codes.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let placement = self.header().placement();
        (placement.device_type, placement.device_id)
    }

    /// A context manager that moves the data to the requested device (named as `move_memory`
    /// names it: `'cpu'`, `'cuda'`, `'cuda:N'` or a DLPack code; None: where it is), locks the
    /// array for the `with` block and exports it through DLPack.
    #[pyo3(
        signature = (device_type = None, device_id = None, stream = StreamArg(None)),
        text_signature = "($self, device_type=None, device_id=None, stream=None)"
    )]
    fn get_dlpack(
        slf: &Bound<'_, Self>,
        device_type: Option<DeviceArg>,
        device_id: Option<i32>, // checked by `target_device`
        stream: StreamArg,
    ) -> PyResult<DLPackContext> {
        let (py, this) = (slf.py(), slf.get());
        let target = this.read(py, |array| match device_type {
            Some(device) => named_target(&array.raw_view(), device, device_id),
            None => target_device(&array.raw_view(), None, device_id),
        })?;
        this.move_to(py, target, stream, false)?;
        Ok(DLPackContext::new(slf.clone().unbind(), LockId::next()))
    }

    // ---- moves and kernels ----

    /// Move the current data to `device_type` (`'cpu'`, `'cuda'`, `'cuda:N'`, or a DLPack code:
    /// kDLCPU or kDLCUDA) on `stream` (0 or 1: legacy default stream, 2: per-thread default
    /// stream, else a stream handle); returns at once when it is already there, and without
    /// waiting for the copy when `async_copy`.
    #[pyo3(
        signature = (device_type, device_id = None, stream = StreamArg(None), async_copy = false),
        text_signature = "($self, device_type, device_id=None, stream=None, async_copy=False)"
    )]
    fn move_memory(
        &self,
        py: Python<'_>,
        device_type: DeviceArg,
        device_id: Option<i32>, // checked by `target_device`
        stream: StreamArg,
        async_copy: bool,
    ) -> PyResult<()> {
        let target = self.read(py, |array| named_target(&array.raw_view(), device_type, device_id))?;
        self.move_to(py, target, stream, async_copy)
    }

    /// The MemArray design's kernel: add the sum of each element's indices to it, on the GPU
    /// (moving the data there first), queued on `stream`.
    #[pyo3(signature = (stream = StreamArg(None)), text_signature = "($self, stream=None)")]
    fn add_index_tuple(&self, py: Python<'_>, stream: StreamArg) -> PyResult<()> {
        let stream = crate::current_stream::resolve(stream.0);
        Ok(self.modify_detached(py, |array| self.add_index_locked(array, stream))??)
    }

    // ---- the CUDA array interface ----

    /// The CUDA Array Interface (version 3) of device-resident data; AttributeError while the
    /// data is on the host, so consumers fall back to other protocols.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::python::export::interface::cuda_array_interface(self, py)
    }

    // ---- NumPy copies ----

    /// Copy `array` in: same shape; values cast as NumPy's `same_kind` rule allows.
    fn read_numpy_array(&self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<()> {
        crate::python::export::numpy_io::read_numpy_array(self, py, array)
    }

    /// A NumPy array holding a copy of the data.
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::python::export::numpy_io::to_numpy(self, py)
    }

    /// A zero-copy NumPy view of host data (`np.asarray(a)`), with NumPy 2's `dtype` and
    /// `copy` rules; device data is a TypeError.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::python::export::numpy_io::array_view(slf, dtype, copy)
    }

    /// The buffer protocol, for host data (see `buffer`).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        // SAFETY: forwarded from Python's buffer protocol.
        unsafe { crate::python::export::buffer::get_buffer(slf.as_any(), slf.get(), view, flags, false) }
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: forwarded from Python's buffer protocol.
        unsafe { crate::python::export::buffer::release_buffer(self, view) }
    }

    // ---- pickle and copy ----

    fn __reduce_ex__<'py>(slf: &Bound<'py, Self>, protocol: i64) -> PyResult<Bound<'py, PyTuple>> {
        crate::python::pickle::reduce(slf, protocol)
    }

    /// A picklable handle another process on this machine opens (`handle.open()`) as an amso
    /// array over this array's device memory, without a copy (a `shareable=True` array).
    #[cfg(feature = "cuda")]
    fn share(slf: &Bound<'_, Self>) -> PyResult<crate::python::share::SharedHandle> {
        crate::python::share::share(slf)
    }

    /// An independent copy on the same device.
    fn copy(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        crate::python::pickle::duplicate(slf)
    }

    fn __copy__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        crate::python::pickle::duplicate(slf)
    }

    fn __deepcopy__(slf: &Bound<'_, Self>, _memo: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        crate::python::pickle::duplicate(slf)
    }
}

impl MemArrayBase {
    /// Move the data to `target` on `stream` (detached), unless buffers pin it on the host.
    fn move_to(&self, py: Python<'_>, target: Device, stream: StreamArg, async_copy: bool) -> PyResult<()> {
        let stream = crate::current_stream::resolve(stream.0);
        // Unlocked data already there stays, whoever holds it (a typed argument refuses real moves).
        let placement = self.header().placement();
        if target.device_type == crate::device::DeviceType::Cpu
            && !placement.on_device()
            && placement.lock_id == 0
            && self.idle(py)
        {
            return Ok(());
        }
        Ok(self.modify_detached(py, |array| self.move_locked(array, target, stream, async_copy))??)
    }
}
