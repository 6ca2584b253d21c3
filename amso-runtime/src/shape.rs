//! Shapes and indices: validation of user-given dimensions, C-order strides, and the mapping
//! between n-dimensional indices and linear offsets.

use crate::error::{Error, Result};

/// Check user-given dimensions for an `ndim`-D array of `itemsize`-byte elements: `ndim` in
/// 1..=MAX_NDIM, the right count, none negative, and a byte size that fits in `isize::MAX`.
/// Returns the shape (its first `ndim` entries) and the byte size.
pub(crate) fn checked_shape(dims: &[i64], ndim: usize, itemsize: usize) -> Result<([usize; crate::MAX_NDIM], usize)> {
    let mut shape = [0; crate::MAX_NDIM];
    if ndim == 0 || ndim > crate::MAX_NDIM {
        return Err(Error::InvalidShape(format!("amso arrays have 1 to {} dimensions, not {ndim}", crate::MAX_NDIM)));
    }
    let bytes = check_dims(dims, &mut shape[..ndim], itemsize)?;
    Ok((shape, bytes))
}

/// `checked_shape`'s body: fills `shape` (whose length is the expected ndim) from `dims` and
/// returns the byte size.
fn check_dims(dims: &[i64], shape: &mut [usize], itemsize: usize) -> Result<usize> {
    let n = shape.len();
    if dims.len() != n {
        return Err(Error::InvalidShape(format!(
            "expected {n} dimensions for a {n}-D array, got {} ({dims:?})",
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
    byte_size(shape, itemsize).ok_or_else(|| too_large(dims, itemsize))
}

fn too_large(dims: &[i64], itemsize: usize) -> Error {
    Error::TooLarge { shape: dims.iter().map(|&d| d as u64).collect(), itemsize, max: isize::MAX as usize }
}

/// Bytes spanned by `shape`, or `None` past `isize::MAX`.
pub(crate) fn byte_size(shape: &[usize], itemsize: usize) -> Option<usize> {
    let bytes = shape.iter().try_fold(itemsize, |acc, &d| acc.checked_mul(d))?;
    (bytes <= isize::MAX as usize).then_some(bytes)
}

/// Number of elements of `shape` (the caller has checked it does not overflow).
pub(crate) fn element_count(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// `shape` (at most `MAX_NDIM` dimensions) and its C-order (row-major) strides in elements,
/// as the fixed-size `int64` arrays DLPack tensors and the C header carry.
#[cfg(feature = "python")] // the C header's
pub(crate) fn c_layout(shape: &[usize]) -> ([i64; crate::MAX_NDIM], [i64; crate::MAX_NDIM]) {
    let mut dims = [0i64; crate::MAX_NDIM];
    let mut strides = [0i64; crate::MAX_NDIM];
    for_each_c_stride(shape, |axis, dim, stride| {
        dims[axis] = dim;
        strides[axis] = stride;
    });
    (dims, strides)
}

/// Calls `f(axis, dimension, C-order stride in elements)` for each axis of `shape` (up to
/// `MAX_NDIM`), the last axis first.
#[inline]
pub(crate) fn for_each_c_stride(shape: &[usize], mut f: impl FnMut(usize, i64, i64)) {
    let mut stride = 1i64;
    for (axis, &dim) in shape.iter().enumerate().take(crate::MAX_NDIM).rev() {
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
        // Zero-size arrays never overflow, however large the other dimensions.
        assert_eq!(checked_shape(&[0, i64::MAX], 2, 8).map(|(s, _)| s[..2].to_vec()), Ok(vec![0, i64::MAX as usize]));
        assert!(matches!(checked_shape(&[], 0, 8), Err(Error::InvalidShape(_))));
        assert!(matches!(checked_shape(&[1; 9], 9, 8), Err(Error::InvalidShape(_))));
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
