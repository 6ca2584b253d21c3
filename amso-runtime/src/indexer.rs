//! `ArrayIndexer`: a `#[repr(C)]`, `Copy` view (data pointer + shape) for kernels and tight
//! loops. Its lifetime borrows the array it came from, so in safe Rust it cannot outlive it.

use std::cell::UnsafeCell;
use std::marker::PhantomData;

use crate::element::Element;

/// Pointer and shape of an N-D array in C order. Its C layout is
/// `struct { T *data; uint64_t shape[N]; }`, which is what a CUDA kernel receives by value.
#[repr(C)]
#[derive(Debug)]
pub struct ArrayIndexer<'a, T, const N: usize> {
    data: *mut T,
    shape: [u64; N],
    _borrow: PhantomData<&'a UnsafeCell<T>>,
}

impl<T, const N: usize> Clone for ArrayIndexer<'_, T, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, const N: usize> Copy for ArrayIndexer<'_, T, N> {}

impl<'a, T: Element, const N: usize> ArrayIndexer<'a, T, N> {
    /// # Safety
    /// `data` must point to `shape.product()` live elements for `'a`.
    pub(crate) unsafe fn new(data: *mut T, shape: [usize; N]) -> Self {
        ArrayIndexer { data, shape: shape.map(|d| d as u64), _borrow: PhantomData }
    }

    /// The shape.
    pub fn shape(&self) -> [usize; N] {
        self.shape.map(|d| d as usize)
    }

    /// Number of elements (computed, not stored, to keep the kernel argument small).
    pub fn size(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }

    /// Linear offset of `index`, or `None` when out of bounds.
    pub fn offset(&self, index: [usize; N]) -> Option<usize> {
        crate::shape::linear_offset(&self.shape(), &index).ok()
    }

    /// The index of linear `offset`.
    pub fn unravel(&self, offset: usize) -> [usize; N] {
        crate::shape::unravel(&self.shape(), offset)
    }

    /// Read the element at `index`, or `None` when out of bounds.
    pub fn get(&self, index: [usize; N]) -> Option<T> {
        let offset = self.offset(index)?;
        // SAFETY: `offset` is in bounds of the live buffer this indexer borrows.
        Some(unsafe { self.data.add(offset).read() })
    }

    /// Read the element at linear `offset` without checks.
    ///
    /// # Safety
    /// `offset < self.size()`.
    pub unsafe fn get_unchecked(&self, offset: usize) -> T {
        // SAFETY: the caller guarantees `offset` is in bounds.
        unsafe { self.data.add(offset).read() }
    }

    /// Write the element at linear `offset` without checks.
    ///
    /// # Safety
    /// `offset < self.size()`, the array is writable, and no other thread accesses that
    /// element at the same time.
    pub unsafe fn write_unchecked(&self, offset: usize, value: T) {
        // SAFETY: the caller guarantees bounds and exclusive access to this element.
        unsafe { self.data.add(offset).write(value) }
    }

    /// The data pointer.
    pub fn as_ptr(&self) -> *mut T {
        self.data
    }
}
