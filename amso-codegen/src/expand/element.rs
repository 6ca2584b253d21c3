//! `#[derive(Element)]`: a user crate's own element type, declared with the fields of a spec
//! row and expanded by the same builder as the spec's table (`traits::element_impl`).
//!
//! ```text
//! #[derive(Clone, Copy, Debug, Default, Element)]
//! #[repr(transparent)]
//! #[amso(name = "float8_e5m2", code = kDLFloat8_e5m2, bits = 8, numpy_module = "ml_dtypes", scalar = f32)]
//! pub struct E5M2(u8);
//! ```
//!
//! The type must be `#[repr(transparent)]` over one field whose every bit pattern is a value
//! (integers, floats, complex numbers or arrays of them: the runtime's `PlainBits`), so that
//! the derived `unsafe impl` is sound; `scalar` names the element type its values convert
//! through (`From` both ways). Each mistake is a compile error at the attribute it is about.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Expr, ExprLit, Fields, Lit, Meta, Token};

use super::traits::{element_impl, Conversion};
use crate::dtype::{check_dtype_name, DType, TypeCode};

/// The keys `#[amso(...)]` takes.
const KEYS: &str = "name, code, bits, lanes, numpy, numpy_module, c, scalar";

/// Expand `#[derive(Element)]` on `input`.
pub fn derive_element(input: TokenStream) -> syn::Result<TokenStream> {
    let input: DeriveInput = syn::parse2(input)?;
    // A `#[repr(C)]` struct of named fields is a record (`record.rs`).
    if super::record::is_record(&input) {
        return super::record::derive_record(&input);
    }
    let mut errors = Errors::default();
    let field = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(f) if f.named.len() == 1 => Some(f.named[0].ty.clone()),
            Fields::Unnamed(f) if f.unnamed.len() == 1 => Some(f.unnamed[0].ty.clone()),
            fields => {
                errors.push(fields.span(), "#[derive(Element)] needs exactly one field, e.g. `pub struct E5M2(u8);`");
                None
            }
        },
        _ => {
            errors.push(
                input.ident.span(),
                "#[derive(Element)] goes on a struct with one field, e.g. `pub struct E5M2(u8);`",
            );
            None
        }
    };
    if !input.generics.params.is_empty() {
        errors.push(input.generics.span(), "#[derive(Element)] types have no generic parameters");
    }
    let transparent = input.attrs.iter().any(|attr| {
        attr.path().is_ident("repr") && attr.parse_args::<syn::Ident>().is_ok_and(|repr| repr == "transparent")
    });
    if !transparent {
        errors.push(
            input.ident.span(),
            "#[derive(Element)] needs #[repr(transparent)]: the element's layout is its field's, which DLPack shares",
        );
    }
    let declared = declaration(&input, &mut errors);
    errors.finish()?;
    let (field, Declared { dtype, scalar, bits_span }) = (field.expect("checked"), declared.expect("checked"));

    let ident = &input.ident;
    let ty: syn::Type = syn::parse_quote!(#ident);
    let krate = quote!(::amso_runtime);
    let implementation = element_impl(&dtype, &ty, &krate, &Conversion::Via(Box::new(scalar)), false, bits_span);
    let plain = quote_spanned! {field.span()=>
        const _: fn() = || {
            fn plain_bits<T: ::amso_runtime::__private::PlainBits>() {}
            plain_bits::<#field>();
        };
    };
    Ok(quote! {
        #plain
        // SAFETY: `#[repr(transparent)]` over one field whose every bit pattern is a value
        // (`PlainBits`, checked above), with the size the facts state (checked below).
        #implementation
    })
}

/// What `#[amso(...)]` declares.
struct Declared {
    dtype: DType,
    scalar: syn::Type,
    bits_span: Span,
}

