//! This module's registered classes: their type objects (checked by the C ABI's fast path
//! without locks) and the factories the DLPack exchange API uses to make arrays of a given
//! `(dtype, ndim)` without Python's help.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::RwLock;

use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{ffi, PyClass, PyClassInitializer, PyTypeInfo};

use crate::element::{DType, ElementOps};
use crate::error::Result;
use crate::memarray::core::ArrayCore;
use crate::memarray::{ArrayOptions, ForeignMemory};
use crate::object::ArrayType;
use crate::python::base::array::MemArrayBase;

/// What a generated class says about itself: the typed array it holds. `#[amso_array]`
/// implements it; `register` takes any class that does.
pub trait Instantiation: PyClass<BaseType = MemArrayBase> + PyTypeInfo + Default {
    /// The typed array, e.g. `MemArray<f32, 3>`.
    type Array: ArrayType;
}

/// How to make arrays of one registered class.
pub(in crate::python) struct Registration {
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
    pub(in crate::python) fn dtype(&self) -> &'static DType {
        self.ops.dtype
    }

    /// A zero-filled array of this class's element type and rank.
    pub(in crate::python) fn create(&self, dims: &[i64], options: ArrayOptions) -> Result<ArrayCore> {
        ArrayCore::from_dims(dims, self.ndim, self.ops, options)
    }

    /// An array of this class's element type and rank over foreign memory.
    ///
    /// # Safety
    /// As `MemArray::from_foreign`, for this class's element type.
    pub(in crate::python) unsafe fn wrap(
        &self,
        dims: &[i64],
        memory: ForeignMemory,
        readonly: bool,
    ) -> Result<ArrayCore> {
        // SAFETY: forwarded from the caller.
        unsafe { ArrayCore::from_foreign(dims, self.ndim, self.ops, memory, readonly) }
    }
}

fn instance<C: Instantiation>(py: Python<'_>, base: MemArrayBase) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, PyClassInitializer::from(base).add_subclass(C::default()))?.into_any())
}

impl Registration {
    /// Class `C`'s entry; `register` fills in its module and Python name.
    pub(in crate::python) fn of<C: Instantiation>(py: Python<'_>) -> Registration {
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
pub(in crate::python) fn class_object<'py>(py: Python<'py>, registration: &Registration) -> Bound<'py, PyType> {
    // SAFETY: the type object of a class that lives for the process (a borrowed pointer).
    unsafe { Bound::from_borrowed_ptr(py, registration.type_object as *mut ffi::PyObject).cast_into_unchecked() }
}

/// Record a class (called by `register`, once its module and name are filled in).
pub(in crate::python) fn add(registration: Registration) {
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
pub(in crate::python) fn interned(text: &str) -> &'static str {
    static STRINGS: RwLock<Vec<&'static str>> = RwLock::new(Vec::new());
    if let Some(known) = STRINGS.read().unwrap_or_else(|e| e.into_inner()).iter().find(|s| **s == text) {
        return known;
    }
    let leaked: &'static str = Box::leak(text.to_owned().into_boxed_str());
    STRINGS.write().unwrap_or_else(|e| e.into_inner()).push(leaked);
    leaked
}

/// Whether `type_object` is one of this module's array classes (a few pointer compares).
pub(in crate::python) fn is_known_type(type_object: usize) -> bool {
    let count = TYPE_COUNT.load(Ordering::Acquire).min(MAX_TYPES);
    TYPES[..count].iter().any(|t| t.load(Ordering::Relaxed) == type_object)
}

/// The first registration `matches` accepts.
fn find_by(matches: impl Fn(&Registration) -> bool) -> Option<&'static Registration> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).iter().find(|r| matches(r)).copied()
}

/// The registered class for a DLPack dtype and ndim.
pub(in crate::python) fn find(code: u8, bits: u8, lanes: u16, ndim: usize) -> Option<&'static Registration> {
    find_by(|r| r.ndim == ndim && r.dtype().code == code && r.dtype().bits == bits && r.dtype().lanes == lanes)
}

