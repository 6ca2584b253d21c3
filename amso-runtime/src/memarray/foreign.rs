//! Arrays over memory another library owns (a DLPack tensor handed to amso): amso reads and
//! writes it in place and keeps the producer's owner alive until the array and every export
//! of it are gone; dropping the owner releases the memory (runs the producer's deleter once).

use std::any::Any;
use std::sync::Arc;

use dlpark::ffi::DLTensor;

use super::core::ArrayCore;
use crate::device::{Device, DeviceId, DeviceType, Residence};
use crate::dlpack::DLPACK_VERSION;
use crate::element::{DType, Element, ElementOps};
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::memarray::{ArrayOptions, MemArray};
use crate::shape;

/// Foreign memory and what keeps it alive.
pub struct ForeignMemory {
    /// Address of the first element.
    pub address: usize,
    /// Where it lives.
    pub device: Device,
    /// Dropped exactly once, when amso no longer needs the memory.
    pub owner: Box<dyn Any + Send + Sync>,
}

/// Dimensions of a C-contiguous tensor, or the reason it cannot be wrapped without a copy.
///
/// # Safety
/// When `1 <= t.ndim <= MAX_NDIM`, `t.shape` and `t.strides` are NULL or hold `t.ndim`
/// entries (DLPack's contract; nothing is read for other `ndim`).
pub(crate) unsafe fn tensor_dims(t: &DLTensor) -> Result<Vec<i64>> {
    let ndim = shape::check_ndim(t.ndim.into())?;
    if t.shape.is_null() {
        return Err(Error::InvalidArgument("the tensor's shape is NULL".into()));
    }
    // SAFETY: a DLTensor's shape holds ndim entries.
    let dims = unsafe { std::slice::from_raw_parts(t.shape, ndim) }.to_vec();
    check_dims(&dims)?;
    if !t.strides.is_null() {
        // SAFETY: as above, for strides.
        check_c_contiguous(&dims, unsafe { std::slice::from_raw_parts(t.strides, ndim) }, 1)?;
    }
    Ok(dims)
}

/// Refuse foreign dimensions amso cannot wrap: an ndim outside `1..=MAX_NDIM`, or a negative
/// dimension.
pub(crate) fn check_dims(dims: &[i64]) -> Result<()> {
    shape::check_ndim(dims.len() as i64)?;
    if let Some(&negative) = dims.iter().find(|&&d| d < 0) {
        return Err(Error::InvalidShape(format!("negative dimension {negative} in {dims:?}")));
    }
    Ok(())
}

/// Refuse `strides` that are not C-contiguous for `dims`; `unit` is what one stride step
/// counts: 1 for DLPack (elements), the itemsize for the CUDA array interface (bytes).
pub(crate) fn check_c_contiguous(dims: &[i64], strides: &[i64], unit: i64) -> Result<()> {
    if dims.contains(&0) {
        return Ok(()); // no element: any strides lay it out (NumPy calls it contiguous too)
    }
    let mut expected = unit;
    for axis in (0..dims.len()).rev() {
        if dims[axis] > 1 && strides.get(axis) != Some(&expected) {
            let kind = if unit == 1 { "strides" } else { "byte strides" };
            return Err(Error::ExportRefused(format!(
                "amso arrays are C-contiguous and this one is not (shape {dims:?}, {kind} {strides:?}); \
                 use amso.asarray(obj) to import a C-contiguous copy of host data"
            )));
        }
        expected = expected.saturating_mul(dims[axis].max(1));
    }
    Ok(())
}

/// Refuse a versioned tensor of a DLPack major version amso does not read.
pub fn check_major_version(major: u32) -> Result<()> {
    if major == DLPACK_VERSION.0 {
        return Ok(());
    }
    Err(Error::ExportRefused(format!(
        "DLPack major version {major} is not supported (amso reads {})",
        DLPACK_VERSION.0
    )))
}

