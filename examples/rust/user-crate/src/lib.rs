//! A user's own crate, in the MemArray design's domain: particle positions and density fields.
//! It declares array classes with `#[amso_array]` and exports Rust functions that take arrays
//! from any framework (NumPy, PyTorch, CuPy, JAX, TVM-FFI, amso) as typed arguments.

mod cic;
mod ops;

use amso_macros::amso_array;
use amso_runtime::cuda::{order_streams, with_stream, Kernel, LaunchConfig, PushKernelArg};
use amso_runtime::dtypes::float8_e4m3fn;
use amso_runtime::ndarray::{Array2, ShapeBuilder};
use amso_runtime::python::{
    ArgumentError, ArrayMut, ArrayMutDyn, ArrayRef, ArrayRefDyn, Framework, IntoFramework, UntypedArray,
};
use amso_runtime::records::Particle;
use amso_runtime::{DeviceIndexer, DeviceType, Element, Stream};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The GPU deposit, written against amso.cuh (compiled by NVRTC per device on first use).
pub(crate) static CIC_KERNEL: Kernel = Kernel::new(include_str!("cic.cu"), "cic_deposit");

/// The same deposit reading each position from a particle record's `pos` (amso.cuh's
/// `amso::particle_indexer<1>`).
static CIC_RECORDS_KERNEL: Kernel = Kernel::new(include_str!("cic.cu"), "cic_deposit_records");

/// Particle positions: one row of x, y, z per particle.
#[amso_array(f32, 2)]
pub struct Positions;

/// A density field on a 3-D grid.
#[amso_array(float64, 3)]
pub struct Density;

/// Per-particle weights in half precision (the dtype named by its Rust type).
#[amso_array(half::f16, 1)]
pub struct Weights;

/// Particles as records (an array of structs): the spec's `particle`, `pos`, `vel`, `mass`
/// and `id` per element, 40 bytes each.
#[amso_array(Particle, 1)]
pub struct Particles;

/// Deposit unit-mass particles into `density` with cloud-in-cell weights and periodic
/// boundaries, accumulating: `positions` is float32 `(n, 3)` (read-only is fine), `density` a
/// writable float64 3-D grid on the same device, `box_size` the box's side.
#[pyfunction]
fn deposit(
    py: Python<'_>,
    positions: ArrayRef<'_, f32, 2>,
    mut density: ArrayMut<'_, f64, 3>,
    box_size: f64,
) -> PyResult<()> {
    check_positions("deposit", &positions, box_size)?;
    if positions.device() != density.device() {
        return Err(PyValueError::new_err(format!(
            "deposit(): arguments 'positions' and 'density' must be on the same device, got {:?} and {:?}",
            positions.device(),
            density.device()
        )));
    }
    if density.device().device_type == DeviceType::Cuda {
        let stream = density.stream().unwrap_or_default();
        return deposit_on_device(&positions, density.device_indexer()?, box_size, stream);
    }
    let (positions, density) = (positions.as_array()?, density.as_array_mut()?);
    py.detach(|| cic::deposit(positions, density, box_size));
    Ok(())
}

/// `deposit` with the particles as records (an array of structs): a 1-D array of the spec's
/// `particle` (this module's `Particles`, another amso record array of that layout, or a NumPy
/// structured array of it), each depositing unit mass at its `pos`, as `deposit` does for a
/// row of `positions` (the same sums in the same order on the host).
#[pyfunction]
fn deposit_records(
    py: Python<'_>,
    particles: ArrayRef<'_, Particle, 1>,
    mut density: ArrayMut<'_, f64, 3>,
    box_size: f64,
) -> PyResult<()> {
    check_box_size("deposit_records", box_size)?;
    if particles.device() != density.device() {
        return Err(PyValueError::new_err(format!(
            "deposit_records(): arguments 'particles' and 'density' must be on the same device, got {:?} and {:?}",
            particles.device(),
            density.device()
        )));
    }
    if density.device().device_type == DeviceType::Cuda {
        let stream = density.stream().unwrap_or_default();
        return deposit_on_device(&particles, density.device_indexer()?, box_size, stream);
    }
    let (particles, density) = (particles.as_array()?, density.as_array_mut()?);
    py.detach(|| cic::deposit_records(particles, density, box_size));
    Ok(())
}

