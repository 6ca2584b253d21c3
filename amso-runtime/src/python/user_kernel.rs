//! `amso.cuda.Kernel(source, name, *, options=())`, called as CuPy's `RawKernel` is:
//! `k(grid, block, args, *, stream=None, shared_mem=0)`. Array arguments (amso arrays, and any
//! C-contiguous CUDA array with DLPack or the CUDA array interface: PyTorch, CuPy, JAX) pass as
//! `amso::Indexer<T, N>` by value; scalars as their C type. The stream follows amso's rule:
//! the explicit `stream`, else the current work stream of an argument's framework (PyTorch's
//! current stream), else `amso.cuda.stream(...)`, else amso's stream.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyComplex, PyFloat, PyInt};

use crate::cuda::add_index::AnyRankIndexer;
use crate::cuda::{with_stream, LaunchConfig, PushKernelArg};
use crate::device::{DeviceId, DeviceType};
use crate::python::base::array::MemArrayBase;
use crate::python::base::convert::StreamArg;
use crate::python::source::{self, Holder, Source};
use crate::stream::Stream;

/// A CUDA kernel compiled from source on first use per device (Python name
/// `amso._amso.Kernel`, exported as `amso.cuda.Kernel`).
#[pyclass(frozen, module = "amso._amso", name = "Kernel")]
pub struct UserKernel {
    kernel: crate::cuda::Kernel,
}

/// One kernel argument, as the launch passes it.
enum Argument {
    Array(AnyRankIndexer),
    Bool(bool),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
    C64(Complex<f32>),
    C128(Complex<f64>),
}

/// A complex scalar as `amso::complex64_t` / `complex128_t` (`{ re, im }`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Complex<T> {
    re: T,
    im: T,
}

// SAFETY: `#[repr(C)]` plain data, the layout of amso.cuh's complex types.
unsafe impl<T: Copy> cudarc::driver::DeviceRepr for Complex<T> {}

/// How an array argument is held until the kernel is queued.
enum Held {
    /// An amso array of this module: its pending work was ordered first; record afterwards.
    Own(Py<MemArrayBase>),
    /// Another producer's memory, from the exchange API, DLPack or the interface dict.
    Foreign(#[allow(dead_code)] Holder),
}

/// The device of an array argument, from what it says without handing anything over: an amso
/// header, `__dlpack_device__`, or the interface's address.
fn device_of_argument(arg: &Bound<'_, PyAny>) -> Option<crate::device::Device> {
    if let Some(header) = crate::python::base::recognize::header_of_object(arg) {
        let placement = header.placement();
        return Some(crate::device::Device {
            device_type: DeviceType::from_code(placement.device_type).unwrap_or(DeviceType::Cpu),
            id: DeviceId::new(placement.device_id).ok()?,
        });
    }
    let py = arg.py();
    if let Ok(Some(method)) = arg.getattr_opt(intern!(py, "__dlpack_device__")) {
        let (kind, id): (i32, i32) = method.call0().ok()?.extract().ok()?;
        return Some(crate::device::Device {
            device_type: DeviceType::from_code(kind).ok()?,
            id: DeviceId::new(id).ok()?,
        });
    }
    let interface = source::parse_interface(arg).ok()?;
    Some(crate::device::Device::cuda(source::device_of(interface.address).ok()?))
}

/// Grid or block dimensions: an int or a tuple of 1 to 3 ints.
struct Dims(u32, u32, u32);

impl<'a, 'py> FromPyObject<'a, 'py> for Dims {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let values: Vec<u32> = if let Ok(single) = obj.extract::<u32>() {
            vec![single]
        } else {
            obj.extract::<Vec<u32>>().map_err(|_| {
                PyTypeError::new_err("grid and block must be a positive int or a tuple of 1 to 3 positive ints")
            })?
        };
        match values[..] {
            [x] | [x, 1] | [x, 1, 1] if x > 0 => Ok(Dims(x, 1, 1)),
            [x, y] | [x, y, 1] if x > 0 && y > 0 => Ok(Dims(x, y, 1)),
            [x, y, z] if x > 0 && y > 0 && z > 0 => Ok(Dims(x, y, z)),
            _ => Err(PyValueError::new_err(format!("grid and block must hold 1 to 3 positive ints, got {values:?}"))),
        }
    }
}

