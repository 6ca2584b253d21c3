//! Conversions at the Python boundary: shapes, indices, scalars and NumPy dtype objects,
//! each checked once with an error that says what was expected and what arrived.

use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyComplex, PyInt, PyIterator, PyList, PySlice, PyString, PyTuple};
use pyo3::{intern, Borrowed};

use crate::device::DeviceId;

use crate::element::{DType, Scalar};
use crate::shape::MAX_NDIM;
use crate::stream::Stream;

/// A shape as Python gives it: an integer or a sequence of integers, of at most `MAX_NDIM`
/// (a longer one is refused here, with its real length: it is no amso shape).
pub(in crate::python) struct ShapeArg(pub Vec<i64>);

impl<'a, 'py> FromPyObject<'a, 'py> for ShapeArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // Tuples and lists, the usual shapes, skip the `__index__` probe (an AttributeError
        // raised and cleared for every sequence), and say their ndim by their length.
        if obj.is_exact_instance_of::<PyTuple>() || obj.is_exact_instance_of::<PyList>() {
            let ndim = obj.len()?;
            if ndim > MAX_NDIM {
                crate::shape::check_ndim(ndim as i64)?; // refuses it, with the real count
            }
            return ShapeArg::from_items(obj.try_iter()?);
        }
        if let Some(dim) = index_like(&obj)? {
            return Ok(ShapeArg(vec![dim]));
        }
        match obj.try_iter() {
            Ok(items) => ShapeArg::from_items(items),
            Err(_) => Err(PyTypeError::new_err(format!(
                "shape must be an integer or a sequence of integers, got {}",
                type_name(&obj)
            ))),
        }
    }
}

impl ShapeArg {
    fn from_items(items: Bound<'_, PyIterator>) -> PyResult<Self> {
        let py = items.py();
        let mut items = items.into_iter();
        let mut dims = Vec::new();
        for item in items.by_ref() {
            let item = item?;
            match index_like(&item.as_borrowed())? {
                Some(dim) => dims.push(dim),
                None => {
                    return Err(PyTypeError::new_err(format!(
                        "shape dimensions must be integers, got {} ({})",
                        type_name(&item.as_borrowed()),
                        item.repr().map(|r| r.to_string()).unwrap_or_default()
                    )))
                }
            }
            if dims.len() == MAX_NDIM {
                break;
            }
        }
        // More items make no amso shape: they are counted (not converted or kept) for the
        // message, which gives the real ndim. Ctrl-C stops an endless iterator.
        let mut ndim = dims.len();
        for (counted, item) in items.enumerate() {
            item?;
            ndim += 1;
            if counted % 65_536 == 65_535 {
                py.check_signals()?;
            }
        }
        if ndim > MAX_NDIM {
            crate::shape::check_ndim(ndim as i64)?; // refuses it, with the real count
        }
        Ok(ShapeArg(dims))
    }
}

/// A stream as Python gives it: `None`, an integer handle (1 legacy default, 2 per-thread
/// default, else a `CUstream`), or any object with `__cuda_stream__` (PyTorch and cuda.core
/// streams), which returns `(version, handle)`. A NULL handle (0: CuPy's and PyTorch's
/// default stream) is the legacy default stream and reads as 1, so that no reader mistakes it
/// for "no stream given".
pub(in crate::python) struct StreamArg(pub Option<Stream>);

/// The stream a Python caller names by its protocol value: the one place where a Python int
/// becomes a `Stream` (making one from a handle is `unsafe` in Rust; these types are amso's
/// own, so no other crate's function gets one this way).
fn python_stream(value: i64) -> Stream {
    // SAFETY: Python callers vouch for the handles they pass, as everywhere in amso (a made-up
    // handle is refused where the driver reports it, or is the caller's fault, as in every
    // CUDA library).
    unsafe { Stream::from_protocol(value) }
}

/// A stream an amso Python function takes as an int only (`_lend`, the interface's `stream`).
pub(in crate::python) struct StreamValue(pub(in crate::python) Stream);

