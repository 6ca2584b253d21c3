//! A user's crate built against the packaged amso crates: array classes of its own, typed
//! arguments from any framework, owned results, and an element type amso's spec lacks, used in
//! a class, in typed arguments and in a CUDA kernel.

use amso_macros::{amso_array, Element};
use amso_runtime::cuda::{with_stream, Kernel, LaunchConfig, PushKernelArg};
use amso_runtime::python::{ArrayMut, ArrayRef, ArrayRefDyn, Framework, IntoFramework, UntypedArray};
use amso_runtime::DeviceType;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

/// float8 e5m2 (ml_dtypes' `float8_e5m2`, DLPack's `kDLFloat8_e5m2`), stored as its byte.
///
/// The orphan rule forbids `impl Element for float8::F8E5M2` here (a foreign trait on a
/// foreign type); a `#[repr(transparent)]` newtype of our own is allowed, and its byte is the
/// plain field the derive needs. Values convert through f32 with the `float8` crate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Element)]
#[repr(transparent)]
#[amso(name = "float8_e5m2", code = kDLFloat8_e5m2, bits = 8, numpy_module = "ml_dtypes", scalar = f32)]
pub struct E5M2(u8);

impl From<E5M2> for f32 {
    fn from(value: E5M2) -> f32 {
        float8::F8E5M2::from_bits(value.0).to_f32()
    }
}

impl From<f32> for E5M2 {
    fn from(value: f32) -> E5M2 {
        // float8 0.7 saturates beyond the largest finite value (57344); IEEE rounding, as
        // ml_dtypes does it, gives an infinity from halfway to the next power of two on.
        if value.abs() >= 61440.0 {
            return E5M2(if value.is_sign_negative() { 0xfc } else { 0x7c });
        }
        E5M2(float8::F8E5M2::from_f32(value).to_bits())
    }
}

/// A float32 field on a 3-D grid.
#[amso_array(f32, 3)]
pub struct Grid;

/// Quantization scales in float8 e5m2, a type of this crate's own.
#[amso_array(E5M2, 2)]
pub struct Scales;

/// Doubles every element of a float8 e5m2 array in place, on its device (NVRTC, with CUDA's
/// own `__nv_fp8_e5m2` from cuda_fp8.h, which has amso's layout: one byte).
static DOUBLE_E5M2: Kernel = Kernel::new(
    r#"
#include "amso.cuh"
#include <cuda_fp8.h>
extern "C" __global__ void double_e5m2(amso::Indexer<__nv_fp8_e5m2, 1> x) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < x.size(); i += (uint64_t)gridDim.x * blockDim.x) {
        x(i) = __nv_fp8_e5m2(2.0f * float(x(i)));
    }
}
"#,
    "double_e5m2",
);

/// `x *= factor` for a float32 3-D array of any framework and layout.
#[pyfunction]
fn scale(mut x: ArrayMut<'_, f32, 3>, factor: f32) -> PyResult<()> {
    x.as_array_mut()?.mapv_inplace(|v| v * factor);
    Ok(())
}

/// The Euclidean norm of a float64 array of any rank.
#[pyfunction]
fn norm(x: ArrayRefDyn<'_, f64>) -> PyResult<f64> {
    Ok(x.as_array()?.iter().map(|v| v * v).sum::<f64>().sqrt())
}

/// The values of a host float8 e5m2 array (NumPy with ml_dtypes, PyTorch, amso) as float32,
/// in the caller's framework.
#[pyfunction]
fn widen<'py>(x: ArrayRef<'py, E5M2, 1>) -> PyResult<Bound<'py, PyAny>> {
    let values: Vec<f32> = x.as_array()?.iter().map(|&v| f32::from(v)).collect();
    x.output(values)
}

/// `values` rounded to float8 e5m2, as a new array of `framework` over a Rust `Vec` (no copy),
/// with the vector's address.
#[pyfunction]
fn quantize<'py>(
    py: Python<'py>,
    values: ArrayRef<'py, f32, 1>,
    framework: Framework,
) -> PyResult<(Bound<'py, PyAny>, usize)> {
    let quantized: Vec<E5M2> = values.as_array()?.iter().map(|&v| E5M2::from(v)).collect();
    let address = quantized.as_ptr() as usize;
    Ok((quantized.into_framework(py, framework)?, address))
}

/// Doubles a float8 e5m2 array in place: on the host in Rust, on a GPU with the kernel.
#[pyfunction]
fn double(mut x: ArrayMut<'_, E5M2, 1>) -> PyResult<()> {
    if x.device().device_type != DeviceType::Cuda {
        x.as_array_mut()?.mapv_inplace(|v| E5M2::from(2.0 * f32::from(v)));
        return Ok(());
    }
    let (device_id, stream) = (x.device().id, x.stream().unwrap_or_default());
    let indexer = x.device_indexer()?;
    if indexer.size() == 0 {
        return Ok(());
    }
    let function = DOUBLE_E5M2.function(device_id)?;
    let blocks = (indexer.size() as u64).div_ceil(256).min(4096) as u32;
    let config = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let queue = |s: &amso_runtime::cuda::CudaStream| {
        // SAFETY: the kernel takes one Indexer<__nv_fp8_e5m2, 1> (one byte per element, as
        // E5M2), which `indexer` is, over device memory the argument holds for the call.
        unsafe { s.launch_builder(&function).arg(&indexer).launch(config) }.map(drop)
    };
    // SAFETY: `stream` is the argument's: its producer's current stream, or amso's.
    unsafe { with_stream(device_id, stream, queue) }?;
    Ok(())
}

/// The dtype and rank an array arrives with, without taking it: "float32, 3".
#[pyfunction]
fn describe(x: UntypedArray<'_>) -> PyResult<String> {
    match x.dtype() {
        Some(dtype) => Ok(format!("{}, {}", dtype.name, x.ndim())),
        None => Err(PyTypeError::new_err("describe(): a dtype amso does not know")),
    }
}

#[pymodule]
fn amso_outside(module: &Bound<'_, PyModule>) -> PyResult<()> {
    amso_runtime::python::register::<Grid>(module)?;
    amso_runtime::python::register::<Scales>(module)?;
    module.add_function(wrap_pyfunction!(scale, module)?)?;
    module.add_function(wrap_pyfunction!(norm, module)?)?;
    module.add_function(wrap_pyfunction!(widen, module)?)?;
    module.add_function(wrap_pyfunction!(quantize, module)?)?;
    module.add_function(wrap_pyfunction!(double, module)?)?;
    module.add_function(wrap_pyfunction!(describe, module)?)
}
