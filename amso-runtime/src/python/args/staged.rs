//! Misaligned host arrays (a NumPy view at an odd byte offset, a field of a packed structured
//! array): no `&T` may point into them, so a typed argument works on an aligned copy in C
//! order, read with unaligned reads at extraction and, for a writable argument, written back
//! with unaligned writes when the argument drops. Nothing ever makes a reference to the
//! producer's misaligned memory.

use std::mem::MaybeUninit;

use crate::strided;

/// An aligned copy of a misaligned array, written back on drop when `write_back`. The copy
/// holds the elements' bytes and is never dropped as `T`: it stands for the producer's memory
/// for the duration of the call, whatever the element kind (for `Py<PyAny>`, the references
/// stay the producer's; a value Rust writes into the copy moves into the producer's memory at
/// write-back, as a write in place would). Only types aligned to more than one byte are ever
/// misaligned, so bool (whose bytes need checking) never gets here.
pub(super) struct Staged<T> {
    /// The elements in C order.
    pub(super) copy: Vec<MaybeUninit<T>>,
    /// The producer's first element (not aligned for `T`).
    data: usize,
    shape: Box<[usize]>,
    /// The producer's strides, in elements.
    strides: Box<[isize]>,
    write_back: bool,
}

impl<T> Staged<T> {
    /// Copy the elements of a host array whose extent the caller checked, shape and strides (in
    /// elements) from `data`, however aligned.
    ///
    /// # Safety
    /// Every element the shape and strides reach from `data` is readable host memory, and, when
    /// `write_back`, writable and held exclusively until this value drops (the caller's
    /// exclusive borrow, which must outlive it).
    pub(super) unsafe fn new(data: usize, shape: &[usize], strides: &[isize], write_back: bool) -> Staged<T> {
        let mut copy = Vec::with_capacity(shape.iter().product());
        strided::for_each_offset(shape, strides, |offset| {
            let source = (data as *const u8).wrapping_offset(offset * size_of::<T>() as isize);
            let mut value = MaybeUninit::<T>::uninit();
            // SAFETY: one element's bytes of the array (the caller's promise: a valid `T`, as
            // the producer's own), copied as bytes into an aligned slot: no reference to the
            // misaligned memory.
            unsafe { std::ptr::copy_nonoverlapping(source, value.as_mut_ptr().cast::<u8>(), size_of::<T>()) };
            copy.push(value);
        });
        Staged { copy, data, shape: shape.into(), strides: strides.into(), write_back }
    }
}

impl<T> Drop for Staged<T> {
    fn drop(&mut self) {
        if !self.write_back {
            return;
        }
        let mut values = self.copy.iter();
        strided::for_each_offset(&self.shape, &self.strides, |offset| {
            let target = (self.data as *mut u8).wrapping_offset(offset * size_of::<T>() as isize);
            if let Some(value) = values.next() {
                // SAFETY: an element of the array, writable and held exclusively (`new`'s
                // contract); a byte copy makes no reference, and moves the value back.
                unsafe { std::ptr::copy_nonoverlapping(value.as_ptr().cast::<u8>(), target, size_of::<T>()) };
            }
        });
    }
}
