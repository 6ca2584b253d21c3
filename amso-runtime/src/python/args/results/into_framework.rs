//! [`IntoFramework`]: memory Rust already owns (`Vec`, `ndarray::Array`, `MemArray`) handed to a
//! framework without a copy, as rust-numpy's `into_pyarray`.

use std::any::Any;
use std::sync::Arc;

use pyo3::prelude::*;

use super::framework::Framework;
use super::handover::Handover;
use crate::device::Device;
use crate::dlpack::DLPACK_VERSION;
use crate::element::{ArrayElement, DTypeOf, Element};
use crate::memarray::core::ArrayCore;
use crate::memarray::MemArray;
use crate::python::base::array::MemArrayBase;
use crate::strided::Dims;

/// Memory Rust owns, handed to a Python framework without a copy: the framework's array
/// object holds the Rust value until its deleter runs (rust-numpy's `into_pyarray`, for every
/// framework). Implemented for `Vec<T>` (one dimension), `ndarray::Array` (the `ndarray`
/// feature) and `MemArray` (host or device).
pub trait IntoFramework: Sized {
    /// `self` as `framework`'s array object.
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>>;
}

impl<T: ArrayElement> IntoFramework for Vec<T> {
    fn into_framework(mut self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let (data, len) = (self.as_mut_ptr(), self.len());
        Handover {
            data: data.cast(),
            device: Device::CPU,
            dtype: DTypeOf::<T>::REF,
            shape: Dims::from_slice(&[len]),
            strides: None,
            owner: self,
            readonly: false,
            stream: None,
        }
        .deliver_as::<T>(py, framework)
    }
}

#[cfg(feature = "ndarray")]
impl<T: ArrayElement, D: ndarray::Dimension> IntoFramework for ndarray::Array<T, D> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let shape = Dims::from_slice(self.shape());
        let strides = Dims::from_slice(self.strides());
        let (mut elements, offset) = self.into_raw_vec_and_offset();
        // SAFETY: the offset of the first element inside the vector (none when it is empty).
        let data = unsafe { elements.as_mut_ptr().add(offset.unwrap_or(0)) };
        Handover {
            data: data.cast(),
            device: Device::CPU,
            dtype: DTypeOf::<T>::REF,
            shape,
            strides: Some(strides),
            owner: elements,
            readonly: false,
            stream: None,
        }
        .deliver_as::<T>(py, framework)
    }
}

/// `elements`, a Fortran-order array of `shape` (rows, columns), as `framework`'s object, over
/// the vector's own buffer (nalgebra's matrices).
#[cfg(feature = "nalgebra")]
pub(in crate::python::args) fn fortran_order<T: ArrayElement>(
    py: Python<'_>,
    mut elements: Vec<T>,
    [rows, columns]: [usize; 2],
    framework: Framework,
) -> PyResult<Bound<'_, PyAny>> {
    debug_assert_eq!(elements.len(), rows * columns);
    Handover {
        data: elements.as_mut_ptr().cast(),
        device: Device::CPU,
        dtype: DTypeOf::<T>::REF,
        shape: Dims::from_slice(&[rows, columns]),
        strides: Some(Dims::from_slice(&[1, rows as isize])),
        owner: elements,
        readonly: false,
        stream: None,
    }
    .deliver_as::<T>(py, framework)
}

impl<T: Element, const N: usize> IntoFramework for MemArray<T, N> {
    fn into_framework(self, py: Python<'_>, framework: Framework) -> PyResult<Bound<'_, PyAny>> {
        let core = self.into_core();
        if framework == Framework::NumPy {
            if let Some(handover) = host_handover(&core) {
                return handover.deliver_as::<T>(py, framework);
            }
        }
        core_into_framework(py, core, framework)
    }
}

/// An owned, unlocked host array's handover to NumPy (or, for records, to any framework): its
/// buffer is the NumPy array's owner as it is (no export plan, no boxed owner).
fn host_handover(core: &ArrayCore) -> Option<Handover<Arc<crate::host::HostBuffer>>> {
    let host = core.residence() == crate::device::Residence::Host;
    (host && core.lock_id().is_none()).then(|| Handover {
        data: core.host_ptr().cast(),
        device: Device::CPU,
        dtype: core.dtype(),
        shape: Dims::from_slice(core.shape()),
        strides: None,
        owner: Arc::clone(core.host_buffer()),
        readonly: core.readonly(),
        stream: None,
    })
}

/// An amso array's core as `framework`'s object: an instance of this module's class for
/// amso when one is registered, else its memory handed over through DLPack.
pub(in crate::python::args) fn core_into_framework(
    py: Python<'_>,
    core: ArrayCore,
    framework: Framework,
) -> PyResult<Bound<'_, PyAny>> {
    if framework == Framework::Amso {
        let dtype = core.dtype();
        if let Some(registration) =
            crate::python::base::registry::find(dtype.code, dtype.bits, dtype.lanes, core.ndim())
        {
            return Ok((registration.instance)(py, MemArrayBase::new(core))?.into_bound(py));
        }
    }
    if framework == Framework::NumPy || core.dtype().is_record() {
        // Records (which DLPack cannot carry) go this way to every framework: `deliver` takes
        // them to NumPy and amso, and refuses the others.
        if let Some(handover) = host_handover(&core) {
            return handover.deliver(py, framework);
        }
    }
    let device = core.device();
    let request = crate::dlpack::DlpackRequest { max_version: Some(DLPACK_VERSION), ..Default::default() };
    let plan = crate::dlpack::plan_export(device, core.pinned(), &request)?;
    let source = core.export_source(&plan, None)?;
    let owner: Arc<dyn Any + Send + Sync> = source.owner.into();
    Handover {
        data: source.data,
        device: source.device,
        dtype: core.dtype(),
        shape: Dims::from_slice(core.shape()),
        strides: None,
        owner,
        readonly: source.readonly,
        stream: core.stream(),
    }
    .deliver(py, framework)
}
