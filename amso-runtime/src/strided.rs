//! Strided layouts of memory amso did not lay out itself (a typed argument's NumPy view, a
//! producer's DLPack tensor): strides in elements, negative ones included, checked for
//! whether a writable view would reach one element twice (the memory they reach:
//! `shape::byte_extent`).

use std::ops::{Deref, DerefMut};

/// How many dimensions `Dims` holds without allocating.
const INLINE: usize = 4;

/// A short list of dimensions or strides, inline up to 4 entries (NumPy allows 64; more than 4
/// take one allocation). Small, since a typed argument of any rank carries two and moves
/// several times on its way into a function.
#[derive(Clone)]
pub struct Dims<T: Copy + Default>(Storage<T>);

#[derive(Clone)]
enum Storage<T: Copy + Default> {
    Inline { len: u8, values: [T; INLINE] },
    Heap(Box<[T]>),
}

impl<T: Copy + Default> Dims<T> {
    /// The entries `values` yields, `len` of them (missing ones are `T::default()`).
    #[inline]
    pub(crate) fn collect(len: usize, values: impl IntoIterator<Item = T>) -> Self {
        if len <= INLINE {
            let mut inline = [T::default(); INLINE];
            for (slot, value) in inline[..len].iter_mut().zip(values) {
                *slot = value;
            }
            return Dims(Storage::Inline { len: len as u8, values: inline });
        }
        let mut heap: Vec<T> = values.into_iter().take(len).collect();
        heap.resize(len, T::default());
        Dims(Storage::Heap(heap.into_boxed_slice()))
    }

    /// A copy of `values`.
    #[inline]
    pub(crate) fn from_slice(values: &[T]) -> Self {
        Dims::collect(values.len(), values.iter().copied())
    }
}

impl<T: Copy + Default> Deref for Dims<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match &self.0 {
            Storage::Inline { len, values } => &values[..usize::from(*len)],
            Storage::Heap(heap) => heap,
        }
    }
}

impl<T: Copy + Default> DerefMut for Dims<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.0 {
            Storage::Inline { len, values } => &mut values[..usize::from(*len)],
            Storage::Heap(heap) => heap,
        }
    }
}

impl<T: Copy + Default> AsRef<[T]> for Dims<T> {
    fn as_ref(&self) -> &[T] {
        self
    }
}

impl<T: Copy + Default> AsMut<[T]> for Dims<T> {
    fn as_mut(&mut self) -> &mut [T] {
        self
    }
}

impl<T: Copy + Default + std::fmt::Debug> std::fmt::Debug for Dims<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Write the C-order strides in elements of `shape` into `strides` (of the same length; axes
/// of length 0 count as 1, so the strides stay what NumPy would give).
pub(crate) fn fill_c_strides(shape: &[usize], strides: &mut [isize]) {
    let mut stride = 1isize;
    for axis in (0..shape.len()).rev() {
        strides[axis] = stride;
        stride = stride.saturating_mul(shape[axis].max(1) as isize);
    }
}

/// Whether `strides` are the C-order strides of `shape`, ignoring axes of length 1 (whose
/// stride never matters) and any layout of an empty array.
pub(crate) fn is_c_contiguous(shape: &[usize], strides: &[isize]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = 1isize;
    for (&dim, &stride) in shape.iter().zip(strides).rev() {
        if dim > 1 && stride != expected {
            return false;
        }
        expected = expected.saturating_mul(dim as isize);
    }
    true
}

/// The offset (in the strides' unit) from the first element to the lowest-addressed one:
/// the sum over reversed axes of their extent. What ndarray's constructors start from.
#[cfg(feature = "ndarray")]
pub(crate) fn lowest_offset(shape: &[usize], strides: &[isize]) -> isize {
    shape.iter().zip(strides).filter(|(_, &s)| s < 0).map(|(&d, &s)| (d as isize - 1) * s).sum()
}

/// The first axis through which two different indices of a non-empty array reach the same
/// element, if any (a broadcast's zero stride, or strides that overlap): what a writable view
/// must not have. Axes of length 1 never step, so their strides do not count.
pub(crate) fn self_overlap(shape: &[usize], strides: &[isize]) -> Option<usize> {
    let mut axes: Dims<usize> = Dims::collect(shape.len(), 0..shape.len());
    axes.sort_unstable_by_key(|&axis| strides[axis].unsigned_abs());
    // With the axes ordered by stride, no overlap means each stride steps past everything the
    // smaller-strided axes reach (a sufficient test, the one NumPy's own writers use).
    let mut reach = 0usize;
    for &axis in axes.iter().filter(|&&axis| shape[axis] > 1) {
        let stride = strides[axis].unsigned_abs();
        if stride <= reach {
            return Some(axis);
        }
        reach = match stride.checked_mul(shape[axis] - 1).and_then(|step| reach.checked_add(step)) {
            Some(reach) => reach,
            None => return Some(axis),
        };
    }
    None
}

/// Calls `visit` with the offset of every element of a strided array (in the strides' unit,
/// elements or bytes), in C order (nothing for an empty array).
pub(crate) fn for_each_offset(shape: &[usize], strides: &[isize], mut visit: impl FnMut(isize)) {
    if shape.contains(&0) {
        return;
    }
    let mut index: Dims<usize> = Dims::collect(shape.len(), std::iter::repeat(0));
    let mut offset = 0isize;
    loop {
        visit(offset);
        // The odometer: step the last axis, carrying into earlier ones.
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            offset += strides[axis];
            if index[axis] < shape[axis] {
                break;
            }
            offset -= strides[axis] * shape[axis] as isize;
            index[axis] = 0;
        }
    }
}

