//! amso's code generator: parse and validate `specs/types.yaml`, then build the Rust tokens
//! (Element impls, PyO3 classes, dispatch registration) and the files under `generated/`.
//!
//! This is a plain library so that it is unit-tested without a compiler in the loop; the
//! proc-macro crate `amso-macros` and the runtime's build script are thin callers of it.

pub mod cuda_header;
pub mod dtype;
pub mod expand;
pub mod spec;
pub mod write;

pub use dtype::{DType, TypeCode};
pub use spec::{Instantiation, Spec, SpecError};

/// The largest `ndim` amso compiles; matches `amso_runtime::MAX_NDIM`.
pub const MAX_NDIM: u8 = 8;

/// Text of the spec bundled with this crate (`specs/types.yaml` of the workspace).
pub const BUNDLED_SPEC: &str = include_str!("../../specs/types.yaml");

/// Path of the bundled spec, as named in error messages.
pub const BUNDLED_SPEC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../specs/types.yaml");

/// Parse and validate the bundled spec.
pub fn bundled_spec() -> Result<Spec, SpecError> {
    Spec::parse(BUNDLED_SPEC, "specs/types.yaml")
}