/// What a producer's tensor claims, checked before amso wraps it: its dimensions, the address
/// of its first element and its device. Refuses NULL data for a non-empty tensor and an offset
/// past the end of the address space.
///
/// # Safety
/// As `tensor_dims`.
pub unsafe fn claim(t: &DLTensor) -> Result<(Vec<i64>, usize, Device)> {
    // SAFETY: forwarded from the caller.
    let dims = unsafe { tensor_dims(t) }?;
    let (device_type, id) = (DeviceType::from_code(t.device.device_type.0 as i32)?, t.device.device_id);
    let on_device = matches!(device_type, DeviceType::Cuda | DeviceType::CudaManaged);
    if id < 0 || (!on_device && id != 0) {
        return Err(Error::InvalidArgument(format!(
            "device id {id} is not valid for device type {}",
            device_type as i32
        )));
    }
    let device = Device { device_type, id: DeviceId::new(id)? };
    let empty = dims.contains(&0);
    if t.data.is_null() && !empty {
        return Err(Error::InvalidArgument(format!("the tensor's data pointer is NULL but its shape is {dims:?}")));
    }
    let address =
        (t.data as usize).checked_add(usize::try_from(t.byte_offset).unwrap_or(usize::MAX)).ok_or_else(|| {
            Error::InvalidArgument(format!("byte_offset {} overflows the data pointer {:p}", t.byte_offset, t.data))
        })?;
    Ok((dims, address, device))
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
    unsafe fn into_device_side(self, bytes: usize) -> Result<super::device_side::DeviceSide> {
        crate::cuda::driver::require()?;
        if bytes > 0 {
            let holder = crate::cuda::driver::device_of_pointer(self.address)?;
            if holder != self.device.id {
                return Err(Error::InvalidArgument(format!(
                    "0x{:x} is memory of CUDA device {holder}, but the tensor says device {}",
                    self.address, self.device.id
                )));
            }
        }
        // SAFETY: forwarded from the caller.
        let device = unsafe {
            let managed = self.device.device_type == DeviceType::CudaManaged;
            crate::cuda::device_memory::DeviceMemory::foreign(
                self.device.id,
                self.address as u64,
                bytes,
                self.owner,
                managed,
            )
        };
        Ok(super::device_side::DeviceSide::with_memory(Arc::new(device)))
    }
}

impl ArrayCore {
    /// An array of `ndim` dimensions `dims` of the element type `ops` describes, over foreign
    /// memory of C-contiguous elements (see `MemArray::from_foreign`).
    ///
    /// # Safety
    /// As `MemArray::from_foreign`, for the element type `ops` describes.
    pub(crate) unsafe fn from_foreign(
        dims: &[i64],
        ndim: usize,
        ops: &'static ElementOps,
        memory: ForeignMemory,
        readonly: bool,
    ) -> Result<Self> {
        let (shape, bytes) = shape::checked_shape(dims, ndim, ops.itemsize())?;
        let shape = &shape[..ndim];
        memory.check_alignment(ops.align, ops.dtype)?;
        let options = ArrayOptions { readonly, ..Default::default() };
        match memory.device.device_type {
            DeviceType::Cpu | DeviceType::CudaHost => {
                // SAFETY: the caller guarantees `bytes` of elements at the address while the
                // owner lives, aligned for them (checked).
                let host = unsafe { HostBuffer::foreign(memory.address as *mut u8, bytes, memory.owner) };
                Ok(Self::assemble(shape, ops, Arc::new(host), options, Residence::Host))
            }
            #[cfg(feature = "cuda")]
            DeviceType::Cuda | DeviceType::CudaManaged => {
                let id = memory.device.id;
                // SAFETY: as above, on the device.
                let device = unsafe { memory.into_device_side(bytes) }?;
                let mut array =
                    Self::assemble(shape, ops, Arc::new(HostBuffer::zeroed(bytes)?), options, Residence::Device);
                array.adopt_device(id, device);
                Ok(array)
            }
            #[cfg(not(feature = "cuda"))]
            DeviceType::Cuda | DeviceType::CudaManaged => {
                Err(Error::Unavailable("CUDA memory needs amso's CUDA layer, which this build does not include".into()))
            }
        }
    }
}

impl<T: Element, const N: usize> MemArray<T, N> {
    /// An array over foreign memory of C-contiguous elements with dimensions `dims`.
    ///
    /// # Safety
    /// `memory.address` addresses `product(dims)` initialised elements of `T` on
    /// `memory.device`, valid until `memory.owner` is dropped.
    pub unsafe fn from_foreign(dims: &[i64], memory: ForeignMemory, readonly: bool) -> Result<Self> {
        // SAFETY: forwarded from the caller.
        let core = unsafe { ArrayCore::from_foreign(dims, N, ElementOps::of::<T>(), memory, readonly) }?;
        Ok(MemArray::from_core(core))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType};

