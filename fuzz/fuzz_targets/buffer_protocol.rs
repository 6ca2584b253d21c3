//! A buffer exporter's `Py_buffer` from the input: format string (known, damaged or random
//! bytes), itemsize, ndim, shape, strides and suboffsets (each possibly NULL), len and buf,
//! through `claim_buffer`, the checks the buffer-protocol reader runs. Any input gives a claim
//! or a refusal, never a panic. For the formats below, a claim is given exactly when an
//! independent reference (the format's size and NumPy's size rule in 128-bit integers) says
//! the buffer is consistent. Strides are the exporter's word (PEP 3118's length is a strided
//! view's logical size), so the fuzzer backs `buf` with exactly `len` bytes of memory when it
//! can, and reads every element of an accepted claim whose strides keep inside them.
#![no_main]

mod input;

use std::ffi::CString;

use amso_runtime::__private::{claim_buffer, BufferFields};
use input::{numpy_bytes, Input};
use libfuzzer_sys::fuzz_target;

/// Formats the reference knows, with the item size each names on this machine (`None`: not
/// one number amso reads).
const FORMATS: [(&str, Option<usize>); 16] = [
    ("d", Some(8)),
    ("f", Some(4)),
    ("<i", Some(4)),
    ("@l", Some(8)),
    ("=l", Some(4)),
    ("B", Some(1)),
    ("?", Some(1)),
    ("Zd", Some(16)),
    ("e", Some(2)),
    ("q", Some(8)),
    (">d", None),
    ("!f", None),
    ("T{d:x:}", None),
    ("2f", None),
    ("", None),
    ("x", None),
];

