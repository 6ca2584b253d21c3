//! The checks of a pickle's `_amso_rebuild` arguments, with no Python in them: the dtype's
//! class, the dimensions, the flags and the data buffer's length and layout become a plan
//! (where the array's memory comes from) or an error, before any of the data is read.
//! `python/pickle.rs` builds the array from the plan; the fuzz target `pickle_rebuild` feeds
//! the same checks arbitrary arguments.

use crate::device::DeviceId;
use crate::element::ElementOps;
use crate::error::{empty_note, Error, Result};
use crate::memarray::foreign::check_dims;
use crate::shape;

/// A pickle's `_amso_rebuild` arguments, as read from it: not yet trusted.
#[derive(Debug, Clone, Copy)]
pub struct Pickled<'a> {
    /// The element type's name (`float32`).
    pub dtype: &'a str,
    /// The dimensions.
    pub dims: &'a [i64],
    /// The array refused writes.
    pub readonly: bool,
    /// Its host memory was pinned.
    pub pinned: bool,
    /// The CUDA device its data was on (`None`: the host).
    pub device: Option<i32>,
    /// The data buffer the pickle carried.
    pub data: PickledData,
}

/// What the pickled data buffer says about itself (through the buffer protocol).
#[derive(Debug, Clone, Copy)]
pub struct PickledData {
    /// The address of its first byte.
    pub address: usize,
    /// Its length in bytes.
    pub len: usize,
    /// It refuses writes.
    pub readonly: bool,
    /// Its bytes are one C-contiguous run.
    pub c_contiguous: bool,
}

/// Where a rebuilt array's memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebuildMemory {
    /// The data buffer itself, kept alive by the array: no copy.
    Adopt,
    /// A copy into fresh host memory, pinned or pageable.
    Copy {
        /// Pinned memory.
        pinned: bool,
    },
    /// A copy onto a CUDA device.
    Upload {
        /// The device.
        device_id: DeviceId,
    },
}

/// How to rebuild a pickled array whose arguments passed the checks.
#[derive(Debug)]
pub struct RebuildPlan<C> {
    /// The class the array is made of (what `find` returned for the dtype and ndim).
    pub class: C,
    /// The array's bytes: exactly the data buffer's length, a C-contiguous run.
    pub bytes: usize,
    /// Where its memory comes from.
    pub memory: RebuildMemory,
    /// What this process cannot restore as pickled (a CUDA device or pinned memory it lacks),
    /// one sentence each, for warnings.
    pub notes: Vec<String>,
}

