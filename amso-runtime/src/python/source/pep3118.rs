//! The buffer protocol (PEP 3118) as a source: `bytearray`, `array.array`, `memoryview`,
//! `mmap` and any C extension's buffers, read without a Python call. An exporter's answer is
//! checked before anything reads through it (`memarray/buffer_claim.rs`): the format must name
//! one element type whose size is the itemsize, the length must be what the shape says, and
//! indirect buffers are refused; strides are the exporter's word, as NumPy takes them.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::device::Device;
use crate::memarray::buffer_claim::{claim_buffer, BufferFields, BufferRefusal};
use crate::python::source::{as_i64s, Extents, Holder, Source, Strides};

/// A buffer view taken from its exporter, released (with the GIL) when dropped.
pub(crate) struct BufferView(Box<ffi::Py_buffer>);

// SAFETY: the view is only read (its fields are plain data), and released once, with the GIL.
unsafe impl Send for BufferView {}
// SAFETY: as above.
unsafe impl Sync for BufferView {}

impl Drop for BufferView {
    fn drop(&mut self) {
        // SAFETY: a view PyObject_GetBuffer filled, released exactly once, with the GIL held
        // (at interpreter exit, where PyO3 cannot attach, it is left to the process's end).
        let _ = Python::try_attach(|_| unsafe { ffi::PyBuffer_Release(&mut *self.0) });
    }
}

impl BufferView {
    /// The view's shape and byte strides (checked when the view was taken).
    pub(super) fn extents(&self) -> Extents<'_> {
        let b = &*self.0;
        let ndim = b.ndim.max(0) as usize;
        // SAFETY: `claim_buffer` checked that the shape holds ndim entries and the strides do
        // when not NULL; the exporter keeps both while the view is held.
        unsafe {
            Extents {
                dims: as_i64s(b.shape, ndim),
                strides: if b.strides.is_null() { Strides::COrder } else { Strides::Bytes(as_i64s(b.strides, ndim)) },
            }
        }
    }
}

/// Whether instances of `ty` export buffers.
pub(super) fn exports_buffers(ty: &Bound<'_, PyType>) -> bool {
    // SAFETY: a live type; PyType_GetSlot accepts every type since Python 3.10.
    !unsafe { ffi::PyType_GetSlot(ty.as_type_ptr(), ffi::Py_bf_getbuffer) }.is_null()
}

/// `obj`'s buffer, taken with strides and format (read-only buffers too: whether a view may
/// write is the typed check's question), as a source that releases it when dropped. What the
/// buffer claims is checked by `claim_buffer` before anything reads through it.
pub(super) fn read(obj: &Bound<'_, PyAny>) -> PyResult<Source> {
    // Boxed before the call: an exporter may point the view's shape into the view itself
    // (PyBuffer_FillInfo does), so it must not move while held.
    // SAFETY: Py_buffer is plain data; all-zero is the state PyObject_GetBuffer expects.
    let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: a live object and a writable view; -1 comes with an exception set.
    if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS_RO) } != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    let view = BufferView(view);
    let b = &*view.0;
    let fields = BufferFields {
        buf: b.buf.cast_const().cast(),
        len: b.len,
        itemsize: b.itemsize,
        ndim: b.ndim,
        format: b.format.cast_const(),
        shape: b.shape.cast_const(),
        strides: b.strides.cast_const(),
        suboffsets: b.suboffsets.cast_const(),
    };
    // SAFETY: the exporter's view, held until `view` drops: its format is NULL or a C string,
    // its shape, strides and suboffsets NULL or ndim entries (PEP 3118's contract).
    let claim = unsafe { claim_buffer(&fields) }.map_err(|refusal| {
        let kind = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
        match refusal {
            BufferRefusal::Unreadable(what) => PyTypeError::new_err(format!("the {kind} object's buffer {what}")),
            BufferRefusal::Invalid(what) => PyValueError::new_err(format!("the {kind} object's buffer {what}")),
        }
    })?;
    Ok(Source {
        data: b.buf as usize,
        readonly: b.readonly != 0,
        dtype: claim.dtype,
        holder: Holder::Buffer(view),
        device: Device::CPU,
        stream: None,
        managed: false,
        numpy_kind: None,
    })
}
