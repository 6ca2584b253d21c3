//! Importing foreign memory without copying: an amso array over what `source` acquired (a
//! DLPack tensor, a NumPy array, a buffer, CUDA array interface data). The producer's tensor or
//! object is kept alive until the amso array and every view exported from it are gone.

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::device::DeviceType;
use crate::dlpack::ManagedTensor;
use crate::element::{adoption_alignment, dlpack_type_name, DType};
use crate::memarray::foreign::{check_dims, ForeignMemory};
use crate::python::base::array::MemArrayBase;
use crate::python::base::registry;
use crate::python::source::{self, Protocol, Request, Source};

/// An amso array of a registered class over `source`'s memory, which must be C-contiguous.
/// Device data records the stream it was handed over on, so amso's later work waits for it.
/// `producer` is the object `source` came from (`None` for a bare tensor).
pub(in crate::python) fn wrap_source(
    py: Python<'_>,
    source: Source,
    producer: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    wrap_lanes(py, source, producer, None)
}

/// `wrap_source`, with `lanes`: the source's last axis holds the lanes of a vector dtype
/// (float32 `(n, 4)` becomes float32x4 `(n,)`), whose elements start aligned to their size.
fn wrap_lanes(
    py: Python<'_>,
    mut source: Source,
    producer: Option<&Bound<'_, PyAny>>,
    lanes: Option<u16>,
) -> PyResult<Py<PyAny>> {
    // A producer that already exports the vector (lanes in its DLPack type) is read as it is.
    let lanes = lanes.filter(|&lanes| source.dtype.2 != lanes || source.numpy_kind.is_some());
    let extents = source.extents(py);
    let mut dims = extents.dims.to_vec();
    if let Some(lanes) = lanes {
        let vector = (source.dtype.0, source.dtype.1, lanes);
        let lane_type = dlpack_type_name(source.dtype);
        if source.numpy_kind.is_some()
            || source.dtype.2 != 1
            || dims.len() < 2
            || dims.last() != Some(&i64::from(lanes))
        {
            return Err(PyValueError::new_err(format!(
                "an array of {} needs a last axis of {lanes} {lane_type} lanes; the input is {}, shape {dims:?}",
                dlpack_type_name(vector),
                source.numpy_kind.as_deref().map_or(lane_type.clone(), str::to_owned)
            )));
        }
    }
    let ndim = dims.len() - usize::from(lanes.is_some());
    if !(1..=crate::shape::MAX_NDIM).contains(&ndim) {
        let dtype = (source.dtype.0, source.dtype.1, lanes.unwrap_or(source.dtype.2));
        return Err(PyTypeError::new_err(registry::uncompiled(&dlpack_type_name(dtype), ndim)));
    }
    check_dims(&extents.dims[..ndim])?;
    extents.strides.check_c_contiguous(extents.dims, source.itemsize())?;
    if let Some(lanes) = lanes {
        dims.pop();
        source.dtype = (source.dtype.0, source.dtype.1, lanes);
    }
    // A vector's elements start aligned to their size, as C's `amso_float32x4_t` and CUDA's
    // `float4` loads need, whoever produced the memory.
    let vector = source.numpy_kind.is_none() && crate::element::vector_type(source.dtype);
    let bytes = DType::from_dlpack_type(source.dtype).map_or(source.itemsize(), |d| adoption_alignment(d, 1));
    if vector && !dims.contains(&0) && !source.data.is_multiple_of(bytes) {
        return Err(PyBufferError::new_err(format!(
            "the input's data at {:#x} is not aligned to {bytes} bytes, as {} elements are (C's and CUDA's vector \
             loads need it); copy it: amso.asarray(x, dtype=..., copy=True)",
            source.data,
            dlpack_type_name(source.dtype)
        )));
    }
    let registration = match source.numpy_kind.as_deref() {
        Some(crate::element::RECORD) => record_class(&source, producer, dims.len())?,
        Some(kind) => {
            return Err(PyTypeError::new_err(format!(
                "a NumPy array of dtype {kind} has no DLPack type; amso arrays hold bool, integer, float, complex, the \
                 spec's other dtypes and its records"
            )))
        }
        None => registry::find(source.dtype.0, source.dtype.1, source.dtype.2, dims.len())
            .ok_or_else(|| PyTypeError::new_err(registry::uncompiled(&dlpack_type_name(source.dtype), dims.len())))?,
    };
    let (readonly, stream) = (source.readonly, source.stream);
    let (address, mut device) = (source.data, source.device);
    if source.managed {
        device.device_type = DeviceType::CudaManaged;
    }
    let memory = ForeignMemory { address, device, owner: source.into_owner(producer)? };
    // SAFETY: the producer's memory holds `dims` C-contiguous elements of this dtype at that
    // address (checked as far as a consumer can), valid until its holder drops.
    let mut array = unsafe { registration.wrap(&dims, memory, readonly) }?;
    if let Some(stream) = stream.filter(|_| array.device().device_type == DeviceType::Cuda) {
        // SAFETY: the stream the producer handed the memory over on, where its work is ordered.
        unsafe { array.record_work(stream) }?;
    }
    (registration.instance)(py, MemArrayBase::new(array))
}

