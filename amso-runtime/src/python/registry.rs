//! This module's registered classes: their type objects (checked by the C ABI's fast path
//! without locks) and the factories the DLPack exchange API uses to make arrays of a given
//! `(dtype, ndim)` without Python's help.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::RwLock;

use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{ffi, PyClassInitializer};

use super::array::MemArrayBase;
use super::Instantiation;
use crate::element::{DType, ElementOps};
use crate::error::Result;
use crate::memarray::core::ArrayCore;
use crate::memarray::{ArrayOptions, ForeignMemory};
use crate::object::ArrayType;

/// How to make arrays of one registered class.
pub(super) struct Registration {
    /// The element type's table.
    pub ops: &'static ElementOps,
    /// Number of dimensions.
    pub ndim: usize,
    /// A Python instance of the class holding `base`.
    pub instance: fn(Python<'_>, MemArrayBase) -> PyResult<Py<PyAny>>,
    /// The module that registered the class (where pickles find `_amso_rebuild`).
    pub module: &'static str,
    /// The class's type object (a class lives for the process once registered).
    pub type_object: usize,
    /// The class's Python name.
    pub name: &'static str,
}

const MAX_TYPES: usize = 1024;
static TYPES: [AtomicUsize; MAX_TYPES] = [const { AtomicUsize::new(0) }; MAX_TYPES];
static TYPE_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Registrations live for the process (a class, once registered, is never unloaded).
static REGISTRY: RwLock<Vec<&'static Registration>> = RwLock::new(Vec::new());

impl Registration {
    /// The element type.
    pub(super) fn dtype(&self) -> &'static DType {
        self.ops.dtype
    }

    /// A zero-filled array of this class's element type and rank.
    pub(super) fn create(&self, dims: &[i64], options: ArrayOptions) -> Result<ArrayCore> {
        ArrayCore::from_dims(dims, self.ndim, self.ops, options)
    }

    /// An array of this class's element type and rank over foreign memory.
    ///
    /// # Safety
    /// As `MemArray::from_foreign`, for this class's element type.
    pub(super) unsafe fn wrap(&self, dims: &[i64], memory: ForeignMemory, readonly: bool) -> Result<ArrayCore> {
        // SAFETY: forwarded from the caller.
        unsafe { ArrayCore::from_foreign(dims, self.ndim, self.ops, memory, readonly) }
    }
}

fn instance<C: Instantiation>(py: Python<'_>, base: MemArrayBase) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, PyClassInitializer::from(base).add_subclass(C::default()))?.into_any())
}

impl Registration {
    /// Class `C`'s entry; `register` fills in its module and Python name.
    pub(super) fn of<C: Instantiation>(py: Python<'_>) -> Registration {
        Registration {
            ops: C::Array::OPS,
            ndim: C::Array::NDIM,
            instance: instance::<C>,
            module: "",
            type_object: C::type_object_raw(py) as usize,
            name: "",
        }
    }
}

/// The class `registration` describes, as a Python object.
pub(super) fn class_object<'py>(py: Python<'py>, registration: &Registration) -> Bound<'py, PyType> {
    // SAFETY: the type object of a class that lives for the process (a borrowed pointer).
    unsafe { Bound::from_borrowed_ptr(py, registration.type_object as *mut ffi::PyObject).cast_into_unchecked() }
}

/// Record a class (called by `register`, once its module and name are filled in).
pub(super) fn add(registration: Registration) {
    let type_object = registration.type_object;
    if !is_known_type(type_object) {
        let slot = TYPE_COUNT.fetch_add(1, Ordering::AcqRel);
        if slot < MAX_TYPES {
            TYPES[slot].store(type_object, Ordering::Release);
        }
    }
    REGISTRY.write().unwrap_or_else(|e| e.into_inner()).push(Box::leak(Box::new(registration)));
}

/// `text` as a string that lives for the process (module and class names, one each).
pub(super) fn interned(text: &str) -> &'static str {
    static STRINGS: RwLock<Vec<&'static str>> = RwLock::new(Vec::new());
    if let Some(known) = STRINGS.read().unwrap_or_else(|e| e.into_inner()).iter().find(|s| **s == text) {
        return known;
    }
    let leaked: &'static str = Box::leak(text.to_owned().into_boxed_str());
    STRINGS.write().unwrap_or_else(|e| e.into_inner()).push(leaked);
    leaked
}

/// Whether `type_object` is one of this module's array classes (a few pointer compares).
pub(super) fn is_known_type(type_object: usize) -> bool {
    let count = TYPE_COUNT.load(Ordering::Acquire).min(MAX_TYPES);
    TYPES[..count].iter().any(|t| t.load(Ordering::Relaxed) == type_object)
}

