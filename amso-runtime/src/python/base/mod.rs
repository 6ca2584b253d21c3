//! The base of every amso class: the type-erased class itself (`array`), the registry of
//! compiled (dtype, ndim) classes, the C-readable header inside each object, recognition of
//! amso arrays of any runtime copy, conversions between Python and Rust values, the identity
//! caches, and the one mapping of amso's errors onto Python's.

pub(crate) mod array;
pub(crate) mod convert;
pub(crate) mod error;
pub(crate) mod header;
pub(crate) mod identity_cache;
pub(crate) mod recognize;
pub(crate) mod registry;
