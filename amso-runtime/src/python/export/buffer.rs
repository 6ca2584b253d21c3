//! The buffer protocol for host data: `memoryview(a)`, `bytes(a)`, `np.asarray(a)` (NumPy
//! tries buffers first), `struct.unpack_from`, mpi4py. A buffer counts as an export, and pins
//! the data: while one lives, amso refuses to move the array (`BufferError` naming the live
//! buffers), so the memory a buffer describes is never freed, moved away or overwritten by a
//! move. `RawBytes` exports the same memory as plain bytes, for element types PEP 3118 has no
//! format for (bfloat16) and for pickle's out-of-band buffers.

use std::ffi::{c_int, CStr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::element::DType;
use crate::host::HostBuffer;
use crate::python::base::array::MemArrayBase;
use crate::shape::MAX_NDIM;

/// The PEP 3118 format of an element type, from its DLPack facts; `None` where PEP 3118 has
/// no character for it (bfloat16, the low-precision floats, packed vectors).
fn format_of(dtype: &DType) -> Option<&'static CStr> {
    use crate::element::dlpack_code::{BOOL, COMPLEX, FLOAT, INT, UINT};
    Some(match (dtype.code, dtype.bits, dtype.lanes) {
        (INT, 8, 1) => c"b",
        (INT, 16, 1) => c"h",
        (INT, 32, 1) => c"i",
        (INT, 64, 1) => c"q",
        (UINT, 8, 1) => c"B",
        (UINT, 16, 1) => c"H",
        (UINT, 32, 1) => c"I",
        (UINT, 64, 1) => c"Q",
        (FLOAT, 16, 1) => c"e",
        (FLOAT, 32, 1) => c"f",
        (FLOAT, 64, 1) => c"d",
        (COMPLEX, 64, 1) => c"Zf",
        (COMPLEX, 128, 1) => c"Zd",
        (BOOL, 8, 1) => c"?",
        _ => return None,
    })
}

