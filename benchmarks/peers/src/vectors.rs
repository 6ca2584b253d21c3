//! Vector elements (issue 40) as typed arguments: the spec's `float32x4` (`[f32; 4]`, CUDA's
//! `float4`) read from amso's vector arrays and from NumPy arrays whose last axis holds the 4
//! lanes, written in place, and returned to NumPy as such arrays.

use amso_runtime::python::{ArrayMut, ArrayRef, ArrayRefDyn, Framework, IntoFramework};
use pyo3::prelude::*;

/// amso's own float32x4 arrays, 1-D (a class of this crate).
#[amso_macros::amso_array(float32x4, 1)]
pub struct Vectors;

/// The length of each vector.
#[pyfunction]
fn vector_norms(x: ArrayRef<'_, [f32; 4], 1>) -> PyResult<Vec<f32>> {
    Ok(x.as_array()?.iter().map(|v| v.iter().map(|lane| lane * lane).sum::<f32>().sqrt()).collect())
}

/// The shape of a vector array of any rank.
#[pyfunction]
fn vector_shape(x: ArrayRefDyn<'_, [f32; 4]>) -> Vec<usize> {
    x.shape().to_vec()
}

/// `w += 1` (the fourth lane) of each vector, in place.
#[pyfunction]
fn vector_bump_w(mut x: ArrayMut<'_, [f32; 4], 1>) -> PyResult<()> {
    x.as_array_mut()?.iter_mut().for_each(|v| v[3] += 1.0);
    Ok(())
}

/// `n` vectors (i, 2i, 3i, 4i) as a NumPy array `(n, 4)` that owns the Rust vector.
#[pyfunction]
fn vector_new(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    let vectors: Vec<[f32; 4]> = (0..n).map(|i| i as f32).map(|f| [f, 2.0 * f, 3.0 * f, 4.0 * f]).collect();
    vectors.into_framework(py, Framework::NumPy)
}

pub(crate) fn add(module: &Bound<'_, PyModule>) -> PyResult<()> {
    amso_runtime::python::register::<Vectors>(module)?;
    module.add_function(wrap_pyfunction!(vector_norms, module)?)?;
    module.add_function(wrap_pyfunction!(vector_shape, module)?)?;
    module.add_function(wrap_pyfunction!(vector_bump_w, module)?)?;
    module.add_function(wrap_pyfunction!(vector_new, module)?)?;
    Ok(())
}
