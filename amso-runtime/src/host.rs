//! Host memory: a zeroed, aligned allocation shared (through `Arc`) by its array and every
//! view exported from it, so a view outlives the array that made it; and the host end of a copy
//! to or from the device (`HostEnd`).

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

use crate::element::MAX_ALIGN;
use crate::error::{Error, Result};

/// Up to this size, a buffer is allocated and then zeroed, rather than allocated zeroed: glibc's
/// `calloc` does not take blocks from the per-thread cache that `malloc` and `free` use (blocks
/// of up to 1032 bytes), so a small array made and dropped in a loop would pay for the general
/// allocator both ways. Larger buffers use `calloc`, whose fresh pages are zero without being
/// touched.
const ZERO_AFTER_ALLOC_MAX: usize = 1024;

/// A run of `bytes` bytes of host memory: amso's own (zeroed, aligned to `MAX_ALIGN`,
/// which covers every element type: `ElementOps::of` refuses types aligned beyond it), or a
/// foreign producer's (aligned for its elements, checked where it is wrapped).
///
/// The memory is reached only through raw pointers: exported views in other libraries alias
/// it, so no Rust reference to the contents is held across calls.
pub(crate) struct HostBuffer {
    ptr: NonNull<u8>,
    bytes: usize,
    /// Page-locked memory from the CUDA driver, when the array asked for it.
    #[cfg(feature = "cuda")]
    pinned: Option<crate::cuda::device_memory::PinnedMemory>,
    /// Keeps foreign memory (another library's export) alive; dropping it releases that memory.
    foreign: Option<Box<dyn std::any::Any + Send + Sync>>,
}

// SAFETY: the buffer holds plain bytes and owns only `Send + Sync` things (its allocation,
// pinned memory, a foreign owner); all access to the bytes goes through raw pointers whose
// synchronisation the array's lock protocol governs.
unsafe impl Send for HostBuffer {}
// SAFETY: as above; `&HostBuffer` hands out only raw pointers.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Allocate `bytes` zeroed bytes (zero bits are every element type's default, see
    /// `Element`).
    pub(crate) fn zeroed(bytes: usize) -> Result<Self> {
        let layout = Self::layout(bytes)?;
        if layout.size() == 0 {
            return Ok(Self::from_raw(Self::dangling(), bytes));
        }
        // SAFETY: the layout has a non-zero size (checked above); a block of
        // `ZERO_AFTER_ALLOC_MAX` bytes or less is zeroed right after it is allocated.
        let raw = unsafe {
            if layout.size() <= ZERO_AFTER_ALLOC_MAX {
                // `black_box`: LLVM would otherwise fuse the allocation and the zeroing back
                // into one `calloc`.
                let raw = std::hint::black_box(alloc(layout));
                if !raw.is_null() {
                    raw.write_bytes(0, layout.size());
                }
                raw
            } else {
                alloc_zeroed(layout)
            }
        };
        let ptr = NonNull::new(raw).ok_or(Error::OutOfMemory { bytes: layout.size(), what: "host" })?;
        Ok(Self::from_raw(ptr, bytes))
    }

    /// A dangling pointer aligned for every element type (empty buffers).
    fn dangling() -> NonNull<u8> {
        NonNull::<Aligned>::dangling().cast()
    }

    fn from_raw(ptr: NonNull<u8>, bytes: usize) -> Self {
        HostBuffer {
            ptr,
            bytes,
            #[cfg(feature = "cuda")]
            pinned: None,
            foreign: None,
        }
    }

    /// A buffer over `bytes` bytes of foreign host memory at `ptr`, kept alive by `owner`
    /// (dropped exactly once, when the buffer and every export of it are gone).
    ///
    /// # Safety
    /// `ptr` points to `bytes` initialised bytes, aligned for the elements the array holds,
    /// that stay valid until `owner` is dropped.
    pub(crate) unsafe fn foreign(ptr: *mut u8, bytes: usize, owner: Box<dyn std::any::Any + Send + Sync>) -> Self {
        let ptr = NonNull::new(ptr).unwrap_or(Self::dangling());
        let mut buffer = Self::from_raw(ptr, bytes);
        buffer.foreign = Some(owner);
        buffer
    }

    /// Allocate `bytes` zeroed bytes, page-locked when `pinned` (which needs the CUDA layer:
    /// `ArrayOptions::check` refuses it without).
    pub(crate) fn zeroed_for(bytes: usize, pinned: bool) -> Result<Self> {
        #[cfg(feature = "cuda")]
        if pinned {
            return Self::pinned_zeroed(bytes);
        }
        let _ = pinned;
        Self::zeroed(bytes)
    }

    /// Allocate `bytes` zeroed bytes of page-locked (pinned) memory.
    #[cfg(feature = "cuda")]
    pub(crate) fn pinned_zeroed(bytes: usize) -> Result<Self> {
        let bytes = Self::layout(bytes)?.size();
        let memory = crate::cuda::device_memory::PinnedMemory::alloc_zeroed(bytes)?;
        let ptr = if bytes == 0 { Self::dangling() } else { NonNull::new(memory.as_ptr()).expect("allocated") };
        Ok(HostBuffer { ptr, bytes, pinned: Some(memory), foreign: None })
    }

    /// Whether the memory is page-locked.
    pub(crate) fn is_pinned(&self) -> bool {
        #[cfg(feature = "cuda")]
        return self.pinned.is_some();
        #[cfg(not(feature = "cuda"))]
        false
    }

    /// A new buffer of the same size and kind (pinned or not), zeroed.
    pub(crate) fn zeroed_like(&self) -> Result<Self> {
        #[cfg(feature = "cuda")]
        if self.is_pinned() {
            return Self::pinned_zeroed(self.bytes);
        }
        Self::zeroed(self.bytes)
    }

    /// A new buffer holding a copy of `self`'s contents.
    pub(crate) fn try_clone(&self) -> Result<Self> {
        let copy = self.zeroed_like()?;
        // SAFETY: both buffers hold `bytes` bytes and are distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr(), copy.as_ptr(), self.bytes) };
        Ok(copy)
    }

    fn layout(bytes: usize) -> Result<Layout> {
        Layout::from_size_align(bytes, MAX_ALIGN).map_err(|_| Error::TooLarge {
            shape: vec![bytes as u64],
            itemsize: 1,
            max: isize::MAX as usize,
        })
    }

    /// Size in bytes.
    pub(crate) fn nbytes(&self) -> usize {
        self.bytes
    }

    /// Whether the buffer holds no bytes.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Pointer to the first byte (dangling but aligned when empty).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