/// Read `#[amso(...)]`, recording every mistake; `None` when any was found.
fn declaration(input: &DeriveInput, errors: &mut Errors) -> Option<Declared> {
    let Some(attr) = input.attrs.iter().find(|attr| attr.path().is_ident("amso")) else {
        errors.push(
            input.ident.span(),
            format!("#[derive(Element)] needs #[amso(...)] with the dtype's facts ({KEYS}), e.g. `#[amso(name = \"float8_e5m2\", code = kDLFloat8_e5m2, bits = 8, numpy_module = \"ml_dtypes\", scalar = f32)]`"),
        );
        return None;
    };
    let items = match attr.parse_args_with(syn::punctuated::Punctuated::<Meta, Token![,]>::parse_terminated) {
        Ok(items) => items,
        Err(e) => {
            errors.push(e.span(), format!("#[amso(...)] is a list of `key = value` ({KEYS}): {e}"));
            return None;
        }
    };
    let (mut name, mut code, mut bits, mut lanes) = (None, None, None, None::<(u16, Span)>);
    let (mut numpy, mut numpy_module, mut c, mut scalar) = (None, None, None, None);
    let mut seen = Vec::new();
    for item in items {
        let Meta::NameValue(pair) = &item else {
            errors.push(item.span(), format!("expected `key = value` ({KEYS})"));
            continue;
        };
        let key = pair.path.get_ident().map(ToString::to_string).unwrap_or_default();
        let value = &pair.value;
        seen.push(key.clone());
        match key.as_str() {
            "name" => name = string(value, errors),
            "numpy" => numpy = string(value, errors),
            "numpy_module" => numpy_module = string(value, errors),
            "c" => c = string(value, errors),
            "code" => {
                let written = match value {
                    Expr::Path(path) => path.path.get_ident().map(ToString::to_string),
                    Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Some(s.value()),
                    _ => None,
                };
                match written.as_deref().and_then(TypeCode::from_dlpack_name) {
                    Some(found) => code = Some(found),
                    None => errors.push(
                        value.span(),
                        format!(
                            "`code` is a DLPack type code: one of {}",
                            TypeCode::dlpack_names().collect::<Vec<_>>().join(", ")
                        ),
                    ),
                }
            }
            "bits" => bits = integer::<u8>(value, errors).map(|b| (b, value.span())),
            "lanes" => lanes = integer::<u16>(value, errors).map(|l| (l, value.span())),
            "scalar" => match syn::parse2::<syn::Type>(quote!(#value)) {
                Ok(ty) => scalar = Some(ty),
                Err(_) => errors.push(value.span(), "`scalar` is an element type values convert through, e.g. `f32`"),
            },
            _ => errors.push(pair.path.span(), format!("unknown key `{key}`; #[amso(...)] takes {KEYS}")),
        }
    }
    let missing: Vec<&str> =
        ["name", "code", "bits", "scalar"].into_iter().filter(|key| !seen.iter().any(|s| s == key)).collect();
    if !missing.is_empty() {
        errors.push(attr.span(), format!("#[amso(...)] misses {}", missing.join(", ")));
    }
    let (Some((name, name_span)), Some(code), Some((bits, bits_span)), Some(scalar)) = (name, code, bits, scalar)
    else {
        return None;
    };
    if let Err(message) = check_dtype_name(&name) {
        errors.push(name_span, message);
    }
    let (lanes, lanes_span) = lanes.unwrap_or((1, bits_span));
    if let Err(message) = code.check_bits(bits.into()) {
        errors.push(bits_span, message);
    } else if let Err(message) = code.check_lanes(bits, lanes.into()) {
        errors.push(lanes_span, message);
    }
    let dtype = DType {
        numpy: numpy.map_or_else(|| name.clone(), |(numpy, _)| numpy),
        name,
        rust: input.ident.to_string(),
        code,
        bits,
        lanes,
        numpy_module: numpy_module.map(|(module, _)| module),
        c: c.map_or_else(|| DType::c_storage((bits as usize * lanes as usize).div_ceil(8)).to_owned(), |(c, _)| c),
    };
    errors.is_empty().then_some(Declared { dtype, scalar, bits_span })
}

fn string(value: &Expr, errors: &mut Errors) -> Option<(String, Span)> {
    match value {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Some((s.value(), s.span())),
        _ => {
            errors.push(value.span(), "expected a string literal");
            None
        }
    }
}

fn integer<N: std::str::FromStr>(value: &Expr, errors: &mut Errors) -> Option<N>
where
    N::Err: std::fmt::Display,
{
    match value {
        Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => match i.base10_parse::<N>() {
            Ok(n) => Some(n),
            Err(e) => {
                errors.push(i.span(), e.to_string());
                None
            }
        },
        _ => {
            errors.push(value.span(), "expected an integer literal");
            None
        }
    }
}

/// Every mistake found, combined into one error.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        let error = syn::Error::new(span, message);
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