/// A record's PEP 3118 struct format (`T{(3)f:pos:(3)f:vel:d:mass:q:id:}`, C's padding as
/// `Nx`), made once per record type and kept for the process; `None` when a field's type has
/// no format character.
fn record_format(dtype: &'static DType) -> Option<&'static CStr> {
    static MADE: std::sync::Mutex<Vec<(usize, &'static CStr)>> = std::sync::Mutex::new(Vec::new());
    if !dtype.is_record() {
        return None;
    }
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let key = dtype as *const DType as usize;
    if let Some(&(_, format)) = made.iter().find(|(k, _)| *k == key) {
        return Some(format);
    }
    let mut text = String::from("T{");
    for stretch in crate::element::record_stretches(dtype) {
        match stretch {
            crate::element::Stretch::Gap(bytes) => text += &format!("{bytes}x"),
            crate::element::Stretch::Field(field) => {
                if !field.shape.is_empty() {
                    let shape: Vec<String> = field.shape.iter().map(usize::to_string).collect();
                    text += &format!("({})", shape.join(","));
                }
                text += format_of(field.dtype)?.to_str().ok()?;
                text += &format!(":{}:", field.name);
            }
        }
    }
    text.push('}');
    let format: &'static CStr = Box::leak(std::ffi::CString::new(text).ok()?.into_boxed_c_str());
    made.push((key, format));
    Some(format)
}

/// The shape and byte strides a buffer points at, and the host memory itself, kept alive in
/// `Py_buffer.internal` until the consumer releases the buffer: besides the pin, the memory a
/// buffer describes is owned by the buffer, as a DLPack export owns its memory.
struct Layout {
    shape: [ffi::Py_ssize_t; MAX_NDIM + 1],
    strides: [ffi::Py_ssize_t; MAX_NDIM + 1],
    _host: Arc<HostBuffer>,
}

/// Fill `view` for `flags` (`__getbuffer__`): the array's elements, or with `raw` its bytes.
/// `owner` goes into `view.obj` and must release the buffer through `release_buffer`.
///
/// # Safety
/// `view` is the consumer's writable `Py_buffer`; the GIL is held.
pub(in crate::python) unsafe fn get_buffer(
    owner: &Bound<'_, PyAny>,
    array: &MemArrayBase,
    view: *mut ffi::Py_buffer,
    flags: c_int,
    raw: bool,
) -> PyResult<()> {
    let py = owner.py();
    let header = array.header();
    let dtype = if raw { &<u8 as crate::element::ArrayElement>::DTYPE } else { array.element_type() };
    // A vector's buffer is of its lanes, with a last axis of `lanes` (PEP 3118 has no vectors).
    let (dtype, lanes) = match dtype.lane() {
        Some(lane) => (lane, Some(ffi::Py_ssize_t::from(dtype.lanes as i16))),
        None => (dtype, None),
    };
    let writable = flags & ffi::PyBUF_WRITABLE != 0;
    let with_shape = flags & ffi::PyBUF_ND == ffi::PyBUF_ND;
    let with_format = flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT;
    let format = match (with_format, format_of(dtype).or_else(|| record_format(dtype))) {
        (false, _) => None,
        (true, Some(format)) => Some(format),
        (true, None) => {
            return Err(PyBufferError::new_err(format!(
                "{} has no buffer-protocol (PEP 3118) format character, so memoryview() cannot describe it; \
                 np.asarray(a) gives a zero-copy NumPy view (ml_dtypes), and DLPack works too",
                dtype.name
            )))
        }
    };
    let f_contiguous_only = flags & ffi::PyBUF_F_CONTIGUOUS == ffi::PyBUF_F_CONTIGUOUS
        && flags & ffi::PyBUF_ANY_CONTIGUOUS != ffi::PyBUF_ANY_CONTIGUOUS;
    let long_axes = header.dims().iter().filter(|&&d| d > 1).count() + usize::from(lanes.is_some_and(|l| l > 1));
    if f_contiguous_only && !raw && long_axes > 1 {
        return Err(PyBufferError::new_err(
            "amso arrays are C-contiguous; a Fortran-contiguous buffer of this shape does not exist",
        ));
    }
    let (address, readonly, host) = array.read(py, |object| -> PyResult<(usize, bool, Arc<HostBuffer>)> {
        let raw = object.raw_view();
        if raw.residence() != crate::device::Residence::Host {
            return Err(PyBufferError::new_err(
                "the data is in device memory; the buffer protocol describes host memory: \
                 move_memory(kDLCPU) first, or use DLPack / __cuda_array_interface__",
            ));
        }
        if writable && raw.readonly() {
            return Err(PyBufferError::new_err("the array is read-only; a writable buffer was requested"));
        }
        let address = raw.data_address(None)?;
        // Counted under the lock, so a move (which takes it exclusively) sees every buffer.
        array.buffer_exports.fetch_add(1, Ordering::AcqRel);
        Ok((address, raw.readonly(), Arc::clone(object.host_buffer())))
    })?;
    let nbytes = host.nbytes() as i64;
    let raw_dims = [nbytes];
    // Strides in elements: the header's (C order, saturating), or 1 for the raw bytes.
    let (dims, element_strides) =
        if raw { (&raw_dims[..], &[1i64][..]) } else { (header.dims(), &header.strides[..header.dims().len()]) };
    let itemsize = dtype.itemsize() as ffi::Py_ssize_t;
    let element_size = itemsize * lanes.unwrap_or(1);
    let mut layout = Box::new(Layout { shape: [0; MAX_NDIM + 1], strides: [0; MAX_NDIM + 1], _host: host });
    for (axis, (&dim, &stride)) in dims.iter().zip(element_strides).enumerate() {
        layout.shape[axis] = dim as ffi::Py_ssize_t;
        layout.strides[axis] = (stride as ffi::Py_ssize_t).saturating_mul(element_size);
    }
    let ndim = dims.len() + usize::from(lanes.is_some());
    if let Some(lanes) = lanes {
        layout.shape[dims.len()] = lanes;
        layout.strides[dims.len()] = itemsize;
    }
    let layout = Box::into_raw(layout);
    // SAFETY: `view` is the consumer's buffer struct; `layout` lives until `release_buffer`,
    // and the new reference in `obj` keeps this array (and its host memory) alive as long.
    unsafe {
        (*view).buf = address as *mut std::ffi::c_void;
        (*view).obj = owner.clone().into_ptr();
        (*view).len = nbytes as ffi::Py_ssize_t;
        (*view).readonly = c_int::from(readonly);
        (*view).itemsize = if with_shape || with_format { itemsize } else { 1 };
        (*view).format = format.map_or(std::ptr::null_mut(), |f| f.as_ptr().cast_mut());
        (*view).ndim = if with_shape { ndim as c_int } else { 1 };
        (*view).shape = if with_shape { (*layout).shape.as_mut_ptr() } else { std::ptr::null_mut() };
        (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
            (*layout).strides.as_mut_ptr()
        } else {
            std::ptr::null_mut()
        };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = layout.cast();
    }
    Ok(())
}

/// Release what `get_buffer` handed out (`__releasebuffer__`).
///
/// # Safety
/// `view` was filled by `get_buffer` and is released once.
pub(in crate::python) unsafe fn release_buffer(array: &MemArrayBase, view: *mut ffi::Py_buffer) {
    // SAFETY: `internal` is the `Layout` `get_buffer` leaked for this view.
    let layout = unsafe { (*view).internal.cast::<Layout>() };
    if !layout.is_null() {
        // SAFETY: as above, released once.
        drop(unsafe { Box::from_raw(layout) });
    }
    array.buffer_exports.fetch_sub(1, Ordering::AcqRel);
}

/// The raw bytes of an amso array's host data, as a buffer (Python name
/// `amso._amso.RawBytes`): `np.frombuffer(RawBytes(a), np.uint8)` views any dtype's memory.
#[pyclass(frozen, module = "amso._amso", name = "RawBytes")]
pub struct RawBytes {
    array: Py<MemArrayBase>,
}

impl From<&Bound<'_, MemArrayBase>> for RawBytes {
    fn from(array: &Bound<'_, MemArrayBase>) -> Self {
        RawBytes { array: array.clone().unbind() }
    }
}

#[pymethods]
impl RawBytes {
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let array = slf.get().array.get();
        // SAFETY: forwarded from Python's buffer protocol.
        unsafe { get_buffer(slf.as_any(), array, view, flags, true) }
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: forwarded from Python's buffer protocol.
        unsafe { release_buffer(self.array.get(), view) }
    }
}
