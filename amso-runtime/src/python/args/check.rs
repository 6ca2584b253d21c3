//! What a typed argument checks of what arrived before Rust reads it: its element type and
//! rank (a vector's lanes folded), writability, the byte extent, alignment, self-overlap of
//! writable views, and the values a `T` cannot hold; then the borrow and, for misaligned host
//! data, the aligned copy. The messages say what was expected and what arrived.

use std::marker::PhantomData;

use pyo3::ffi;
use pyo3::prelude::*;

use super::{staged, Access, ArgumentError, Dimensions, TypedArray};
use crate::borrow::guard::{self, Borrow};
use crate::device::{Device, DeviceType};
use crate::element::{dlpack_type_name, ArrayElement};
use crate::error::with_article;
use crate::python::source::{self, Source};
use crate::strided;

/// "a writable float32 array with 2 dimensions", what a typed argument asks for.
pub(super) fn wanted<T: ArrayElement, D: Dimensions, A: Access>() -> String {
    // A type of one's own that names a NumPy kind says which (`millis (timedelta64[ms])`).
    let name = match T::DTYPE.numpy_only() && T::DTYPE.name != T::DTYPE.numpy {
        true => format!("{} ({})", T::DTYPE.name, T::DTYPE.numpy),
        false => T::DTYPE.name.to_owned(),
    };
    if T::DTYPE.is_record() {
        let writable = if A::WRITABLE { "writable " } else { "" };
        return match D::NDIM {
            Some(n) => format!(
                "a {writable}{} record array with {n} dimension{}",
                T::DTYPE.name,
                if n == 1 { "" } else { "s" }
            ),
            None => format!("a {writable}{} record array", T::DTYPE.name),
        };
    }
    let kind = match (A::WRITABLE, T::DTYPE.numpy_only()) {
        (false, false) => with_article(name),
        (true, false) => format!("a writable {name}"),
        (false, true) => format!("a NumPy {name}"),
        (true, true) => format!("a writable NumPy {name}"),
    };
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let array = match D::NDIM {
        Some(n) => format!("{kind} array with {n} dimension{}", plural(n)),
        None => format!("{kind} array"),
    };
    if !T::DTYPE.is_vector() {
        return array;
    }
    // A vector array also arrives as its lanes (NumPy's view): say how.
    let lanes = format!("its last axis the {} lanes side by side", T::DTYPE.lanes);
    match D::NDIM {
        Some(n) => format!("{array} (or a {} array with {} dimensions, {lanes})", T::DTYPE.numpy, n + 1),
        None => format!("{array} (or a {} array, {lanes})", T::DTYPE.numpy),
    }
}

/// The extents and DLPack type `source` has for a typed argument of `T`: its own, except that
/// a vector element type (`[f32; 4]`, CUDA's float4) also takes an array of its lane type whose
/// last axis holds the lanes side by side (NumPy's view of vectors: float32 `(n, 4)`), which
/// reads as vectors `(n,)`. DLPack's strides (in lanes) are kept in `storage` as bytes.
#[inline]
fn fold_lanes<'a, T: ArrayElement>(
    source: &Source,
    extents: source::Extents<'a>,
    storage: &'a mut Vec<i64>,
) -> (source::Extents<'a>, (u8, u8, u16)) {
    let dtype = &T::DTYPE;
    let lanes = i64::from(dtype.lanes);
    let candidate = const { T::DTYPE.is_vector() }
        && source.dtype == (dtype.code, dtype.bits, 1)
        && source.numpy_kind.is_none()
        && extents.dims.len() >= 2
        && extents.dims.last() == Some(&lanes);
    if !candidate {
        return (extents, source.dtype);
    }
    let (ndim, lane_bytes) = (extents.dims.len() - 1, i64::from(dtype.bits / 8));
    let strides = match extents.strides {
        source::Strides::COrder => source::Strides::COrder,
        source::Strides::Bytes(given) if given[ndim] == lane_bytes => source::Strides::Bytes(&given[..ndim]),
        source::Strides::Elements(given) if given[ndim] == 1 => {
            storage.extend(given[..ndim].iter().map(|&stride| stride.saturating_mul(lane_bytes)));
            source::Strides::Bytes(storage)
        }
        _ => return (extents, source.dtype), // lanes apart: not vectors
    };
    (source::Extents { dims: &extents.dims[..ndim], strides }, dtype.dlpack())
}

