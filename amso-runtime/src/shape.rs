//! Shapes and indices: validation of user-given dimensions, C-order strides, and the mapping
//! between n-dimensional indices and linear offsets.

use crate::error::{Error, Result};

/// The largest number of dimensions amso compiles (the spec's ndim range is `1..=MAX_NDIM`),
/// as amso-codegen defines it.
pub const MAX_NDIM: usize = crate::element::MAX_NDIM;

/// Check user-given dimensions for an `ndim`-D array of `itemsize`-byte elements: `ndim` in
/// 1..=MAX_NDIM, the right count, none negative, and a byte size that fits in `isize::MAX`
/// (`byte_size`'s rule). Returns the shape (its first `ndim` entries) and the byte size.
pub(crate) fn checked_shape(dims: &[i64], ndim: usize, itemsize: usize) -> Result<([usize; MAX_NDIM], usize)> {
    let mut shape = [0; MAX_NDIM];
    let ndim = check_ndim(ndim as i64)?;
    let bytes = check_dims(dims, &mut shape[..ndim], itemsize)?;
    Ok((shape, bytes))
}

/// Refuse a number of dimensions outside amso's `1..=MAX_NDIM`, whoever gave it (a caller's
/// shape, a producer's tensor, a pickle); the message has the number as given.
pub(crate) fn check_ndim(ndim: i64) -> Result<usize> {
    match usize::try_from(ndim) {
        Ok(n) if (1..=MAX_NDIM).contains(&n) => Ok(n),
        _ => Err(Error::InvalidArgument(format!("ndim {ndim} is outside amso's 1..={}", MAX_NDIM))),
    }
}

/// `checked_shape`'s body: fills `shape` (whose length is the expected ndim) from `dims` and
/// returns the byte size.
fn check_dims(dims: &[i64], shape: &mut [usize], itemsize: usize) -> Result<usize> {
    let n = shape.len();
    if dims.len() != n {
        return Err(Error::InvalidShape(format!(
            "expected {n} dimensions for {}-D array, got {} ({dims:?})",
            crate::error::with_article(n),
            dims.len()
        )));
    }
    for (axis, (&dim, slot)) in dims.iter().zip(shape.iter_mut()).enumerate() {
        if dim < 0 {
            return Err(Error::InvalidShape(format!(
                "negative dimension {dim} on axis {axis}; dimensions must be >= 0"
            )));
        }
        *slot = usize::try_from(dim).map_err(|_| too_large(dims, itemsize))?;
    }
    byte_size(shape.iter().copied(), itemsize).ok_or_else(|| too_large(dims, itemsize))
}

fn too_large(dims: &[i64], itemsize: usize) -> Error {
    Error::TooLarge { shape: dims.iter().map(|&d| d as u64).collect(), itemsize, max: isize::MAX as usize }
}

/// Bytes held by an array of `shape` with `itemsize`-byte elements, or `None` when the shape
/// is too big. NumPy's rule, the one amso applies to every shape it is given: the product of
/// the *nonzero* dimensions times the itemsize must fit in `isize::MAX`, whatever the order of
/// the dimensions. A zero dimension makes the array empty but does not excuse the others: an
/// empty array still has C-order strides made of them (a zero counts as 1), and those must
/// not overflow either. Returns 0 for an empty shape that passes.
pub(crate) fn byte_size(shape: impl IntoIterator<Item = usize>, itemsize: usize) -> Option<usize> {
    let (mut bytes, mut empty) = (itemsize, false);
    for dim in shape {
        match dim {
            0 => empty = true,
            _ => bytes = bytes.checked_mul(dim)?,
        }
    }
    (bytes <= isize::MAX as usize).then_some(if empty { 0 } else { bytes })
}