/// The registered record classes with `ndim` dimensions, those of DLPack sizing `dtype` (records
/// of one size) first.
pub(in crate::python) fn records(dtype: (u8, u8, u16), ndim: usize) -> Vec<&'static Registration> {
    let registry = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let mut found: Vec<_> = registry.iter().filter(|r| r.ndim == ndim && r.dtype().is_record()).copied().collect();
    found.sort_by_key(|r| r.dtype().dlpack() != dtype);
    found
}

/// The registration of exactly the class `type_object`.
pub(in crate::python) fn of_type(type_object: usize) -> Option<&'static Registration> {
    find_by(|r| r.type_object == type_object)
}

/// The registered class that `object`'s type is, or derives from (a Python subclass).
pub(in crate::python) fn of_object(object: &Bound<'_, PyAny>) -> Option<&'static Registration> {
    object.get_type().mro().iter().find_map(|class| of_type(class.as_ptr() as usize))
}

/// The registered class of Python name `class` holding `dtype` arrays with `ndim` dimensions.
pub(in crate::python) fn find_class_name(class: &str, dtype: &str, ndim: usize) -> Option<&'static Registration> {
    find_by(|r| r.ndim == ndim && r.dtype().name == dtype && r.name == class)
}

/// The registered class for a dtype name (`float32`) and ndim.
pub(in crate::python) fn find_name(name: &str, ndim: usize) -> Option<&'static Registration> {
    find_by(|r| r.ndim == ndim && r.dtype().name == name)
}

/// The one message for a `(dtype, ndim)` pair this module has no class for, wherever the
/// pair comes from (a constructor, DLPack, a pickle, a shared handle, the C exchange API):
/// what was asked, what is compiled, and advice that fits how amso was installed.
pub(in crate::python) fn uncompiled(dtype: &str, ndim: usize) -> String {
    let registry = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let compiled: Vec<usize> = registry.iter().filter(|r| r.dtype().name == dtype).map(|r| r.ndim).collect();
    let compound = registry.iter().any(|r| r.dtype().name == dtype && r.dtype().is_compound());
    drop(registry);
    let install = match (BUNDLED.load(Ordering::Relaxed), SOURCE_CHECKOUT.load(Ordering::Relaxed)) {
        (false, _) => Install::ExtensionCrate,
        (true, false) => Install::Wheel,
        (true, true) => Install::Checkout,
    };
    let spec: Vec<&str> = crate::element::ALL.iter().map(|d| d.name).collect();
    uncompiled_message(dtype, ndim, compiled, &spec, if compound { Install::WheelCompound } else { install })
}

/// Where the module that could not make an array came from.
#[derive(Clone, Copy, Debug)]
enum Install {
    /// The bundled `amso` package, from a wheel (or an sdist).
    Wheel,
    /// The bundled package, imported from a source checkout.
    Checkout,
    /// Another extension crate's module (`#[amso_array]` classes).
    ExtensionCrate,
    /// A record or vector dtype of the bundled package (compiled at the ranks its spec lists).
    WheelCompound,
}

/// `uncompiled`'s text, from what the module compiles (`compiled`: the ndims of `dtype`) and
/// the spec's dtype names.
fn uncompiled_message(dtype: &str, ndim: usize, mut compiled: Vec<usize>, spec: &[&str], install: Install) -> String {
    let asked = format!("amso has no compiled array for dtype {dtype} with ndim {ndim}");
    let max = crate::shape::MAX_NDIM;
    if ndim == 0 {
        return format!(
            "{asked}: amso arrays have 1 to {max} dimensions, and a scalar or 0-d array has none. \
             Pass np.atleast_1d(x) for a shape-(1,) array"
        );
    }
    if ndim > max {
        return format!("{asked}: amso arrays have 1 to {max} dimensions (amso.MAX_NDIM)");
    }
    let in_spec = spec.contains(&dtype);
    if compiled.is_empty() && !in_spec {
        let table = match install {
            Install::Checkout => ", or add it to the dtype table of specs/types.yaml",
            _ => "",
        };
        return format!(
            "{asked}: amso's dtypes are {}. An element type of your own is declared in an extension crate \
             with #[derive(amso_macros::Element)] and #[amso_array(YourType, NDIM)] (docs/rust.md){table}",
            spec.join(", ")
        );
    }
    compiled.sort_unstable();
    compiled.dedup();
    let compiled = match compiled.is_empty() {
        true => format!("this module compiles no {dtype} array"),
        false => {
            let ndims: Vec<String> = compiled.iter().map(usize::to_string).collect();
            format!("this module compiles {dtype} with ndim {}", ndims.join(", "))
        }
    };
    let advice = match install {
        Install::Checkout => {
            "To compile it, list it under `instantiations` in specs/types.yaml and run \
             `python3 scripts/amso.py bundled` (docs/python.md, \"Adding a pair\")"
        }
        Install::Wheel => {
            "amso's published wheel compiles every dtype of its spec at ndim 1 to 8; this build was \
             made from a spec without the pair: install amso from its wheel, or add the pair to that \
             spec's `instantiations` and rebuild"
        }
        Install::ExtensionCrate => {
            "Declare it in this extension crate with #[amso_array(YourType, NDIM)] (docs/rust.md)"
        }
        Install::WheelCompound => {
            "Make the 1-D array of all the elements and take NumPy's view of the shape you need \
             (np.asarray(a).reshape(...), the same memory; a vector's view has its lanes as a last \
             axis), or build amso from a source checkout with the pair listed under `instantiations` \
             in specs/types.yaml (docs/python.md, \"Adding a pair\")"
        }
    };
    format!("{asked}; {compiled}. {advice}")
}

