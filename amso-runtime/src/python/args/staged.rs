//! Misaligned host arrays (a NumPy view at an odd byte offset, a field of a packed structured
//! array): no `&T` may point into them. Element reads and writes through an indexer go to the
//! producer's memory in place, with unaligned loads and stores; a view that needs references
//! (`as_slice`, `as_array`, the matrix views) works on an aligned copy in C order, made at the
//! first such view with unaligned reads and, for a writable argument, written back with
//! unaligned writes when the argument drops. Nothing ever makes a reference to the producer's
//! misaligned memory.

use std::cell::OnceCell;
use std::mem::MaybeUninit;

use crate::strided;

/// A misaligned array, and its aligned copy once a view needed one (written back on drop when
/// `write_back`). The copy holds the elements' bytes and is never dropped as `T`: it stands
/// for the producer's memory for the duration of the call, whatever the element kind (for
/// `Py<PyAny>`, the references stay the producer's; a value Rust writes into the copy moves
/// into the producer's memory at write-back, as a write in place would). Only types aligned to
/// more than one byte are ever misaligned: never a bool, but a record with bool fields, whose
/// bool bytes the copy makes 0 or 1 (as `read_element` reads them).
pub(super) struct Staged<T> {
    /// The elements in C order, once copied.
    copy: OnceCell<Vec<MaybeUninit<T>>>,
    /// Whether the copy was handed out for writes: only then is it written back (a copy that
    /// was only read would undo the producer's own writes made meanwhile).
    written: bool,
    /// The producer's first element (not aligned for `T`).
    data: usize,
    shape: Box<[usize]>,
    /// The producer's strides, in elements.
    strides: Box<[isize]>,
    write_back: bool,
}

impl<T: crate::element::ArrayElement> Staged<T> {
    /// A misaligned host array whose extent the caller checked, shape and strides (in
    /// elements) from `data`; nothing is copied yet.
    ///
    /// # Safety
    /// Every element the shape and strides reach from `data` is readable host memory, holding
    /// valid `T`s, and, when `write_back`, writable and held exclusively until this value
    /// drops (the caller's exclusive borrow, which must outlive it).
    pub(super) unsafe fn new(data: usize, shape: &[usize], strides: &[isize], write_back: bool) -> Staged<T> {
        Staged { copy: OnceCell::new(), written: false, data, shape: shape.into(), strides: strides.into(), write_back }
    }

    /// The producer's first element, while its elements are in C order and no copy stands for
    /// them: reads and writes there, unaligned, are the array's.
    pub(super) fn in_place(&self) -> Option<usize> {
        (self.copy.get().is_none() && strided::is_c_contiguous(&self.shape, &self.strides)).then_some(self.data)
    }

    /// The aligned copy's first element, copied at the first call.
    pub(super) fn copy_ptr(&self) -> *const T {
        self.copy().as_ptr().cast()
    }

    /// The aligned copy's first element, for writes (written back when the argument drops).
    pub(super) fn copy_ptr_mut(&mut self) -> *mut T {
        self.copy();
        self.written = true;
        self.copy.get_mut().map_or(std::ptr::null_mut(), |copy| copy.as_mut_ptr().cast())
    }

    fn copy(&self) -> &Vec<MaybeUninit<T>> {
        self.copy.get_or_init(|| {
            let mut copy = Vec::with_capacity(self.shape.iter().product());
            strided::for_each_offset(&self.shape, &self.strides, |offset| {
                let source = (self.data as *const u8).wrapping_offset(offset * size_of::<T>() as isize);
                let mut value = MaybeUninit::<T>::uninit();
                // SAFETY: one element's bytes of the array (`new`'s contract: a valid `T`, as the
                // producer's own), copied as bytes into an aligned slot: no reference to the
                // misaligned memory.
                unsafe { std::ptr::copy_nonoverlapping(source, value.as_mut_ptr().cast::<u8>(), size_of::<T>()) };
                // SAFETY: `value` holds one `T`'s bytes, just copied.
                unsafe { crate::element::normalise_record_bools(&T::DTYPE, value.as_mut_ptr().cast::<u8>()) };
                copy.push(value);
            });
            copy
        })
    }
}

impl<T> Drop for Staged<T> {
    fn drop(&mut self) {
        let Some(copy) = self.copy.get().filter(|_| self.write_back && self.written) else { return };
        let mut values = copy.iter();
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
