//! Indexers: small views (data pointer + shape, C order) for tight loops and kernels.
//!
//! Host and device data get different types. `HostIndexer` and `HostIndexerMut` read and
//! write host memory safely (bounds-checked, with `unsafe` unchecked variants) and borrow the
//! array they came from. They read and write elements by value, with unaligned loads and
//! stores (the same instructions as aligned ones on x86-64 and AArch64), so a misaligned
//! argument is read in place. `DeviceIndexer` is what a CUDA kernel receives by value: it holds a
//! device address, so it offers no host reads at all.

use std::marker::PhantomData;

use crate::element::{read_element_unaligned, Element};
use crate::shape;

/// A read-only view of an array's host data.
#[derive(Debug, Clone, Copy)]
pub struct HostIndexer<'a, T, const N: usize> {
    data: *const T,
    shape: [usize; N],
    _borrow: PhantomData<&'a [T]>,
}

impl<'a, T: Element, const N: usize> HostIndexer<'a, T, N> {
    /// # Safety
    /// `data` points to `shape.product()` initialised host elements (aligned or not), alive
    /// and not written through any other path for `'a`.
    pub(crate) unsafe fn new(data: *const T, shape: [usize; N]) -> Self {
        HostIndexer { data, shape, _borrow: PhantomData }
    }

    /// The shape.
    pub fn shape(&self) -> [usize; N] {
        self.shape
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        shape::element_count(&self.shape)
    }

    /// Linear offset of `index`, or `None` when out of bounds.
    pub fn offset(&self, index: [usize; N]) -> Option<usize> {
        shape::linear_offset(&self.shape, &index).ok()
    }

    /// The index of linear `offset`.
    pub fn unravel(&self, offset: usize) -> [usize; N] {
        shape::unravel(&self.shape, offset)
    }

    /// The element at `index`, or `None` when out of bounds.
    pub fn get(&self, index: [usize; N]) -> Option<T> {
        let offset = self.offset(index)?;
        // SAFETY: `offset` is in bounds.
        Some(unsafe { self.get_unchecked(offset) })
    }

    /// The elements in C order, by value.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = T> + '_ {
        // SAFETY: every offset is below the size.
        (0..self.size()).map(|offset| unsafe { self.get_unchecked(offset) })
    }

    /// The element at linear `offset` without a bounds check.
    ///
    /// # Safety
    /// `offset < self.size()`.
    pub unsafe fn get_unchecked(&self, offset: usize) -> T {
        // SAFETY: in bounds (the caller) of the live buffer this indexer borrows; read as a
        // value, aligned or not.
        unsafe { read_element_unaligned(self.data.add(offset)) }
    }
}

/// A writable view of an array's host data; it borrows the array exclusively.
#[derive(Debug)]
pub struct HostIndexerMut<'a, T, const N: usize> {
    data: *mut T,
    shape: [usize; N],
    _borrow: PhantomData<&'a mut [T]>,
}

impl<'a, T: Element, const N: usize> HostIndexerMut<'a, T, N> {
    /// # Safety
    /// As `HostIndexer::new`, and no other path reads or writes the elements for `'a`.
    pub(crate) unsafe fn new(data: *mut T, shape: [usize; N]) -> Self {
        HostIndexerMut { data, shape, _borrow: PhantomData }
    }

    /// This view, read-only.
    pub fn as_indexer(&self) -> HostIndexer<'_, T, N> {
        // SAFETY: the same live buffer, borrowed from `self`.
        unsafe { HostIndexer::new(self.data, self.shape) }
    }

    /// The shape.
    pub fn shape(&self) -> [usize; N] {
        self.shape
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        shape::element_count(&self.shape)
    }

    /// The index of linear `offset`.
    pub fn unravel(&self, offset: usize) -> [usize; N] {
        shape::unravel(&self.shape, offset)
    }

    /// The element at `index`, or `None` when out of bounds.
    pub fn get(&self, index: [usize; N]) -> Option<T> {
        self.as_indexer().get(index)
    }

    /// Write `value` at `index`; `None` (and nothing written) when out of bounds.
    pub fn set(&mut self, index: [usize; N], value: T) -> Option<()> {
        let offset = shape::linear_offset(&self.shape, &index).ok()?;
        // SAFETY: `offset` is in bounds.
        unsafe { self.set_unchecked(offset, value) };
        Some(())
    }

    /// The element at linear `offset` without a bounds check.
    ///
    /// # Safety
    /// `offset < self.size()`.
    pub unsafe fn get_unchecked(&self, offset: usize) -> T {
        // SAFETY: forwarded.
        unsafe { self.as_indexer().get_unchecked(offset) }
    }

    /// Write the element at linear `offset` without a bounds check.
    ///
    /// # Safety
    /// `offset < self.size()`.
    pub unsafe fn set_unchecked(&mut self, offset: usize, value: T) {
        // SAFETY: in bounds (the caller) of the buffer this indexer borrows exclusively;
        // written as a value, aligned or not.
        unsafe { self.data.add(offset).write_unaligned(value) }
    }
}