/// The deposit kernel that reads positions of element type `Self` and rank `N`: `cic_deposit`
/// for float32 `(n, 3)` rows, `cic_deposit_records` for 1-D particle records.
trait DepositKernel<const N: usize>: Element {
    fn kernel() -> &'static Kernel;
}

impl DepositKernel<2> for f32 {
    fn kernel() -> &'static Kernel {
        &CIC_KERNEL
    }
}

impl DepositKernel<1> for Particle {
    fn kernel() -> &'static Kernel {
        &CIC_RECORDS_KERNEL
    }
}

/// Launch the deposit kernel for `positions` on `stream` (the density's: the caller's current
/// stream for PyTorch, amso's stream rule otherwise), after the positions' stream if it
/// differs: one thread per particle (a row of float32 positions, or a particle record).
fn deposit_on_device<T: DepositKernel<N>, const N: usize>(
    positions: &ArrayRef<'_, T, N>,
    density: DeviceIndexer<'_, f64, 3>,
    box_size: f64,
    stream: Stream,
) -> PyResult<()> {
    let device_id = positions.device().id;
    if let Some(earlier) = positions.stream().filter(|&s| s != stream) {
        // SAFETY: both are streams the arguments' producers reported for their live data.
        unsafe { order_streams(device_id, earlier, stream) }?;
    }
    let particles = positions.device_indexer()?;
    if particles.size() == 0 || density.size() == 0 {
        return Ok(());
    }
    let function = T::kernel().function(device_id)?;
    let blocks = (particles.shape()[0] as u64).div_ceil(256).min(65_535 * 32) as u32;
    let config = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let queue = |s: &amso_runtime::cuda::CudaStream| {
        // SAFETY: `T::kernel()` takes (Indexer<float, 2>, Indexer<double, 3>, double) for f32
        // positions, (particle_indexer<1>, Indexer<double, 3>, double) for particles, which
        // these are; both arrays are live device memory their arguments hold.
        unsafe { s.launch_builder(&function).arg(&particles).arg(&density).arg(&box_size).launch(config) }.map(drop)
    };
    // SAFETY: `stream` is the density's: its producer's current stream, or amso's.
    unsafe { with_stream(device_id, stream, queue) }?;
    Ok(())
}

/// The cloud-in-cell density of `positions` on a new zeroed float64 grid of `shape`, in the
/// caller's framework (torch in, torch out) or, for NumPy and CuPy, as an amso array.
#[pyfunction]
fn cic_density<'py>(
    py: Python<'py>,
    positions: ArrayRef<'py, f32, 2>,
    shape: [usize; 3],
    box_size: f64,
) -> PyResult<Bound<'py, PyAny>> {
    check_positions("cic_density", &positions, box_size)?;
    let mut density = positions.new_array::<f64, 3>(shape)?;
    if density.device().device_type == DeviceType::Cuda {
        let stream = density.stream().unwrap_or_default();
        deposit_on_device(&positions, density.device_indexer()?, box_size, stream)?;
        return density.into_object();
    }
    {
        let (positions, density) = (positions.as_array()?, density.as_array_mut()?);
        py.detach(|| cic::deposit(positions, density, box_size));
    }
    density.into_object()
}

fn check_positions(function: &str, positions: &ArrayRef<'_, f32, 2>, box_size: f64) -> PyResult<()> {
    if positions.shape()[1] != 3 {
        return Err(PyValueError::new_err(format!(
            "{function}(): argument 'positions' must have shape (n, 3), one row of x, y, z per particle; got {:?}",
            positions.shape()
        )));
    }
    check_box_size(function, box_size)
}

fn check_box_size(function: &str, box_size: f64) -> PyResult<()> {
    if !(box_size.is_finite() && box_size > 0.0) {
        return Err(PyValueError::new_err(format!(
            "{function}(): argument 'box_size' must be a positive number, got {box_size}"
        )));
    }
    Ok(())
}

/// Add the sum of each element's indices to it: the MemArray design's kernel, on the host.
#[pyfunction]
fn add_index_sum(mut density: ArrayMut<'_, f64, 3>) -> PyResult<()> {
    for (index, value) in density.as_array_mut()?.indexed_iter_mut() {
        *value += (index.0 + index.1 + index.2) as f64;
    }
    Ok(())
}

