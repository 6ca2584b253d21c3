//! What a PEP 3118 buffer claims, checked before anything reads through it, with no Python in
//! the checks: the format must name one element type whose size is the itemsize, the shape's
//! bytes must be the length, and indirect buffers are refused; strides are the exporter's word,
//! as NumPy takes them. `python/source/pep3118.rs` fills the
//! fields from the exporter's `Py_buffer`; the fuzz target `buffer_protocol` makes them up.

use std::ffi::{c_char, c_int, CStr};

use crate::error::empty_note;
use crate::shape;

/// The fields of a `Py_buffer` the checks read, copied out of the exporter's view.
#[derive(Debug, Clone, Copy)]
pub struct BufferFields {
    /// The address of the first element.
    pub buf: *const u8,
    /// The length in bytes.
    pub len: isize,
    /// Bytes per item.
    pub itemsize: isize,
    /// The number of dimensions.
    pub ndim: c_int,
    /// The struct-module format (NULL: unsigned bytes).
    pub format: *const c_char,
    /// `ndim` dimensions (NULL only when `ndim` is 0).
    pub shape: *const isize,
    /// `ndim` strides in bytes (NULL: C order).
    pub strides: *const isize,
    /// `ndim` suboffsets (NULL, or all negative, for a direct buffer).
    pub suboffsets: *const isize,
}

/// A buffer that passed the checks: its element type and extents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferClaim<'a> {
    /// DLPack (code, bits, lanes).
    pub dtype: (u8, u8, u16),
    /// Bytes per element.
    pub itemsize: usize,
    /// The dimensions, none negative.
    pub dims: &'a [isize],
    /// The strides in bytes (`None`: C order).
    pub byte_strides: Option<&'a [isize]>,
}

/// Why a buffer cannot be read. Each message continues "the <exporter's type> object's
/// buffer ..." (the reader knows the exporter; these checks do not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BufferRefusal {
    /// A buffer amso does not read: its format, or an indirect layout (a `TypeError`).
    Unreadable(String),
    /// Fields that contradict each other, or strides reaching outside it (a `ValueError`).
    Invalid(String),
}