fn position_error<E: pyo3::PyTypeInfo>(position: usize, message: impl std::fmt::Display) -> PyErr {
    PyErr::new::<E, _>(format!("kernel argument {position}: {message}"))
}

/// A scalar argument as its C type: Python bool, int (int64_t), float (double) and complex
/// (complex128), or a NumPy scalar as its own type.
fn scalar(position: usize, value: &Bound<'_, PyAny>) -> PyResult<Option<Argument>> {
    let py = value.py();
    if value.is_instance_of::<PyBool>() {
        return Ok(Some(Argument::Bool(value.extract()?)));
    }
    if value.is_instance_of::<PyInt>() {
        let int = value.extract::<i64>().map_err(|_| {
            position_error::<PyOverflowError>(position, "a Python int is passed as int64_t, and this one does not fit")
        })?;
        return Ok(Some(Argument::I64(int)));
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(Some(Argument::F64(value.extract()?)));
    }
    if value.is_instance_of::<PyComplex>() {
        let c = value.cast::<PyComplex>()?;
        return Ok(Some(Argument::C128(Complex { re: c.real(), im: c.imag() })));
    }
    let numpy = crate::python::npyffi::dtype::numpy(py)?;
    if !value.is_instance(&numpy.getattr(intern!(py, "generic"))?)? {
        return Ok(None);
    }
    let dtype = value.getattr(intern!(py, "dtype"))?;
    let kind: String = dtype.getattr(intern!(py, "kind"))?.extract()?;
    let size: usize = dtype.getattr(intern!(py, "itemsize"))?.extract()?;
    let item = value.call_method0(intern!(py, "item"))?;
    Ok(Some(match (kind.as_str(), size) {
        ("b", 1) => Argument::Bool(item.extract()?),
        ("i", 1) => Argument::I8(item.extract()?),
        ("i", 2) => Argument::I16(item.extract()?),
        ("i", 4) => Argument::I32(item.extract()?),
        ("i", 8) => Argument::I64(item.extract()?),
        ("u", 1) => Argument::U8(item.extract()?),
        ("u", 2) => Argument::U16(item.extract()?),
        ("u", 4) => Argument::U32(item.extract()?),
        ("u", 8) => Argument::U64(item.extract()?),
        ("f", 2) => Argument::U16(value.call_method1(intern!(py, "view"), ("uint16",))?.extract()?),
        ("f", 4) => Argument::F32(item.extract()?),
        ("f", 8) => Argument::F64(item.extract()?),
        ("c", 8) => {
            let c = item.cast::<PyComplex>()?;
            Argument::C64(Complex { re: c.real() as f32, im: c.imag() as f32 })
        }
        ("c", 16) => {
            let c = item.cast::<PyComplex>()?;
            Argument::C128(Complex { re: c.real(), im: c.imag() })
        }
        _ => {
            return Err(position_error::<PyTypeError>(
                position,
                format!("NumPy scalars of dtype {} have no kernel parameter type", dtype.str()?),
            ))
        }
    }))
}

/// An array argument's indexer from its source: CUDA device data in C order.
fn indexer(py: Python<'_>, position: usize, source: &Source) -> PyResult<AnyRankIndexer> {
    if source.device.device_type != DeviceType::Cuda {
        return Err(position_error::<PyValueError>(
            position,
            "the array is in host memory; kernels take CUDA device arrays (move_memory(kDLCUDA), or .cuda())",
        ));
    }
    let extents = source.extents(py);
    let dims = extents.dims;
    let contiguous = extents.strides.check_c_contiguous(dims, source.itemsize()).is_ok();
    if !contiguous || dims.is_empty() || dims.len() > crate::shape::MAX_NDIM {
        return Err(position_error::<PyValueError>(
            position,
            format!(
                "kernels take C-contiguous arrays of 1 to {} dimensions, got shape {:?} with strides {:?}",
                crate::shape::MAX_NDIM,
                dims,
                extents.strides
            ),
        ));
    }
    let mut shape = [0u64; crate::shape::MAX_NDIM];
    for (axis, &dim) in dims.iter().enumerate() {
        shape[axis] = dim as u64;
    }
    Ok(AnyRankIndexer { data: source.data as u64, shape })
}