/// How many elements of a bool array are true (a bool argument's bytes must all be 0 or 1).
#[pyfunction]
fn count_true(flags: ArrayRef<'_, bool, 1>) -> PyResult<usize> {
    Ok(flags.as_array()?.iter().filter(|&&flag| flag).count())
}

/// The sum of a float64 array, or what kept it from one, matched in Rust on the typed error
/// (`ArgumentError`), as rust-numpy's `TypeError` and `NotContiguousError` are matched.
#[pyfunction]
fn sum_or_why(x: UntypedArray<'_>) -> PyResult<(Option<f64>, String)> {
    let x: ArrayRefDyn<'_, f64> = match x.into_typed() {
        Ok(x) => x,
        Err(ArgumentError::Kind { dtype, ndim, .. }) => return Ok((None, format!("{dtype} in {ndim}-D"))),
        Err(other) => return Err(other.into()),
    };
    match x.as_slice() {
        Ok(values) => Ok((Some(values.iter().sum()), "contiguous".into())),
        Err(ArgumentError::NotContiguous { strides, .. }) => Ok((None, format!("strides {strides:?}"))),
        Err(other) => Err(other.into()),
    }
}

/// The sum of any real array (bool, integer or floating point, any number of dimensions),
/// dispatching on the dtype it arrives with.
#[pyfunction]
fn sum_any(x: UntypedArray<'_>) -> PyResult<f64> {
    fn total<T: amso_runtime::Element + Into<f64>>(x: UntypedArray<'_>) -> PyResult<f64> {
        let x: ArrayRefDyn<'_, T> = x.into_typed()?;
        Ok(x.as_array()?.iter().map(|&v| v.into()).sum())
    }
    if x.is::<f64>() {
        total::<f64>(x)
    } else if x.is::<f32>() {
        total::<f32>(x)
    } else if x.is::<i32>() {
        total::<i32>(x)
    } else if x.is::<u8>() {
        total::<u8>(x)
    } else if x.is::<bool>() {
        let x: ArrayRefDyn<'_, bool> = x.into_typed()?;
        Ok(x.as_array()?.iter().filter(|&&v| v).count() as f64)
    } else {
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "sum_any(): unsupported dtype {}",
            x.dtype().map_or("outside the spec", |d| d.name)
        )))
    }
}

/// The sum of a float8 e4m3fn matrix (NumPy with ml_dtypes, PyTorch, JAX, amso), in float64.
#[pyfunction]
fn float8_sum(x: ArrayRef<'_, float8_e4m3fn, 2>) -> PyResult<f64> {
    Ok(x.as_array()?.iter().map(|v| f64::from(v.to_f32())).sum())
}

/// Halve a float8 e4m3fn vector in place, rounding to nearest even as ml_dtypes does.
#[pyfunction]
fn float8_halve(mut x: ArrayMut<'_, float8_e4m3fn, 1>) -> PyResult<()> {
    x.as_array_mut()?.mapv_inplace(|v| float8_e4m3fn::from_f32(v.to_f32() / 2.0));
    Ok(())
}

/// Call `callback` while holding `x` for writing: another typed argument over the same memory,
/// from any extension module, is refused meanwhile.
#[pyfunction]
fn while_writing(mut x: ArrayMutDyn<'_, f64>, callback: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let _view = x.as_array_mut()?;
    Ok(callback.call0()?.unbind())
}

/// Double the float64 array `make()` returns, holding the only reference to it: a misaligned
/// one is written back from its aligned copy before that reference goes.
#[pyfunction]
fn double_sole_reference(make: &Bound<'_, PyAny>) -> PyResult<()> {
    let mut x: ArrayMut<'_, f64, 1> = make.call0()?.extract()?;
    x.as_array_mut()?.mapv_inplace(|v| 2.0 * v);
    Ok(())
}

/// `0, 1, ..., n - 1` (float64) as a Rust `Vec` handed to `framework` without a copy, with the
/// vector's address (the tests check the framework's array uses that memory).
#[pyfunction]
fn owned_vec(py: Python<'_>, n: usize, framework: Framework) -> PyResult<(Bound<'_, PyAny>, usize)> {
    let values: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let address = values.as_ptr() as usize;
    Ok((values.into_framework(py, framework)?, address))
}