/// Whether `source`'s elements (of DLPack type `dtype`, lanes folded) are `T`s by kind: a kind
/// DLPack lacks matches by its NumPy name alone (datetime64[s] and int64 share DLPack's fields);
/// every other kind by DLPack's fields, from any producer.
#[inline]
fn kind_matches<T: ArrayElement>(source: &Source, dtype: (u8, u8, u16)) -> bool {
    let numpy_only = const { T::DTYPE.numpy_only() };
    let same_kind = match &source.numpy_kind {
        Some(name) => numpy_only && *name == T::DTYPE.numpy,
        None => !numpy_only,
    };
    same_kind && dtype == T::DTYPE.dlpack()
}

/// Whether `check` would take `source`'s elements as `T`s (the element type alone: kind, DLPack
/// type with a vector's lanes folded, a record's fields), for `UntypedArray::is`.
pub(super) fn holds<T: ArrayElement>(object: &Bound<'_, PyAny>, source: &Source) -> bool {
    let mut lane_strides = Vec::new();
    let (_, dtype) = fold_lanes::<T>(source, source.extents(object.py()), &mut lane_strides);
    kind_matches::<T>(source, dtype) && check_record::<T>(object, source).is_ok()
}

/// "torch.Tensor on cuda:0": the argument's type and where its data lives.
pub(super) fn describe(object: &Bound<'_, PyAny>, device: Option<Device>) -> String {
    let kind = object.get_type().fully_qualified_name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    match device {
        Some(Device { device_type: DeviceType::Cuda, id }) => format!("{kind} on cuda:{id}"),
        Some(_) => format!("{kind} on cpu"),
        None => kind,
    }
}

/// Refuse host elements that are not values of `T`: a bool byte other than 0 or 1 (of a bool
/// array, or a record's bool field), a NULL object pointer (`Py<PyAny>` is never NULL; NumPy
/// reads NULL entries, of arrays C code made without filling them, as None).
///
/// # Safety
/// Every element `shape` and `strides` reach from `source.data` is readable.
#[inline]
unsafe fn check_values<T: ArrayElement, D: Dimensions, A: Access>(
    object: &Bound<'_, PyAny>,
    source: &Source,
    shape: &[usize],
    strides: &[isize],
    size: usize,
) -> Result<(), Box<ArgumentError>> {
    if T::DTYPE.code == crate::element::dlpack_code::BOOL && !const { T::DTYPE.numpy_only() } {
        // SAFETY: one readable byte per element (the caller's promise).
        check_each(source.data, shape, strides, 1, |byte| unsafe { *byte } <= 1)
            .map_err(|()| refuse::<T, D, A>(Refusal::Bools, object, source))?;
    }
    if const { crate::element::record_has_bool(&T::DTYPE) } {
        let bools: Vec<usize> = crate::element::record_bool_bytes(&T::DTYPE).collect();
        // SAFETY: each record's bytes are readable (the caller's promise).
        let valid = |record: *const u8| bools.iter().all(|&at| unsafe { *record.add(at) } <= 1);
        check_each(source.data, shape, strides, size_of::<T>(), valid)
            .map_err(|()| refuse::<T, D, A>(Refusal::RecordBools, object, source))?;
    }
    // SAFETY: an object array's elements are pointers, readable (the caller's promise).
    if source.numpy_kind.as_deref() == Some("object") && !unsafe { objects_filled(source.data, shape, strides, size) } {
        return Err(refuse::<T, D, A>(Refusal::NullObjects, object, source));
    }
    Ok(())
}

