//! `#[amso_array(f32, 3)]` on a user's unit struct: the struct becomes the instantiation's
//! Python class, and a `<Name>Array` alias names the typed Rust array.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::parse::{Parse, ParseStream};
use syn::{Fields, ItemStruct, LitInt, Token, Type};

use crate::expand::pyclass::{instantiation_class, ClassNames, ElementType};
use crate::{Spec, MAX_NDIM};

/// The attribute's arguments: an element type and an ndim literal.
pub struct ArrayArgs {
    /// Element type as written: a spec dtype name (`float32`), its Rust type (`f32`), or a
    /// user's own element type (`E5M2`).
    pub dtype: Type,
    /// The ndim literal.
    pub ndim: LitInt,
}

impl Parse for ArrayArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let dtype: Type = input.parse()?;
        input.parse::<Token![,]>()?;
        let ndim: LitInt = input.parse()?;
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
        }
        if !input.is_empty() {
            return Err(input.error("expected `#[amso_array(DTYPE, NDIM)]`, e.g. `#[amso_array(f32, 3)]`"));
        }
        Ok(ArrayArgs { dtype, ndim })
    }
}

/// Expand `#[amso_array(args)] item` against `spec` (read from `spec_path`).
pub fn amso_array(args: TokenStream, item: TokenStream, spec: &Spec, spec_path: &str) -> syn::Result<TokenStream> {
    let args: ArrayArgs = syn::parse2(args)?;
    let item: ItemStruct = syn::parse2(item)
        .map_err(|e| syn::Error::new(e.span(), "#[amso_array] goes on a unit struct, e.g. `pub struct Density;`"))?;
    let mut errors: Vec<syn::Error> = Vec::new();

    let written = args.dtype_string();
    // A spec dtype by name or Rust type; else a user's own element type (`#[derive(Element)]`),
    // unless it is written as a lowercase word, the way only spec names are.
    let element = match spec.dtype_by_name_or_rust(&written) {
        Some(dtype) => Some(ElementType::of(dtype)),
        None if written.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') => {
            errors.push(syn::Error::new_spanned(
                &args.dtype,
                format!(
                    "unknown amso dtype `{written}`; known dtypes (name or Rust type): {}. Add it to the dtype table \
                     of {spec_path}, or declare a type of your own with #[derive(amso_macros::Element)]",
                    spec.dtypes.iter().map(|d| format!("{} ({})", d.name, d.rust)).collect::<Vec<_>>().join(", ")
                ),
            ));
            None
        }
        None => Some(ElementType { ty: args.dtype.clone(), shown: written.clone() }),
    };
    let ndim = match args.ndim.base10_parse::<u8>() {
        Ok(n) if (1..=MAX_NDIM).contains(&n) => Some(n),
        _ => {
            errors.push(syn::Error::new_spanned(
                &args.ndim,
                format!("ndim must be an integer in 1..={MAX_NDIM}, got `{}`", args.ndim),
            ));
            None
        }
    };
    if !matches!(item.fields, Fields::Unit) || !item.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &item.ident,
            "#[amso_array] goes on a unit struct without generics, e.g. `pub struct Density;`",
        ));
    }
    if let Some(combined) = errors.into_iter().reduce(|mut acc, e| {
        acc.combine(e);
        acc
    }) {
        return Err(combined);
    }
    let (element, ndim) = (element.expect("checked"), ndim.expect("checked"));

    let ident = &item.ident;
    let python_name = ident.to_string();
    let names = ClassNames { ident, vis: &item.vis, attrs: &item.attrs, python_name: &python_name, module: None };
    let class = instantiation_class(&element, ndim, &names);
    let alias = format_ident!("{}Array", ident);
    let vis = &item.vis;
    let ty = &element.ty;
    let ndim = ndim as usize;
    let alias_doc = format!("The typed Rust array behind the Python class `{python_name}`.");
    Ok(quote! {
        #class
        #[doc = #alias_doc]
        #vis type #alias = ::amso_runtime::MemArray<#ty, #ndim>;
    })
}

impl ArrayArgs {
    /// The element type as written, without spaces: `f32`, `half::f16`.
    pub fn dtype_string(&self) -> String {
        let ty = &self.dtype;
        quote!(#ty).to_string().chars().filter(|c| !c.is_whitespace()).collect()
    }
}