/// The memory a non-empty strided array reaches, in bytes relative to its first element's
/// address: `lowest` (at most 0, through negative strides) and `end` (one past the last byte
/// reached). `axes` gives each axis' (dimension, stride); `unit` is what one stride step
/// counts in bytes: the itemsize for strides in elements (DLPack), 1 for strides in bytes
/// (NumPy, the buffer protocol). `None` if the offsets overflow.
#[cfg_attr(not(feature = "python"), allow(dead_code))] // typed arguments' borrow keys
pub(crate) fn byte_extent(
    axes: impl IntoIterator<Item = (usize, isize)>,
    unit: usize,
    itemsize: usize,
) -> Option<(isize, isize)> {
    let (mut lowest, mut highest) = (0isize, 0isize);
    for (dim, stride) in axes {
        let step = stride.checked_mul(isize::try_from(dim.checked_sub(1)?).ok()?)?.checked_mul(unit as isize)?;
        if step < 0 {
            lowest = lowest.checked_add(step)?;
        } else {
            highest = highest.checked_add(step)?;
        }
    }
    Some((lowest, highest.checked_add(itemsize as isize)?))
}

/// Number of elements of `shape` (the caller has checked it does not overflow).
pub(crate) fn element_count(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// `shape` (at most `MAX_NDIM` dimensions) and its C-order (row-major) strides in elements,
/// as the fixed-size `int64` arrays DLPack tensors and the C header carry.
#[cfg(feature = "python")] // the C header's
pub(crate) fn c_layout(shape: &[usize]) -> ([i64; MAX_NDIM], [i64; MAX_NDIM]) {
    let mut dims = [0i64; MAX_NDIM];
    let mut strides = [0i64; MAX_NDIM];
    for_each_c_stride(shape, |axis, dim, stride| {
        dims[axis] = dim;
        strides[axis] = stride;
    });
    (dims, strides)
}

/// Calls `f(axis, dimension, C-order stride in elements)` for each axis of `shape` (up to
/// `MAX_NDIM`), the last axis first. For a shape `byte_size` accepts the strides are exact
/// (and so are they times the itemsize); the saturation only keeps other shapes from
/// overflowing.
#[inline]
pub(crate) fn for_each_c_stride(shape: &[usize], mut f: impl FnMut(usize, i64, i64)) {
    let mut stride = 1i64;
    for (axis, &dim) in shape.iter().enumerate().take(MAX_NDIM).rev() {
        f(axis, dim as i64, stride);
        stride = stride.saturating_mul((dim as i64).max(1));
    }
}

/// Linear offset of an in-bounds `index` into a C-order array of `shape`.
pub(crate) fn linear_offset<const N: usize>(shape: &[usize; N], index: &[usize; N]) -> Result<usize> {
    let mut offset = 0usize;
    for axis in 0..N {
        if index[axis] >= shape[axis] {
            return Err(Error::IndexOutOfBounds { index: index[axis] as i64, axis, size: shape[axis] });
        }
        offset = offset * shape[axis] + index[axis];
    }
    Ok(offset)
}

/// The index of linear `offset` in a C-order array of `shape` (the inverse of `linear_offset`).
pub fn unravel<const N: usize>(shape: &[usize; N], mut offset: usize) -> [usize; N] {
    let mut index = [0usize; N];
    for axis in (0..N).rev() {
        let dim = shape[axis].max(1);
        index[axis] = offset % dim;
        offset /= dim;
    }
    index
}

/// The C-order linear offset (in elements) of a Python-style index into `shape`: negative
/// entries count from the end; the count and every entry are checked.
pub(crate) fn python_offset(shape: &[usize], index: &[i64]) -> Result<usize> {
    if index.len() != shape.len() {
        return Err(Error::IndexArity { expected: shape.len(), got: index.len() });
    }
    let mut offset = 0usize;
    for (axis, (&size, &given)) in shape.iter().zip(index).enumerate() {
        let wrapped = if given < 0 { given.checked_add(size as i64) } else { Some(given) };
        match wrapped {
            Some(i) if i >= 0 && (i as u64) < size as u64 => offset = offset * size + i as usize,
            _ => return Err(Error::IndexOutOfBounds { index: given, axis, size }),
        }
    }
    Ok(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked() {
        assert_eq!(checked_shape(&[2, 0, 4], 3, 4).map(|(s, _)| s[..3].to_vec()), Ok(vec![2, 0, 4]));
        assert!(
            matches!(checked_shape(&[2, 3, 4], 2, 4), Err(Error::InvalidShape(m)) if m.contains("expected 2 dimensions"))
        );
        assert!(
            matches!(checked_shape(&[2, -3], 2, 4), Err(Error::InvalidShape(m)) if m.contains("negative dimension -3 on axis 1"))
        );
        assert!(matches!(checked_shape(&[1 << 40, 1 << 40], 2, 8), Err(Error::TooLarge { .. })));
        assert!(matches!(checked_shape(&[i64::MAX], 1, 2), Err(Error::TooLarge { .. })));
        assert!(
            matches!(checked_shape(&[], 0, 8), Err(Error::InvalidArgument(m)) if m == "ndim 0 is outside amso's 1..=8")
        );
        assert!(
            matches!(checked_shape(&[1; 9], 9, 8), Err(Error::InvalidArgument(m)) if m.contains("ndim 9 is outside"))
        );
    }

    #[test]
    fn a_zero_dimension_does_not_excuse_the_others_in_any_order() {
        let max = isize::MAX as usize;
        // Each shape in every order of its dims, against NumPy's rule computed in u128.
        let shapes: [&[usize]; 8] = [
            &[0, max],
            &[0, 1 << 62],
            &[0, 1 << 61, 4],
            &[3, 0, 1 << 40, 1 << 20],
            &[0, 0, max],
            &[2, 3, 4],
            &[1 << 31, 1 << 31, 0],
            &[0],
        ];
        for shape in shapes {
            for itemsize in [1usize, 2, 4, 8, 16] {
                let nonzero = shape.iter().filter(|&&d| d != 0).fold(itemsize as u128, |n, &d| n * d as u128);
                let numpy = (nonzero <= max as u128).then(|| if shape.contains(&0) { 0 } else { nonzero as usize });
                let mut order = shape.to_vec();
                for _ in 0..shape.len() {
                    order.rotate_left(1);
                    assert_eq!(byte_size(order.iter().copied(), itemsize), numpy, "{order:?} x {itemsize}");
                    order.reverse();
                    assert_eq!(byte_size(order.iter().copied(), itemsize), numpy, "{order:?} x {itemsize}");
                }
            }
        }
        assert_eq!(byte_size([0, max], 1), Some(0), "uint8 (0, 2**63 - 1), as NumPy allows");
        assert_eq!(byte_size([max, 0], 2), None, "float16 (2**63 - 1, 0), as NumPy refuses");
        let dims = |shape: &[i64]| checked_shape(shape, shape.len(), 8).map(|(_, bytes)| bytes);
        assert!(
            matches!(dims(&[0, i64::MAX]), Err(e @ Error::TooLarge { .. }) if e.to_string().contains("even when one is zero"))
        );
        assert!(matches!(dims(&[i64::MAX, 0]), Err(Error::TooLarge { .. })));
        assert_eq!(dims(&[0, 1 << 59]), Ok(0), "(1 << 59) * 8 fits");
        assert_eq!(dims(&[1 << 59, 0]), Ok(0));
    }

    #[test]
    fn strides_of_accepted_empty_shapes_are_exact_in_bytes() {
        let max = isize::MAX as usize;
        let accepted: [(&[usize], usize); 5] =
            [(&[0, max], 1), (&[max, 0], 1), (&[0, 1 << 60, 2], 2), (&[1 << 30, 0, 1 << 29], 8), (&[0, 0, 0], 16)];
        for (shape, itemsize) in accepted {
            assert!(byte_size(shape.iter().copied(), itemsize).is_some(), "{shape:?} x {itemsize}");
            // The strides in bytes, with every product checked.
            let mut exact = vec![0i64; shape.len()];
            let mut step = Some(itemsize as i64);
            for axis in (0..shape.len()).rev() {
                exact[axis] = step.expect("no overflow");
                step = step.and_then(|s| s.checked_mul(shape[axis].max(1) as i64));
            }
            let mut layout = vec![0i64; shape.len()];
            for_each_c_stride(shape, |axis, _, stride| layout[axis] = stride * itemsize as i64);
            assert_eq!(layout, exact, "{shape:?} x {itemsize}");
        }
    }

    #[test]
    fn ndims_outside_1_to_8_are_refused_as_given() {
        assert_eq!(check_ndim(1), Ok(1));
        assert_eq!(check_ndim(8), Ok(8));
        for ndim in [0, 9, -1, 1_000_000, i64::MIN] {
            assert_eq!(check_ndim(ndim), Err(Error::InvalidArgument(format!("ndim {ndim} is outside amso's 1..=8"))));
        }
    }

    #[test]
    fn extents_reach_below_the_first_element_through_negative_strides() {
        let extent = |shape: &[usize], strides: &[isize], unit, itemsize| {
            byte_extent(shape.iter().copied().zip(strides.iter().copied()), unit, itemsize)
        };
        assert_eq!(extent(&[2, 3], &[3, 1], 4, 4), Some((0, 24)));
        assert_eq!(extent(&[4], &[-1], 8, 8), Some((-24, 8)), "x[::-1]: three elements below the first");
        assert_eq!(extent(&[2, 3], &[-3, 2], 4, 4), Some((-12, 20)));
        assert_eq!(extent(&[2], &[isize::MAX], 8, 8), None);
        // The same layouts with strides in bytes.
        assert_eq!(extent(&[2, 3], &[12, 4], 1, 4), Some((0, 24)));
        assert_eq!(extent(&[4], &[-8], 1, 8), Some((-24, 8)));
        assert_eq!(extent(&[8], &[16], 1, 8), Some((0, 120)), "every other item of 15");
        assert_eq!(extent(&[3, 1], &[0, 999], 1, 8), Some((0, 8)), "a broadcast, and an axis that never steps");
        assert_eq!(extent(&[2], &[isize::MIN], 1, 8), Some((isize::MIN, 8)));
        assert_eq!(extent(&[3], &[isize::MIN], 1, 8), None);
    }

    #[test]
    fn offsets_match_a_hand_computed_c_order() {
        let shape = [2, 3, 4];
        let mut layout = Vec::new();
        for_each_c_stride(&shape, |axis, dim, stride| layout.push((axis, dim, stride)));
        assert_eq!(layout, [(2, 4, 1), (1, 3, 4), (0, 2, 12)]);
        assert_eq!(linear_offset(&shape, &[1, 2, 3]), Ok(23));
        assert_eq!(linear_offset(&shape, &[0, 1, 0]), Ok(4));
        for offset in 0..24 {
            assert_eq!(linear_offset(&shape, &unravel(&shape, offset)), Ok(offset));
        }
        assert_eq!(linear_offset(&shape, &[0, 3, 0]), Err(Error::IndexOutOfBounds { index: 3, axis: 1, size: 3 }));
    }

    #[test]
    fn negative_indices_wrap_like_numpy() {
        let shape = [3, 5];
        assert_eq!(python_offset(&shape, &[-1, -5]), Ok(2 * 5));
        assert_eq!(python_offset(&shape, &[1, -1]), Ok(5 + 4));
        assert_eq!(python_offset(&shape, &[0, -6]), Err(Error::IndexOutOfBounds { index: -6, axis: 1, size: 5 }));
        assert_eq!(python_offset(&shape, &[3, 0]), Err(Error::IndexOutOfBounds { index: 3, axis: 0, size: 3 }));
        assert_eq!(
            python_offset(&shape, &[i64::MIN, 0]),
            Err(Error::IndexOutOfBounds { index: i64::MIN, axis: 0, size: 3 })
        );
        assert_eq!(python_offset(&shape, &[1]), Err(Error::IndexArity { expected: 2, got: 1 }));
        assert!(python_offset(&[0usize], &[0]).is_err(), "no index is valid on an empty axis");
    }
}