impl<'py, T: ArrayElement, D: Dimensions, A: Access> TypedArray<'py, T, D, A> {
    /// Check what `source` describes against `T`, `D` and `A`, and take hold of its memory. The
    /// refusal is boxed: a result as small as the argument moves in a few words.
    pub(super) fn check(object: Bound<'py, PyAny>, source: Source) -> Result<Self, Box<ArgumentError>> {
        let mut lane_strides = Vec::new();
        let (extents, dtype) = fold_lanes::<T>(&source, source.extents(object.py()), &mut lane_strides);
        let ndim = extents.dims.len();
        check_record::<T>(&object, &source).map_err(|error| Box::new(error.into()))?;
        if !kind_matches::<T>(&source, dtype) || D::NDIM.is_some_and(|n| n != ndim) {
            let kind = Refusal::Kind { numpy_kind: source.numpy_kind.as_deref(), dtype, ndim };
            return Err(refuse::<T, D, A>(kind, &object, &source));
        }
        let shape = D::shape(extents.dims);
        let mut strides = D::zero_strides(ndim);
        extents
            .strides
            .fill(shape.as_ref(), size_of::<T>(), strides.as_mut())
            .map_err(|error| Box::new(error.into()))?;
        if A::WRITABLE && source.readonly {
            return Err(refuse::<T, D, A>(Refusal::ReadOnly, &object, &source));
        }
        let (shape_ref, strides_ref) = (shape.as_ref(), strides.as_ref());
        let itemsize = size_of::<T>();
        // NumPy's rule (`shape::byte_size`), which ndarray's views rely on too: the element
        // count cannot overflow either.
        if crate::shape::byte_size(shape_ref.iter().copied(), itemsize).is_none() {
            return Err(refuse::<T, D, A>(Refusal::TooManyElements { shape: shape_ref }, &object, &source));
        }
        let size = shape_ref.iter().product::<usize>();
        let extent = match size {
            0 => None,
            _ => {
                let axes = shape_ref.iter().copied().zip(strides_ref.iter().copied());
                let extent = crate::shape::byte_extent(axes, itemsize, itemsize).filter(|&(lowest, end)| {
                    source.data.checked_add_signed(lowest).is_some() && source.data.checked_add_signed(end).is_some()
                });
                let past = || Refusal::PastAddressSpace { shape: shape_ref, strides: strides_ref };
                Some(extent.ok_or_else(|| refuse::<T, D, A>(past(), &object, &source))?)
            }
        };
        let host = source.device.device_type != DeviceType::Cuda;
        let aligned = source.data.is_multiple_of(if host { align_of::<T>() } else { device_alignment::<T>() });
        // Misaligned host arrays are read through an aligned copy (`staged`); kernels need
        // aligned device memory.
        if extent.is_some() && (source.data == 0 || (!aligned && !host)) {
            return Err(refuse::<T, D, A>(Refusal::Address { data: source.data }, &object, &source));
        }
        // A C-contiguous array reaches each element once: only other layouts are sorted by stride.
        if A::WRITABLE && extent.is_some() && !strided::is_c_contiguous(shape_ref, strides_ref) {
            if let Some(axis) = strided::self_overlap(shape_ref, strides_ref) {
                let overlap = Refusal::Overlap { axis, shape: shape_ref, strides: strides_ref };
                return Err(refuse::<T, D, A>(overlap, &object, &source));
            }
        }
        let borrow = match extent {
            Some(extent) if host => {
                // SAFETY: the extent was checked above: every element's bytes are readable.
                unsafe { check_values::<T, D, A>(&object, &source, shape_ref, strides_ref, size) }?;
                let key = guard::key(source.data, extent, shape_ref, strides_ref, itemsize, A::WRITABLE);
                Some(Borrow::new(object.py(), key).map_err(|other| ArgumentError::Borrowed {
                    exclusive: other.exclusive != 0,
                    start: other.start,
                    end: other.end,
                })?)
            }
            _ => None,
        };
        let staged = match borrow {
            Some(_) if !aligned => {
                // SAFETY: host memory whose extent was checked, held by `object` and `source`
                // and borrowed (exclusively when writable) by `borrow`, which `Held` drops after
                // `staged`.
                Some(unsafe { staged::Staged::new(source.data, shape_ref, strides_ref, A::WRITABLE) })
            }
            _ => None,
        };
        let data = source.data;
        // Host data read in place needs nothing more than its borrow (registered exactly when it
        // is not empty), whose key `Drop` makes again.
        let in_place = matches!(source.holder, source::Holder::NumPy(_) | source::Holder::AmsoInPlace(_));
        if in_place && staged.is_none() && borrow.is_some() == extent.is_some() {
            if let Some(borrow) = borrow {
                borrow.leave_registered();
            }
            return Ok(TypedArray { held: None, object, data, shape, strides, _element: PhantomData });
        }
        let mut strides = strides;
        if staged.is_some() {
            strided::fill_c_strides(shape.as_ref(), strides.as_mut());
        }
        let held = Some(Box::new(super::Held { staged, _borrow: borrow, source }));
        Ok(TypedArray { held, object, data, shape, strides, _element: PhantomData })
    }
}