/// The alignment `MAX_ALIGN` names, for dangling pointers.
#[repr(align(16))]
struct Aligned;
const _: () = assert!(align_of::<Aligned>() == MAX_ALIGN);

impl Drop for HostBuffer {
    // Pinned memory is released by its own Drop (field `pinned`).
    fn drop(&mut self) {
        if self.foreign.is_some() {
            return; // the owner releases foreign memory when it drops
        }
        #[cfg(feature = "cuda")]
        if self.pinned.is_some() {
            return; // PinnedMemory frees itself
        }
        if self.bytes == 0 {
            return;
        }
        let layout = Self::layout(self.bytes).expect("layout was valid at allocation");
        // SAFETY: allocated in `zeroed` with this exact layout and not freed before.
        unsafe { dealloc(self.ptr.as_ptr(), layout) };
    }
}

/// The host end of a host <-> device copy, which also says its direction: host memory copied
/// to the device, or host memory the device's bytes are copied into. Held as an address, so
/// that it crosses into the GIL-free section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostEnd {
    /// Host memory read and copied to the device.
    ToDevice(usize),
    /// Host memory the device's bytes are written to.
    FromDevice(usize),
}

impl HostEnd {
    /// A copy of `src` to the device.
    pub(crate) fn to_device(src: *const u8) -> HostEnd {
        HostEnd::ToDevice(src as usize)
    }

    /// A copy from the device into `dst`.
    pub(crate) fn from_device(dst: *mut u8) -> HostEnd {
        HostEnd::FromDevice(dst as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_cloned() {
        let buffer = HostBuffer::zeroed(1000 * 8).unwrap();
        assert_eq!(buffer.as_ptr() as usize % MAX_ALIGN, 0);
        let values = buffer.as_ptr().cast::<f64>();
        // SAFETY: 1000 initialised, aligned elements.
        assert!(unsafe { std::slice::from_raw_parts(values, 1000) }.iter().all(|&v| v == 0.0));
        // SAFETY: index 3 is in bounds.
        unsafe { *values.add(3) = 2.5 };
        let copy = buffer.try_clone().unwrap();
        // SAFETY: index 3 is in bounds of the copy.
        assert_eq!(unsafe { *copy.as_ptr().cast::<f64>().add(3) }, 2.5);
        assert_ne!(copy.as_ptr(), buffer.as_ptr());
    }

    #[test]
    fn small_buffers_are_zeroed_even_when_their_block_is_reused() {
        // Small buffers are zeroed after allocation: a block freed dirty and handed out again
        // (the allocator's per-thread cache returns the last block freed) must read as zeros.
        for bytes in [1, 16, 1000, ZERO_AFTER_ALLOC_MAX, ZERO_AFTER_ALLOC_MAX + 16] {
            for _ in 0..3 {
                let buffer = HostBuffer::zeroed(bytes).unwrap();
                // SAFETY: the buffer holds `bytes` initialised bytes.
                let contents = unsafe { std::slice::from_raw_parts_mut(buffer.as_ptr(), bytes) };
                assert!(contents.iter().all(|&b| b == 0), "{bytes} bytes");
                contents.fill(0xFF);
            }
        }
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
        let buffer = HostBuffer::zeroed(4 << 30).unwrap(); // 4 GiB
        let grown = resident_bytes().saturating_sub(before);
        assert!(grown < 64 << 20, "zeroing must be lazy (calloc), but {grown} bytes became resident");
        drop(buffer);
    }

    #[test]
    #[cfg_attr(miri, ignore = "asks the allocator for 1 EiB, which Miri reports as exhaustion")]
    fn empty_and_impossible_sizes() {
        assert!(HostBuffer::zeroed(0).unwrap().is_empty());
        assert_eq!(HostBuffer::zeroed(0).unwrap().as_ptr() as usize % MAX_ALIGN, 0);
        assert!(matches!(HostBuffer::zeroed(usize::MAX / 2), Err(Error::TooLarge { .. })));
        assert!(matches!(HostBuffer::zeroed(1 << 60), Err(Error::OutOfMemory { .. })));
    }
}