/// Pass 1 of a launch: the arrays of frameworks with the exchange API acquired (their current
/// work stream is the launch stream unless one is given), the device the arrays are on, and
/// the launch stream: `explicit`, else such a producer's, the stream context's or amso's own.
fn plan(args: &[Bound<'_, PyAny>], explicit: Option<Stream>) -> PyResult<(Vec<Option<Source>>, DeviceId, Stream)> {
    let mut early: Vec<Option<Source>> = Vec::with_capacity(args.len());
    for arg in args {
        let exchange = arg.cast::<MemArrayBase>().is_err()
            && crate::python::base::recognize::header_of_object(arg).is_none()
            && source::exchange_api_of_type(&arg.get_type())?.is_some();
        early.push(if exchange { source::acquire(arg, None)? } else { None });
    }
    let device = early
        .iter()
        .flatten()
        .map(|s| s.device)
        .chain(args.iter().filter_map(|arg| device_of_argument(arg)))
        .find(|d| d.device_type == DeviceType::Cuda)
        .map_or(DeviceId::ZERO, |d| d.id);
    let launch = match explicit {
        Some(explicit) => explicit,
        None => match early.iter().flatten().find_map(|s| s.stream) {
            Some(producer) => producer,
            None => match crate::current_stream::current() {
                Some(context) => context,
                None => crate::cuda::stream::amso_stream(device)?.stream(),
            },
        },
    };
    Ok((early, device, launch))
}

/// What follows a launch on stream `launch`: later work waits for the kernel (amso's own
/// arrays record it, a framework's current stream is ordered after it), and arguments whose
/// streams this runtime cannot reach (another crate's arrays, DLPack or interface producers)
/// see it complete, unless a CUDA graph capture is recording it.
fn after_launch(
    py: Python<'_>,
    device: DeviceId,
    launch: Stream,
    held: &[Held],
    producer_streams: &[Stream],
    complete_before_release: bool,
) -> PyResult<()> {
    for holder in held {
        if let Held::Own(array) = holder {
            // SAFETY: the launch stream, checked by the launch's `with_stream`.
            array.get().modify(py, |array| unsafe { array.record_work(launch) })?;
        }
    }
    for &producer in producer_streams {
        // SAFETY: as above.
        unsafe { crate::cuda::order_streams(device, launch, producer) }?;
    }
    // Under a CUDA graph capture the kernel has not run: its arguments must outlive the
    // graph's launches (the caller keeps them, as with any captured framework op).
    let launch = crate::cuda::stream::StreamHandle::of(launch)?;
    if complete_before_release && !launch.check(device)?.capturing() {
        crate::cuda::stream::synchronize(device, launch)?;
    }
    Ok(())
}

/// The prepared arguments onto `builder`, in order.
fn push_arguments<'a>(builder: &mut cudarc::driver::LaunchArgs<'a>, prepared: &'a [Argument]) {
    for argument in prepared {
        match argument {
            Argument::Array(a) => builder.arg(a),
            Argument::Bool(v) => builder.arg(v),
            Argument::I8(v) => builder.arg(v),
            Argument::I16(v) => builder.arg(v),
            Argument::I32(v) => builder.arg(v),
            Argument::I64(v) => builder.arg(v),
            Argument::U8(v) => builder.arg(v),
            Argument::U16(v) => builder.arg(v),
            Argument::U32(v) => builder.arg(v),
            Argument::U64(v) => builder.arg(v),
            Argument::F32(v) => builder.arg(v),
            Argument::F64(v) => builder.arg(v),
            Argument::C64(v) => builder.arg(v),
            Argument::C128(v) => builder.arg(v),
        };
    }
}

#[pymethods]
impl UserKernel {
    #[new]
    #[pyo3(signature = (source, name, *, options = Vec::new()), text_signature = "(source, name, *, options=())")]
    fn new(source: String, name: String, options: Vec<String>) -> Self {
        UserKernel { kernel: crate::cuda::Kernel::from_source(source, name).with_options(options) }
    }

