//! [`NewArray`]: a new array to fill, allocated where the framework allocates (NumPy's
//! allocator, the exchange API's `managed_tensor_allocator`) or by amso, then handed over:
//! zeroed (`zeros`), or written whole by its constructor (`from_vec2`, `from_vec3`).

use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;
use std::ptr::NonNull;

use dlpark::ffi::{DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor};
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::framework::Framework;
use super::into_framework::core_into_framework;
use crate::device::{Device, DeviceType};
use crate::dlpack::{ManagedTensor, RawManaged};
use crate::element::Element;
use crate::memarray::core::ArrayCore;
use crate::memarray::foreign::check_c_contiguous;
use crate::memarray::options::ArrayOptions;
use crate::python::base::array::MemArrayBase;
use crate::python::npyffi::dtype;
use crate::python::source;
use crate::stream::Stream;

/// A new array of `T` with `N` dimensions, zeroed, owned until `into_object` hands it to
/// Python as its framework's array object.
pub struct NewArray<'py, T: Element, const N: usize> {
    py: Python<'py>,
    framework: Framework,
    storage: Storage<'py>,
    data: usize,
    shape: [usize; N],
    device: Device,
    stream: Option<Stream>,
    _element: PhantomData<T>,
}

/// What a new array's memory holds before it is handed out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fill {
    Zeros,
    /// Anything: the constructor writes every element before handing the array out.
    ByCaller,
}

