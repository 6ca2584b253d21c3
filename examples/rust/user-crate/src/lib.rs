//! A user's own crate, in the MemArray design's domain: particle positions and density fields.
//! It declares array classes with `#[amso_array]` and exports Rust functions that take arrays
//! from any framework (NumPy, PyTorch, CuPy, JAX, TVM-FFI, amso) as typed arguments.

mod cic;

use amso_macros::amso_array;
use amso_runtime::python::{ArrayMut, ArrayRef};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Particle positions: one row of x, y, z per particle.
#[amso_array(f32, 2)]
pub struct Positions;

/// A density field on a 3-D grid.
#[amso_array(float64, 3)]
pub struct Density;

/// Per-particle weights in half precision (the dtype named by its Rust type).
#[amso_array(half::f16, 1)]
pub struct Weights;

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
    let (positions, density) = (positions.as_array()?, density.as_array_mut()?);
    py.detach(|| cic::deposit(positions, density, box_size));
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
    Ok(flags.as_slice()?.iter().filter(|&&flag| flag).count())
}

/// Extract one float32 1-D argument and do nothing: the per-call cost of a typed argument.
#[pyfunction]
fn extract_one(_a: ArrayRef<'_, f32, 1>) {}

/// Extract three float32 1-D arguments and do nothing.
#[pyfunction]
fn extract_three(_a: ArrayRef<'_, f32, 1>, _b: ArrayRef<'_, f32, 1>, _c: ArrayRef<'_, f32, 1>) {}

#[pymodule]
fn amso_user_example(module: &Bound<'_, PyModule>) -> PyResult<()> {
    amso_runtime::python::register::<Positions>(module)?;
    amso_runtime::python::register::<Density>(module)?;
    amso_runtime::python::register::<Weights>(module)?;
    module.add_function(wrap_pyfunction!(deposit, module)?)?;
    module.add_function(wrap_pyfunction!(cic_density, module)?)?;
    module.add_function(wrap_pyfunction!(add_index_sum, module)?)?;
    module.add_function(wrap_pyfunction!(count_true, module)?)?;
    module.add_function(wrap_pyfunction!(extract_one, module)?)?;
    module.add_function(wrap_pyfunction!(extract_three, module)?)
}