/// The most memory the fuzzer backs a buffer with.
const MAX_LEN: usize = 4096;
/// Entries in the shape, strides and suboffsets arrays (PEP 3118's most dimensions).
const ENTRIES: usize = 64;

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let choice = usize::from(input.u8());
    let random_format: Vec<u8> = (0..input.u8() % 8).map(|_| input.u8()).filter(|&b| b != 0).collect();
    // NULL reads as "B"; other choices past the table are random bytes.
    let (format, known) = match FORMATS.get(choice % 20) {
        Some(&(text, size)) => (Some(CString::new(text).expect("no NUL")), Some(size)),
        None if choice % 20 == FORMATS.len() => (None, Some(Some(1))),
        None => (Some(CString::new(random_format).expect("NULs filtered")), None),
    };
    let true_itemsize = known.flatten();
    let itemsize = match input.u8() % 4 {
        0 => isize::from_le_bytes(input.bytes::<8>()),
        1 => isize::from(input.u8() % 20),
        _ => true_itemsize.unwrap_or(8) as isize,
    };
    let ndim: i32 = match input.u8() {
        b @ 0..=239 => i32::from(b % 5),
        b @ 240..=251 => i32::from(b - 240) * 6, // up to 66: past PEP 3118's 64
        _ => i32::from_le_bytes(input.bytes::<4>()),
    };
    let mut shape = [0isize; ENTRIES];
    let count = usize::try_from(ndim).unwrap_or(0).min(ENTRIES);
    for dim in &mut shape[..count] {
        *dim = input.dim() as isize;
    }
    let shape_null = input.u8() % 16 == 0;
    let mut strides = [0isize; ENTRIES];
    let strides_given = input.flag();
    let step = true_itemsize.unwrap_or(8) as isize;
    for stride in &mut strides[..count] {
        *stride = match input.u8() % 8 {
            0 => input.dim() as isize,
            1 => isize::from(input.u8() as i8),
            k => (isize::from(k) - 4) * step, // -2..=3 items: reversed, broadcast, gaps
        };
    }
    let mut suboffsets = [-1isize; ENTRIES];
    let suboffsets_given = input.u8() % 8 == 0;
    if suboffsets_given && count > 0 {
        suboffsets[usize::from(input.u8()) % count] = isize::from(input.u8() as i8);
    }
    // The length: mostly what the shape says (the reference's count), else anything.
    let reference_bytes = true_itemsize.and_then(|size| numpy_bytes(&shape[..count], size));
    let len: isize = match input.u8() % 4 {
        0 => isize::from_le_bytes(input.bytes::<8>()),
        1 => isize::from(input.u8()),
        _ => reference_bytes.map_or(0, |bytes| bytes.min(isize::MAX as usize) as isize),
    };
    // Memory: exactly `len` bytes after `offset` when that is at most MAX_LEN (a read past them
    // leaves the allocation); the data pointer may also be NULL or wild.
    let backed = usize::try_from(len).ok().filter(|&len| len <= MAX_LEN);
    let offset = usize::from(input.u8() % 16) * 8;
    let memory: Vec<u8> = (0..offset + backed.unwrap_or(0)).map(|i| (i as u8).wrapping_mul(29)).collect();
    let buf = match input.u8() % 16 {
        0 => std::ptr::null(),
        1 => std::ptr::without_provenance(usize::MAX - usize::from(input.u8())),
        _ => memory.as_ptr().wrapping_add(offset),
    };
    let fields = BufferFields {
        buf,
        len,
        itemsize,
        ndim,
        format: format.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
        shape: if shape_null { std::ptr::null() } else { shape.as_ptr() },
        strides: if strides_given { strides.as_ptr() } else { std::ptr::null() },
        suboffsets: if suboffsets_given { suboffsets.as_ptr() } else { std::ptr::null() },
    };
    // SAFETY: the format is NULL or a C string; shape, strides and suboffsets are NULL or
    // hold 64 entries (every ndim 1..=64); all outlive the claim.
    let claim = unsafe { claim_buffer(&fields) };

    if let Some(true_itemsize) = known {
        let consistent = true_itemsize.is_some_and(|size| {
            itemsize == size as isize
                && (0..=64).contains(&ndim)
                && (ndim == 0 || !shape_null)
                && !(suboffsets_given && suboffsets[..count].iter().any(|&o| o >= 0))
                && reference_bytes.is_some_and(|bytes| bytes as isize == len && len >= 0)
                && (len == 0 || !buf.is_null())
                && (buf as usize).checked_add(len as usize).is_some()
        });
        assert_eq!(claim.is_ok(), consistent, "{fields:?}: {claim:?}");
    }
    let Ok(claim) = claim else { return };
    let size = claim.itemsize;
    assert_eq!((size as isize, claim.dims.len()), (itemsize, count));
    assert_eq!(claim.dims, &shape[..count]);
    assert_eq!(usize::from(claim.dtype.1) * usize::from(claim.dtype.2), size * 8);
    assert_eq!(numpy_bytes(claim.dims, size), Some(len as usize));
    if backed.is_none() || buf != memory.as_ptr().wrapping_add(offset) || len == 0 {
        return; // nothing the fuzzer can read (an empty buffer reaches nothing)
    }
    // Every element an accepted claim reaches, read where its strides say, when they keep inside
    // the memory the fuzzer backs the buffer with.
    let dims: Vec<usize> = claim.dims.iter().map(|&d| d as usize).collect();
    let c_strides = c_order(&dims, size);
    let strides = claim.byte_strides.unwrap_or(&c_strides);
    if !reach_inside(claim.dims, strides, size, len) {
        return;
    }
    let mut checksum = 0u8;
    for linear in 0..len as usize / size {
        let mut rest = linear;
        let mut at = 0i128;
        for axis in (0..dims.len()).rev() {
            at += (rest % dims[axis]) as i128 * strides[axis] as i128;
            rest /= dims[axis];
        }
        assert!(at >= 0 && at + size as i128 <= len as i128, "element {linear} at byte {at} of {len}");
        // SAFETY: `at..at + size` lies inside the `len` bytes at `buf` (asserted), which
        // `memory` holds.
        let element = unsafe { std::slice::from_raw_parts(buf.add(at as usize), size) };
        checksum = element.iter().fold(checksum, |sum, &byte| sum.wrapping_add(byte));
    }
    std::hint::black_box(checksum);
});

/// Whether every element of a non-empty buffer with these byte strides lies in `0..len`.
fn reach_inside(dims: &[isize], strides: &[isize], itemsize: usize, len: isize) -> bool {
    let (mut lowest, mut highest) = (0i128, 0i128);
    for (&dim, &stride) in dims.iter().zip(strides) {
        let step = (dim as i128 - 1) * stride as i128;
        if step < 0 {
            lowest += step;
        } else {
            highest += step;
        }
    }
    lowest >= 0 && highest + itemsize as i128 <= len as i128
}

/// C-order byte strides of `dims`.
fn c_order(dims: &[usize], itemsize: usize) -> Vec<isize> {
    let mut strides = vec![0isize; dims.len()];
    let mut step = itemsize as isize;
    for axis in (0..dims.len()).rev() {
        strides[axis] = step;
        step = step.saturating_mul(dims[axis].max(1) as isize);
    }
    strides
}