/// Where a new array's memory came from.
pub(in crate::python::args) enum Storage<'py> {
    /// A NumPy array NumPy allocated.
    NumPy(Bound<'py, PyAny>),
    /// A tensor from an exchange table's allocator, wrapped by the same table.
    Tensor(ManagedTensor, &'static DLPackExchangeAPI),
    /// amso's own array, handed over at the end.
    Amso(ArrayCore),
}

/// What the producer's allocator reported through `set_error`.
#[derive(Default)]
pub(in crate::python::args) struct AllocatorError(Option<(String, String)>);

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
    /// A new zeroed array of `shape` on `device`, for `framework` (device data zeroed on
    /// `stream`, else the stream rule's).
    pub fn zeros(py: Python<'py>, framework: Framework, shape: [usize; N], device: Device) -> PyResult<Self> {
        crate::process::join(py)?;
        let stream =
            (device.device_type == DeviceType::Cuda).then(|| source::work_stream(None, device.id)).transpose()?;
        Self::zeros_in(py, framework, shape, device, stream)
    }

    pub(in crate::python::args) fn zeros_in(
        py: Python<'py>,
        framework: Framework,
        shape: [usize; N],
        device: Device,
        stream: Option<Stream>,
    ) -> PyResult<Self> {
        Self::allocate_in(py, framework, shape, device, stream, Fill::Zeros)
    }

    /// A new host array of `shape` for `framework` whose every element the caller writes before
    /// anything reads it: NumPy's allocation is not zeroed first (the others are).
    fn host_to_fill(py: Python<'py>, framework: Framework, shape: [usize; N]) -> PyResult<Self> {
        crate::process::join(py)?;
        Self::allocate_in(py, framework, shape, Device::CPU, None, Fill::ByCaller)
    }

    fn allocate_in(
        py: Python<'py>,
        framework: Framework,
        shape: [usize; N],
        device: Device,
        stream: Option<Stream>,
        fill: Fill,
    ) -> PyResult<Self> {
        framework.check_device(device)?;
        let dims = checked_dims::<T, N>(&shape)?;
        let bytes = shape.iter().product::<usize>() * size_of::<T>();
        let (storage, data) = if framework == Framework::NumPy {
            // SAFETY: NULL data: NumPy allocates the array.
            let array = unsafe { dtype::array_over(py, &T::DTYPE, &shape, None, std::ptr::null_mut(), None, false) }?;
            let data = dtype::data_address(&array);
            if fill == Fill::Zeros {
                // SAFETY: NumPy's fresh allocation of `bytes`, reached by nothing else yet.
                unsafe { std::ptr::write_bytes(data as *mut u8, 0, bytes) };
            }
            (Storage::NumPy(array), data)
        } else if let Some(table) = framework.exchange_table(py)?.filter(|t| t.managed_tensor_allocator.is_some()) {
            let (tensor, data) = allocate::<T, N>(table, &shape, device)?;
            zero(data, bytes, device, stream)?;
            (Storage::Tensor(tensor, table), data)
        } else {
            let options = ArrayOptions {
                device_id: device.id,
                on_device: device.device_type == DeviceType::Cuda,
                ..Default::default()
            };
            let core = ArrayCore::from_dims(&dims, N, crate::element::ElementOps::of::<T>(), options)?;
            #[cfg(feature = "cuda")]
            if let Some(stream) = stream.filter(|_| device.device_type == DeviceType::Cuda) {
                let handle = crate::cuda::stream::StreamHandle::of(stream)?;
                core.device_side().hand_to(device.id, handle)?; // the zero fill comes first
            }
            let data = if device.device_type == DeviceType::Cuda {
                #[cfg(feature = "cuda")]
                {
                    core.device_address() as usize
                }
                #[cfg(not(feature = "cuda"))]
                0
            } else {
                core.host_ptr() as usize
            };
            (Storage::Amso(core), data)
        };
        Ok(NewArray { py, framework, storage, data, shape, device, stream, _element: PhantomData })
    }

    /// The shape.
    pub fn shape(&self) -> [usize; N] {
        self.shape
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The framework the array goes to.
    pub fn framework(&self) -> Framework {
        self.framework
    }

    /// For device data: the stream it was zeroed on, which work on it should use (a stream of
    /// the result's framework, alive while the result is: use it within the call).
    pub fn stream(&self) -> Option<crate::stream::Stream> {
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
    pub fn device_indexer(&mut self) -> PyResult<crate::indexer::DeviceIndexer<'_, T, N>> {
        if self.device.device_type != DeviceType::Cuda {
            return Err(PyValueError::new_err("a device indexer needs CUDA device data; the new array is on the host"));
        }
        Ok(crate::indexer::DeviceIndexer::new(self.data as u64, self.shape))
    }

    /// The elements, writable, in C order (host data).
    pub fn as_slice_mut(&mut self) -> PyResult<&mut [T]> {
        let data = self.host_ptr()?;
        // SAFETY: a C-contiguous allocation whose every element is initialised (zeroed, which
        // is valid for every element type, or written by the constructor; a resize keeps that),
        // reached only through this value until `into_object`.
        Ok(unsafe { std::slice::from_raw_parts_mut(data, self.shape.iter().product()) })
    }

    /// A writable `ndarray` view (host data).
    #[cfg(feature = "ndarray")]
    pub fn as_array_mut(&mut self) -> PyResult<ndarray::ArrayViewMut<'_, T, ndarray::Dim<[usize; N]>>>
    where
        ndarray::Dim<[usize; N]>: ndarray::Dimension,
    {
        use crate::python::args::NdDimensions;
        let data = self.host_ptr()?;
        // SAFETY: as `as_slice_mut`, in C order.
        Ok(unsafe { ndarray::ArrayViewMut::from_shape_ptr(crate::python::args::Rank::<N>::nd(&self.shape), data) })
    }

    /// NumPy's `ndarray.resize` (rust-numpy's `PyArray::resize`): the shape changes with the
    /// storage; the first elements in C order stay and new ones are zero. A NumPy array is
    /// resized by NumPy (`PyArray_Resize`, which may grow its memory in place); the others get
    /// new storage. Host data only.
    pub fn resize(&mut self, shape: [usize; N]) -> PyResult<()> {
        if self.device.device_type == DeviceType::Cuda {
            return Err(PyValueError::new_err(
                "resize needs a host array (NumPy's ndarray.resize); the new array is in CUDA device memory: make a \
                 new one of the shape instead",
            ));
        }
        checked_dims::<T, N>(&shape)?;
        if let Storage::NumPy(array) = &self.storage {
            // SAFETY: an array NumPy allocated for this value, which no other object references
            // (NumPy checks that too), resized in C order.
            self.data = unsafe { dtype::resize(array, &shape) }?;
            self.shape = shape;
            return Ok(());
        }
        let mut resized = Self::allocate_in(self.py, self.framework, shape, self.device, None, Fill::Zeros)?;
        let kept = self.shape.iter().product::<usize>().min(shape.iter().product());
        if kept > 0 {
            // SAFETY: `kept` elements of this host array, copied into the new one's distinct
            // memory, which has room for them.
            unsafe { std::ptr::copy_nonoverlapping(self.data as *const T, resized.data as *mut T, kept) };
        }
        std::mem::swap(self, &mut resized);
        Ok(())
    }

    /// The array as its framework's Python object.
    pub fn into_object(self) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        match self.storage {
            Storage::NumPy(array) => Ok(array),
            Storage::Tensor(tensor, table) => {
                let to_object = table
                    .managed_tensor_to_py_object_no_sync
                    .ok_or_else(|| PyTypeError::new_err("the framework's exchange API cannot wrap tensors"))?;
                let RawManaged::Versioned(raw) = tensor.into_raw() else { unreachable!("allocated as versioned") };
                let mut out: *mut c_void = std::ptr::null_mut();
                // SAFETY: the function takes ownership of the tensor (deleting it on failure);
                // the GIL is held.
                if unsafe { to_object(raw.as_ptr(), &mut out) } != 0 || out.is_null() {
                    return Err(PyErr::take(py)
                        .unwrap_or_else(|| PyRuntimeError::new_err("the framework could not wrap the tensor")));
                }
                // SAFETY: a new reference from the framework.
                let object = unsafe { Bound::from_owned_ptr(py, out.cast()) };
                // An amso array of this runtime learns the stream its contents were written on,
                // so amso's later work on it, and its consumers, wait for that work.
                if let (Ok(array), Some(stream)) = (object.cast::<MemArrayBase>(), self.stream) {
                    // SAFETY: the stream the array was zeroed on and handed out for its work.
                    array.get().modify(py, |array| unsafe { array.record_work(stream) })?;
                }
                Ok(object)
            }
            Storage::Amso(mut core) => {
                if let Some(stream) = self.stream {
                    // SAFETY: the stream the array was zeroed on and handed out for its work.
                    unsafe { core.record_work(stream) }?;
                }
                core_into_framework(py, core, self.framework)
            }
        }
    }
}

