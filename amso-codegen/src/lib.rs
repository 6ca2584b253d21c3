//! amso's code generator: parse and validate `specs/types.yaml`, then build the Rust tokens
//! (Element impls, PyO3 classes, dispatch registration) and the files under `generated/`.
//!
//! This is a plain library so that it is unit-tested without a compiler in the loop; the
//! proc-macro crate `amso-macros` and the runtime's build script are thin callers of it.

pub mod cuda_header;
pub mod dtype;
pub mod expand;
pub mod record;
pub mod spec;
pub(crate) mod stubs;
pub mod write;

pub use dtype::{DType, TypeCode};
pub use record::{Record, RecordField};
pub use spec::{Instantiation, Spec, SpecError};

/// The largest `ndim` amso compiles; matches `amso_runtime::MAX_NDIM`.
pub const MAX_NDIM: u8 = 8;

/// Text of the spec bundled with this crate: `bundled/types.yaml`, a verbatim copy of the
/// workspace's `specs/types.yaml` (the one file people edit) that `amso-generate` writes and
/// `amso-generate --check` keeps current, so that the packaged crate carries its spec.
pub const BUNDLED_SPEC: &str = include_str!("../bundled/types.yaml");

/// Path of the bundled copy (for build scripts' `rerun-if-changed`).
pub const BUNDLED_SPEC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bundled/types.yaml");

/// Where the bundled copy lives in the workspace, relative to its root (written by
/// `amso-generate` from the spec it reads).
pub const BUNDLED_SPEC_COPY: &str = "amso-codegen/bundled/types.yaml";

/// Parse and validate the bundled spec.
pub fn bundled_spec() -> Result<Spec, SpecError> {
    Spec::parse(BUNDLED_SPEC, "specs/types.yaml")
}
