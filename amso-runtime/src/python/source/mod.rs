//! Where an array's memory comes from: the one acquisition path of typed arguments, kernel
//! launches, `amso.from_dlpack` and `amso.asarray`. A producer is read by the first protocol
//! its type speaks, in this order:
//! 1. amso arrays of any crate: their memory, held in place through their runtime's
//!    `__amso_type__` table (no managed tensor);
//! 2. NumPy arrays and subclasses: the array struct, read at the C level (`numpy.rs`), as
//!    rust-numpy reads it;
//! 3. the producer type's DLPack C exchange API (`__dlpack_c_exchange_api__`: PyTorch, TVM-FFI,
//!    other crates' amso arrays), with no Python call;
//! 4. `__dlpack__` (CuPy, JAX, ...): the array API handshake (`handshake.rs`);
//! 5. `__cuda_array_interface__`;
//! 6. the buffer protocol (`bytearray`, `array.array`, `memoryview`, `mmap`: `pep3118.rs`).
//!
//! Which protocol a type speaks is worked out once and cached by the type's identity, so a
//! repeated call does no probing.
//!
//! The stream rule, stated once for every path: device data is handed over on the stream the
//! caller names, else the thread's `amso.cuda.stream(...)` context, else amso's own stream of
//! the device. Producers with the exchange API report their own current stream instead
//! (inside `with torch.cuda.stream(s):` that is `s`); amso arrays report the context, else the
//! legacy default stream.
//!
//! What comes back holds the memory until it drops: a managed tensor (its deleter runs exactly
//! once, also when a later check refuses it), a buffer view, the producer object, or the amso
//! runtime's reference to its memory. NumPy arrays and amso arrays are read in place, so a
//! `Source` may only live while the object it came from does: its acquirer keeps that object
//! (`into_owner` makes an owner that outlives it).

mod handshake;
pub(crate) mod import;
pub(crate) mod numpy;
mod pep3118;
mod protocol;

use std::ffi::c_void;
use std::ptr::NonNull;

use dlpark::ffi::{DLDeviceType, DLManagedTensorVersioned, DLPackExchangeAPI};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::device::{Device, DeviceId, DeviceType};

use crate::dlpack::{ManagedTensor, RawManaged};
use crate::python::base::header::{Header, FLAG_CHANGING, FLAG_ON_DEVICE, FLAG_READONLY};
use crate::python::base::recognize::{ArrayTypeInfo, HeldArray};
use crate::stream::Stream;

pub(crate) use handshake::take_capsule;
#[cfg(feature = "cuda")]
pub(crate) use handshake::{device_of, parse_interface};
pub(crate) use protocol::{exchange_api_of_type, protocol_of};

/// The protocol a producer type speaks (see the module docs for the order).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Protocol {
    /// An amso array of the runtime this table describes (this one, or another crate's copy).
    Amso(&'static ArrayTypeInfo),
    /// `numpy.ndarray` or a subclass.
    NumPy,
    /// The type's DLPack C exchange table.
    Exchange(&'static DLPackExchangeAPI),
    /// `__dlpack__`.
    DLPack,
    /// `__cuda_array_interface__`.
    Interface,
    /// The buffer protocol.
    Buffer,
}

/// What keeps a source's memory alive, and where its dimensions and strides are read from.
pub(crate) enum Holder {
    /// A managed tensor, deleted once on drop; its shape and strides are read in place.
    Tensor(ManagedTensor),
    /// A NumPy array (borrowed: the acquirer keeps it alive), whose struct holds its shape and
    /// byte strides.
    NumPy(NonNull<ffi::PyObject>),
    /// A CUDA array interface producer, with the dimensions and byte strides its dict gave.
    Interface(Box<Described>),
    /// A buffer view, released on drop; its shape and byte strides are read in place.
    Buffer(pep3118::BufferView),
    /// An amso array of any runtime (borrowed: the acquirer keeps it alive; its C-order shape
    /// is in its header), its memory held through its runtime's table.
    Amso(AmsoHold),
    /// An amso array's host data read in place (`Request::in_place`): its header, valid while
    /// the array (which the acquirer keeps alive) is. Nothing holds the memory: the typed
    /// argument's borrow keeps every change away.
    AmsoInPlace(NonNull<Header>),
}

/// An amso array's memory held through its runtime's `__amso_type__` table, released when
/// dropped; and the array's header, valid while the array lives.
pub(crate) struct AmsoHold {
    header: NonNull<Header>,
    runtime: &'static ArrayTypeInfo,
    token: usize,
}

// SAFETY: the token is a reference to memory the runtime releases from any thread; the header
// is only read while the array lives (see `Holder::Amso`).
unsafe impl Send for AmsoHold {}
// SAFETY: as above.
unsafe impl Sync for AmsoHold {}

impl Drop for AmsoHold {
    fn drop(&mut self) {
        // SAFETY: a token this runtime's `hold` gave, released once.
        unsafe { (self.runtime.release)(self.token) }
    }
}

/// A producer object with the dimensions and byte strides it described.
pub(crate) struct Described {
    pub(super) _producer: Producer,
    pub(super) dims: Vec<i64>,
    pub(super) byte_strides: Option<Vec<i64>>,
}

/// A reference to a producer object, released at once when dropped, wherever that happens (a
/// consumer's DLPack deleter, called from C, included): PyO3 would otherwise defer the release
/// to its next call when it cannot tell the GIL is held, and keep the producer alive meanwhile.
pub(crate) struct Producer(Option<Py<PyAny>>);

impl Producer {
    pub(crate) fn new(object: &Bound<'_, PyAny>) -> Producer {
        Producer(Some(object.clone().unbind()))
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            crate::python::base::drop_attached(object);
        }
    }
}

