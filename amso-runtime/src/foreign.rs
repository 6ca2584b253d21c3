//! Arrays over memory another library owns (a DLPack tensor handed to amso): amso reads and
//! writes it in place and keeps the producer's owner alive until the array and every export
//! of it are gone; dropping the owner releases the memory (runs the producer's deleter once).

use std::any::Any;
use std::sync::Arc;

use crate::element::{DType, Element};
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::memarray::{ArrayOptions, Device, DeviceType, MemArray, Residence};
use crate::shape::{self, checked_shape};

/// Foreign memory and what keeps it alive.
pub struct ForeignMemory {
    /// Address of the first element.
    pub address: usize,
    /// Where it lives.
    pub device: Device,
    /// Dropped exactly once, when amso no longer needs the memory.
    pub owner: Box<dyn Any + Send + Sync>,
}

impl ForeignMemory {
    /// Refuse an address not aligned for `dtype` (alignment `align`).
    fn check_alignment(&self, align: usize, dtype: &DType) -> Result<()> {
        if self.address.is_multiple_of(align) {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "foreign data at 0x{:x} is not aligned for {} ({align} bytes)",
            self.address, dtype.name
        )))
    }

    /// The device side of an array over this device memory of `bytes`.
    ///
    /// # Safety
    /// As `MemArray::from_foreign`.
    #[cfg(feature = "cuda")]
    unsafe fn into_device_side(self, bytes: usize) -> Result<crate::device::DeviceSide> {
        crate::cuda::driver::check_device(self.device.id)?;
        // SAFETY: forwarded from the caller.
        let device = unsafe {
            crate::cuda::memory::DeviceMemory::foreign(self.device.id, self.address as u64, bytes, self.owner)
        };
        Ok(crate::device::DeviceSide::with_memory(Arc::new(device)))
    }
}

impl<T: Element, const N: usize> MemArray<T, N> {
    /// An array over foreign memory of C-contiguous elements with dimensions `dims`.
    ///
    /// # Safety
    /// `memory.address` addresses `product(dims)` initialised elements of `T` on
    /// `memory.device`, valid until `memory.owner` is dropped.
    pub unsafe fn from_foreign(dims: &[i64], memory: ForeignMemory, readonly: bool) -> Result<Self> {
        let shape = checked_shape::<N>(dims, size_of::<T>())?;
        let len = shape::element_count(&shape);
        memory.check_alignment(align_of::<T>(), &T::DTYPE)?;
        let options = ArrayOptions { device_id: 0, readonly, ..Default::default() };
        match memory.device.device_type {
            DeviceType::Cpu | DeviceType::CudaHost => {
                // SAFETY: the caller guarantees `len` elements at the address while the owner lives.
                let host = unsafe { HostBuffer::foreign(memory.address as *mut T, len, memory.owner) };
                Ok(Self::assemble(shape, Arc::new(host), options, Residence::Host))
            }
            #[cfg(feature = "cuda")]
            DeviceType::Cuda => {
                let id = memory.device.id;
                // SAFETY: as above, on the device.
                let device = unsafe { memory.into_device_side(len * size_of::<T>()) }?;
                let mut array = Self::assemble(shape, Arc::new(HostBuffer::zeroed(len)?), options, Residence::Device);
                array.adopt_device(id, device);
                Ok(array)
            }
            #[cfg(not(feature = "cuda"))]
            DeviceType::Cuda => {
                Err(Error::Unavailable("CUDA memory needs amso's CUDA layer, which this build does not include".into()))
            }
        }
    }
}
