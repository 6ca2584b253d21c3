//! Records (issue 40) as typed arguments: the spec's `particle` (`amso_runtime::records`) and a
//! record of this crate's own (`#[derive(Element)]`), read from NumPy structured arrays without
//! a copy; fields as strided views, records written in place, owned record results to NumPy.

use amso_runtime::python::{ArrayMut, ArrayRef, ArrayRefDyn, Framework, IntoFramework};
use amso_runtime::records::Particle;
use numpy::PyArrayDescrMethods;
use pyo3::prelude::*;

/// amso's own arrays of the spec's particle, 1-D (a class of this crate).
#[amso_macros::amso_array(Particle, 1)]
pub struct Particles;

/// amso's own arrays of a record with a bool field.
#[amso_macros::amso_array(Flagged, 1)]
pub struct FlaggedArray;

/// A record with a bool field and C padding (7 bytes after `alive`).
#[derive(Clone, Copy, Debug, Default, amso_macros::Element)]
#[repr(C)]
pub struct Flagged {
    alive: bool,
    weight: f64,
}

/// The total mass, through the `mass` field's view.
#[pyfunction]
fn record_total_mass(x: ArrayRef<'_, Particle, 1>) -> PyResult<f64> {
    Ok(x.field::<f64>("mass")?.sum())
}

/// The positions, an n x 3 view of the `pos` field: (shape, elements in C order).
#[pyfunction]
fn record_positions(x: ArrayRefDyn<'_, Particle>) -> PyResult<(Vec<usize>, Vec<f32>)> {
    let pos = x.field::<f32>("pos")?;
    Ok((pos.shape().to_vec(), pos.iter().copied().collect()))
}

/// `pos += vel * dt`, each record read and written in place.
#[pyfunction]
fn record_kick(mut x: ArrayMut<'_, Particle, 1>, dt: f32) -> PyResult<()> {
    for p in x.as_array_mut()?.iter_mut() {
        for k in 0..3 {
            p.pos[k] += p.vel[k] * dt;
        }
    }
    Ok(())
}

/// `mass *= by`, through the writable view of one field.
#[pyfunction]
fn record_scale_mass(mut x: ArrayMut<'_, Particle, 1>, by: f64) -> PyResult<()> {
    x.field_mut::<f64>("mass")?.map_inplace(|m| *m *= by);
    Ok(())
}

/// The positions summed over the records (`sum_axis` over the 2-D `pos` view), and the masses
/// doubled in place, through the static-rank field views.
#[pyfunction]
fn record_pos_total_and_double_mass(mut x: ArrayMut<'_, Particle, 1>) -> PyResult<Vec<f32>> {
    use amso_runtime::ndarray::{Axis, Ix1, Ix2};
    let total = x.field_view::<f32, Ix2>("pos")?.sum_axis(Axis(0)).to_vec();
    x.field_view_mut::<f64, Ix1>("mass")?.map_inplace(|m| *m *= 2.0);
    Ok(total)
}

/// The `pos` field asked for at rank 1 (it has 2): the error.
#[pyfunction]
fn record_pos_as_1d(x: ArrayRef<'_, Particle, 1>) -> PyResult<usize> {
    Ok(x.field_view::<f32, amso_runtime::ndarray::Ix1>("pos")?.len())
}

/// A copy of the records, in the caller's framework (`output`).
#[pyfunction]
fn record_echo<'py>(x: ArrayRef<'py, Particle, 1>) -> PyResult<Bound<'py, PyAny>> {
    x.output(x.as_array()?.to_owned())
}

/// A 2-D copy of `x` handed to amso (which has no 2-D particle class).
#[pyfunction]
fn record_echo_2d_to_amso<'py>(x: ArrayRef<'py, Particle, 2>) -> PyResult<Bound<'py, PyAny>> {
    x.as_array()?.to_owned().into_framework(x.object().py(), Framework::Amso)
}

/// `x` reversed (an owned result in reverse memory order), to the caller's framework.
#[pyfunction]
fn record_reversed<'py>(x: ArrayRef<'py, Particle, 1>) -> PyResult<Bound<'py, PyAny>> {
    let mut reversed = x.as_array()?.to_owned();
    reversed.invert_axis(amso_runtime::ndarray::Axis(0));
    x.output(reversed)
}

/// `n` zeroed particles as an owned `MemArray`, handed to `framework`.
#[pyfunction]
fn record_memarray_to(py: Python<'_>, n: usize, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
    amso_runtime::MemArray::<Particle, 1>::new([n])?.into_framework(py, framework)
}

/// The ids, from the records themselves.
#[pyfunction]
fn record_ids(x: ArrayRefDyn<'_, Particle>) -> PyResult<Vec<i64>> {
    Ok(x.as_array()?.iter().map(|p| p.id).collect())
}

/// Field `name` read as float32 (an error for other fields' types, or no such field).
#[pyfunction]
fn record_field_f32(x: ArrayRef<'_, Particle, 1>, name: &str) -> PyResult<Vec<f32>> {
    Ok(x.field::<f32>(name)?.iter().copied().collect())
}

