//! Results: a new zeroed array allocated through a DLPack exchange table, so a function called
//! with torch tensors returns a torch tensor (as TVM-FFI does), and one called with NumPy or
//! CuPy arrays returns an amso array (amso's own table).

use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;
use std::ptr::NonNull;

use dlpark::ffi::{DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor};
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::device::{Device, DeviceType};
use crate::dlpack::{ManagedTensor, RawManaged};
use crate::element::Element;
use crate::memarray::foreign::check_c_contiguous;

/// A new array of `T` with `N` dimensions, zeroed, owned until `into_object` hands it to
/// Python as its framework's array object.
pub struct NewArray<'py, T: Element, const N: usize> {
    py: Python<'py>,
    api: &'static DLPackExchangeAPI,
    tensor: ManagedTensor,
    data: usize,
    shape: [usize; N],
    device: Device,
    stream: Option<i64>,
    _element: PhantomData<T>,
}

/// A new zeroed amso array of `shape` on `device` (of a class this module registered).
pub fn new_array<T: Element, const N: usize>(
    py: Python<'_>,
    shape: [usize; N],
    device: Device,
) -> PyResult<NewArray<'_, T, N>> {
    crate::stream_context::join_bundled(py)?;
    let stream = (device.device_type == DeviceType::Cuda).then(|| crate::stream_context::resolve(None));
    NewArray::allocate(py, super::super::exchange::api(), shape, device, stream)
}

/// What the producer's allocator reported through `set_error`.
#[derive(Default)]
struct AllocatorError(Option<(String, String)>);

