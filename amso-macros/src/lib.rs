//! amso's procedural macros. This crate holds nothing but the entry points: each parses its
//! input and calls one builder of `amso-codegen`, where all logic and its tests live.
//!
//! An extension module with an array type of its own:
//!
//! ```
//! use amso_macros::amso_array;
//! use pyo3::prelude::*;
//!
//! /// Particle positions: one row of x, y, z per particle.
//! #[amso_array(f32, 2)]
//! pub struct Positions;
//!
//! #[pymodule]
//! fn my_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
//!     amso_runtime::python::register::<Positions>(m)
//! }
//!
//! // The Rust side of the same type: `PositionsArray` is `MemArray<f32, 2>`.
//! let mut positions = PositionsArray::new([100, 3])?;
//! positions.write([0, 2], 1.5)?;
//! assert_eq!(positions.get([0, 2])?, 1.5);
//! # Ok::<(), amso_runtime::Error>(())
//! ```

use proc_macro::TokenStream;

/// `#[amso_array(f32, 3)] pub struct Density;` makes `Density` the Python class of
/// `MemArray<f32, 3>` (register it with `amso_runtime::python::register::<Density>(module)`)
/// and adds the alias `DensityArray = amso_runtime::MemArray<f32, 3>`. The dtype is a name
/// or Rust type from the dtype table of `specs/types.yaml`; ndim is `1..=8`.
#[proc_macro_attribute]
pub fn amso_array(args: TokenStream, item: TokenStream) -> TokenStream {
    let expanded = amso_codegen::bundled_spec()
        .map_err(|e| spec_error(&e))
        .and_then(|spec| amso_codegen::expand::array::amso_array(args.into(), item.into(), &spec, &spec_path()));
    expanded.unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Every instantiation of `specs/types.yaml` as a Python class of module `amso._amso`, plus
/// `pub fn register_classes(module)`; used by the bundled extension.
#[proc_macro]
pub fn amso_spec_classes(input: TokenStream) -> TokenStream {
    let expanded = match syn::parse::<syn::parse::Nothing>(input) {
        Err(e) => Err(e),
        Ok(_) => amso_codegen::bundled_spec()
            .map(|spec| amso_codegen::expand::dispatch::spec_classes(&spec, "amso._amso"))
            .map_err(|e| spec_error(&e)),
    };
    expanded.unwrap_or_else(syn::Error::into_compile_error).into()
}

/// The bundled spec's path as users read it (without `..`).
fn spec_path() -> String {
    let path = std::path::Path::new(amso_codegen::BUNDLED_SPEC_PATH);
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf()).display().to_string()
}

fn spec_error(error: &amso_codegen::SpecError) -> syn::Error {
    syn::Error::new(proc_macro2::Span::call_site(), format!("invalid amso spec:\n{error}"))
}