/// The record class each layout (a NumPy descriptor or an amso class, with the ndim) found.
static RECORD_CLASSES: crate::python::identity_cache::IdentityCache<16> =
    crate::python::identity_cache::IdentityCache::new();

/// The compiled record class whose layout is that of `source` (a NumPy structured array, or an
/// amso record array of another runtime copy) with `ndim` dimensions: the first difference
/// from the compiled records of its size is the error.
fn record_class(
    source: &Source,
    producer: Option<&Bound<'_, PyAny>>,
    ndim: usize,
) -> PyResult<&'static registry::Registration> {
    let Some(producer) = producer else {
        return Err(PyTypeError::new_err("a record array arrived without its producer, whose dtype names its fields"));
    };
    let numpy = matches!(source.holder, source::Holder::NumPy(_));
    // What decides the layout (a NumPy descriptor, an amso class): a repeated one finds its
    // class in one lookup, without scanning the registry.
    let key = match numpy {
        // SAFETY: a NumPy array's descriptor, alive while the array is.
        true => unsafe { Bound::from_borrowed_ptr(producer.py(), crate::python::npyffi::descr_of(producer)) },
        false => producer.get_type().into_any(),
    };
    if let Some(found) = RECORD_CLASSES.get(&key, ndim) {
        // SAFETY: only `&'static Registration`s are stored (below).
        let registration = unsafe { &*(found as *const registry::Registration) };
        // One more lookup (the layout check's own cache) sees fields renamed since.
        // SAFETY: `numpy` says whether the producer is a NumPy array.
        if unsafe { crate::python::npyffi::record_layout::check_layout(producer, numpy, registration.dtype()) }.is_ok()
        {
            return Ok(registration);
        }
    }
    let candidates = registry::records(source.dtype, ndim);
    let mut first_error = None;
    for registration in &candidates {
        // SAFETY: `numpy` says whether the producer is a NumPy array.
        match unsafe { crate::python::npyffi::record_layout::check_layout(producer, numpy, registration.dtype()) } {
            Ok(()) => {
                RECORD_CLASSES.insert(&key, ndim, *registration as *const registry::Registration as usize);
                return Ok(registration);
            }
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| {
        PyTypeError::new_err(format!(
            "amso has no compiled record class of {} bytes with {ndim} dimension{} for this structured array: add the \
             record to specs/types.yaml (records: and instantiations:), or declare it in an extension crate with \
             #[derive(amso_macros::Element)] and #[amso_array(YourRecord, NDIM)]",
            source.dtype.2,
            if ndim == 1 { "" } else { "s" }
        ))
    }))
}

/// An amso array over the tensor `owner` owns (its deleter runs exactly once, also when the
/// tensor is refused).
pub(in crate::python) fn wrap_tensor(py: Python<'_>, owner: ManagedTensor) -> PyResult<Py<PyAny>> {
    wrap_source(py, source::from_tensor(owner)?, None)
}

