//! The base of every amso class: the type-erased class itself (`array`), the registry of
//! compiled (dtype, ndim) classes, the C-readable header inside each object, recognition of
//! amso arrays of any runtime copy, conversions between Python and Rust values,
//! the one mapping of amso's errors onto Python's, and dropping values attached to
//! the interpreter (`drop_attached`).

pub(crate) mod array;
pub(crate) mod convert;
pub(crate) mod error;
pub(crate) mod header;
pub(crate) mod recognize;
pub(crate) mod registry;

use pyo3::Python;

/// Drop `value` attached to the interpreter, so that the Python references it holds are
/// released now rather than at PyO3's next call. At interpreter exit, where PyO3 can no longer
/// attach (a capsule's destructor run by `Py_FinalizeEx`), `value` is leaked deliberately and
/// quietly, as NumPy leaks what it still holds at finalization.
pub(crate) fn drop_attached<T>(value: T) {
    let mut value = std::mem::ManuallyDrop::new(value);
    // SAFETY: dropped at most once, inside the closure; when it does not run, never.
    let _ = Python::try_attach(|_| unsafe { std::mem::ManuallyDrop::drop(&mut value) });
}
