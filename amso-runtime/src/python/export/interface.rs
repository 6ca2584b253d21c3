//! `__cuda_array_interface__` (version 3): a dict per access, copied from a cached one while
//! the (address, stream) it describes is unchanged.

use pyo3::exceptions::PyAttributeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::device::Residence;
use crate::python::base::array::MemArrayBase;

/// The interface dict of `array`'s device data.
pub(in crate::python) fn cuda_array_interface<'py>(
    array: &MemArrayBase,
    py: Python<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let (address, stream, readonly) = array.read(py, |object| {
        let view = object.raw_view();
        if view.residence() != Residence::Device {
            return Err(PyAttributeError::new_err(
                "__cuda_array_interface__: the data is in host memory; call move_memory(kDLCUDA) first",
            ));
        }
        let address = view.data_address(None)?;
        view.share_device_memory();
        #[cfg(feature = "cuda")]
        let stream = published_stream(view.device().id, object.stream())?;
        #[cfg(not(feature = "cuda"))]
        let stream = object.stream();
        Ok((address, stream, view.readonly()))
    })?;
    let cached = {
        let cache = array.interface_cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.as_ref().filter(|(a, s, _)| *a == address && *s == stream).map(|(_, _, dict)| dict.clone_ref(py))
    };
    if let Some(interface) = cached {
        return interface.bind(py).copy();
    }
    let interface = PyDict::new(py);
    // A vector's lanes are a last axis of its lane type (the typestr's).
    interface.set_item(intern!(py, "shape"), crate::python::export::numpy_io::numpy_shape(py, array)?)?;
    interface.set_item(intern!(py, "typestr"), array.element_type().typestr)?;
    if array.element_type().is_record() {
        interface.set_item(intern!(py, "descr"), record_descr(py, array.element_type())?)?;
    }
    interface.set_item(intern!(py, "data"), (address, readonly))?;
    interface.set_item(intern!(py, "version"), 3)?;
    interface.set_item(intern!(py, "strides"), py.None())?;
    interface.set_item(intern!(py, "stream"), stream)?;
    let replaced = array.interface_cache.lock().unwrap_or_else(|e| e.into_inner()).replace((
        address,
        stream,
        interface.clone().unbind(),
    ));
    drop(replaced); // outside the cache's lock
    interface.copy()
}

/// A record's `descr` (the array interface's field list: `(name, typestr[, shape])`, C's
/// padding as `('', '|V<n>')` entries), which CuPy and Numba read into a structured dtype.
fn record_descr<'py>(py: Python<'py>, dtype: &crate::element::DType) -> PyResult<Bound<'py, pyo3::types::PyList>> {
    let descr = pyo3::types::PyList::empty(py);
    for stretch in crate::element::record_stretches(dtype) {
        match stretch {
            crate::element::Stretch::Gap(bytes) => descr.append(("", format!("|V{bytes}")))?,
            crate::element::Stretch::Field(field) if field.shape.is_empty() => {
                descr.append((field.name, field.dtype.typestr))?
            }
            crate::element::Stretch::Field(field) => {
                descr.append((field.name, field.dtype.typestr, PyTuple::new(py, field.shape)?))?
            }
        }
    }
    Ok(descr)
}

/// The stream to publish. While a capture amso has seen is in progress on the device, the
/// array's pending work is completed first and no stream is published: a capturing consumer
/// would otherwise wait on a stream outside its capture, which invalidates it.
#[cfg(feature = "cuda")]
fn published_stream(
    device_id: crate::device::DeviceId,
    stream: Option<crate::stream::Stream>,
) -> crate::error::Result<Option<crate::stream::Stream>> {
    use crate::cuda::{capture, stream as streams};
    match stream {
        Some(value) if capture::in_progress(Some(device_id)) => {
            streams::synchronize(device_id, streams::StreamHandle::of(value)?)?;
            Ok(None)
        }
        other => Ok(other),
    }
}
