//! An op's eager entry (the `#[pyfunction]` that takes any framework's arrays as typed
//! arguments) and the module registration that tells `amso.ops` what the op is.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::buffer::{Buffer, BufferMut};
use super::signature::{self, panic_message, Dim, Op, OpResult, Param};
use super::xla;
use crate::device::{Device, DeviceType};
use crate::element::Element;
use crate::python::{ArrayMut, ArrayRef};
use crate::stream::Stream;

/// Put `op` in `module`: its eager function under the op's name, and its description in the
/// module's `__amso_ops__`, which `amso.ops.jax()` and `amso.ops.torch()` read.
pub fn add(module: &Bound<'_, PyModule>, op: &'static Op) -> PyResult<()> {
    let py = module.py();
    module.add_function((op.eager)(module)?)?;
    let registry = match module.getattr("__amso_ops__") {
        Ok(registry) => registry.cast_into::<PyDict>()?,
        Err(_) => {
            let registry = PyDict::new(py);
            module.add("__amso_ops__", &registry)?;
            module.add_function(pyo3::wrap_pyfunction!(xla_version, module)?)?;
            registry
        }
    };
    registry.set_item(op.name, describe(py, op)?)
}

/// `__amso_xla_version__(major, minor)`: the FFI version this module's handlers report (the
/// running jaxlib's header's, which XLA requires).
#[pyfunction]
#[pyo3(name = "__amso_xla_version__")]
fn xla_version(major: u32, minor: u32) {
    xla::set_version(major, minor);
}

/// The op as `amso.ops` reads it.
fn describe<'py>(py: Python<'py>, op: &Op) -> PyResult<Bound<'py, PyDict>> {
    let params = PyList::empty(py);
    for param in op.params {
        let entry = PyDict::new(py);
        match *param {
            Param::Input { name, dtype, ndim } | Param::Output { name, dtype, ndim, .. } => {
                let output = matches!(param, Param::Output { .. });
                entry.set_item("name", name)?;
                entry.set_item("role", if output { "output" } else { "input" })?;
                entry.set_item("dtype", dtype.name)?;
                entry.set_item("ndim", ndim)?;
                entry.set_item("xla_dtype", xla::dtype_code(dtype))?;
                if let Param::Output { shape, .. } = param {
                    let rule = PyList::empty(py);
                    for dim in *shape {
                        rule.append(match *dim {
                            Dim::Like(input) => ("like", input.into_pyobject(py)?.into_any()),
                            Dim::Of(input, axis) => ("of", (input, axis).into_pyobject(py)?.into_any()),
                            Dim::Attr(attr) => ("attr", attr.into_pyobject(py)?.into_any()),
                            Dim::Fixed(size) => ("fixed", size.into_pyobject(py)?.into_any()),
                        })?;
                    }
                    entry.set_item("shape", rule)?;
                }
            }
            Param::Attr { name, kind } => {
                entry.set_item("name", name)?;
                entry.set_item("role", "attr")?;
                entry.set_item("kind", kind.name())?;
            }
            Param::Stream => entry.set_item("role", "stream")?,
        }
        params.append(entry)?;
    }
    let handlers = PyList::empty(py);
    for handler in op.xla {
        // SAFETY: a capsule over the handler itself (not a box), as `jax.ffi.register_ffi_target`
        // takes it; the name is the one XLA's own capsules carry.
        let capsule = unsafe {
            pyo3::ffi::PyCapsule_New(handler as *mut std::ffi::c_void, c"xla._CUSTOM_CALL_TARGET".as_ptr(), None)
        };
        // SAFETY: a new reference, or NULL with an exception set.
        handlers.append(unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?)?;
    }
    let description = PyDict::new(py);
    description.set_item("name", op.name)?;
    description.set_item("platforms", op.platforms.names().to_vec())?;
    description.set_item("params", params)?;
    description.set_item("xla", handlers)?;
    Ok(description)
}

/// Where an argument's memory is, as its producer said.
struct Located {
    device: Device,
    c_order: bool,
    stream: Option<Stream>,
}

/// One eager call of an op: its arguments as buffers, checked to be on one device the op runs
/// on, and the stream to work on. Generated code only.
#[doc(hidden)]
pub struct Eager {
    op: &'static Op,
    device: Option<(Device, &'static str)>,
    /// The first output's stream, then the inputs' (ordered before it, and after it when done).
    streams: Vec<Stream>,
    has_output_stream: bool,
    /// Each buffer's (name, address, bytes, written), refused when a written one overlaps another.
    ranges: Vec<(&'static str, usize, usize, bool)>,
}

impl Eager {
    pub fn new(op: &'static Op) -> Eager {
        Eager { op, device: None, streams: Vec::new(), has_output_stream: false, ranges: Vec::new() }
    }

    /// Refuse outputs whose shapes differ from their rules (`signature::check_outputs`).
    pub fn check_outputs(&self, shapes: &[(&str, &[usize])], attrs: &[(&str, i64)]) -> PyResult<()> {
        signature::check_outputs(self.op, shapes, attrs)
            .map_err(|message| PyValueError::new_err(format!("{}(): {message}", self.op.name)))
    }

    /// Record a buffer's memory, refused when it overlaps a written one (or is written and
    /// overlaps any): the same CUDA array as an input and an output, say. (Host arrays are
    /// refused earlier, by the typed arguments' borrows.)
    fn claim(&mut self, name: &'static str, address: usize, bytes: usize, written: bool) -> PyResult<()> {
        self.ranges.push((name, address, bytes, written));
        match signature::overlap(&self.ranges) {
            Some((first, second)) => Err(PyValueError::new_err(format!(
                "{}(): arguments '{first}' and '{second}' share memory, and one of them is written; pass a copy",
                self.op.name
            ))),
            None => Ok(()),
        }
    }

    /// Argument `name`, read, as a buffer.
    pub fn input<'a, T: Element, const N: usize>(
        &mut self,
        argument: &'a ArrayRef<'_, T, N>,
        name: &'static str,
    ) -> PyResult<Buffer<'a, T, N>> {
        let at = Located { device: argument.device(), c_order: argument.is_c_contiguous(), stream: argument.stream() };
        let host = || Ok(argument.as_slice()?.as_ptr() as usize);
        let (data, device) =
            self.locate(name, at, false, argument.data_address(), argument.len() * size_of::<T>(), host)?;
        // SAFETY: C-order elements of the argument's shape on `device`, held and borrowed by
        // the argument (which outlives the buffer); no written buffer of the call overlaps it.
        Ok(unsafe { Buffer::new(data, argument.dim(), device) })
    }

