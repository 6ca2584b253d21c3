//! An amso array and NumPy: `__array__` (a zero-copy view of host data, NumPy 2's rules),
//! `read_numpy_array` (any array-like in, NumPy's `same_kind` casting) and `to_numpy` (a fresh
//! NumPy array out). The Python work happens before or after a copy, never under the array's
//! lock; the copy itself runs detached.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::python::base::array::MemArrayBase;
use crate::python::npyffi::dtype::{numpy, numpy_dtype};

/// `a.__array__(dtype=None, copy=None)`, which `np.asarray(a)` and `np.array(a)` call: a view
/// of host data that holds the memory (read-only for read-only arrays), a copy where `dtype`
/// needs a conversion or `copy=True`, a `ValueError` where a copy is needed but `copy=False`.
/// Device data is a `TypeError`, as in CuPy: NumPy would need a silent device-to-host copy.
pub(in crate::python) fn array_view<'py>(
    slf: &Bound<'py, MemArrayBase>,
    dtype: Option<&Bound<'py, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let (py, array) = (slf.py(), slf.get());
    if array.header().placement().on_device() {
        return Err(PyTypeError::new_err(
            "the array is in CUDA device memory, and NumPy reads host memory: use a.to_numpy() for a host copy, \
             or a.move_memory(amso.dlpack.kDLCPU) first",
        ));
    }
    let np = numpy(py)?;
    let own = numpy_element(py, array.element_type())?;
    let target = match dtype {
        Some(dtype) if !dtype.is_none() => np.getattr(intern!(py, "dtype"))?.call1((dtype,))?,
        _ => own.clone(),
    };
    // A vector's own dtype (NumPy's subarray dtype) asks for the view as it is.
    let converts = !target.eq(&own)? && !target.eq(numpy_dtype(py, array.element_type())?)?;
    if converts && copy == Some(false) {
        return Err(PyValueError::new_err(format!(
            "converting {} to {} needs a copy, but copy=False was given",
            own.str()?,
            target.str()?
        )));
    }
    // NumPy imports through DLPack the dtypes it defines itself (not ml_dtypes' nor vectors).
    let dtype = array.element_type();
    let view = if dtype.numpy_module.is_none() && dtype.lanes == 1 {
        np.call_method1(intern!(py, "from_dlpack"), (slf,))?
    } else {
        // NumPy cannot import this dtype through DLPack or a typed buffer (bfloat16): view the
        // raw bytes, then the dtype.
        let raw = Bound::new(py, crate::python::export::buffer::RawBytes::from(slf))?;
        let bytes = np.call_method1(intern!(py, "frombuffer"), (raw, np.getattr(intern!(py, "uint8"))?))?;
        let typed = bytes.call_method1(intern!(py, "view"), (&own,))?;
        typed.call_method1(intern!(py, "reshape"), (numpy_shape(py, array)?,))?
    };
    match (converts, copy) {
        (false, Some(true)) => view.call_method0(intern!(py, "copy")),
        (false, _) => Ok(view),
        (true, _) => view.call_method1(intern!(py, "astype"), (target,)),
    }
}

/// `a.read_numpy_array(x)`.
pub(in crate::python) fn read_numpy_array(
    array: &MemArrayBase,
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let np = numpy(py)?;
    let source = np.call_method1(intern!(py, "asarray"), (source,))?;
    let shape = numpy_shape(py, array)?;
    let source_shape = source.getattr(intern!(py, "shape"))?;
    if !source_shape.eq(&shape)? {
        return Err(PyValueError::new_err(format!(
            "shape mismatch: the input has shape {}, the MemArray has shape {}",
            source_shape.repr()?,
            shape.repr()?
        )));
    }
    let target = numpy_element(py, array.element_type())?;
    let source_dtype = source.getattr(intern!(py, "dtype"))?;
    let castable: bool = np.call_method1(intern!(py, "can_cast"), (&source_dtype, &target, "same_kind"))?.extract()?;
    if !castable {
        return Err(PyTypeError::new_err(format!(
            "cannot cast {} to {} under the 'same_kind' rule; convert it first, e.g. with .astype()",
            source_dtype.str()?,
            target.str()?
        )));
    }
    let contiguous = np.call_method1(intern!(py, "ascontiguousarray"), (&source, &target))?;
    let buffer = PyBuffer::<u8>::get(&raw_bytes(py, &contiguous)?)?;
    let (address, len) = (buffer.buf_ptr() as usize, buffer.len_bytes());
    // SAFETY: the buffer is a live C-contiguous run of `len` bytes, held by `buffer` for the
    // call; it may be this array's own memory (a view of it), which the copy allows.
    array.modify_detached(py, |object| unsafe { object.copy_from(address as *const u8, len, None) })??;
    Ok(())
}