/// What a CUDA kernel receives for one array: its device address and shape. The C layout is
/// `struct { T *data; uint64_t shape[N]; }`, which a kernel takes by value. It borrows the
/// array it came from, so the memory cannot be freed or moved while the indexer lives.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceIndexer<'a, T, const N: usize> {
    data: u64,
    shape: [u64; N],
    _borrow: PhantomData<(&'a mut [T], *mut T)>,
}

// SAFETY: a device address and a shape, which the host never dereferences: sharing or sending
// them is sharing numbers (launches, which run with the GIL released, capture indexers).
unsafe impl<T, const N: usize> Send for DeviceIndexer<'_, T, N> {}
// SAFETY: as above.
unsafe impl<T, const N: usize> Sync for DeviceIndexer<'_, T, N> {}

impl<T: Element, const N: usize> DeviceIndexer<'_, T, N> {
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn new(data: u64, shape: [usize; N]) -> Self {
        DeviceIndexer { data, shape: shape.map(|d| d as u64), _borrow: PhantomData }
    }

    /// The device address of the first element.
    pub fn device_address(&self) -> u64 {
        self.data
    }

    /// The shape.
    pub fn shape(&self) -> [usize; N] {
        self.shape.map(|d| d as usize)
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        shape::element_count(&self.shape())
    }
}

// SAFETY: `#[repr(C)]` plain data (a device address and 64-bit dimensions), which is what
// the kernel parameter `amso::Indexer<T, N>` expects by value.
#[cfg(feature = "cuda")]
unsafe impl<T: Element, const N: usize> cudarc::driver::DeviceRepr for DeviceIndexer<'_, T, N> {}

// The layout kernels see: a device pointer, then N 64-bit dimensions, no padding.
const _: () = {
    assert!(std::mem::offset_of!(DeviceIndexer<'static, f64, 3>, data) == 0);
    assert!(std::mem::offset_of!(DeviceIndexer<'static, f64, 3>, shape) == 8);
    assert!(size_of::<DeviceIndexer<'static, u8, 1>>() == 16);
    assert!(size_of::<DeviceIndexer<'static, f64, 8>>() == 72);
};

#[cfg(test)]
mod tests {
    use crate::memarray::MemArray;

    #[test]
    fn host_indexers_read_and_write_in_bounds_only() {
        let mut array = MemArray::<i32, 2>::new([2, 3]).unwrap();
        {
            let mut writer = array.indexer_mut().unwrap();
            assert_eq!(writer.set([1, 2], 7), Some(()));
            assert_eq!(writer.set([2, 0], 1), None);
        }
        let reader = array.indexer().unwrap();
        assert_eq!((reader.get([1, 2]), reader.get([0, 3])), (Some(7), None));
        assert_eq!(reader.unravel(5), [1, 2]);
        assert_eq!(reader.offset([1, 2]), Some(5));
    }

    /// Elements at an odd byte offset are read and written in place, as values (Miri checks
    /// that no aligned access or reference reaches them).
    #[test]
    fn misaligned_elements_are_read_and_written_in_place() {
        let mut bytes = vec![0u8; 1 + 4 * size_of::<f64>()];
        for (i, value) in [1.5f64, -2.0, 3.25, 4.0].iter().enumerate() {
            bytes[1 + i * 8..9 + i * 8].copy_from_slice(&value.to_ne_bytes());
        }
        let data = bytes[1..].as_mut_ptr().cast::<f64>();
        // SAFETY: four f64 values' bytes at `data` (misaligned), borrowed through `bytes`.
        let mut writer = unsafe { super::HostIndexerMut::new(data, [2, 2]) };
        assert_eq!(writer.as_indexer().iter().collect::<Vec<_>>(), [1.5, -2.0, 3.25, 4.0]);
        assert_eq!(writer.as_indexer().iter().sum::<f64>(), 6.75);
        assert_eq!(writer.set([1, 0], 10.0), Some(()));
        assert_eq!(writer.get([1, 0]), Some(10.0));
        assert_eq!(f64::from_ne_bytes(bytes[17..25].try_into().unwrap()), 10.0, "written in place");
    }

    #[test]
    fn read_only_arrays_give_no_writable_indexer() {
        let options = crate::memarray::options::ArrayOptions { readonly: true, ..Default::default() };
        let mut array = MemArray::<f32, 1>::with_options([3], options).unwrap();
        assert_eq!(array.indexer_mut().err(), Some(crate::error::Error::ReadOnly));
        assert!(array.indexer().is_ok());
    }
}
