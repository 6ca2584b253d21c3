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
/// or Rust type from the dtype table of `specs/types.yaml`, or a type of your own with
/// `#[derive(Element)]`; ndim is `1..=8`.
#[proc_macro_attribute]
pub fn amso_array(args: TokenStream, item: TokenStream) -> TokenStream {
    let expanded = amso_codegen::bundled_spec()
        .map_err(|e| spec_error(&e))
        .and_then(|spec| amso_codegen::expand::array::amso_array(args.into(), item.into(), &spec, &spec_path()));
    expanded.unwrap_or_else(syn::Error::into_compile_error).into()
}

/// `#[derive(Element)]`: a type of your own as an amso element type, usable in `#[amso_array]`,
/// typed arguments and kernels like the spec's dtypes. The type is `#[repr(transparent)]` over
/// one field of plain numbers (integers, floats, complex numbers, or arrays of them), and
/// `#[amso(...)]` states its facts as a row of `specs/types.yaml` does:
///
/// ```
/// use amso_macros::Element;
///
/// /// A length in metres: float64 to every framework, a type of its own in Rust.
/// #[derive(Clone, Copy, Debug, Default, PartialEq, Element)]
/// #[repr(transparent)]
/// #[amso(name = "metres", code = kDLFloat, bits = 64, numpy = "float64", scalar = f64)]
/// pub struct Metres(pub f64);
///
/// // Values reach Python (and come back) through `scalar`.
/// impl From<Metres> for f64 {
///     fn from(length: Metres) -> f64 {
///         length.0
///     }
/// }
/// impl From<f64> for Metres {
///     fn from(value: f64) -> Metres {
///         Metres(value)
///     }
/// }
///
/// let lengths = amso_runtime::MemArray::<Metres, 1>::from_slice([2], &[Metres(1.5), Metres(2.0)])?;
/// assert_eq!(lengths.get([1])?, Metres(2.0));
/// assert_eq!(<Metres as amso_runtime::ArrayElement>::DTYPE.dlpack(), (2, 64, 1));
/// # Ok::<(), amso_runtime::Error>(())
/// ```
///
/// A dtype amso lacks is declared the same way: `#[amso(name = "float8_e5m2", code =
/// kDLFloat8_e5m2, bits = 8, numpy_module = "ml_dtypes", scalar = f32)] pub struct E5M2(u8);`.
///
/// Keys: `name` (the dtype's name, lowercase), `code` (a DLPack type code, `kDLFloat8_e5m2`),
/// `bits` and `lanes` (default 1) per element, `numpy` (the NumPy dtype's name, default
/// `name`), `numpy_module` (the package that defines it, when NumPy does not), `c` (its C type,
/// default an unsigned integer of its size) and `scalar` (the element type values convert
/// through, with `From` both ways). Each mistake is a compile error at the key it is about.
///
/// The orphan rule: a crate implements amso's `Element` only for types of its own. To use a
/// type from another crate (`float8::F8E5M2`), wrap it in a `#[repr(transparent)]` newtype; a
/// field that is not plain numbers needs a hand-written `unsafe impl amso_runtime::Element`
/// with the trait's safety contract instead of the derive.
#[proc_macro_derive(Element, attributes(amso))]
pub fn derive_element(input: TokenStream) -> TokenStream {
    amso_codegen::expand::element::derive_element(input.into()).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// `#[op(outputs(y = like(x)), platforms(cpu, cuda))]` on a function over
/// `amso_runtime::op::Buffer`s (read), `BufferMut`s (written), scalar attributes (`f64`, `f32`,
/// `i64`, `i32`, `bool`) and a `Stream`: the same function as an eager `#[pyfunction]`, an XLA
/// FFI handler for `jax.jit` (`amso.ops.jax`) and a `torch.library` op for `torch.compile`
/// (`amso.ops.torch`). It adds `mod <function> { pub static OP }`; register it with
/// `amso_runtime::op::add(module, &<function>::OP)`. Each output's shape rule is `like(input)`
/// or a list of dimensions (an integer, an integer attribute, `input[axis]`); `platforms`
/// defaults to both. docs/ops.md.
#[proc_macro_attribute]
pub fn op(args: TokenStream, item: TokenStream) -> TokenStream {
    amso_codegen::expand::op::op(args.into(), item.into()).unwrap_or_else(syn::Error::into_compile_error).into()
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