/// A (rows, columns) float32 `ndarray::Array2` holding `10 * row + column`, in Fortran order
/// when `fortran`, handed to `framework` without a copy, with the address of its first element.
#[pyfunction]
fn owned_ndarray(
    py: Python<'_>,
    rows: usize,
    columns: usize,
    fortran: bool,
    framework: Framework,
) -> PyResult<(Bound<'_, PyAny>, usize)> {
    let shape = (rows, columns).set_f(fortran);
    let values = Array2::from_shape_fn(shape, |(i, j)| (10 * i + j) as f32);
    let address = values.as_ptr() as usize;
    Ok((values.into_framework(py, framework)?, address))
}

/// A (rows, columns) float32 array whose rows are reversed (a negative stride), handed over as
/// it is.
#[pyfunction]
fn owned_reversed(py: Python<'_>, rows: usize, columns: usize, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
    let mut values = Array2::from_shape_fn((rows, columns), |(i, j)| (10 * i + j) as f32);
    values.invert_axis(amso_runtime::ndarray::Axis(0));
    values.into_framework(py, framework)
}

/// A new amso `MemArray` (float32, 1-D, 0..n), on the device when `on_device`, handed to
/// `framework` without a copy, with its data address.
#[pyfunction]
fn owned_memarray(
    py: Python<'_>,
    n: usize,
    on_device: bool,
    framework: Framework,
) -> PyResult<(Bound<'_, PyAny>, usize)> {
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut array = amso_runtime::MemArray::<f32, 1>::from_slice([n], &values)?;
    if on_device {
        array.move_memory(amso_runtime::Device::cuda(amso_runtime::DeviceId::ZERO), Stream::LEGACY, false)?;
    }
    let address = array.data_address();
    Ok((array.into_framework(py, framework)?, address))
}

/// Extract one float32 1-D argument and do nothing: the per-call cost of a typed argument.
#[pyfunction]
fn extract_one(_a: ArrayRef<'_, f32, 1>) {}

/// Extract three float32 1-D arguments and do nothing.
#[pyfunction]
fn extract_three(_a: ArrayRef<'_, f32, 1>, _b: ArrayRef<'_, f32, 1>, _c: ArrayRef<'_, f32, 1>) {}

/// The smallest and largest element, read with the GIL released: what tests of readers racing a
/// copy in another thread call (an array of one value must never read as two).
#[pyfunction]
fn min_max(py: Python<'_>, x: ArrayRef<'_, f64, 1>) -> PyResult<(f64, f64)> {
    let values = x.as_slice()?;
    Ok(py.detach(|| values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)))))
}

#[pymodule]
fn amso_user_example(module: &Bound<'_, PyModule>) -> PyResult<()> {
    amso_runtime::python::register::<Positions>(module)?;
    amso_runtime::python::register::<Density>(module)?;
    amso_runtime::python::register::<Weights>(module)?;
    amso_runtime::python::register::<Particles>(module)?;
    module.add_function(wrap_pyfunction!(deposit, module)?)?;
    amso_runtime::op::add(module, &ops::drift::OP)?;
    amso_runtime::op::add(module, &ops::density::OP)?;
    amso_runtime::op::add(module, &ops::running_sum::OP)?;
    module.add_function(wrap_pyfunction!(deposit_records, module)?)?;
    module.add_function(wrap_pyfunction!(cic_density, module)?)?;
    module.add_function(wrap_pyfunction!(add_index_sum, module)?)?;
    module.add_function(wrap_pyfunction!(count_true, module)?)?;
    module.add_function(wrap_pyfunction!(sum_any, module)?)?;
    module.add_function(wrap_pyfunction!(double_sole_reference, module)?)?;
    module.add_function(wrap_pyfunction!(sum_or_why, module)?)?;
    module.add_function(wrap_pyfunction!(while_writing, module)?)?;
    module.add_function(wrap_pyfunction!(min_max, module)?)?;
    module.add_function(wrap_pyfunction!(float8_sum, module)?)?;
    module.add_function(wrap_pyfunction!(float8_halve, module)?)?;
    module.add_function(wrap_pyfunction!(owned_vec, module)?)?;
    module.add_function(wrap_pyfunction!(owned_ndarray, module)?)?;
    module.add_function(wrap_pyfunction!(owned_reversed, module)?)?;
    module.add_function(wrap_pyfunction!(owned_memarray, module)?)?;
    module.add_function(wrap_pyfunction!(extract_one, module)?)?;
    module.add_function(wrap_pyfunction!(extract_three, module)?)
}