    /// Argument `name`, written, as a buffer.
    pub fn output<'a, T: Element, const N: usize>(
        &mut self,
        argument: &'a mut ArrayMut<'_, T, N>,
        name: &'static str,
    ) -> PyResult<BufferMut<'a, T, N>> {
        let at = Located { device: argument.device(), c_order: argument.is_c_contiguous(), stream: argument.stream() };
        let (shape, address, bytes) = (argument.dim(), argument.data_address(), argument.len() * size_of::<T>());
        let host = || Ok(argument.as_slice_mut()?.as_mut_ptr() as usize);
        let (data, device) = self.locate(name, at, true, address, bytes, host)?;
        // SAFETY: as `input`, borrowed exclusively by the writable argument, and overlapping no
        // other buffer of the call.
        Ok(unsafe { BufferMut::new(data, shape, device) })
    }

    /// Place argument `name` (`place`) and claim its memory (`claim`): its first element's
    /// address, `address` on a device, `host()` on the host (the argument's aligned copy of a
    /// misaligned array), and the device it is read on.
    fn locate(
        &mut self,
        name: &'static str,
        at: Located,
        written: bool,
        address: usize,
        bytes: usize,
        host: impl FnOnce() -> PyResult<usize>,
    ) -> PyResult<(usize, Device)> {
        let device = self.place(name, at.device, at.c_order, at.stream, written)?;
        let data = if device.device_type == DeviceType::Cuda { address } else { host()? };
        self.claim(name, data, bytes, written)?;
        Ok((data, device))
    }

    fn place(
        &mut self,
        name: &'static str,
        device: Device,
        c_order: bool,
        stream: Option<Stream>,
        output: bool,
    ) -> PyResult<Device> {
        let device = match device.device_type {
            DeviceType::Cuda => device,
            _ => Device::CPU, // pinned and managed memory is read on the host
        };
        let cuda = device.device_type == DeviceType::Cuda;
        if let Some(refusal) = self.op.refusal(cuda) {
            return Err(PyValueError::new_err(format!("argument '{name}': {refusal}")));
        }
        match self.device {
            Some((first, first_name)) if first != device => {
                return Err(PyValueError::new_err(format!(
                "{}(): arguments '{first_name}' and '{name}' must be on the same device, got {first:?} and {device:?}",
                self.op.name
            )))
            }
            None => self.device = Some((device, name)),
            _ => {}
        }
        if !c_order {
            return Err(PyValueError::new_err(format!(
                "argument '{name}': {}() takes arrays in C order (its buffers are dense), got a strided one; pass a \
                 contiguous copy (np.ascontiguousarray(x), x.contiguous(), cupy.ascontiguousarray(x))",
                self.op.name
            )));
        }
        if let Some(stream) = stream.filter(|_| cuda) {
            if output && !self.has_output_stream {
                self.streams.insert(0, stream);
                self.has_output_stream = true;
            } else {
                self.streams.push(stream);
            }
        }
        Ok(device)
    }

    /// The stream to work on: the first output's (the caller's current stream for PyTorch,
    /// amso's stream rule for the others), after each input's stream.
    pub fn stream(&self) -> PyResult<Stream> {
        let Some(&stream) = self.streams.first() else { return Ok(Stream::default()) };
        #[cfg(feature = "cuda")]
        if let Some((device, _)) = self.device {
            for &earlier in self.streams.iter().skip(1).filter(|&&s| s != stream) {
                // SAFETY: streams the arguments' producers reported for their live data.
                unsafe { crate::cuda::order_streams(device.id, earlier, stream) }?;
            }
        }
        Ok(stream)
    }

    /// Run the op's function without the GIL: its error or panic as a `RuntimeError`.
    pub fn run<R: OpResult>(&self, py: Python<'_>, function: impl FnOnce() -> R + Send) -> PyResult<()> {
        let name = self.op.name;
        let outcome =
            py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| function().into_message())));
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(PyRuntimeError::new_err(format!("{name}(): {message}"))),
            Err(payload) => {
                Err(PyRuntimeError::new_err(format!("{name}() panicked: {}", panic_message(payload.as_ref()))))
            }
        }
    }
}