/// The first registration `matches` accepts.
fn find_by(matches: impl Fn(&Registration) -> bool) -> Option<&'static Registration> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).iter().find(|r| matches(r)).copied()
}

/// The registered class for a DLPack dtype and ndim.
pub(super) fn find(code: u8, bits: u8, lanes: u16, ndim: usize) -> Option<&'static Registration> {
    find_by(|r| r.ndim == ndim && r.dtype().code == code && r.dtype().bits == bits && r.dtype().lanes == lanes)
}

/// The registration of exactly the class `type_object`.
pub(super) fn of_type(type_object: usize) -> Option<&'static Registration> {
    find_by(|r| r.type_object == type_object)
}

/// The registered class that `object`'s type is, or derives from (a Python subclass).
pub(super) fn of_object(object: &Bound<'_, PyAny>) -> Option<&'static Registration> {
    object.get_type().mro().iter().find_map(|class| of_type(class.as_ptr() as usize))
}

/// The registered class of Python name `class` holding `dtype` arrays with `ndim` dimensions.
pub(super) fn find_class_name(class: &str, dtype: &str, ndim: usize) -> Option<&'static Registration> {
    find_by(|r| r.ndim == ndim && r.dtype().name == dtype && r.name == class)
}

/// The registered class for a dtype name (`float32`) and ndim.
pub(super) fn find_name(name: &str, ndim: usize) -> Option<&'static Registration> {
    find_by(|r| r.ndim == ndim && r.dtype().name == name)
}

/// The one message for a `(dtype, ndim)` pair this module has no class for, wherever the
/// pair comes from (a constructor, DLPack, a pickle, a shared handle, the C exchange API):
/// what was asked, what is compiled, and advice that fits how amso was installed.
pub(super) fn uncompiled(dtype: &str, ndim: usize) -> String {
    let asked = format!("amso has no compiled array for dtype {dtype} with ndim {ndim}");
    let max = crate::MAX_NDIM;
    if ndim == 0 {
        return format!(
            "{asked}: amso arrays have 1 to {max} dimensions, and a scalar or 0-d array has none. \
             Pass np.atleast_1d(x) for a shape-(1,) array"
        );
    }
    if ndim > max {
        return format!("{asked}: amso arrays have 1 to {max} dimensions (amso.MAX_NDIM)");
    }
    let checkout = SOURCE_CHECKOUT.load(Ordering::Relaxed);
    let in_spec = crate::element::ALL.iter().any(|d| d.name == dtype);
    let registry = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let mut ndims: Vec<usize> = registry.iter().filter(|r| r.dtype().name == dtype).map(|r| r.ndim).collect();
    drop(registry);
    if ndims.is_empty() && !in_spec {
        let names: Vec<&str> = crate::element::ALL.iter().map(|d| d.name).collect();
        let spec = if checkout { ", or add it to the dtype table of specs/types.yaml" } else { "" };
        return format!(
            "{asked}: amso's dtypes are {}. An element type of your own is declared in an extension crate \
             with #[derive(amso_macros::Element)] and #[amso_array(YourType, NDIM)] (docs/rust.md){spec}",
            names.join(", ")
        );
    }
    ndims.sort_unstable();
    ndims.dedup();
    let compiled = match ndims.is_empty() {
        true => "none".to_owned(),
        false => ndims.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
    };
    let advice = match (in_spec, checkout) {
        (true, true) => {
            "To compile it, list it under `instantiations` in specs/types.yaml and run \
             `python3 scripts/amso.py bundled` (docs/python.md, \"Adding a pair\")"
        }
        (true, false) => {
            "amso's wheel compiles every dtype of its spec at ndim 1 to 8, so this module was built \
             from a spec of its own: add the pair to that spec's `instantiations` and rebuild it"
        }
        (false, _) => "Declare it in the extension crate that defines the type, with #[amso_array(YourType, NDIM)]",
    };
    format!("{asked}; this module compiles {dtype} with ndim {compiled}. {advice}")
}

/// Whether this module was built in, and runs from, a source checkout of amso (the bundled
/// package says so when it is imported from one); otherwise it came from a wheel or is another
/// extension crate.
static SOURCE_CHECKOUT: AtomicBool = AtomicBool::new(false);

/// Note whether the module runs from a source checkout (for `uncompiled`'s advice).
pub(super) fn set_source_checkout(checkout: bool) {
    SOURCE_CHECKOUT.store(checkout, Ordering::Relaxed);
}
