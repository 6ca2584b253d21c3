//! Host memory: a zeroed, aligned allocation shared (through `Arc`) by its array and every
//! view exported from it, so a view outlives the array that made it.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::element::Element;
use crate::error::{Error, Result};

/// Alignment of host allocations: malloc's own (16 bytes on 64-bit targets), which covers
/// every element type. Asking the system allocator for more makes `alloc_zeroed` memset the
/// whole block instead of using calloc's lazily zeroed pages, which costs time and resident
/// memory for large arrays.
pub const HOST_ALIGNMENT: usize = 16;

/// An owned, zero-initialised run of `len` elements in host memory.
///
/// The memory is reached only through raw pointers: exported views in other libraries alias
/// it, so no Rust reference to the contents is held across calls.
pub struct HostBuffer<T> {
    ptr: NonNull<T>,
    len: usize,
    /// Page-locked memory from the CUDA driver, when the array asked for it.
    #[cfg(feature = "cuda")]
    pinned: Option<crate::cuda::memory::PinnedMemory>,
    /// Keeps foreign memory (another library's export) alive; dropping it releases that memory.
    foreign: Option<Box<dyn std::any::Any + Send + Sync>>,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns plain element data (`Element: Send + Sync`); all access goes
// through raw pointers whose synchronisation the array's lock protocol governs.
unsafe impl<T: Element> Send for HostBuffer<T> {}
// SAFETY: as above; `&HostBuffer` hands out only raw pointers.
unsafe impl<T: Element> Sync for HostBuffer<T> {}

impl<T: Element> HostBuffer<T> {
    /// Allocate `len` zeroed elements (zero bits are `T::default()`, see `Element`).
    pub fn zeroed(len: usize) -> Result<Self> {
        let layout = Self::layout(len)?;
        if layout.size() == 0 {
            return Ok(Self::from_raw(NonNull::dangling(), len));
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw.cast::<T>()).ok_or(Error::OutOfMemory { bytes: layout.size(), what: "host" })?;
        Ok(Self::from_raw(ptr, len))
    }

    fn from_raw(ptr: NonNull<T>, len: usize) -> Self {
        HostBuffer {
            ptr,
            len,
            #[cfg(feature = "cuda")]
            pinned: None,
            foreign: None,
            _owns: PhantomData,
        }
    }

    /// A buffer over `len` elements of foreign host memory at `ptr`, kept alive by `owner`
    /// (dropped exactly once, when the buffer and every export of it are gone).
    ///
    /// # Safety
    /// `ptr` points to `len` initialised, suitably aligned elements that stay valid until
    /// `owner` is dropped.
    pub unsafe fn foreign(ptr: *mut T, len: usize, owner: Box<dyn std::any::Any + Send + Sync>) -> Self {
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
        let mut buffer = Self::from_raw(ptr, len);
        buffer.foreign = Some(owner);
        buffer
    }

    /// Allocate `len` zeroed elements, page-locked when `options.pinned` (checked by
    /// `ArrayOptions::check` to need the CUDA layer).
    pub fn for_options(len: usize, options: &crate::memarray::ArrayOptions) -> Result<Self> {
        #[cfg(feature = "cuda")]
        if options.pinned {
            return Self::pinned_zeroed(len);
        }
        let _ = options;
        Self::zeroed(len)
    }

    /// Allocate `len` zeroed elements of page-locked (pinned) memory.
    #[cfg(feature = "cuda")]
    pub fn pinned_zeroed(len: usize) -> Result<Self> {
        let bytes = Self::layout(len)?.size();
        let memory = crate::cuda::memory::PinnedMemory::alloc_zeroed(bytes)?;
        let ptr = if bytes == 0 {
            NonNull::dangling()
        } else {
            NonNull::new(memory.as_ptr().cast::<T>()).expect("allocated")
        };
        Ok(HostBuffer { ptr, len, pinned: Some(memory), foreign: None, _owns: PhantomData })
    }