/// Why a typed argument is refused: the facts its message needs, made into the exception by
/// `refuse` on the error path only.
enum Refusal<'a> {
    Kind { numpy_kind: Option<&'a str>, dtype: (u8, u8, u16), ndim: usize },
    ReadOnly,
    TooManyElements { shape: &'a [usize] },
    PastAddressSpace { shape: &'a [usize], strides: &'a [isize] },
    Address { data: usize },
    Overlap { axis: usize, shape: &'a [usize], strides: &'a [isize] },
    Bools,
    RecordBools,
    NullObjects,
}

/// The error for `refusal` of argument `object` (read as `source`) of `T`, `D` and `A`. What
/// arrived is described here, on the error path only (it costs Python calls, so it comes after
/// the extents were copied: NumPy's can change under Python code).
#[cold]
#[inline(never)]
fn refuse<T: ArrayElement, D: Dimensions, A: Access>(
    refusal: Refusal<'_>,
    object: &Bound<'_, PyAny>,
    source: &Source,
) -> Box<ArgumentError> {
    let arrived = describe(object, Some(source.device));
    Box::new(match refusal {
        Refusal::Kind { numpy_kind, dtype, ndim } => ArgumentError::Kind {
            expected: wanted::<T, D, A>(),
            dtype: numpy_kind.map_or_else(|| dlpack_type_name(dtype), str::to_owned),
            ndim,
            arrived,
        },
        Refusal::ReadOnly => ArgumentError::ReadOnly { expected: wanted::<T, D, A>(), arrived },
        Refusal::TooManyElements { shape } => ArgumentError::TooManyElements { shape: shape.to_vec(), arrived },
        Refusal::PastAddressSpace { shape, strides } => {
            ArgumentError::PastAddressSpace { shape: shape.to_vec(), strides: strides.to_vec(), arrived }
        }
        Refusal::Address { data } => ArgumentError::Address { data, dtype: T::DTYPE.name, arrived },
        Refusal::Overlap { axis, shape, strides } => ArgumentError::Overlap {
            expected: wanted::<T, D, A>(),
            axis,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            arrived,
        },
        Refusal::Bools => ArgumentError::Bools { arrived },
        Refusal::RecordBools => ArgumentError::RecordBools { arrived },
        Refusal::NullObjects => ArgumentError::NullObjects { arrived },
    })
}

/// A record argument's layout against `T`'s, field by field (a NumPy structured array's, or an
/// amso record array's of another runtime copy); nothing for other kinds.
#[inline]
fn check_record<T: ArrayElement>(object: &Bound<'_, PyAny>, source: &Source) -> PyResult<()> {
    if const { T::DTYPE.is_record() } && source.numpy_kind.as_deref() == Some(crate::element::RECORD) {
        let numpy = matches!(source.holder, source::Holder::NumPy(_));
        // SAFETY: `numpy` says whether `object` is a NumPy array (else an amso record array).
        unsafe {
            crate::python::npyffi::record_layout::check_layout(object, numpy, crate::element::DTypeOf::<T>::REF)
        }?;
    }
    Ok(())
}

/// The alignment device data of `T` needs: a vector's own size (CUDA's `float4` loads), else
/// `T`'s alignment.
#[inline]
fn device_alignment<T: ArrayElement>() -> usize {
    match const { T::DTYPE.is_vector() } {
        true => size_of::<T>(),
        false => align_of::<T>(),
    }
}

/// Whether no entry of an object array (`size` pointers at `data`, strides in elements) is
/// NULL. An aligned C-contiguous one is read as one slice, without stopping at the first NULL
/// (a refusal is rare), so that the compiler reads several entries per instruction: `e - 1`
/// has its top bit set when `e` is NULL (it wraps around), so if the OR of those over the
/// entries has it clear, no entry is NULL (two SSE2 operations per pair of entries: an add and
/// an OR). A set bit is a NULL, or an address in the upper half of the address space (user
/// space never is on 64-bit systems, but may be on 32-bit ones), which the exact per-entry
/// test then tells apart.
///
/// # Safety
/// Every element's pointer is readable.
unsafe fn objects_filled(data: usize, shape: &[usize], strides: &[isize], size: usize) -> bool {
    // (A 1-D array of unit stride, the common case, is told apart without the general test.)
    let contiguous = matches!(strides, [1]) || strided::is_c_contiguous(shape, strides);
    if data.is_multiple_of(align_of::<usize>()) && contiguous {
        // SAFETY: `size` readable pointers (the caller's contract), aligned as `usize`.
        let entries = unsafe { std::slice::from_raw_parts(data as *const usize, size) };
        let suspects = entries.iter().fold(0, |suspects, &entry| suspects | entry.wrapping_sub(1));
        return suspects.leading_zeros() > 0 || !entries.contains(&0);
    }
    let non_null = |entry: *const u8| {
        // SAFETY: one readable pointer per element (the caller's contract), read unaligned: a
        // misaligned array is staged after the check.
        !unsafe { entry.cast::<*const ffi::PyObject>().read_unaligned() }.is_null()
    };
    check_each(data, shape, strides, size_of::<usize>(), non_null).is_ok()
}

/// Whether `valid` holds for the address of every element of a strided array (strides in
/// elements of `itemsize` bytes): one linear pass when the array is C-contiguous, else the
/// shared odometer.
fn check_each(
    data: usize,
    shape: &[usize],
    strides: &[isize],
    itemsize: usize,
    mut valid: impl FnMut(*const u8) -> bool,
) -> Result<(), ()> {
    let base = data as *const u8;
    // Every element of the array (the caller checked the extent). A C-contiguous array is read
    // without stopping at the first invalid element (a refusal is rare), so that the compiler
    // can read several elements per instruction.
    let all = if strided::is_c_contiguous(shape, strides) {
        (0..shape.iter().product::<usize>()).fold(true, |all, i| all & valid(base.wrapping_add(i * itemsize)))
    } else {
        let mut all = true;
        strided::for_each_offset(shape, strides, |offset| {
            all = all && valid(base.wrapping_offset(offset * itemsize as isize))
        });
        all
    };
    all.then_some(()).ok_or(())
}

#[cfg(test)]
mod tests {
    use super::objects_filled;

    /// The scan's verdict on `entries` read as a 1-D object array, with its strides in elements.
    fn filled(entries: &[usize], stride: isize) -> bool {
        let size = entries.len().div_ceil(stride.unsigned_abs());
        // SAFETY: every element the shape and stride reach is an entry of `entries`.
        unsafe { objects_filled(entries.as_ptr() as usize, &[size], &[stride], size) }
    }

    #[test]
    fn a_null_entry_anywhere_is_found_and_high_addresses_are_not_one() {
        let high = 1usize << (usize::BITS - 1); // an upper-half address: suspect, but not NULL
        for len in [1, 2, 3, 8, 24, 25] {
            let mut entries = vec![0x1000usize; len];
            assert!(filled(&entries, 1));
            for at in 0..len {
                entries[at] = 0;
                assert!(!filled(&entries, 1), "NULL at {at} of {len}");
                entries[at] = high | 8;
                assert!(filled(&entries, 1), "upper-half address at {at} of {len}");
                entries[at] = 0x1000;
            }
        }
        assert!(filled(&[], 1), "an empty array has no NULL");
        // A strided array reads only its own entries: a NULL between them is not one of them.
        assert!(filled(&[0x1000, 0, 0x2000, 0], 2));
        assert!(!filled(&[0x1000, 8, 0, 8], 2));
    }

    #[test]
    fn a_misaligned_array_is_read_entry_by_entry() {
        let width = size_of::<usize>();
        for null_at in [None, Some(0), Some(2)] {
            // Three entries at an address that is not a multiple of the pointer size.
            let mut bytes = vec![0u8; 3 * width + 2];
            let offset = if (bytes.as_ptr() as usize + 1).is_multiple_of(width) { 2 } else { 1 };
            for (at, chunk) in bytes[offset..].chunks_exact_mut(width).take(3).enumerate() {
                let entry = if Some(at) == null_at { 0usize } else { 0x1000 };
                chunk.copy_from_slice(&entry.to_ne_bytes());
            }
            let data = bytes.as_ptr() as usize + offset;
            // SAFETY: three entries' bytes from `data`, read unaligned.
            let verdict = unsafe { objects_filled(data, &[3], &[1], 3) };
            assert_eq!(verdict, null_at.is_none(), "NULL at {null_at:?}");
        }
    }
}