/// Check `pickled` and plan its rebuild. `find(ndim)` gives the class for the pickled dtype
/// name and ndim with its element type's table, or the error that names what is compiled;
/// `cuda_devices` is how many CUDA devices this process has (0 without a driver).
pub fn plan_rebuild<C>(
    pickled: &Pickled<'_>,
    find: impl FnOnce(usize) -> Result<(C, &'static ElementOps)>,
    cuda_devices: i32,
) -> Result<RebuildPlan<C>> {
    let (dtype, dims, data) = (pickled.dtype, pickled.dims, pickled.data);
    check_dims(dims)?;
    let (class, ops) = find(dims.len())?;
    // The dims are not negative (checked above).
    let bytes = shape::byte_size(dims.iter().map(|&d| d as usize), ops.itemsize());
    if bytes != Some(data.len) {
        let needs = match bytes {
            Some(bytes) => bytes.to_string(),
            None => format!("more than any address space{}", empty_note(dims.contains(&0))),
        };
        return Err(Error::InvalidArgument(format!(
            "the pickled data holds {} bytes, but {} array of shape {dims:?} needs {needs}: the pickle is \
             truncated or altered",
            data.len,
            crate::error::with_article(dtype)
        )));
    }
    if !data.c_contiguous {
        return Err(Error::InvalidArgument(format!(
            "the pickled data for {} array of shape {dims:?} is a strided buffer, not one contiguous run of \
             bytes: the pickle is altered",
            crate::error::with_article(dtype)
        )));
    }
    let mut notes = Vec::new();
    let device_id = match pickled.device.map(|id| (id, DeviceId::among(id, cuda_devices))) {
        Some((_, Some(device_id))) => Some(device_id),
        Some((id, None)) => {
            notes.push(format!(
                "the array was pickled on CUDA device {id}, which this process does not have; unpickled on the host"
            ));
            None
        }
        None => None,
    };
    if pickled.pinned && cuda_devices <= 0 {
        notes.push(
            "the pickled array used pinned memory, which needs a CUDA driver; unpickled into pageable memory".into(),
        );
    }
    let pinned = pickled.pinned && cuda_devices > 0;
    // The buffer is adopted when the array can use it as it is: host data, no pinned memory
    // asked for (a pickle's buffer is not pinned), writable unless the array is read-only,
    // and aligned for the element type.
    let memory = match device_id {
        Some(device_id) => RebuildMemory::Upload { device_id },
        None if !pinned && (pickled.readonly || !data.readonly) && data.address.is_multiple_of(ops.align) => {
            RebuildMemory::Adopt
        }
        None => RebuildMemory::Copy { pinned },
    };
    Ok(RebuildPlan { class, bytes: data.len, memory, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    const F64: &ElementOps = ElementOps::of::<f64>();

    fn pickled<'a>(dtype: &'a str, dims: &'a [i64], len: usize) -> Pickled<'a> {
        let data = PickledData { address: 4096, len, readonly: false, c_contiguous: true };
        Pickled { dtype, dims, readonly: false, pinned: false, device: None, data }
    }

    /// Plans for float64 at any ndim; other names are not compiled.
    fn plan(pickled: &Pickled<'_>, cuda_devices: i32) -> Result<RebuildPlan<usize>> {
        let find = |ndim| match pickled.dtype {
            "float64" => Ok((ndim, F64)),
            other => Err(Error::WrongValueType(format!("{other} is not compiled"))),
        };
        plan_rebuild(pickled, find, cuda_devices)
    }

    #[test]
    fn a_pickle_that_matches_its_data_is_adopted() {
        let plan = plan(&pickled("float64", &[2, 3], 48), 0).unwrap();
        assert_eq!((plan.class, plan.bytes, plan.memory), (2, 48, RebuildMemory::Adopt));
        assert!(plan.notes.is_empty());
        let empty = plan_rebuild(&pickled("float64", &[0, 5], 0), |_| Ok(((), F64)), 0).unwrap();
        assert_eq!((empty.bytes, empty.memory), (0, RebuildMemory::Adopt));
    }

    #[test]
    fn damaged_arguments_are_refused_before_anything_is_read() {
        let refused = |p: Pickled<'_>| plan(&p, 0).unwrap_err().to_string();
        assert!(refused(pickled("float64", &[2, 4], 48))
            .contains("holds 48 bytes, but a float64 array of shape [2, 4] needs 64"));
        assert!(refused(pickled("float64", &[1 << 62, 1 << 62], 0)).contains("needs more than any address space"));
        assert!(refused(pickled("float64", &[2, -3], 0)).contains("negative dimension -3"));
        assert!(refused(pickled("float64", &[1; 9], 0)).contains("ndim 9 is outside amso's 1..=8"));
        assert!(refused(pickled("float64", &[], 0)).contains("ndim 0 is outside"));
        assert!(refused(pickled("float65", &[2, 3], 48)).contains("float65 is not compiled"));
        let mut strided = pickled("float64", &[2, 3], 48);
        strided.data.c_contiguous = false;
        assert!(refused(strided).contains("is a strided buffer"));
    }

    #[test]
    fn both_orders_of_a_huge_empty_shape_are_refused_alike() {
        for dims in [[0, i64::MAX], [i64::MAX, 0]] {
            let message = plan(&pickled("float64", &dims, 0), 0).unwrap_err().to_string();
            assert!(
                message.contains("needs more than any address space (the nonzero dimensions count"),
                "{dims:?}: {message}"
            );
        }
        let uint8 = |dims| plan_rebuild(&pickled("uint8", dims, 0), |_| Ok(((), ElementOps::of::<u8>())), 0);
        assert!(uint8(&[0, i64::MAX]).is_ok() && uint8(&[i64::MAX, 0]).is_ok(), "NumPy allows both for 1-byte items");
    }

    #[test]
    fn the_memory_follows_the_flags_and_this_process() {
        let memory = |p: Pickled<'_>, cuda| plan(&p, cuda).map(|plan| (plan.memory, plan.notes.len()));
        let base = pickled("float64", &[2], 16);
        let copy = RebuildMemory::Copy { pinned: false };
        let readonly_data = Pickled { data: PickledData { readonly: true, ..base.data }, ..base };
        assert_eq!(memory(readonly_data, 0), Ok((copy, 0)), "a writable array is not made of read-only bytes");
        let readonly = Pickled { readonly: true, ..readonly_data };
        assert_eq!(memory(readonly, 0), Ok((RebuildMemory::Adopt, 0)));
        let misaligned = Pickled { data: PickledData { address: 4097, ..base.data }, ..base };
        assert_eq!(memory(misaligned, 0), Ok((copy, 0)));
        let pinned = Pickled { pinned: true, ..base };
        assert_eq!(memory(pinned, 1), Ok((RebuildMemory::Copy { pinned: true }, 0)));
        assert_eq!(memory(pinned, 0), Ok((RebuildMemory::Adopt, 1)), "no CUDA: pageable, with a note");
        for (device, cuda, expected) in [
            (0, 1, (RebuildMemory::Upload { device_id: DeviceId::ZERO }, 0)),
            (1, 1, (RebuildMemory::Adopt, 1)),
            (-1, 2, (RebuildMemory::Adopt, 1)),
            (i32::MIN, 0, (RebuildMemory::Adopt, 1)),
        ] {
            assert_eq!(memory(Pickled { device: Some(device), ..base }, cuda), Ok(expected), "device {device}");
        }
    }
}