/// Whether this runtime copy serves the bundled `amso` package (its module init says so); the
/// copies linked into other extension crates serve their `#[amso_array]` classes.
static BUNDLED: AtomicBool = AtomicBool::new(false);

/// Note that this runtime copy serves the bundled package (for `uncompiled`'s advice).
pub(in crate::python) fn set_bundled() {
    BUNDLED.store(true, Ordering::Relaxed);
}

/// Whether the bundled package was imported from a source checkout (it says so when imported).
static SOURCE_CHECKOUT: AtomicBool = AtomicBool::new(false);

/// Note whether the module runs from a source checkout (for `uncompiled`'s advice).
pub(in crate::python) fn set_source_checkout(checkout: bool) {
    SOURCE_CHECKOUT.store(checkout, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use crate::python::base::registry::{uncompiled_message, Install};

    const SPEC: &[&str] = &["bool", "float32", "int16"];

    #[test]
    fn every_install_gets_advice_it_can_follow() {
        let message =
            |ndim, compiled: &[usize], install| uncompiled_message("float32", ndim, compiled.to_vec(), SPEC, install);
        let checkout = message(3, &[2, 1, 2], Install::Checkout);
        assert!(checkout.starts_with(
            "amso has no compiled array for dtype float32 with ndim 3; this module compiles float32 with ndim 1, 2."
        ));
        assert!(checkout.contains("specs/types.yaml and run `python3 scripts/amso.py bundled`"));
        let wheel = message(3, &[1], Install::Wheel);
        assert!(wheel.contains("install amso from its wheel") && !wheel.contains("scripts/amso.py"));
        let crate_ = message(3, &[1], Install::ExtensionCrate);
        assert!(
            crate_.ends_with("Declare it in this extension crate with #[amso_array(YourType, NDIM)] (docs/rust.md)")
        );
        assert!(message(4, &[], Install::ExtensionCrate).contains("this module compiles no float32 array"));
    }

    #[test]
    fn ranks_outside_one_to_eight_and_unknown_dtypes_say_what_amso_has() {
        for install in [Install::Checkout, Install::Wheel, Install::ExtensionCrate] {
            assert!(uncompiled_message("float32", 0, vec![1], SPEC, install).contains("np.atleast_1d(x)"));
            assert!(
                uncompiled_message("float32", 9, vec![1], SPEC, install).ends_with("1 to 8 dimensions (amso.MAX_NDIM)")
            );
            let unknown = uncompiled_message("object", 1, vec![], SPEC, install);
            assert!(unknown.contains("amso's dtypes are bool, float32, int16."), "{unknown}");
            assert_eq!(unknown.contains("specs/types.yaml"), matches!(install, Install::Checkout));
        }
        // A type of a crate's own, compiled at other ranks: the crate's advice.
        let own = uncompiled_message("e5m2", 2, vec![1], SPEC, Install::ExtensionCrate);
        assert!(own.contains("this module compiles e5m2 with ndim 1. Declare it in this extension crate"));
    }
}