impl<'a, 'py> FromPyObject<'a, 'py> for StreamValue {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(StreamValue(python_stream(obj.extract::<i64>()?)))
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for StreamArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_none() {
            return Ok(StreamArg(None));
        }
        if let Ok(value) = obj.extract::<i64>() {
            return Ok(StreamArg(Some(python_stream(value))));
        }
        let wanted = "a stream: None, an int handle, or an object with __cuda_stream__ (a torch or cuda.core stream)";
        let protocol = obj
            .getattr_opt(intern!(obj.py(), "__cuda_stream__"))?
            .ok_or_else(|| PyTypeError::new_err(format!("expected {wanted}, got {}", type_name(&obj))))?;
        let returned = protocol.call0()?;
        let value = returned.extract::<(i64, i64)>().map(|(_version, handle)| handle).map_err(|_| {
            PyTypeError::new_err(format!(
                "{}.__cuda_stream__() must return a (version, handle) tuple of ints, got {}",
                type_name(&obj),
                returned.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        Ok(StreamArg(Some(python_stream(value))))
    }
}

/// A device as `move_memory` takes it: a DLPack device type (`amso.dlpack.kDLCPU`, `kDLCUDA`;
/// plain ints as before) or a name as `a.device` spells it: `'cpu'`, `'cuda'`, `'cuda:N'`.
pub(in crate::python) enum DeviceArg {
    /// A DLPack device type code.
    Code(i32),
    /// `'cpu'`.
    Cpu,
    /// `'cuda'` (no device number) or `'cuda:N'`.
    Cuda(Option<i32>),
}

const DEVICE_FORMS: &str = "'cpu', 'cuda', 'cuda:N' (N a device number, as a.device gives it), or a DLPack \
                            device type (amso.dlpack.kDLCPU, amso.dlpack.kDLCUDA)";

impl<'a, 'py> FromPyObject<'a, 'py> for DeviceArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(name) = obj.cast::<PyString>() {
            let name = name.to_cow()?;
            return match name.as_ref() {
                "cpu" => Ok(DeviceArg::Cpu),
                "cuda" => Ok(DeviceArg::Cuda(None)),
                other => {
                    let id = other
                        .strip_prefix("cuda:")
                        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|id| id.parse::<i32>().ok())
                        .ok_or_else(|| {
                            let given = obj.repr().map(|r| r.to_string()).unwrap_or_default();
                            PyValueError::new_err(format!("unknown device {given}; accepted: {DEVICE_FORMS}"))
                        })?;
                    Ok(DeviceArg::Cuda(Some(id))) // checked by `target_device`
                }
            };
        }
        obj.extract::<i32>().map(DeviceArg::Code).map_err(|e| {
            if e.is_instance_of::<PyTypeError>(obj.py()) {
                PyTypeError::new_err(format!("device_type must be {DEVICE_FORMS}; got {}", type_name(&obj)))
            } else {
                e
            }
        })
    }
}