    /// Whether the memory is page-locked.
    pub fn is_pinned(&self) -> bool {
        #[cfg(feature = "cuda")]
        return self.pinned.is_some();
        #[cfg(not(feature = "cuda"))]
        false
    }

    /// A new buffer of the same length and kind (pinned or not), zeroed.
    pub fn zeroed_like(&self) -> Result<Self> {
        #[cfg(feature = "cuda")]
        if self.is_pinned() {
            return Self::pinned_zeroed(self.len);
        }
        Self::zeroed(self.len)
    }

    /// A new buffer holding a copy of `self`'s contents.
    pub fn try_clone(&self) -> Result<Self> {
        let copy = self.zeroed_like()?;
        // SAFETY: both buffers hold `len` elements and are distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr(), copy.as_ptr(), self.len) };
        Ok(copy)
    }

    fn layout(len: usize) -> Result<Layout> {
        let too_large =
            || Error::TooLarge { shape: vec![len as u64], itemsize: size_of::<T>(), max: isize::MAX as usize };
        let bytes = len.checked_mul(size_of::<T>()).ok_or_else(too_large)?;
        Layout::from_size_align(bytes, HOST_ALIGNMENT.max(align_of::<T>())).map_err(|_| too_large())
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pointer to the first element (dangling but aligned when empty).
    pub fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
}

impl<T> Drop for HostBuffer<T> {
    // Pinned memory is released by its own Drop (field `pinned`).
    fn drop(&mut self) {
        let bytes = self.len * size_of::<T>();
        if self.foreign.is_some() {
            return; // the owner releases foreign memory when it drops
        }
        #[cfg(feature = "cuda")]
        if self.pinned.is_some() {
            return; // PinnedMemory frees itself
        }
        if bytes == 0 {
            return;
        }
        let layout = Layout::from_size_align(bytes, HOST_ALIGNMENT.max(align_of::<T>()))
            .expect("layout was valid at allocation");
        // SAFETY: allocated in `zeroed` with this exact layout and not freed before.
        unsafe { dealloc(self.ptr.as_ptr().cast(), layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_cloned() {
        let buffer = HostBuffer::<f64>::zeroed(1000).unwrap();
        assert_eq!(buffer.as_ptr() as usize % HOST_ALIGNMENT, 0);
        // SAFETY: 1000 initialised elements.
        let values = unsafe { std::slice::from_raw_parts(buffer.as_ptr(), 1000) };
        assert!(values.iter().all(|&v| v == 0.0));
        // SAFETY: index 3 is in bounds.
        unsafe { *buffer.as_ptr().add(3) = 2.5 };
        let copy = buffer.try_clone().unwrap();
        // SAFETY: index 3 is in bounds of the copy.
        assert_eq!(unsafe { *copy.as_ptr().add(3) }, 2.5);
        assert_ne!(copy.as_ptr(), buffer.as_ptr());
    }

    #[cfg(target_os = "linux")]
    #[test]
    #[cfg_attr(miri, ignore = "reads /proc and allocates 4 GiB")]
    fn large_zeroed_buffers_are_not_touched() {
        fn resident_bytes() -> usize {
            let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
            statm.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 4096
        }
        let before = resident_bytes();
        let buffer = HostBuffer::<f32>::zeroed(1 << 30).unwrap(); // 4 GiB
        let grown = resident_bytes().saturating_sub(before);
        assert!(grown < 64 << 20, "zeroing must be lazy (calloc), but {grown} bytes became resident");
        drop(buffer);
    }

    #[test]
    #[cfg_attr(miri, ignore = "asks the allocator for 1 EiB, which Miri reports as exhaustion")]
    fn empty_and_impossible_sizes() {
        assert!(HostBuffer::<u8>::zeroed(0).unwrap().is_empty());
        assert!(matches!(HostBuffer::<f64>::zeroed(usize::MAX / 4), Err(Error::TooLarge { .. })));
        assert!(matches!(HostBuffer::<u8>::zeroed(1 << 60), Err(Error::OutOfMemory { .. })));
    }
}