/// The element type and extents of the buffer `fields` describe, or why it cannot be read.
///
/// # Safety
/// `fields.format` is NULL or a NUL-terminated string. When `1 <= fields.ndim <= 64`,
/// `fields.shape`, `fields.strides` and `fields.suboffsets` are NULL or hold `ndim` entries
/// (PEP 3118's contract; none is read for another `ndim`). All of them stay alive and
/// unchanged for `'a`. Nothing is read at `fields.buf`.
pub unsafe fn claim_buffer<'a>(fields: &BufferFields) -> Result<BufferClaim<'a>, BufferRefusal> {
    let inconsistent = |what: String| BufferRefusal::Invalid(format!("is inconsistent: {what}; it cannot be read"));
    // SAFETY: NULL or a NUL-terminated format string alive for 'a (the caller's contract).
    let format = if fields.format.is_null() { c"B" } else { unsafe { CStr::from_ptr(fields.format) } };
    let dtype = element_type(format.to_bytes()).map_err(|problem| {
        BufferRefusal::Unreadable(format!(
            "has format {:?}, {problem}; amso reads single numbers of the machine's byte order",
            format.to_string_lossy()
        ))
    })?;
    let itemsize = (dtype.1 as usize * dtype.2 as usize).div_ceil(8);
    if fields.itemsize != itemsize as isize {
        return Err(inconsistent(format!(
            "format {:?} describes {itemsize}-byte items, but its itemsize is {}",
            format.to_string_lossy(),
            fields.itemsize
        )));
    }
    if !(0..=64).contains(&fields.ndim) {
        return Err(inconsistent(format!("ndim {} is outside the buffer protocol's 0..=64", fields.ndim)));
    }
    if fields.ndim > 0 && fields.shape.is_null() {
        return Err(inconsistent(format!("ndim {} without a shape", fields.ndim)));
    }
    let ndim = fields.ndim as usize;
    // SAFETY: the shape, strides and suboffsets hold ndim entries when not NULL, alive for 'a.
    let (dims, strides, suboffsets) = unsafe {
        let part = |p: *const isize| (!p.is_null() && ndim > 0).then(|| std::slice::from_raw_parts(p, ndim));
        (part(fields.shape).unwrap_or(&[]), part(fields.strides), part(fields.suboffsets))
    };
    if suboffsets.is_some_and(|s| s.iter().any(|&o| o >= 0)) {
        return Err(BufferRefusal::Unreadable(
            "is indirect (PIL-style suboffsets); amso reads direct buffers only".into(),
        ));
    }
    if let Some(&negative) = dims.iter().find(|&&d| d < 0) {
        return Err(inconsistent(format!("a negative dimension {negative}")));
    }
    let Some(bytes) = shape::byte_size(dims.iter().map(|&d| d as usize), itemsize) else {
        return Err(inconsistent(format!(
            "shape {dims:?} of {itemsize}-byte items is more than an address space holds{}",
            empty_note(dims.contains(&0))
        )));
    };
    if bytes as isize != fields.len {
        return Err(inconsistent(format!(
            "shape {dims:?} of {itemsize}-byte items is not its length of {} bytes",
            fields.len
        )));
    }
    if bytes > 0 && fields.buf.is_null() {
        return Err(inconsistent("a NULL data pointer".into()));
    }
    if (fields.buf as usize).checked_add(bytes).is_none() {
        return Err(inconsistent(format!(
            "{bytes} bytes from 0x{:x} pass the end of the address space",
            fields.buf as usize
        )));
    }
    // Given strides are the exporter's word: PEP 3118 gives a strided view's logical size as its
    // length (`memoryview(x)[::2]` reaches past it), so no length can check them, as NumPy takes
    // them on trust too.
    Ok(BufferClaim { dtype, itemsize, dims, byte_strides: strides })
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
    use super::*;

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

    /// A float64 buffer of `dims` over `memory`, with `strides` if given.
    fn fields(memory: &[f64], dims: &[isize], strides: Option<&[isize]>) -> BufferFields {
        let count: isize = dims.iter().product();
        BufferFields {
            buf: memory.as_ptr().cast(),
            len: count * 8,
            itemsize: 8,
            ndim: dims.len() as c_int,
            format: c"d".as_ptr(),
            shape: dims.as_ptr(),
            strides: strides.map_or(std::ptr::null(), |s| s.as_ptr()),
            suboffsets: std::ptr::null(),
        }
    }

    /// `claim_buffer` of a test's fields; the claim borrows the test's arrays, which outlive
    /// every use of it.
    fn claim<'a>(fields: &BufferFields) -> Result<BufferClaim<'a>, BufferRefusal> {
        // SAFETY: every test's format is a C string literal and its shape, strides and
        // suboffsets hold ndim entries, alive while the claim is used.
        unsafe { claim_buffer(fields) }
    }

    fn message(result: Result<BufferClaim<'_>, BufferRefusal>) -> String {
        match result {
            Err(BufferRefusal::Unreadable(m) | BufferRefusal::Invalid(m)) => m,
            Ok(claim) => panic!("accepted: {claim:?}"),
        }
    }

    #[test]
    fn honest_buffers_are_claimed() {
        let memory = [0.0f64; 12];
        let dims = [3isize, 4];
        let claimed = claim(&fields(&memory, &dims, None)).unwrap();
        assert_eq!(
            (claimed.dtype, claimed.itemsize, claimed.dims, claimed.byte_strides),
            ((2, 64, 1), 8, &dims[..], None)
        );
        // Fortran order and a broadcast stay inside the 96 bytes.
        let fortran = [8isize, 24];
        assert!(claim(&fields(&memory, &dims, Some(&fortran))).is_ok());
        let broadcast = [0isize, 8];
        assert!(claim(&fields(&memory, &dims, Some(&broadcast))).is_ok());
        // An empty buffer reaches nothing, whatever its strides and pointer.
        let empty = [0isize, 4];
        let huge = [isize::MAX, isize::MIN];
        let mut empty_fields = fields(&memory, &empty, Some(&huge));
        empty_fields.buf = std::ptr::null();
        assert_eq!(claim(&empty_fields).map(|c| c.dims.len()), Ok(2));
        // A scalar: ndim 0, no shape.
        let scalar = BufferFields { ndim: 0, shape: std::ptr::null(), len: 8, ..fields(&memory, &[], None) };
        assert_eq!(claim(&scalar).map(|c| c.dims.len()), Ok(0));
    }

    #[test]
    fn lies_are_refused_with_what_arrived() {
        let memory = [0.0f64; 8];
        let dims = [8isize];
        let honest = fields(&memory, &dims, None);
        let lie = |change: &dyn Fn(&mut BufferFields)| {
            let mut f = honest;
            change(&mut f);
            message(claim(&f))
        };
        assert!(lie(&|f| f.itemsize = 4).contains("format \"d\" describes 8-byte items, but its itemsize is 4"));
        assert!(lie(&|f| f.len = 72).contains("shape [8] of 8-byte items is not its length of 72 bytes"));
        assert!(lie(&|f| f.format = c"T{d:x:}".as_ptr()).contains("which is not one number"));
        assert!(lie(&|f| f.format = c">d".as_ptr()).contains("which is big-endian"));
        assert!(lie(&|f| f.shape = std::ptr::null()).contains("ndim 1 without a shape"));
        assert!(lie(&|f| f.ndim = 65).contains("ndim 65 is outside the buffer protocol's 0..=64"));
        assert!(lie(&|f| f.ndim = -1).contains("ndim -1 is outside"));
        assert!(lie(&|f| f.buf = std::ptr::null()).contains("a NULL data pointer"));
        assert!(
            lie(&|f| f.buf = std::ptr::without_provenance(usize::MAX)).contains("pass the end of the address space")
        );
        let negative = [-8isize];
        assert!(lie(&|f| f.shape = negative.as_ptr()).contains("a negative dimension -8"));
        let suboffsets = [0isize];
        assert_eq!(
            claim(&BufferFields { suboffsets: suboffsets.as_ptr(), ..honest }),
            Err(BufferRefusal::Unreadable("is indirect (PIL-style suboffsets); amso reads direct buffers only".into()))
        );
        let direct = [-1isize];
        assert!(claim(&BufferFields { suboffsets: direct.as_ptr(), ..honest }).is_ok(), "negative: direct");
    }

    #[test]
    fn a_zero_dimension_does_not_excuse_a_huge_one() {
        let memory = [0.0f64; 1];
        for dims in [[0isize, 1 << 61], [1 << 61, 0]] {
            assert!(message(claim(&fields(&memory, &dims, None)))
                .contains("is more than an address space holds (the nonzero dimensions count"));
        }
        let fits = [0isize, 1 << 59];
        assert!(claim(&fields(&memory, &fits, None)).is_ok());
    }

    #[test]
    fn strides_are_the_exporters_word() {
        let memory = [0.0f64; 8];
        let dims = [4isize];
        assert!(claim(&fields(&memory[..4], &dims, Some(&[16]))).is_ok(), "a stepped view reaches past its length");
        assert!(claim(&fields(&memory[3..7], &dims, Some(&[-8]))).is_ok(), "a reversed view starts at its end");
    }
}
