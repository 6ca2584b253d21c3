//! Pickle and copy. `__reduce_ex__` hands host data out of band (protocol 5: a `PickleBuffer`
//! over the array's own memory) or inline (protocols 2-4: bytes), and device data through one
//! host copy (out of band from protocol 5). The module that registered the class carries
//! `_amso_rebuild`, which restores the array, adopting the buffer it gets where it can (no
//! copy) and checking everything it reads: a truncated or altered pickle is a clear error.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeWarning, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::device::{Device, Residence};
use crate::error::Error;
use crate::memarray::rebuild::{plan_rebuild, Pickled, PickledData, RebuildMemory};
use crate::memarray::{ArrayOptions, ForeignMemory};
use crate::python::base::array::MemArrayBase;
use crate::python::base::convert::ShapeArg;
use crate::python::base::registry::{self, Registration};
use crate::python::export::buffer::RawBytes;

/// The name of the rebuild function in a registering module.
pub(super) const REBUILD: &str = "_amso_rebuild";

/// This runtime's registration of `slf`'s class (for a Python subclass, the amso class it
/// derives from: pickles and copies are of that class).
fn registration_of(slf: &Bound<'_, MemArrayBase>) -> PyResult<&'static Registration> {
    registry::of_object(slf.as_any()).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{} is not a registered amso class",
            slf.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })
}

/// `a.__reduce_ex__(protocol)`.
pub(super) fn reduce<'py>(slf: &Bound<'py, MemArrayBase>, protocol: i64) -> PyResult<Bound<'py, PyTuple>> {
    let (py, array) = (slf.py(), slf.get());
    let registration = registration_of(slf)?;
    let rebuild = py.import(registration.module)?.getattr(REBUILD)?;
    let (readonly, pinned, device, nbytes) = array.read(py, |object| {
        let raw = object.raw_view();
        let device = (raw.residence() == Residence::Device).then(|| raw.device_id());
        (raw.readonly(), raw.pinned(), device, raw.nbytes())
    });
    let pickle_buffer = || py.import(intern!(py, "pickle"))?.getattr(intern!(py, "PickleBuffer"));
    let data = match device {
        // Out of band, no copy: the array's own host memory, as a raw byte buffer.
        None if protocol >= 5 => pickle_buffer()?.call1((Bound::new(py, RawBytes::from(slf))?,))?,
        None => PyBytes::new_with(py, nbytes, |out| {
            // SAFETY: `out` is a fresh bytes object of `nbytes` writable bytes.
            Ok(array.read(py, |object| unsafe { object.raw_view().copy_to(out.as_mut_ptr(), nbytes, None) })?)
        })?
        .into_any(),
        // Device data: one copy into a fresh host buffer (NumPy's `empty`, never zeroed), through
        // amso's pinned staging pipeline; out of band from protocol 5 on.
        Some(_) => {
            let host = crate::python::npyffi::dtype::numpy(py)?
                .call_method1(intern!(py, "empty"), (nbytes, intern!(py, "uint8")))?;
            // The buffer is held through the copy: its view is the memory written.
            let buffer = crate::python::export::numpy_io::writable_bytes(py, &host, nbytes)?;
            let address = buffer.buf_ptr() as usize;
            // SAFETY: `host` holds `nbytes` writable bytes and lives through the copy, which
            // is complete when this returns.
            array.read_detached(py, |object| unsafe { object.raw_view().copy_to(address as *mut u8, nbytes, None) })?;
            if protocol >= 5 {
                pickle_buffer()?.call1((host,))?
            } else {
                host
            }
        }
    };
    let dims = PyTuple::new(py, array.header().dims())?;
    // The class's name picks the same class when a module registers several of one dtype/ndim.
    let arguments =
        (array.element_type().name, dims, readonly, pinned, device, data, registration.name).into_pyobject(py)?;
    PyTuple::new(py, [rebuild, arguments.into_any()])
}