fn type_name(obj: &Borrowed<'_, '_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// The integer value of an object supporting `__index__` (not bool), `None` for anything else;
/// integers beyond i64 are an OverflowError.
fn index_like(obj: &Borrowed<'_, '_, PyAny>) -> PyResult<Option<i64>> {
    if obj.is_exact_instance_of::<PyInt>() {
        return obj.extract::<i64>().map(Some); // an int too large for i64: OverflowError
    }
    if obj.is_instance_of::<PyBool>() || !obj.hasattr(intern!(obj.py(), "__index__"))? {
        return Ok(None);
    }
    match obj.extract::<i64>() {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => Err(e),
        Err(_) => Ok(None),
    }
}

/// What an index key asks for.
pub(in crate::python) enum Key {
    /// Integers only (`a[i]`, `a[i, j, ...]`): one element when there is one per dimension.
    Integers(Vec<i64>),
    /// NumPy's basic indexing with at least one slice, `...` or `None`.
    Basic,
}

/// Parse an index key: integers (the element fast path, read first), or NumPy's basic indexing
/// (integers, slices, `...`, `None`); anything else (fancy or boolean indexing, floats,
/// strings) is a TypeError that points at a NumPy view.
pub(in crate::python) fn parse_key(key: &Bound<'_, PyAny>) -> PyResult<Key> {
    if let Ok(tuple) = key.cast::<PyTuple>() {
        let mut index = Vec::with_capacity(tuple.len());
        for item in tuple.iter() {
            match integer_item(&item)? {
                Some(i) => index.push(i),
                None => return basic_key(key, tuple.iter()),
            }
        }
        return Ok(Key::Integers(index));
    }
    match integer_item(key)? {
        Some(i) => Ok(Key::Integers(vec![i])),
        None => basic_key(key, std::iter::once(key.clone())),
    }
}

/// An index item's integer value; `None` for anything else; an IndexError past i64.
fn integer_item(item: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    index_like(&item.as_borrowed()).map_err(|_| {
        PyIndexError::new_err(format!(
            "index {} does not fit in a 64-bit integer",
            item.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// `Key::Basic` if every item of `key` is an integer, a slice, `...` or `None`.
fn basic_key<'py>(key: &Bound<'py, PyAny>, items: impl Iterator<Item = Bound<'py, PyAny>>) -> PyResult<Key> {
    let py = key.py();
    for item in items {
        if item.is_none()
            || item.is_instance_of::<PySlice>()
            || item.is(py.Ellipsis())
            || integer_item(&item)?.is_some()
        {
            continue;
        }
        let kind = match item.is_instance_of::<PyBool>() {
            true => "bool: NumPy reads it as a mask".to_string(),
            false => type_name(&item.as_borrowed()),
        };
        return Err(PyTypeError::new_err(format!(
            "amso arrays take NumPy's basic indices (integers, slices, ... and None, as in a[i], a[i, j], \
             a[1:3, ::2], a[..., 0]), got {} ({kind}) in a[{}]; for fancy or boolean indexing, index a NumPy \
             view: np.asarray(a)[...]",
            item.repr().map(|r| r.to_string()).unwrap_or_default(),
            key.repr().map(|r| r.to_string()).unwrap_or_default()
        )));
    }
    Ok(Key::Basic)
}

/// A scalar as the Python object NumPy's `.item()` would give.
pub(in crate::python) fn scalar_to_py(py: Python<'_>, value: Scalar) -> PyResult<Bound<'_, PyAny>> {
    Ok(match value {
        Scalar::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Scalar::Int(i) => i.into_pyobject(py)?.into_any(),
        Scalar::UInt(u) => u.into_pyobject(py)?.into_any(),
        Scalar::Float(f) => f.into_pyobject(py)?.into_any(),
        Scalar::Complex(re, im) => PyComplex::from_doubles(py, re, im).into_any(),
    })
}

/// A Python number as a scalar for an element of `dtype`.
pub(in crate::python) fn scalar_from_py(value: &Bound<'_, PyAny>, dtype: &DType) -> PyResult<Scalar> {
    let py = value.py();
    if value.is_instance_of::<PyBool>() {
        return Ok(Scalar::Bool(value.extract()?));
    }
    // `__index__` that fails (a NumPy array of several elements has one) is not an integer.
    if let Some(value) =
        value.hasattr(intern!(py, "__index__"))?.then(|| value.call_method0(intern!(py, "__index__")).ok()).flatten()
    {
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Scalar::Int(i));
        }
        if let Ok(u) = value.extract::<u64>() {
            return Ok(Scalar::UInt(u));
        }
        return Err(PyOverflowError::new_err(format!(
            "Python integer {} out of bounds for {}",
            value.repr()?,
            dtype.name
        )));
    }
    if is_complex(value)? {
        let re: f64 = value.getattr(intern!(py, "real"))?.extract()?;
        let im: f64 = value.getattr(intern!(py, "imag"))?.extract()?;
        return Ok(Scalar::Complex(re, im));
    }
    match value.extract::<f64>() {
        Ok(f) => Ok(Scalar::Float(f)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "cannot assign {} to {} element; expected a number",
            value.get_type().name()?,
            crate::error::with_article(dtype.name)
        ))),
    }
}

/// NumPy 2's `RuntimeWarning` ("overflow encountered in cast") for a finite value that becomes
/// infinite in a float32, float16 or complex64 element, as `x[i] = 1e40` warns on a NumPy array.
/// (Raised as an error where warnings are errors, before anything is written.)
pub(in crate::python) fn warn_overflow(py: Python<'_>, value: &Scalar, dtype: &DType) -> PyResult<()> {
    let overflows = |f: f64| {
        f.is_finite()
            && match dtype.name {
                "float32" | "complex64" => (f as f32).is_infinite(),
                "float16" => half::f16::from_f64(f).is_infinite(),
                _ => false,
            }
    };
    let overflow = match *value {
        Scalar::Float(f) => overflows(f),
        Scalar::Int(i) => overflows(i as f64),
        Scalar::UInt(u) => overflows(u as f64),
        Scalar::Complex(re, im) => overflows(re) || overflows(im),
        _ => false,
    };
    if overflow {
        let category = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
        PyErr::warn(py, &category, c"overflow encountered in cast", 1)?;
    }
    Ok(())
}

/// Whether `value` is complex and not real (Python complex, numpy.complex64, ...).
fn is_complex(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    if value.is_instance_of::<PyComplex>() {
        return Ok(true);
    }
    static NUMBERS: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();
    let py = value.py();
    let (complex, real) = NUMBERS.get_or_try_init(py, || -> PyResult<_> {
        let numbers = py.import("numbers")?;
        Ok((numbers.getattr("Complex")?.unbind(), numbers.getattr("Real")?.unbind()))
    })?;
    Ok(value.is_instance(complex.bind(py))? && !value.is_instance(real.bind(py))?)
}

/// `max_version` of `__dlpack__`: a `(major, minor)` tuple of non-negative ints. Read by hand:
/// NumPy passes it on every import, and generic tuple extraction costs more than the export.
pub(in crate::python) fn dlpack_version(value: &Bound<'_, PyAny>) -> PyResult<(u32, u32)> {
    let wrong = || {
        PyTypeError::new_err(format!(
            "max_version must be a (major, minor) tuple of ints, got {}",
            value.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    };
    let tuple = value.cast::<PyTuple>().map_err(|_| wrong())?;
    if tuple.len() != 2 {
        return Err(wrong());
    }
    let part = |index| -> PyResult<u32> {
        let item = tuple.get_borrowed_item(index)?;
        if item.is_exact_instance_of::<PyInt>() {
            // SAFETY: an exact int; -1 with an exception set means it does not fit a C long.
            let value = unsafe { pyo3::ffi::PyLong_AsLong(item.as_ptr()) };
            if let Ok(value) = u32::try_from(value) {
                return Ok(value);
            }
            let _ = PyErr::take(tuple.py()); // the overflow, if any: reported as `wrong` below
        }
        item.extract::<u32>().map_err(|_| wrong())
    };
    Ok((part(0)?, part(1)?))
}

/// Parse a generated constructor's `(shape, device_id=0, *, readonly=False, pinned=False,
/// on_device=False, uninitialized=False, managed=False, shareable=False)`, once for every class (instead of one parser
/// generated per class).
pub(in crate::python) fn constructor_args(
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
) -> PyResult<(ShapeArg, crate::memarray::options::ArrayOptions)> {
    if args.len() > 2 {
        return Err(PyTypeError::new_err(format!(
            "MemArray() takes at most 2 positional arguments (shape, device_id), got {}; readonly, pinned, \
             on_device, uninitialized, managed and shareable are keyword-only",
            args.len()
        )));
    }
    let mut shape = args.get_item(0).ok();
    let mut device_id = args.get_item(1).ok();
    let mut options = crate::memarray::options::ArrayOptions::default();
    if let Some(kwargs) = kwargs {
        for (key, value) in kwargs.iter() {
            let key = key.extract::<&str>()?;
            let flag = || flag_arg(key, &value);
            match key {
                "shape" if shape.is_none() => shape = Some(value),
                "device_id" if device_id.is_none() => device_id = Some(value),
                "readonly" => options.readonly = flag()?,
                "pinned" => options.pinned = flag()?,
                "on_device" => options.on_device = flag()?,
                "managed" => options.managed = flag()?,
                "shareable" => options.shareable = flag()?,
                "uninitialized" => options.uninitialized = flag()?,
                "shape" | "device_id" => {
                    return Err(PyTypeError::new_err(format!("MemArray() got multiple values for argument '{key}'")))
                }
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "MemArray() got an unexpected keyword argument '{other}'"
                    )))
                }
            }
        }
    }
    let shape = shape.ok_or_else(|| PyTypeError::new_err("MemArray() missing required argument 'shape'"))?;
    if let Some(device_id) = device_id {
        options.device_id = device_id_arg(&device_id)?;
    }
    Ok((shape.extract::<ShapeArg>()?, options))
}

