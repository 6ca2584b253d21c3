//! The buffer protocol (PEP 3118) as a source: `bytearray`, `array.array`, `memoryview`,
//! `mmap` and any C extension's buffers, read without a Python call. An exporter's answer is
//! checked before anything reads through it: the format must name one element type whose size
//! is the itemsize, the length must be what the shape says, and indirect buffers are refused.

use std::ffi::{c_char, CStr};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

use super::{as_i64s, Extents, Holder, Source, Strides};
use crate::device::Device;

/// A buffer view taken from its exporter, released (with the GIL) when dropped.
pub(crate) struct BufferView(Box<ffi::Py_buffer>);

// SAFETY: the view is only read (its fields are plain data), and released once, with the GIL.
unsafe impl Send for BufferView {}
// SAFETY: as above.
unsafe impl Sync for BufferView {}

impl Drop for BufferView {
    fn drop(&mut self) {
        // SAFETY: a view PyObject_GetBuffer filled, released exactly once, with the GIL held.
        Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut *self.0) });
    }
}

impl BufferView {
    /// The view's shape and byte strides (checked when the view was taken).
    pub(super) fn extents(&self) -> Extents<'_> {
        let b = &*self.0;
        let ndim = b.ndim.max(0) as usize;
        // SAFETY: `read` checked that the shape holds ndim entries and the strides do when not
        // NULL; the exporter keeps both while the view is held.
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
/// write is the typed check's question), as a source that releases it when dropped.
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
    let kind = || obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    let lie = |what: String| {
        PyValueError::new_err(format!("the {} object's buffer is inconsistent: {what}; it cannot be read", kind()))
    };
    // SAFETY: NULL or a NUL-terminated format string the exporter keeps while the view lives.
    let format = if b.format.is_null() { c"B" } else { unsafe { CStr::from_ptr(b.format as *const c_char) } };
    let dtype = element_type(format.to_bytes()).map_err(|problem| {
        PyTypeError::new_err(format!(
            "the {} object's buffer has format {:?}, {problem}; amso reads single numbers of the machine's byte order",
            kind(),
            format.to_string_lossy()
        ))
    })?;
    let itemsize = (dtype.1 as usize * dtype.2 as usize).div_ceil(8);
    if b.itemsize != itemsize as isize {
        return Err(lie(format!(
            "format {:?} describes {itemsize}-byte items, but its itemsize is {}",
            format.to_string_lossy(),
            b.itemsize
        )));
    }
    if !(0..=64).contains(&b.ndim) || (b.ndim > 0 && b.shape.is_null()) {
        return Err(lie(format!("ndim {} without a shape", b.ndim)));
    }
    let ndim = b.ndim as usize;
    // SAFETY: the exporter's shape and suboffsets hold ndim entries when not NULL.
    let (shape, suboffsets) = unsafe {
        let part = |p: *mut isize| (!p.is_null() && ndim > 0).then(|| std::slice::from_raw_parts(p, ndim));
        (part(b.shape).unwrap_or(&[]), part(b.suboffsets))
    };
    if suboffsets.is_some_and(|s| s.iter().any(|&o| o >= 0)) {
        return Err(PyTypeError::new_err(format!(
            "the {} object's buffer is indirect (PIL-style suboffsets); amso reads direct buffers only",
            kind()
        )));
    }
    if let Some(&negative) = shape.iter().find(|&&d| d < 0) {
        return Err(lie(format!("a negative dimension {negative}")));
    }
    let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d as usize));
    if elements.and_then(|n| n.checked_mul(itemsize)) != Some(b.len as usize) || b.len < 0 {
        return Err(lie(format!("shape {shape:?} of {itemsize}-byte items is not its length of {} bytes", b.len)));
    }
    if b.len > 0 && b.buf.is_null() {
        return Err(lie("a NULL data pointer".into()));
    }
    Ok(Source {
        data: b.buf as usize,
        readonly: b.readonly != 0,
        holder: Holder::Buffer(view),
        dtype,
        device: Device::CPU,
        stream: None,
        managed: false,
    })
}

/// The DLPack (code, bits, lanes) of a PEP 3118 format naming one number: `struct`'s codes
/// with an optional byte-order prefix (native or little-endian only), and NumPy's `Zf` / `Zd`
/// for complex numbers.
fn element_type(format: &[u8]) -> Result<(u8, u8, u16), &'static str> {
    let (native, code) = match format {
        [b'@', rest @ ..] => (true, rest),
        [b'=' | b'<', rest @ ..] => (false, rest),
        [b'>' | b'!', ..] if cfg!(target_endian = "little") => return Err("which is big-endian"),
        rest => (true, rest),
    };
    // Sizes: native ('@') as C declares them here, else struct's standard sizes.
    let (int, long) = if native { (std::ffi::c_int::BITS as u8, std::ffi::c_long::BITS as u8) } else { (32, 32) };
    use crate::element::dlpack_code::{BOOL, COMPLEX, FLOAT, INT, UINT};
    let (code, bits) = match code {
        b"?" => (BOOL, 8),
        b"b" => (INT, 8),
        b"B" | b"c" => (UINT, 8),
        b"h" => (INT, 16),
        b"H" => (UINT, 16),
        b"i" => (INT, int),
        b"I" => (UINT, int),
        b"l" => (INT, long),
        b"L" => (UINT, long),
        b"q" => (INT, 64),
        b"Q" => (UINT, 64),
        b"n" if native => (INT, isize::BITS as u8),
        b"N" if native => (UINT, usize::BITS as u8),
        b"e" => (FLOAT, 16),
        b"f" => (FLOAT, 32),
        b"d" => (FLOAT, 64),
        b"Zf" => (COMPLEX, 64),
        b"Zd" => (COMPLEX, 128),
        _ => return Err("which is not one number of a type amso knows"),
    };
    Ok((code, bits, 1))
}

#[cfg(test)]
mod tests {
    use super::element_type;

    #[test]
    fn formats_name_dlpack_types() {
        assert_eq!(element_type(b"f"), Ok((2, 32, 1)));
        assert_eq!(element_type(b"<d"), Ok((2, 64, 1)));
        assert_eq!(element_type(b"=l"), Ok((0, 32, 1)), "standard size");
        assert_eq!(element_type(b"@l"), Ok((0, std::ffi::c_long::BITS as u8, 1)), "native size");
        assert_eq!(element_type(b"Zd"), Ok((5, 128, 1)));
        assert_eq!(element_type(b"?"), Ok((6, 8, 1)));
        assert!(element_type(b">f").unwrap_err().contains("big-endian"));
        assert!(element_type(b"T{f:x:}").is_err());
        assert!(element_type(b"2f").is_err(), "a repeat count is not one number");
        assert!(element_type(b"").is_err());
    }
}