/// An array's memory as its producer describes it, before any typed check.
pub(crate) struct Source {
    pub(crate) holder: Holder,
    /// Address of the first element (any byte offset applied).
    pub(crate) data: usize,
    /// DLPack (code, bits, lanes).
    pub(crate) dtype: (u8, u8, u16),
    pub(crate) device: Device,
    pub(crate) readonly: bool,
    /// For device data: the stream this call works on (see the module docs).
    pub(crate) stream: Option<Stream>,
    /// The device data is CUDA managed memory (the producer said kDLCUDAManaged); `device`
    /// is then the CUDA device.
    pub(crate) managed: bool,
    /// For a NumPy array of a kind DLPack lacks (`object`, `datetime64[s]`, `S8`, `U4`; asked
    /// for with `Request::numpy_kinds`): that kind's canonical name (`DType::numpy_only`),
    /// which typed arguments match; `dtype` then only sizes it.
    pub(crate) numpy_kind: Option<std::borrow::Cow<'static, str>>,
}

/// A source's dimensions (none negative) and strides, read where its holder keeps them.
pub(crate) struct Extents<'a> {
    pub(crate) dims: &'a [i64],
    pub(crate) strides: Strides<'a>,
}

/// How a producer gave its strides.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Strides<'a> {
    /// None given: C order.
    COrder,
    /// In elements (DLPack).
    Elements(&'a [i64]),
    /// In bytes (NumPy, the buffer protocol, the CUDA array interface).
    Bytes(&'a [i64]),
}

// NumPy's and the buffer protocol's `npy_intp` / `Py_ssize_t` lists are read as `i64` lists.
const _: () = assert!(size_of::<isize>() == size_of::<i64>(), "amso reads 64-bit producers");

/// `len` entries at `data` (`npy_intp` / `Py_ssize_t`) as `i64`s.
///
/// # Safety
/// `data` addresses `len` readable entries (or `len` is 0), alive and unchanged for `'a`.
unsafe fn as_i64s<'a>(data: *const isize, len: usize) -> &'a [i64] {
    if len == 0 {
        return &[];
    }
    // SAFETY: forwarded from the caller; isize and i64 have the same size (asserted above)
    // and alignment on 64-bit targets.
    unsafe { std::slice::from_raw_parts(data.cast::<i64>(), len) }
}

impl Source {
    /// The dimensions and strides. NumPy keeps them in its array struct, which only Python code
    /// changes (`x.shape = ...`): callers copy what they need before any Python code runs.
    pub(crate) fn extents<'a>(&'a self, _attached: Python<'a>) -> Extents<'a> {
        match &self.holder {
            Holder::Tensor(tensor) => {
                let t = tensor.describe().0;
                // SAFETY: `from_tensor` checked ndim in 0..=64 and a non-NULL shape; a tensor's
                // shape and (non-NULL) strides hold ndim entries, alive while it is.
                unsafe {
                    let ndim = t.ndim as usize;
                    let dims = if ndim == 0 { &[][..] } else { std::slice::from_raw_parts(t.shape, ndim) };
                    let strides = match t.strides.is_null() || ndim == 0 {
                        true => Strides::COrder,
                        false => Strides::Elements(std::slice::from_raw_parts(t.strides, ndim)),
                    };
                    Extents { dims, strides }
                }
            }
            // SAFETY: the array the acquirer keeps alive; the GIL is held.
            Holder::NumPy(array) => unsafe { numpy::extents(*array) },
            Holder::Interface(described) => Extents {
                dims: &described.dims,
                strides: described.byte_strides.as_deref().map_or(Strides::COrder, Strides::Bytes),
            },
            Holder::Buffer(view) => view.extents(),
            Holder::Amso(AmsoHold { header, .. }) | Holder::AmsoInPlace(header) => {
                // SAFETY: the header of an array the acquirer keeps alive; its shape never changes.
                let header = unsafe { header.as_ref() };
                Extents { dims: header.dims(), strides: Strides::COrder }
            }
        }
    }

    /// What keeps the memory alive once `producer`, the object this source came from, may be
    /// gone (an amso array over it, say).
    pub(crate) fn into_owner(
        self,
        producer: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Box<dyn std::any::Any + Send + Sync>> {
        Ok(match self.holder {
            Holder::NumPy(_) => Box::new(Producer::new(
                producer.ok_or_else(|| PyValueError::new_err("a NumPy source needs its array to be kept"))?,
            )),
            Holder::Tensor(tensor) => Box::new(tensor),
            Holder::Interface(described) => Box::new(described),
            Holder::Buffer(view) => Box::new(view),
            Holder::Amso(held) => Box::new(held), // the runtime's reference keeps the memory
            Holder::AmsoInPlace(_) => {
                return Err(PyValueError::new_err(
                    "internal error in amso: an array read in place cannot outlive the call that read it",
                ))
            }
        })
    }

    /// Bytes per element (a sub-byte element takes one, padded).
    pub(crate) fn itemsize(&self) -> usize {
        (self.dtype.1 as usize * self.dtype.2 as usize).div_ceil(8)
    }
}

impl Strides<'_> {
    /// Write the element strides of an array of `shape` with `itemsize`-byte elements into
    /// `out` (as long as `shape`). An empty array gets C-order strides whatever it came with;
    /// otherwise a byte stride must be a multiple of the itemsize.
    #[inline(always)] // into each typed argument's check, where `itemsize` is a constant
    pub(crate) fn fill(self, shape: &[usize], itemsize: usize, out: &mut [isize]) -> PyResult<()> {
        match self {
            _ if shape.contains(&0) => crate::strided::fill_c_strides(shape, out),
            Strides::COrder => crate::strided::fill_c_strides(shape, out),
            Strides::Elements(given) => {
                for (slot, &stride) in out.iter_mut().zip(given) {
                    *slot = stride as isize;
                }
            }
            Strides::Bytes(given) => {
                // A power-of-two itemsize (every scalar's) takes a mask and a shift, not a
                // division (tens of cycles, for every argument); a record's may take the division.
                let size = itemsize as i64;
                let exact = |stride: i64| match itemsize.is_power_of_two() {
                    true => (stride & (size - 1) == 0).then(|| stride >> itemsize.trailing_zeros()),
                    false => (size != 0 && stride % size == 0).then(|| stride / size),
                };
                for (axis, (slot, &stride)) in out.iter_mut().zip(given).enumerate() {
                    match exact(stride) {
                        Some(elements) => *slot = elements as isize,
                        None if shape[axis] <= 1 => *slot = 0, // never steps
                        None => {
                            return Err(PyValueError::new_err(format!(
                                "the array's stride of {stride} bytes on axis {axis} is not a multiple of its \
                                 itemsize ({itemsize} bytes); pass a copy (np.ascontiguousarray)"
                            )))
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Refuse strides that are not C-contiguous for `dims` (`itemsize`-byte elements).
    pub(crate) fn check_c_contiguous(self, dims: &[i64], itemsize: usize) -> crate::error::Result<()> {
        match self {
            Strides::COrder => Ok(()),
            Strides::Elements(given) => crate::memarray::foreign::check_c_contiguous(dims, given, 1),
            Strides::Bytes(given) => crate::memarray::foreign::check_c_contiguous(dims, given, itemsize as i64),
        }
    }
}

/// What a caller asks of an acquisition.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Request {
    /// The stream to hand device data over on (default: the stream rule).
    pub(crate) stream: Option<Stream>,
    /// Ask a `__dlpack__` producer for a copy (`true`) or for none (`false`).
    pub(crate) copy: Option<bool>,
    /// The caller wraps only C-contiguous memory: refuse other layouts before any driver call.
    pub(crate) c_contiguous: bool,
    /// Take NumPy arrays of the kinds DLPack lacks (`Source::numpy_kind`): only typed
    /// arguments, which match them by name, ask; everyone else refuses them.
    pub(crate) numpy_kinds: bool,
    /// The caller is a typed argument, which borrows host memory in the borrow registry before
    /// the GIL is next released and keeps the object: an amso array's host data may be read in
    /// place, with no reference to its buffer (`from_amso`).
    pub(crate) in_place: bool,
}

/// `obj`'s memory by the first protocol it speaks (`None`: it speaks none); device data of
/// producers without the exchange API is handed over on `stream` (default: the stream rule).
#[inline]
pub(crate) fn acquire(obj: &Bound<'_, PyAny>, stream: Option<Stream>) -> PyResult<Option<Source>> {
    // A user crate whose module only defines typed functions registers no class: join here.
    crate::process::join(obj.py())?;
    let Some(protocol) = protocol_of(obj)? else { return Ok(None) };
    acquire_as(obj, protocol, Request { stream, ..Request::default() }).map(Some)
}

/// `obj`'s memory for an untyped argument (`UntypedArray`): NumPy arrays of the kinds DLPack
/// lacks are taken too, as typed arguments take them (`Request::numpy_kinds`).
pub(crate) fn acquire_any_kind(obj: &Bound<'_, PyAny>) -> PyResult<Option<Source>> {
    crate::process::join(obj.py())?;
    let Some(protocol) = protocol_of(obj)? else { return Ok(None) };
    acquire_as(obj, protocol, Request { numpy_kinds: true, ..Request::default() }).map(Some)
}

/// `obj`'s memory for a typed argument (`Request::in_place`, `Request::numpy_kinds`): the
/// caller keeps `obj`, and borrows non-empty host memory in the registry before it next
/// releases the GIL; NumPy arrays of the kinds DLPack lacks are taken too (typed arguments
/// match them by name).
#[inline]
pub(crate) fn acquire_argument(obj: &Bound<'_, PyAny>) -> PyResult<Option<Source>> {
    crate::process::join(obj.py())?;
    let Some(protocol) = protocol_of(obj)? else { return Ok(None) };
    acquire_as(obj, protocol, Request { in_place: true, numpy_kinds: true, ..Request::default() }).map(Some)
}

/// `obj`'s memory through `protocol`.
#[inline]
pub(crate) fn acquire_as(obj: &Bound<'_, PyAny>, protocol: Protocol, request: Request) -> PyResult<Source> {
    match protocol {
        Protocol::Amso(runtime) => match request.in_place.then(|| in_place(obj, runtime)).flatten() {
            Some(source) => Ok(source),
            None => from_amso(obj, runtime, request.stream),
        },
        Protocol::NumPy => numpy::read(obj, request.numpy_kinds),
        Protocol::Exchange(table) => from_exchange(obj, table),
        Protocol::DLPack => {
            let (tensor, stream) = handshake::dlpack_tensor(obj, request.stream, request.copy)?;
            let mut source = from_tensor(tensor)?;
            source.stream = stream.filter(|_| source.device.device_type == DeviceType::Cuda);
            Ok(source)
        }
        Protocol::Interface => handshake::from_interface(obj, request),
        Protocol::Buffer => pep3118::read(obj),
    }
}

/// An amso array's host data read in place from its header, if its runtime keeps
/// `FLAG_CHANGING` and the data is unlocked host data that no change is under way on.
///
/// Why this is sound without a reference to the buffer: the GIL is held. The flag is set, with
/// the GIL held, before any change of the array begins, and cleared after it ended and the
/// header was republished (`python/base/array.rs`), so with it clear the header's placement is
/// current and nothing writes or frees the data. The caller (a typed argument) registers its
/// borrow of the memory before it next releases the GIL; every change that could write or
/// free host memory while the GIL is released first borrows it for writing in the same
/// registry, with the GIL held, so it is refused while the argument lives. Anything else
/// (device data, a locked array, a change under way, a version 1 runtime) is held by
/// `from_amso` as before.
#[inline]
fn in_place(obj: &Bound<'_, PyAny>, runtime: &'static ArrayTypeInfo) -> Option<Source> {
    if !runtime.reads_in_place() {
        return None;
    }
    let header = match std::ptr::eq(runtime, &crate::python::base::recognize::INFO) {
        true => obj.cast::<crate::python::base::array::MemArrayBase>().ok()?.get().header(),
        // SAFETY: `obj`'s type is one of `runtime`'s classes (its protocol), the GIL held.
        false => unsafe { crate::python::base::recognize::foreign_header(obj, runtime) }?,
    };
    let placement = header.placement();
    let moving = placement.flags & (FLAG_CHANGING | FLAG_ON_DEVICE) != 0;
    if moving || placement.lock_id != 0 || placement.device_type != DeviceType::Cpu as i32 {
        return None;
    }
    Some(Source {
        holder: Holder::AmsoInPlace(NonNull::from(header)),
        data: placement.data,
        dtype: (header.code, header.bits, header.lanes),
        device: Device::CPU,
        readonly: placement.flags & FLAG_READONLY != 0,
        stream: None,
        managed: false,
        numpy_kind: amso_kind(header),
    })
}

/// An amso array's kind DLPack lacks: `record` for a record array (the one kind amso's own
/// arrays hold that DLPack cannot describe; its fields are compared by typed arguments).
fn amso_kind(header: &Header) -> Option<std::borrow::Cow<'static, str>> {
    (header.code == crate::element::OPAQUE_HANDLE).then_some(std::borrow::Cow::Borrowed(crate::element::RECORD))
}

/// An amso array of any runtime, held in place by that runtime; device data is handed to the
/// work stream (`stream`, else the context, else the legacy default).
fn from_amso(obj: &Bound<'_, PyAny>, runtime: &'static ArrayTypeInfo, stream: Option<Stream>) -> PyResult<Source> {
    let work = crate::current_stream::resolve(stream);
    let mut held = HeldArray::default();
    // SAFETY: a live object, a writable output, the GIL held.
    if unsafe { (runtime.hold)(obj.as_ptr(), work, &mut held) } != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    let header = NonNull::new(held.header as *mut Header)
        .ok_or_else(|| PyValueError::new_err("an amso runtime held an array without a header"))?;
    let holder = AmsoHold { header, runtime, token: held.token };
    // SAFETY: the header of the array just held, alive while it is.
    let header = unsafe { header.as_ref() };
    let device = Device { device_type: DeviceType::from_code(held.device_type)?, id: held.device_id };
    Ok(Source {
        holder: Holder::Amso(holder),
        data: held.data,
        dtype: (header.code, header.bits, header.lanes),
        device,
        readonly: held.readonly != 0,
        stream: (device.device_type == DeviceType::Cuda).then_some(work),
        managed: false,
        numpy_kind: amso_kind(header),
    })
}

/// Through the producer type's exchange table: an owning tensor, no Python call.
fn from_exchange(obj: &Bound<'_, PyAny>, table: &'static DLPackExchangeAPI) -> PyResult<Source> {
    let from_object = table
        .managed_tensor_from_py_object_no_sync
        .ok_or_else(|| PyTypeError::new_err("the producer's DLPack exchange API cannot export tensors"))?;
    let mut out: *mut DLManagedTensorVersioned = std::ptr::null_mut();
    // SAFETY: `obj` is of the type the table came from, alive for the call, the GIL held.
    if unsafe { from_object(obj.as_ptr().cast(), &mut out) } != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    let tensor =
        NonNull::new(out).ok_or_else(|| PyValueError::new_err("the producer's exchange API returned no tensor"))?;
    // SAFETY: the producer hands the tensor over; we delete it once.
    let tensor = unsafe { ManagedTensor::from_raw(RawManaged::Versioned(tensor)) };
    let mut source = from_tensor(tensor)?;
    if source.device.device_type == DeviceType::Cuda {
        source.stream = Some(framework_stream(obj.py(), table, source.device.id)?);
    }
    Ok(source)
}

/// The current work stream a framework's exchange API reports on CUDA device `device_id`
/// (NULL: the legacy default stream): where a producer's data is ready (acquiring an argument)
/// or where a consumer works (handing a result over).
pub(crate) fn framework_stream(py: Python<'_>, table: &DLPackExchangeAPI, device_id: DeviceId) -> PyResult<Stream> {
    let Some(current) = table.current_work_stream else { return Ok(Stream::LEGACY) };
    let mut stream: *mut c_void = std::ptr::null_mut();
    // SAFETY: the framework's function with a writable output; the GIL is held.
    if unsafe { current(DLDeviceType::CUDA, device_id.ordinal(), &mut stream) } != 0 {
        return Err(PyErr::take(py).unwrap_or_else(|| {
            PyRuntimeError::new_err("the framework's current_work_stream failed without saying why")
        }));
    }
    // SAFETY: the framework's current stream on the device, alive while its data is, or NULL.
    Ok(unsafe { Stream::from_handle(stream as usize) })
}

/// The stream this call works on for a producer without the exchange API (the module's rule).
pub(crate) fn work_stream(stream: Option<Stream>, device_id: DeviceId) -> PyResult<Stream> {
    if let Some(stream) = stream.or_else(crate::current_stream::current) {
        return Ok(stream);
    }
    #[cfg(feature = "cuda")]
    return Ok(crate::cuda::stream::amso_stream(device_id)?.stream());
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device_id;
        Ok(Stream::LEGACY)
    }
}

/// A source over `tensor` (amso's own export, say), whose device data is on `stream`.
#[cfg(feature = "cuda")]
pub(crate) fn from_managed(tensor: ManagedTensor, stream: Option<Stream>) -> PyResult<Source> {
    let mut source = from_tensor(tensor)?;
    source.stream = stream.filter(|_| source.device.device_type == DeviceType::Cuda);
    Ok(source)
}

/// The fields of a producer's managed tensor, checked enough to be read safely.
pub(crate) fn from_tensor(tensor: ManagedTensor) -> PyResult<Source> {
    let (t, flags, major) = tensor.describe();
    let readonly = flags.contains(dlpark::DlpackFlags::READ_ONLY);
    crate::memarray::foreign::check_major_version(major)?;
    crate::element::check_dlpack_type((t.dtype.code.0, t.dtype.bits, t.dtype.lanes)).map_err(PyTypeError::new_err)?;
    crate::dlpack::check_subbyte_layout(t.dtype, flags).map_err(PyTypeError::new_err)?;
    if !(0..=64).contains(&t.ndim) {
        return Err(PyValueError::new_err(format!("the producer's tensor ndim {} is outside DLPack's 0..=64", t.ndim)));
    }
    if t.ndim > 0 && t.shape.is_null() {
        return Err(PyValueError::new_err("the producer's tensor shape is NULL"));
    }
    let ndim = t.ndim as usize;
    let kind = DeviceType::from_code(t.device.device_type.0 as i32)?;
    let invalid = || {
        PyValueError::new_err(format!(
            "the producer's device id {} is not valid for device type {}",
            t.device.device_id, t.device.device_type.0
        ))
    };
    let device = match kind {
        DeviceType::CudaHost => Device::CPU, // page-locked host memory reads as host memory
        // Managed memory is device memory the host may read.
        DeviceType::Cuda | DeviceType::CudaManaged if t.device.device_id >= 0 => {
            Device::cuda(DeviceId::new(t.device.device_id)?)
        }
        DeviceType::Cpu if t.device.device_id == 0 => Device::CPU,
        _ => return Err(invalid()),
    };
    // SAFETY: a DLTensor's shape holds ndim entries (checked not NULL above when ndim > 0),
    // alive while the tensor is.
    let dims = if ndim == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(t.shape, ndim) } };
    if let Some(&negative) = dims.iter().find(|&&d| d < 0) {
        return Err(PyValueError::new_err(format!("the producer's tensor has a negative dimension {negative}")));
    }
    let data = (t.data as usize)
        .checked_add(usize::try_from(t.byte_offset).unwrap_or(usize::MAX))
        .ok_or_else(|| PyValueError::new_err("the producer's byte_offset overflows the data pointer"))?;
    if t.data.is_null() && !dims.contains(&0) {
        return Err(PyValueError::new_err(format!(
            "the producer's tensor data pointer is NULL but its shape is {dims:?}"
        )));
    }
    Ok(Source {
        data,
        dtype: (t.dtype.code.0, t.dtype.bits, t.dtype.lanes),
        device,
        readonly,
        stream: None,
        managed: kind == DeviceType::CudaManaged,
        numpy_kind: None,
        holder: Holder::Tensor(tensor),
    })
}