/// A constructor's boolean option `name`.
pub(in crate::python) fn flag_arg(name: &str, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    value
        .extract::<bool>()
        .map_err(|_| PyTypeError::new_err(format!("{name} must be a bool, got {}", type_name(&value.as_borrowed()))))
}

/// A constructor's `device_id`.
pub(in crate::python) fn device_id_arg(value: &Bound<'_, PyAny>) -> PyResult<DeviceId> {
    value.extract()
}

/// A device id from Python, checked once here (`DeviceId::new`): an int, never negative, and a
/// device of this machine when a driver is loaded.
impl<'a, 'py> FromPyObject<'a, 'py> for DeviceId {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let id = obj.extract::<i32>().map_err(|error| match error.is_instance_of::<PyOverflowError>(obj.py()) {
            true => PyOverflowError::new_err(format!(
                "device_id must be a device ordinal (0 to {}), got {}; pass the index of a CUDA device of this machine",
                i32::MAX,
                obj.str().map_or_else(|_| "?".to_owned(), |text| text.to_string())
            )),
            false => PyTypeError::new_err(format!("device_id must be an int, got {}", type_name(&obj))),
        })?;
        Ok(DeviceId::new(id)?)
    }
}

impl<'py> IntoPyObject<'py> for Stream {
    type Target = PyInt;
    type Output = Bound<'py, PyInt>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        self.protocol_value().into_pyobject(py)
    }
}

impl<'py> IntoPyObject<'py> for DeviceId {
    type Target = PyInt;
    type Output = Bound<'py, PyInt>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        self.ordinal().into_pyobject(py)
    }
}