/// The greatest common divisor of the byte strides of the axes that step (length > 1); 0 for
/// an array of at most one element.
pub(crate) fn stride_gcd(shape: &[usize], strides: &[isize], itemsize: usize) -> usize {
    shape
        .iter()
        .zip(strides)
        .filter(|(&dim, _)| dim > 1)
        .map(|(_, &stride)| stride.unsigned_abs().saturating_mul(itemsize))
        .fold(0, gcd)
}

/// The greatest common divisor, by shifts (Stein's algorithm): this runs for every typed
/// argument, and a division costs tens of cycles.
pub(crate) fn gcd(a: usize, b: usize) -> usize {
    if a == 0 || b == 0 {
        return a | b;
    }
    let shift = (a | b).trailing_zeros();
    let (mut a, mut b) = (a >> a.trailing_zeros(), b);
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_hold_short_and_long_lists() {
        let short = Dims::from_slice(&[3usize, 4]);
        assert_eq!(&*short, &[3, 4]);
        let long: Vec<i64> = (0..20).collect();
        assert_eq!(&*Dims::from_slice(&long), &long[..]);
        assert_eq!(&*Dims::<i64>::from_slice(&[]), &[] as &[i64]);
        for len in 0..=6 {
            let values: Vec<i64> = (0..len).collect(); // inline up to 4, then on the heap
            assert_eq!(&*Dims::from_slice(&values), &values[..]);
            assert_eq!(&mut *Dims::collect(len as usize, values.iter().copied()), &values[..]);
        }
        let c_strides = |shape: &[usize]| {
            let mut strides = vec![0; shape.len()];
            fill_c_strides(shape, &mut strides);
            strides
        };
        assert_eq!(c_strides(&[2, 3, 4]), [12, 4, 1]);
        assert_eq!(c_strides(&[2, 0, 4]), [4, 4, 1], "an empty axis counts as 1");
        let mut many = Dims::collect(12, std::iter::repeat(0isize));
        fill_c_strides(&[1; 12], &mut many);
        assert_eq!(&*many, &[1isize; 12]);
    }

    #[test]
    fn contiguity_ignores_unit_axes_and_empty_arrays() {
        assert!(is_c_contiguous(&[2, 3], &[3, 1]));
        assert!(is_c_contiguous(&[2, 1], &[1, 99]), "a length-1 axis may have any stride");
        assert!(!is_c_contiguous(&[2, 3], &[1, 2]), "Fortran order");
        assert!(!is_c_contiguous(&[3], &[-1]), "reversed");
        assert!(is_c_contiguous(&[0, 3], &[0, 0]), "an empty array has no layout to speak of");
    }

    #[test]
    fn overlap_is_found_through_zero_and_overlapping_strides() {
        assert_eq!(self_overlap(&[2, 3], &[3, 1]), None);
        assert_eq!(self_overlap(&[2, 3], &[1, 2]), None, "a transposed view");
        assert_eq!(self_overlap(&[3], &[-1]), None, "reversed");
        assert_eq!(self_overlap(&[4, 3], &[0, 1]), Some(0), "a broadcast");
        assert_eq!(self_overlap(&[3, 3], &[2, 1]), Some(0));
        assert_eq!(self_overlap(&[3, 3], &[-2, 1]), Some(0), "overlap through a negative stride");
        assert_eq!(self_overlap(&[1, 3], &[0, 1]), None, "a length-1 axis never steps");
    }

    #[test]
    fn gcd_by_shifts_matches_euclid() {
        fn euclid(mut a: usize, mut b: usize) -> usize {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        }
        for a in 0..70 {
            for b in [0, 1, 2, 3, 8, 12, 16, 24, 35, 64, 96, 1 << 40] {
                assert_eq!(gcd(a, b), euclid(a, b), "gcd({a}, {b})");
            }
        }
    }

    #[test]
    fn stride_gcds_count_stepping_axes_in_bytes() {
        assert_eq!(stride_gcd(&[4], &[2], 8), 16);
        assert_eq!(stride_gcd(&[2, 3], &[6, -2], 4), 8);
        assert_eq!(stride_gcd(&[1, 1], &[5, 7], 4), 0);
    }

    #[test]
    fn offsets_run_in_c_order() {
        let collect = |shape: &[usize], strides: &[isize]| {
            let mut offsets = Vec::new();
            for_each_offset(shape, strides, |offset| offsets.push(offset));
            offsets
        };
        assert_eq!(collect(&[2, 3], &[3, 1]), [0, 1, 2, 3, 4, 5]);
        assert_eq!(collect(&[2, 3], &[1, 2]), [0, 2, 4, 1, 3, 5], "transposed");
        assert_eq!(collect(&[3], &[-2]), [0, -2, -4], "reversed and stepped");
        assert_eq!(collect(&[2, 0], &[1, 1]), Vec::<isize>::new(), "empty");
        assert_eq!(collect(&[], &[]), [0], "one element, no axes");
    }
}
