//! A user's own crate: two array types declared with `#[amso_array]`, a Rust function that
//! works on one of them through the typed API, and the Python module that registers them.

use amso_macros::amso_array;
use pyo3::exceptions::PyTypeError;
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

/// Add the sum of each element's indices to it: the MemArray design's kernel, on the host,
/// through the typed array and its indexer.
#[pyfunction]
fn add_index_sum(density: &Bound<'_, Density>) -> PyResult<()> {
    let base = density.as_super().get();
    base.with_typed_mut(density.py(), |array: &mut DensityArray| -> PyResult<()> {
        let mut cells = array.indexer_mut()?;
        for offset in 0..cells.size() {
            let index = cells.unravel(offset);
            let value = cells.get(index).unwrap_or_default() + index.iter().sum::<usize>() as f64;
            cells.set(index, value);
        }
        Ok(())
    })
    .ok_or_else(|| PyTypeError::new_err("expected a Density array"))?
}

#[pymodule]
fn amso_user_example(module: &Bound<'_, PyModule>) -> PyResult<()> {
    amso_runtime::python::register::<Positions>(module)?;
    amso_runtime::python::register::<Density>(module)?;
    amso_runtime::python::register::<Weights>(module)?;
    module.add_function(wrap_pyfunction!(add_index_sum, module)?)
}