/// `n` particles (`id` = i, `mass` = i / 2, `pos` = (i, 2i, 3i), `vel` = -pos) as a NumPy
/// structured array that owns the Rust vector.
#[pyfunction]
fn record_new(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
    let particles: Vec<Particle> = (0..n)
        .map(|i| {
            let f = i as f32;
            Particle { pos: [f, 2.0 * f, 3.0 * f], vel: [-f, -2.0 * f, -3.0 * f], mass: i as f64 / 2.0, id: i as i64 }
        })
        .collect();
    particles.into_framework(py, Framework::NumPy)
}

/// The spec's particle as rust-numpy needs it for the report's peer row: a struct of the same C
/// layout and the `unsafe impl numpy::Element` rust-numpy asks for (its dtype built from
/// NumPy's structured dtype, kept once made).
#[derive(Clone, Copy)]
#[repr(C)]
struct NumpyParticle {
    pos: [f32; 3],
    vel: [f32; 3],
    mass: f64,
    id: i64,
}

// SAFETY: a plain `#[repr(C)]` struct whose layout is the dtype `get_dtype` gives (field names,
// types and offsets of the spec's particle, 40 bytes); copyable, with no Python references.
unsafe impl numpy::Element for NumpyParticle {
    const IS_COPY: bool = true;

    fn get_dtype(py: Python<'_>) -> Bound<'_, numpy::PyArrayDescr> {
        static DTYPE: pyo3::sync::PyOnceLock<Py<numpy::PyArrayDescr>> = pyo3::sync::PyOnceLock::new();
        DTYPE
            .get_or_init(py, || {
                let fields = [("pos", "<f4", 3), ("vel", "<f4", 3), ("mass", "<f8", 1), ("id", "<i8", 1)];
                let spec: Vec<Bound<'_, PyAny>> = fields
                    .iter()
                    .map(|&(name, dtype, count)| {
                        let entry = if count == 1 {
                            (name, dtype).into_pyobject(py).map(Bound::into_any)
                        } else {
                            (name, dtype, (count,)).into_pyobject(py).map(Bound::into_any)
                        };
                        entry.expect("a field tuple")
                    })
                    .collect();
                let dtype = numpy::PyArrayDescr::new(py, spec).expect("the particle's structured dtype");
                assert_eq!(dtype.itemsize(), size_of::<NumpyParticle>(), "the dtype has the struct's layout");
                dtype.unbind()
            })
            .bind(py)
            .clone()
    }

    fn clone_ref(&self, _py: Python<'_>) -> Self {
        *self
    }
}

/// rust-numpy's owned record result, the peer of `record_new`: `n` particles as a NumPy array
/// (`PyArray::from_vec`).
#[pyfunction]
fn numpy_record_new(py: Python<'_>, n: usize) -> Bound<'_, numpy::PyArray1<NumpyParticle>> {
    let particles: Vec<NumpyParticle> = (0..n)
        .map(|i| {
            let f = i as f32;
            NumpyParticle {
                pos: [f, 2.0 * f, 3.0 * f],
                vel: [-f, -2.0 * f, -3.0 * f],
                mass: i as f64 / 2.0,
                id: i as i64,
            }
        })
        .collect();
    numpy::PyArray1::from_vec(py, particles)
}

/// Read one record argument and do nothing (the cost of taking a structured array).
#[pyfunction]
fn record_noop(_x: ArrayRef<'_, Particle, 1>) {}

/// Read one float64 argument and do nothing (the same call over a plain array).
#[pyfunction]
fn float64_noop(_x: ArrayRef<'_, f64, 1>) {}

/// The weights of the live records.
#[pyfunction]
fn flagged_live_weight(x: ArrayRef<'_, Flagged, 1>) -> PyResult<f64> {
    Ok(x.as_array()?.iter().filter(|f| f.alive).map(|f| f.weight).sum())
}

pub(crate) fn add(module: &Bound<'_, PyModule>) -> PyResult<()> {
    amso_runtime::python::register::<Particles>(module)?;
    amso_runtime::python::register::<FlaggedArray>(module)?;
    module.add_function(wrap_pyfunction!(record_total_mass, module)?)?;
    module.add_function(wrap_pyfunction!(record_positions, module)?)?;
    module.add_function(wrap_pyfunction!(record_kick, module)?)?;
    module.add_function(wrap_pyfunction!(record_scale_mass, module)?)?;
    module.add_function(wrap_pyfunction!(record_ids, module)?)?;
    module.add_function(wrap_pyfunction!(record_echo, module)?)?;
    module.add_function(wrap_pyfunction!(record_echo_2d_to_amso, module)?)?;
    module.add_function(wrap_pyfunction!(record_reversed, module)?)?;
    module.add_function(wrap_pyfunction!(record_memarray_to, module)?)?;
    module.add_function(wrap_pyfunction!(record_pos_total_and_double_mass, module)?)?;
    module.add_function(wrap_pyfunction!(record_pos_as_1d, module)?)?;
    module.add_function(wrap_pyfunction!(record_field_f32, module)?)?;
    module.add_function(wrap_pyfunction!(record_new, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_record_new, module)?)?;
    module.add_function(wrap_pyfunction!(flagged_live_weight, module)?)?;
    module.add_function(wrap_pyfunction!(record_noop, module)?)?;
    module.add_function(wrap_pyfunction!(float64_noop, module)?)?;
    Ok(())
}