/// `a.scalar_view()`: an amso array over a vector array's memory, without a copy, with the
/// lanes as a last axis of their own dtype (float32x4 `(n,)` is float32 `(n, 4)`), for DLPack
/// consumers that refuse lanes (PyTorch, NumPy, CuPy, JAX). Like a DLPack export, it holds the
/// memory where it is now; device data is handed to the current stream, which its work waits on.
pub(in crate::python) fn scalar_view(slf: &Bound<'_, MemArrayBase>) -> PyResult<Py<PyAny>> {
    let (py, array) = (slf.py(), slf.get());
    let dtype = array.element_type();
    if !dtype.is_vector() {
        return Err(PyTypeError::new_err(format!(
            "scalar_view() shows the lanes of a vector dtype (float32x4) as a last axis; {} elements are single \
             values already, so use the array itself",
            dtype.name
        )));
    }
    crate::process::join(py)?;
    let stream = crate::current_stream::resolve(None);
    let tensor = array.read(py, |core| crate::python::export::capsule::export_lanes(core, stream))?;
    let source = Source { stream: Some(stream), ..source::from_tensor(tensor)? };
    wrap_source(py, source, None)
}

/// `amso.from_dlpack(obj, *, copy=None)`: an amso array over `obj`'s memory (or a copy of it
/// with copy=True), for any object with `__dlpack__`. The memory is read through the fastest
/// protocol `obj` speaks (NumPy's struct, the exchange API, `__dlpack__`); a copy is asked of
/// `__dlpack__` itself.
#[pyfunction]
#[pyo3(signature = (obj, *, copy = None))]
pub(in crate::python) fn from_dlpack(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    copy: Option<bool>,
) -> PyResult<Py<PyAny>> {
    if !obj.hasattr(pyo3::intern!(py, "__dlpack__"))? {
        return Err(PyTypeError::new_err(format!(
            "{} has no __dlpack__; amso.asarray also takes the CUDA array interface and the buffer protocol",
            obj.get_type().name()?
        )));
    }
    crate::process::join(py)?;
    let protocol = match source::protocol_of(obj)? {
        Some(protocol) if copy != Some(true) => protocol,
        _ => Protocol::DLPack,
    };
    // NumPy's kinds DLPack lacks arrive named, so that structured arrays reach their record class.
    let request = Request { copy, c_contiguous: true, numpy_kinds: true, ..Request::default() };
    wrap_source(py, source::acquire_as(obj, protocol, request)?, Some(obj))
}

/// `amso._amso._wrap(obj, lanes=None)`: an amso array over `obj`'s memory by the first
/// protocol it speaks (what `amso.asarray` tries before copying); a BufferError when it speaks
/// none. With `lanes`, `obj`'s last axis holds the lanes of a vector dtype.
#[pyfunction(name = "_wrap")]
#[pyo3(signature = (obj, lanes = None))]
pub(in crate::python) fn wrap(py: Python<'_>, obj: &Bound<'_, PyAny>, lanes: Option<u16>) -> PyResult<Py<PyAny>> {
    crate::process::join(py)?;
    let protocol = source::protocol_of(obj)?.ok_or_else(|| {
        PyBufferError::new_err(format!(
            "{} object exposes no memory (DLPack, the CUDA array interface or the buffer protocol)",
            crate::error::with_article(obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into()))
        ))
    })?;
    // NumPy's kinds DLPack lacks arrive named, so that structured arrays reach their record class.
    let request = Request { c_contiguous: true, numpy_kinds: true, ..Request::default() };
    wrap_lanes(py, source::acquire_as(obj, protocol, request)?, Some(obj), lanes)
}

/// `amso._amso.from_cuda_array_interface(obj)`: an amso array over the device memory `obj`
/// describes with `__cuda_array_interface__` (version 2 or 3), keeping `obj` alive. A v3
/// `stream` is honoured: amso's work on the array waits for it.
#[pyfunction]
pub(in crate::python) fn from_cuda_array_interface(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let request = Request { c_contiguous: true, ..Request::default() };
    wrap_source(py, source::acquire_as(obj, Protocol::Interface, request)?, Some(obj))
}
