//! Record layouts against NumPy's structured dtypes: a NumPy structured array, or an amso
//! record array of any runtime copy, is a record's only when its fields have the record's
//! names, element types, shapes and offsets, in the same order, and its itemsize is the
//! record's size; the first difference is the error.

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::element::{DType, Field};
use crate::python::identity_cache::IdentityCache;

/// Descriptors already found to match a record type (tag: the record's `DType` address).
static MATCHED: IdentityCache<16> = IdentityCache::new();

/// "particle (pos float32[3] at 0, vel float32[3] at 12, mass float64 at 24, id int64 at 32;
/// 40 bytes)": a record's layout, for messages.
pub(crate) fn layout_text(dtype: &DType) -> String {
    let fields: Vec<String> = dtype.fields.iter().map(|f| format!("{} at {}", field_text(f), f.offset)).collect();
    format!("{} ({}; {} bytes)", dtype.name, fields.join(", "), dtype.itemsize())
}

/// "pos float32[3]".
fn field_text(field: &Field) -> String {
    let shape: Vec<String> = field.shape.iter().map(usize::to_string).collect();
    match shape.is_empty() {
        true => format!("{} {}", field.name, field.dtype.name),
        false => format!("{} {}[{}]", field.name, field.dtype.name, shape.join(", ")),
    }
}

/// Refuse record array `object` (a NumPy structured array, or an amso record array of any
/// runtime copy) unless its dtype lays out the record `dtype` exactly. A NumPy descriptor or an
/// amso class that matched once is remembered (by identity, held for the process), so a
/// repeated argument costs one lookup.
///
/// # Safety
/// `numpy`: `object` is a live NumPy array (its type checked through NumPy's C API).
pub(crate) unsafe fn check_layout(object: &Bound<'_, PyAny>, numpy: bool, dtype: &'static DType) -> PyResult<()> {
    let py = object.py();
    // What decides the layout: the NumPy array's descriptor, or the amso array's class.
    let key = match numpy {
        // SAFETY: the caller's guarantee; the descriptor lives while the array does.
        true => unsafe { super::descr_of(object) },
        false => object.get_type().as_ptr(),
    };
    let tag = dtype as *const DType as usize;
    // The fields' names are the one part of a NumPy descriptor a program can change in place
    // (`dtype.names = ...` replaces the tuple): a hit holds only while the tuple is the one that
    // matched. (An amso class's layout never changes.)
    // SAFETY: `key` is a NumPy array's descriptor when `numpy`.
    let names = if numpy { (unsafe { super::field_names(key) }) as usize } else { 0 };
    if MATCHED.get_raw(key as usize, tag) == Some(names) {
        return Ok(());
    }
    let descr = match numpy {
        // SAFETY: as above, a live descriptor.
        true => unsafe { Bound::from_borrowed_ptr(py, key) },
        false => object.getattr(intern!(py, "dtype"))?,
    };
    if let Some(difference) = first_difference(&descr, dtype)? {
        return Err(PyTypeError::new_err(format!(
            "expected an array of record {}, got a structured array of dtype {} whose {difference}; make the NumPy \
             dtype from the record (same field names, types, shapes and offsets, in order, and the same itemsize)",
            layout_text(dtype),
            descr.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into()),
        )));
    }
    // SAFETY: `key` is a live object (the descriptor or the class), held by the cache from now.
    let stored = MATCHED.insert(&unsafe { Bound::from_borrowed_ptr(py, key) }, tag, names);
    if stored && names != 0 {
        // The entry holds the names tuple it compares by address, for the process: a rename
        // (`dtype.names = ...`) releases the descriptor's reference, not this one, so no later
        // tuple can take its address and pass for it. A renamed descriptor misses from then on
        // and is compared each call.
        // SAFETY: the descriptor's live names tuple.
        std::mem::forget(unsafe { Bound::from_borrowed_ptr(py, names as *mut pyo3::ffi::PyObject) });
    }
    Ok(())
}

/// The first way NumPy dtype `descr` (structured) differs from record `dtype`, if any.
pub(crate) fn first_difference(descr: &Bound<'_, PyAny>, dtype: &DType) -> PyResult<Option<String>> {
    let py = descr.py();
    let names = descr.getattr(intern!(py, "names"))?;
    let names: Vec<String> = if names.is_none() { Vec::new() } else { names.extract()? };
    let fields = descr.getattr(intern!(py, "fields"))?;
    for (index, expected) in dtype.fields.iter().enumerate() {
        let Some(name) = names.get(index) else {
            return Ok(Some(format!("fields end after {index}, where the record has `{}` next", field_text(expected))));
        };
        if name != expected.name {
            return Ok(Some(format!("field {index} is named `{name}`, where the record has `{}`", expected.name)));
        }
        let entry = fields.get_item(name)?.cast_into::<PyTuple>()?;
        let (field_dtype, offset): (Bound<'_, PyAny>, usize) = (entry.get_item(0)?, entry.get_item(1)?.extract()?);
        let subdtype = field_dtype.getattr(intern!(py, "subdtype"))?;
        let (base, shape): (Bound<'_, PyAny>, Vec<usize>) =
            if subdtype.is_none() { (field_dtype, Vec::new()) } else { subdtype.extract()? };
        // `str(dtype)`: `float32`, or `>f4` for another byte order.
        let base_name = base.str()?.to_string();
        if base_name != expected.dtype.numpy {
            return Ok(Some(format!(
                "field {index} `{name}` is {base_name}, where the record has {}",
                expected.dtype.numpy
            )));
        }
        if shape != expected.shape {
            return Ok(Some(format!(
                "field {index} `{name}` has shape {shape:?}, where the record has {:?}",
                expected.shape
            )));
        }
        if offset != expected.offset {
            return Ok(Some(format!(
                "field {index} `{name}` is at offset {offset}, where the record has it at {}",
                expected.offset
            )));
        }
    }
    if let Some(extra) = names.get(dtype.fields.len()) {
        return Ok(Some(format!("field {} `{extra}` is not in the record", dtype.fields.len())));
    }
    let itemsize: usize = descr.getattr(intern!(py, "itemsize"))?.extract()?;
    if itemsize != dtype.itemsize() {
        return Ok(Some(format!("itemsize is {itemsize} bytes, where the record has {}", dtype.itemsize())));
    }
    Ok(None)
}