    use super::*;
    use crate::element::Scalar;
    use crate::object::ArrayObject;

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn tensor(data: *mut u8, shape: &mut [i64]) -> DLTensor {
        DLTensor {
            data: data.cast(),
            device: DLDevice { device_type: DLDeviceType(1), device_id: 0 },
            ndim: shape.len() as i32,
            dtype: DLDataType { code: DLDataTypeCode(6), bits: 8, lanes: 1 },
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }

    #[test]
    fn foreign_bool_bytes_other_than_0_and_1_read_as_true() {
        // A producer's kDLBool byte may be anything; reading 2 as a Rust bool would be UB.
        let mut bytes = [0u8, 1, 2, 255];
        let drops = Arc::new(AtomicUsize::new(0));
        let mut shape = [4i64];
        // SAFETY: shape holds ndim entries.
        let (dims, address, device) = unsafe { claim(&tensor(bytes.as_mut_ptr(), &mut shape)) }.unwrap();
        let memory = ForeignMemory { address, device, owner: Box::new(Counted(Arc::clone(&drops))) };
        // SAFETY: four initialised bytes that outlive the array.
        let array = unsafe { MemArray::<bool, 1>::from_foreign(&dims, memory, true) }.unwrap();
        let read: Vec<Scalar> = (0..4).map(|i| array.get_scalar(&[i], None).unwrap()).collect();
        assert_eq!(read, [Scalar::Bool(false), Scalar::Bool(true), Scalar::Bool(true), Scalar::Bool(true)]);
        drop(array);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn foreign_bool_bytes_are_valid_through_every_safe_api() {
        // Each safe path that makes a Rust `bool` from the producer's bytes: typed reads, whole
        // copies, indexers (read-only and writable) and a lock guard. Miri checks validity.
        let mut bytes = [0u8, 2, 255, 1, 0, 7];
        let mut shape = [2i64, 3];
        let mut t = tensor(bytes.as_mut_ptr(), &mut shape);
        t.ndim = 2;
        // SAFETY: shape holds ndim entries.
        let (dims, address, device) = unsafe { claim(&t) }.unwrap();
        let memory = ForeignMemory { address, device, owner: Box::new(()) };
        // SAFETY: six initialised bytes that outlive the array.
        let mut array = unsafe { MemArray::<bool, 2>::from_foreign(&dims, memory, false) }.unwrap();
        let expected = [false, true, true, true, false, true];
        assert_eq!(array.to_vec().unwrap(), expected);
        assert_eq!((array.get([0, 1]), array.get([1, 2])), (Ok(true), Ok(true)));
        let reader = array.indexer().unwrap();
        assert_eq!(reader.get([0, 2]), Some(true));
        // SAFETY: 4 < size.
        assert!(unsafe { reader.get_unchecked(4) } == expected[4]);
        let writer = array.indexer_mut().unwrap();
        assert_eq!(writer.get([0, 1]), Some(true));
        let guard = array.lock().unwrap();
        assert_eq!(guard.to_vec().unwrap(), expected);
        assert_eq!(guard.indexer().unwrap().get([1, 2]), Some(true));
        drop(guard);
        // Writes through amso store canonical bytes.
        array.write([0, 1], true).unwrap();
        drop(array);
        assert_eq!(bytes[1], 1);
    }

    /// `claim` of a test tensor whose shape holds its ndim entries.
    fn checked(t: &DLTensor) -> Result<(Vec<i64>, usize, Device)> {
        // SAFETY: every tensor here points at a shape array of ndim entries and no strides.
        unsafe { claim(t) }
    }

    #[test]
    fn claims_that_cannot_be_wrapped_are_refused() {
        let mut byte = 0u8;
        let mut shape = [3i64];
        let null = checked(&tensor(std::ptr::null_mut(), &mut shape));
        assert!(matches!(null, Err(Error::InvalidArgument(m)) if m.contains("NULL")));
        let mut empty = [0i64];
        assert!(checked(&tensor(std::ptr::null_mut(), &mut empty)).is_ok(), "NULL is fine when empty");
        let mut t = tensor(&mut byte, &mut shape);
        t.byte_offset = u64::MAX;
        assert!(matches!(checked(&t), Err(Error::InvalidArgument(m)) if m.contains("overflows")));
        let mut t = tensor(&mut byte, &mut shape);
        t.device.device_id = 2;
        assert!(matches!(checked(&t), Err(Error::InvalidArgument(m)) if m.contains("device id 2")));
        assert!(check_major_version(2).is_err() && check_major_version(1).is_ok());
    }
}