/// `shape` as the dimensions amso checks (`checked_shape`: NumPy's size rule): one beyond
/// `i64` is too large, never clamped to a size that could pass.
fn checked_dims<T: Element, const N: usize>(shape: &[usize; N]) -> PyResult<[i64; N]> {
    let too_large = || crate::error::Error::TooLarge {
        shape: shape.iter().map(|&d| d as u64).collect(),
        itemsize: size_of::<T>(),
        max: isize::MAX as usize,
    };
    let mut dims = [0i64; N];
    for (slot, &d) in dims.iter_mut().zip(shape) {
        *slot = i64::try_from(d).map_err(|_| too_large())?;
    }
    crate::shape::checked_shape(&dims, N, size_of::<T>())?;
    Ok(dims)
}

/// A new tensor from `table`'s allocator, shaped like the prototype; its first element's address.
pub(in crate::python::args) fn allocate<T: Element, const N: usize>(
    table: &DLPackExchangeAPI,
    shape: &[usize; N],
    device: Device,
) -> PyResult<(ManagedTensor, usize)> {
    let allocator = table.managed_tensor_allocator.expect("checked by the caller");
    let mut dims = shape.map(|d| d as i64);
    let mut prototype = DLTensor {
        data: std::ptr::null_mut(),
        device: DLDevice { device_type: DLDeviceType(device.device_type as u32), device_id: device.id.ordinal() },
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
    let same_place = t.device.device_type.0 == device.device_type as u32 && t.device.device_id == device.id.ordinal();
    let same_type = (t.dtype.code.0, t.dtype.bits, t.dtype.lanes) == T::DTYPE.dlpack();
    let address = (t.data as usize).checked_add(t.byte_offset as usize);
    let usable = address.is_some_and(|a| bytes == 0 || (a != 0 && a % align_of::<T>() == 0));
    if !(same_shape && same_place && same_type && contiguous && usable) {
        return Err(PyRuntimeError::new_err(
            "the framework's allocator returned a tensor unlike the prototype (shape, dtype, device, layout or \
             alignment)",
        ));
    }
    Ok((tensor, address.unwrap_or(0)))
}

/// Zero `bytes` at `data` on `device` (on `stream` for device memory).
pub(in crate::python::args) fn zero(data: usize, bytes: usize, device: Device, stream: Option<Stream>) -> PyResult<()> {
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
        let stream = crate::cuda::stream::StreamHandle::of(stream.unwrap_or(Stream::LEGACY))?;
        // SAFETY: a fresh device allocation of `bytes`; queued on the stream work will use.
        Ok(unsafe { crate::cuda::transfer::zero(device.id, data as u64, bytes, stream) }?)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = stream;
        Err(PyRuntimeError::new_err("device memory needs amso's CUDA layer, which this build does not include"))
    }
}

impl<'py, T: Element> NewArray<'py, T, 2> {
    /// rust-numpy's `PyArray::from_vec2` in the caller's framework: a host array of the rows
    /// (every row the same length; ragged rows are a `ValueError` naming the first that
    /// differs), allocated where `framework` allocates and written once.
    pub fn from_vec2(py: Python<'py>, framework: Framework, rows: &[Vec<T>]) -> PyResult<Self> {
        let shape = crate::memarray::rows_shape(rows)?;
        let array = Self::host_to_fill(py, framework, shape)?;
        let data = array.host_ptr()?;
        // SAFETY: the new host array of the rows' checked shape; nothing else reaches it yet.
        unsafe { crate::memarray::write_rows(data, rows.iter(), shape[1]) };
        Ok(array)
    }
}

impl<'py, T: Element> NewArray<'py, T, 3> {
    /// rust-numpy's `PyArray::from_vec3` in the caller's framework: a host array of the planes
    /// (each the same shape; ragged input is a `ValueError` naming where it differs), written
    /// once.
    pub fn from_vec3(py: Python<'py>, framework: Framework, planes: &[Vec<Vec<T>>]) -> PyResult<Self> {
        let shape = crate::memarray::planes_shape(planes)?;
        let array = Self::host_to_fill(py, framework, shape)?;
        let data = array.host_ptr()?;
        // SAFETY: as in `from_vec2`, the planes' rows in C order.
        unsafe { crate::memarray::write_rows(data, planes.iter().flatten(), shape[2]) };
        Ok(array)
    }
}