/// `_amso_rebuild(dtype, shape, readonly, pinned, device, data)`: the array a pickle describes.
///
/// Host data adopts the buffer it arrives in, without a copy (protocol 5's out-of-band buffer,
/// or the bytes of an in-band one), as imported memory does: the array keeps the buffer alive.
/// It is copied instead when the buffer is read-only and the array is not, when it is not
/// aligned for the element type, or when the array was pinned (a pickle's buffer is not pinned
/// memory: the data goes into fresh pinned memory). Device data is uploaded to the device
/// (asynchronously, on the stream rule's stream) through amso's staging pipeline. Which of
/// these, and whether the arguments describe an array at all, is `plan_rebuild`'s decision.
#[pyfunction]
#[pyo3(name = "_amso_rebuild", signature = (dtype, shape, readonly, pinned, device, data, class = None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn rebuild(
    py: Python<'_>,
    dtype: &str,
    shape: ShapeArg,
    readonly: bool,
    pinned: bool,
    device: Option<i32>,
    data: &Bound<'_, PyAny>,
    class: Option<&str>,
) -> PyResult<Py<PyAny>> {
    let dims = shape.0;
    let buffer = PyBuffer::<u8>::get(data).map_err(|_| {
        PyTypeError::new_err(format!(
            "the pickled array data must be a bytes-like object, got {}",
            data.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    let data = PickledData {
        address: buffer.buf_ptr() as usize,
        len: buffer.len_bytes(),
        readonly: buffer.readonly(),
        c_contiguous: buffer.is_c_contiguous(),
    };
    let pickled = Pickled { dtype, dims: &dims, readonly, pinned, device, data };
    // The class's name picks the same class when a module registers several of one dtype/ndim.
    let find = |ndim| {
        let by_class = class.and_then(|name| registry::find_class_name(name, dtype, ndim));
        let registration = by_class
            .or_else(|| registry::find_name(dtype, ndim))
            .ok_or_else(|| Error::WrongValueType(format!("cannot unpickle: {}", registry::uncompiled(dtype, ndim))))?;
        Ok((registration, registration.ops))
    };
    let plan = plan_rebuild(&pickled, find, cuda_devices())?;
    for note in plan.notes {
        warn(py, &std::ffi::CString::new(note)?)?;
    }
    let (registration, address) = (plan.class, data.address);
    let array = match plan.memory {
        RebuildMemory::Adopt => {
            let memory = ForeignMemory { address, device: Device::CPU, owner: Box::new(buffer) };
            // SAFETY: the buffer holds exactly the array's bytes, C-contiguous and aligned for
            // its elements (the plan's checks); `memory` owns the buffer export, which keeps
            // them alive.
            unsafe { registration.wrap(&dims, memory, readonly) }?
        }
        RebuildMemory::Upload { device_id } => {
            let options = ArrayOptions { device_id, on_device: true, uninitialized: true, ..Default::default() };
            let mut array = registration.create(&dims, options)?;
            // SAFETY: the buffer holds the array's bytes (the plan's checks), alive for the
            // call; the upload has read them when it returns.
            unsafe { array.upload_from(address as *const u8, plan.bytes, crate::current_stream::resolve(None)) }?;
            if readonly {
                array.make_readonly();
            }
            array
        }
        RebuildMemory::Copy { pinned } => {
            let mut array = registration.create(&dims, ArrayOptions { pinned, ..Default::default() })?;
            // SAFETY: the buffer is a live C-contiguous run of exactly the array's bytes.
            unsafe { array.copy_from(address as *const u8, plan.bytes, None) }?;
            if readonly {
                array.make_readonly();
            }
            array
        }
    };
    (registration.instance)(py, MemArrayBase::new(array))
}

/// `a.copy()`, `copy.copy(a)`, `copy.deepcopy(a)`: an independent array on the same device
/// (a device-to-device copy for device data).
pub(super) fn duplicate(slf: &Bound<'_, MemArrayBase>) -> PyResult<Py<PyAny>> {
    let (py, array) = (slf.py(), slf.get());
    let registration = registration_of(slf)?;
    let copy = array.read_detached(py, |object| object.duplicate(None))?;
    (registration.instance)(py, MemArrayBase::new(copy))
}

/// Number of CUDA devices (0 without a driver or the CUDA layer).
fn cuda_devices() -> i32 {
    #[cfg(feature = "cuda")]
    return crate::cuda::device_count().unwrap_or(0);
    #[cfg(not(feature = "cuda"))]
    0
}

fn warn(py: Python<'_>, message: &std::ffi::CStr) -> PyResult<()> {
    PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), message, 1)
}