/// `a.to_numpy()`.
pub(in crate::python) fn to_numpy<'py>(array: &MemArrayBase, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let np = numpy(py)?;
    let shape = PyTuple::new(py, array.header().dims())?;
    let out = np.call_method1(intern!(py, "empty"), (shape, numpy_dtype(py, array.element_type())?))?;
    let nbytes = array.read(py, |object| object.raw_view().nbytes());
    let buffer = writable_bytes(py, &out, nbytes)?;
    let (address, len) = (buffer.buf_ptr() as usize, buffer.len_bytes());
    // SAFETY: `out` is a fresh, writable, C-contiguous NumPy array of `len` bytes that nothing
    // else references yet.
    array.read_detached(py, |object| unsafe { object.raw_view().copy_to(address as *mut u8, len, None) })?;
    Ok(out)
}

/// The dtype of NumPy arrays of `dtype`'s elements: `numpy_dtype`, except for a vector, whose
/// NumPy arrays are of its lane type (a trailing axis holds the lanes).
fn numpy_element<'py>(py: Python<'py>, dtype: &'static crate::element::DType) -> PyResult<Bound<'py, PyAny>> {
    let own = numpy_dtype(py, dtype)?;
    match dtype.is_vector() {
        true => own.getattr(intern!(py, "base")),
        false => Ok(own),
    }
}

/// The shape of NumPy arrays (and array interfaces) of `array`'s data: its own, and a vector's
/// lanes as a last axis.
pub(in crate::python) fn numpy_shape<'py>(py: Python<'py>, array: &MemArrayBase) -> PyResult<Bound<'py, PyTuple>> {
    let dtype = array.element_type();
    let mut dims = array.header().dims().to_vec();
    dims.extend(dtype.is_vector().then_some(i64::from(dtype.lanes)));
    PyTuple::new(py, dims)
}

/// The bytes of `out`, a fresh array NumPy made for amso to fill: refused unless it is exactly a
/// NumPy array whose own `nbytes` writable, C-contiguous bytes the buffer is (a patched
/// `numpy.empty` is not trusted). Hold the buffer while writing through it.
pub(in crate::python) fn writable_bytes(
    py: Python<'_>,
    out: &Bound<'_, PyAny>,
    nbytes: usize,
) -> PyResult<PyBuffer<u8>> {
    let exact = crate::python::npyffi::is_exact_array(out);
    let buffer = PyBuffer::<u8>::get(&raw_bytes(py, out)?)?;
    if !exact
        || buffer.buf_ptr() as usize != crate::python::npyffi::dtype::data_address(out)
        || buffer.readonly()
        || !buffer.is_c_contiguous()
        || buffer.len_bytes() != nbytes
    {
        return Err(PyTypeError::new_err(format!(
            "numpy.empty gave a {} of {} bytes{}, not a fresh writable NumPy array of {nbytes} bytes: numpy.empty is \
             patched or replaced",
            out.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into()),
            buffer.len_bytes(),
            if buffer.readonly() { ", read-only" } else { "" }
        )));
    }
    Ok(buffer)
}

/// A flat uint8 view of a C-contiguous NumPy array, for byte copies of any dtype (NumPy's
/// buffer export refuses some, such as ml_dtypes' bfloat16).
fn raw_bytes<'py>(py: Python<'py>, array: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let flat = array.call_method1(intern!(py, "reshape"), (-1,))?;
    flat.call_method1(intern!(py, "view"), (numpy(py)?.getattr(intern!(py, "uint8"))?,))
}