    /// Launch with `grid` and `block` (ints or tuples of up to 3), `args` (arrays as
    /// `amso::Indexer<T, N>`, scalars as their C types) on the stream amso's rule picks.
    #[pyo3(signature = (grid, block, args, *, stream = StreamArg(None), shared_mem = 0))]
    fn __call__(
        &self,
        py: Python<'_>,
        grid: Dims,
        block: Dims,
        args: &Bound<'_, PyAny>,
        stream: StreamArg,
        shared_mem: u32,
    ) -> PyResult<()> {
        let args: Vec<Bound<'_, PyAny>> = args
            .try_iter()
            .map_err(|_| PyTypeError::new_err("args must be a tuple or list of kernel arguments"))?
            .collect::<PyResult<_>>()?;
        let (early, device, launch) = plan(&args, stream.0)?;
        // Pass 2: every argument, arrays on the launch stream.
        let mut prepared = Vec::with_capacity(args.len());
        let mut held = Vec::new();
        // Another crate's amso arrays (whose streams this runtime cannot record on), and
        // DLPack or interface producers (whose pools may free a temporary on their own stream):
        // the launch completes before they are let go.
        let mut complete_before_release = false;
        let mut producer_streams = Vec::new();
        for (position, (arg, early)) in args.iter().zip(early).enumerate() {
            if let Some(value) = scalar(position, arg)? {
                prepared.push(value);
                continue;
            }
            let source = if let Some(source) = early {
                source
            } else if let Ok(own) = arg.cast::<MemArrayBase>() {
                // Ordered after amso's pending work on the array, handed to the launch stream.
                let tensor =
                    own.get().read(py, |array| crate::python::export::capsule::export_for_stream(array, launch))?;
                held.push(Held::Own(own.clone().unbind()));
                source::from_managed(tensor, Some(launch))?
            } else {
                complete_before_release = true;
                source::acquire(arg, Some(launch))?.ok_or_else(|| {
                    position_error::<PyTypeError>(
                        position,
                        format!(
                            "expected an array (DLPack, the CUDA array interface) or a scalar (bool, int, float, complex, a NumPy scalar), got {}",
                            arg.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                        ),
                    )
                })?
            };
            // Arguments that arrived on another stream (a framework's current one, another
            // crate's amso array) are ordered before the launch, and after it.
            producer_streams.extend(source.stream.filter(|&s| s != launch && !producer_streams.contains(&s)));
            if source.device.device_type == DeviceType::Cuda && source.device.id != device {
                return Err(position_error::<PyValueError>(
                    position,
                    format!("the array is on CUDA device {}, the other arrays on device {device}", source.device.id),
                ));
            }
            prepared.push(Argument::Array(indexer(py, position, &source)?));
            held.push(Held::Foreign(source.holder));
        }
        for &producer in &producer_streams {
            // SAFETY: a stream a producer reported for its live data on this device.
            unsafe { crate::cuda::order_streams(device, producer, launch) }?;
        }
        let function = self.kernel.function(device)?;
        let config = LaunchConfig {
            grid_dim: (grid.0, grid.1, grid.2),
            block_dim: (block.0, block.1, block.2),
            shared_mem_bytes: shared_mem,
        };
        let queue = |stream: &cudarc::driver::CudaStream| {
            let mut builder = stream.launch_builder(&function);
            push_arguments(&mut builder, &prepared);
            // SAFETY: the arguments are what the caller's kernel declares (the caller's
            // contract, as with CuPy's RawKernel); arrays are live device memory held above.
            unsafe { builder.launch(config) }.map(drop)
        };
        // SAFETY: the caller's explicit stream (Python callers vouch for handles, as everywhere
        // in amso), a producer's current stream, the stream context's, or amso's own.
        unsafe { with_stream(device, launch, queue) }?;
        after_launch(py, device, launch, &held, &producer_streams, complete_before_release)?;
        drop(held);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("Kernel({:?})", self.kernel.name())
    }
}