unsafe extern "C" fn set_error(context: *mut c_void, kind: *const c_char, message: *const c_char) {
    let text = |p: *const c_char| -> String {
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string from the producer, read during the call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    // SAFETY: `context` is the `AllocatorError` `allocate` passed for this call.
    unsafe { (*context.cast::<AllocatorError>()).0 = Some((text(kind), text(message))) };
}

impl<'py, T: Element, const N: usize> NewArray<'py, T, N> {
    pub(super) fn allocate(
        py: Python<'py>,
        api: &'static DLPackExchangeAPI,
        shape: [usize; N],
        device: Device,
        stream: Option<i64>,
    ) -> PyResult<Self> {
        let allocator = api
            .managed_tensor_allocator
            .ok_or_else(|| PyTypeError::new_err("the producer's exchange API cannot allocate"))?;
        let mut dims = shape.map(|d| d as i64);
        let mut prototype = DLTensor {
            data: std::ptr::null_mut(),
            device: DLDevice { device_type: DLDeviceType(device.device_type as u32), device_id: device.id },
            ndim: N as i32,
            dtype: T::DTYPE.dl_data_type(),
            shape: dims.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let mut out: *mut DLManagedTensorVersioned = std::ptr::null_mut();
        let mut error = AllocatorError::default();
        // SAFETY: a prototype with `N` dims, a writable output and an error callback with its
        // context, all alive for the call; the GIL is held.
        let status =
            unsafe { allocator(&mut prototype, &mut out, (&mut error as *mut AllocatorError).cast(), Some(set_error)) };
        let Some(raw) = NonNull::new(out).filter(|_| status == 0) else {
            let (kind, message) = error.0.unwrap_or_else(|| ("RuntimeError".into(), "allocation failed".into()));
            return Err(match kind.as_str() {
                "MemoryError" => PyMemoryError::new_err(message),
                "TypeError" => PyTypeError::new_err(message),
                "ValueError" => PyValueError::new_err(message),
                "BufferError" => PyBufferError::new_err(message),
                _ => PyRuntimeError::new_err(message),
            });
        };
        // SAFETY: the allocator hands the new tensor over.
        let tensor = unsafe { ManagedTensor::from_raw(RawManaged::Versioned(raw)) };
        // SAFETY: a live versioned tensor we own.
        let t = unsafe { &raw.as_ref().dl_tensor };
        let bytes = shape.iter().product::<usize>() * size_of::<T>();
        // SAFETY: a DLTensor's shape and (non-NULL) strides hold ndim entries, checked to be N
        // before either is read.
        let same_shape = t.ndim == N as i32 && unsafe { std::slice::from_raw_parts(t.shape, N) } == &dims[..];
        let contiguous = same_shape
            && (t.strides.is_null()
                // SAFETY: as above.
                || check_c_contiguous(&dims, unsafe { std::slice::from_raw_parts(t.strides, N) }, 1).is_ok());
        let same_place = t.device.device_type.0 == device.device_type as u32 && t.device.device_id == device.id;
        let same_type = (t.dtype.code.0, t.dtype.bits, t.dtype.lanes) == (T::DTYPE.code, T::DTYPE.bits, T::DTYPE.lanes);
        let address = (t.data as usize).checked_add(t.byte_offset as usize);
        let usable = address.is_some_and(|a| bytes == 0 || (a != 0 && a % align_of::<T>() == 0));
        if !(same_shape && same_place && same_type && contiguous && usable) {
            return Err(PyRuntimeError::new_err(
                "the producer's allocator returned a tensor unlike the prototype (shape, dtype, device, layout or \
                 alignment)",
            ));
        }
        let data = address.unwrap_or(0);
        zero(data, bytes, device, stream)?;
        Ok(NewArray { py, api, tensor, data, shape, device, stream, _element: PhantomData })
    }

    /// The shape.
    pub fn shape(&self) -> [usize; N] {
        self.shape
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.device
    }

    /// For device data: the stream it was zeroed on, which work on it should use.
    pub fn stream(&self) -> Option<i64> {
        self.stream
    }

    /// The address of the first element (host or device).
    pub fn data_address(&self) -> usize {
        self.data
    }

    fn host_ptr(&self) -> PyResult<*mut T> {
        if self.device.device_type == DeviceType::Cuda {
            return Err(PyValueError::new_err("the new array is in CUDA device memory; host views need host data"));
        }
        let size: usize = self.shape.iter().product();
        Ok(if size == 0 { NonNull::dangling().as_ptr() } else { self.data as *mut T })
    }

    /// What a CUDA kernel receives for the new array's device data; launch it on `stream()`.
    #[cfg(feature = "cuda")]
    pub fn device_indexer(&mut self) -> PyResult<crate::DeviceIndexer<'_, T, N>> {
        if self.device.device_type != DeviceType::Cuda {
            return Err(PyValueError::new_err("a device indexer needs CUDA device data; the new array is on the host"));
        }
        Ok(crate::DeviceIndexer::new(self.data as u64, self.shape))
    }

    /// The elements, writable, in C order (host data).
    pub fn as_slice_mut(&mut self) -> PyResult<&mut [T]> {
        let data = self.host_ptr()?;
        // SAFETY: a fresh, zeroed (valid for every element type), C-contiguous allocation
        // that only this value reaches until `into_object`.
        Ok(unsafe { std::slice::from_raw_parts_mut(data, self.shape.iter().product()) })
    }

    /// A writable `ndarray` view (host data).
    #[cfg(feature = "ndarray")]
    pub fn as_array_mut(&mut self) -> PyResult<ndarray::ArrayViewMut<'_, T, ndarray::Dim<[usize; N]>>>
    where
        ndarray::Dim<[usize; N]>: ndarray::Dimension,
    {
        let data = self.host_ptr()?;
        // SAFETY: as `as_slice_mut`, in C order.
        Ok(unsafe { ndarray::ArrayViewMut::from_shape_ptr(super::dim(self.shape), data) })
    }

    /// The array as its framework's Python object.
    pub fn into_object(self) -> PyResult<Bound<'py, PyAny>> {
        let to_object = self
            .api
            .managed_tensor_to_py_object_no_sync
            .ok_or_else(|| PyTypeError::new_err("the producer's exchange API cannot wrap tensors"))?;
        let RawManaged::Versioned(raw) = self.tensor.into_raw() else { unreachable!("allocated as versioned") };
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: the function takes ownership of the tensor (deleting it on failure); the
        // GIL is held.
        if unsafe { to_object(raw.as_ptr(), &mut out) } != 0 || out.is_null() {
            return Err(PyErr::take(self.py)
                .unwrap_or_else(|| PyRuntimeError::new_err("the producer could not wrap the tensor")));
        }
        // SAFETY: a new reference from the producer.
        let object = unsafe { Bound::from_owned_ptr(self.py, out.cast()) };
        // An amso array of this runtime learns the stream its contents were written on, so
        // amso's later work on it, and its consumers, wait for that work.
        if let (Ok(array), Some(stream)) = (object.cast::<super::super::array::MemArrayBase>(), self.stream) {
            // SAFETY: the stream the array was zeroed on and handed out for its work.
            array.get().modify(self.py, |array| unsafe { array.record_work(stream) })?;
        }
        Ok(object)
    }
}

/// Zero `bytes` at `data` on `device` (on `stream` for device memory).
fn zero(data: usize, bytes: usize, device: Device, stream: Option<i64>) -> PyResult<()> {
    if bytes == 0 {
        return Ok(());
    }
    if device.device_type != DeviceType::Cuda {
        // SAFETY: a fresh host allocation of `bytes` that nothing else reaches yet.
        unsafe { std::ptr::write_bytes(data as *mut u8, 0, bytes) };
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    {
        let stream = crate::cuda::stream::StreamHandle::from_int(stream.unwrap_or(1))?;
        // SAFETY: a fresh device allocation of `bytes`; queued on the stream work will use.
        Ok(unsafe { crate::cuda::transfer::zero(device.id, data as u64, bytes, stream) }?)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = stream;
        Err(PyRuntimeError::new_err("device memory needs amso's CUDA layer, which this build does not include"))
    }
}
