//! Records in Rust: the `#[repr(C)]` struct of each record of the spec, written into the
//! runtime's `records` module by its build script, and `#[derive(Element)]` on a user's
//! `#[repr(C)]` struct of named fields. Both describe a record the one way the runtime reads it:
//! code kDLOpaqueHandle, 8 bits x (size) lanes, NumPy kind `record`, typestr `|V<size>`, and one
//! `Field` per field in declaration order with its C offset (padding is in the size, not in the
//! fields).
//!
//! ```text
//! #[derive(Clone, Copy, Debug, Default, Element)]
//! #[repr(C)]
//! #[amso(name = "particle")]         // optional: the struct's name in snake_case otherwise
//! pub struct Particle { pos: [f32; 3], vel: [f32; 3], mass: f64, id: i64 }
//! ```

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Expr, ExprLit, Fields, Lit, Meta, Token};

use super::element::Errors;
use crate::record::Record;
use crate::Spec;

/// One `#[repr(C)]` struct per record of the spec, each with its `ArrayElement` impl and
/// compile-time assertions that Rust lays it out as the generator did.
pub fn record_impls(spec: &Spec) -> TokenStream {
    let records = spec.records.iter().map(|record| record_struct(spec, record));
    quote!(#(#records)*)
}

fn record_struct(spec: &Spec, record: &Record) -> TokenStream {
    let ident = format_ident!("{}", record.camel());
    let doc = format!(
        "The `{}` record of specs/types.yaml: C's `{}` in generated/amso.h, `amso::{}` in generated/amso.cuh \
         ({} bytes, aligned to {}).",
        record.name,
        record.c_type(),
        record.name,
        record.size,
        record.align
    );
    let mut members = Vec::new();
    let mut descriptions = Vec::new();
    let mut offsets = Vec::new();
    for field in &record.fields {
        let dtype = spec.dtype(&field.dtype).expect("validated: a field's dtype is in the table");
        let name = format_ident!("{}", field.name);
        let element = format_ident!("{}", dtype.name);
        let element: syn::Type = syn::parse_quote!(crate::dtypes::#element);
        let ty = field.shape.iter().rev().fold(quote!(#element), |inner, &length| quote!([#inner; #length]));
        let field_doc = format!("`{}`: {}{:?}.", field.name, dtype.name, field.shape);
        members.push(quote!(#[doc = #field_doc] pub #name: #ty));
        let (field_name, shape, offset) = (&field.name, &field.shape, field.offset);
        descriptions.push(quote! {
            crate::Field {
                name: #field_name,
                dtype: &<#element as crate::ArrayElement>::DTYPE,
                shape: &[#(#shape),*],
                offset: #offset,
            }
        });
        let message = format!("Rust's offset of {}.{} is not the generator's {offset}", record.name, field.name);
        offsets.push(quote!(::core::assert!(::core::mem::offset_of!(#ident, #name) == #offset, #message);));
    }
    let (name, c_type, typestr, size, align) =
        (&record.name, record.c_type(), record.typestr(), record.size, record.align);
    let lanes = u16::try_from(size).unwrap_or(u16::MAX);
    let impls = element_impls(&ident, &quote!(crate), name, &quote!(#lanes), &c_type, &quote!(#typestr), &descriptions);
    let size_message = format!("Rust's size of {name} is not the generator's {size}");
    let align_message = format!("Rust's alignment of {name} is not the generator's {align}");
    quote! {
        #[doc = #doc]
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct #ident {
            #(#members,)*
        }

        impl ::core::default::Default for #ident {
            fn default() -> Self {
                // SAFETY: every field is an element type, whose all-zero bits are its default.
                unsafe { ::core::mem::zeroed() }
            }
        }

        #impls

        const _: () = {
            ::core::assert!(::core::mem::size_of::<#ident>() == #size, #size_message);
            ::core::assert!(::core::mem::align_of::<#ident>() == #align, #align_message);
            #(#offsets)*
        };
    }
}

/// A record's `ArrayElement` and `Element` impls, the one text both the spec's records and
/// `#[derive(Element)]` emit (`krate`: `crate` inside amso-runtime, `::amso_runtime` outside).
/// `lanes` and `typestr` are expressions: the generator's numbers, or the compiler's size.
fn element_impls(
    ident: &syn::Ident,
    krate: &TokenStream,
    name: &str,
    lanes: &TokenStream,
    c_type: &str,
    typestr: &TokenStream,
    descriptions: &[TokenStream],
) -> TokenStream {
    quote! {
        // SAFETY: `#[repr(C)]` over element types (each valid for the bytes a NumPy array of its
        // dtype holds), with the size and offsets the DType states (the generator's, asserted
        // beside it, or the compiler's).
        unsafe impl #krate::ArrayElement for #ident {
            const DTYPE: #krate::DType = #krate::DType {
                name: #name,
                code: #krate::__private::OPAQUE_HANDLE,
                bits: 8,
                lanes: #lanes,
                numpy: #krate::__private::RECORD,
                numpy_module: None,
                c_type: #c_type,
                typestr: #typestr,
                fields: &[#(#descriptions),*],
            };
        }
        // SAFETY: as above; amso's arrays of it are plain bytes, read from foreign memory through
        // `read_element`, which makes any bool field's bytes 0 or 1.
        unsafe impl #krate::Element for #ident {
            fn to_scalar(self) -> #krate::Result<#krate::Scalar> {
                ::core::result::Result::Err(#krate::__private::scalar::record_is_not_one_value(
                    &<Self as #krate::ArrayElement>::DTYPE,
                ))
            }
            fn from_scalar(_: #krate::Scalar) -> #krate::Result<Self> {
                ::core::result::Result::Err(#krate::__private::scalar::record_is_not_one_value(
                    &<Self as #krate::ArrayElement>::DTYPE,
                ))
            }
        }
    }
}

/// Whether `#[derive(Element)]` on `input` derives a record: a `#[repr(C)]` type, or a struct of
/// named fields that is not `#[repr(transparent)]` (which is then told it needs `#[repr(C)]`).
pub(crate) fn is_record(input: &DeriveInput) -> bool {
    let reprs = reprs(input);
    let named = matches!(&input.data, Data::Struct(data) if matches!(data.fields, Fields::Named(_)));
    reprs.iter().any(|r| r == "C") || (named && !reprs.iter().any(|r| r == "transparent"))
}

/// The words of `#[repr(...)]` attributes (`C`, `packed`, `align`, ...).
fn reprs(input: &DeriveInput) -> Vec<String> {
    let mut words = Vec::new();
    for attr in input.attrs.iter().filter(|attr| attr.path().is_ident("repr")) {
        let _ = attr.parse_nested_meta(|meta| {
            words.push(meta.path.get_ident().map(ToString::to_string).unwrap_or_default());
            if meta.input.peek(syn::token::Paren) {
                let _content;
                syn::parenthesized!(_content in meta.input);
            }
            Ok(())
        });
    }
    words
}

/// `#[derive(Element)]` on a `#[repr(C)]` struct of named fields: a record.
pub(crate) fn derive_record(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let ident = &input.ident;
    let reprs = reprs(input);
    if !reprs.iter().any(|r| r == "C") {
        errors.push(
            ident.span(),
            "#[derive(Element)] on a struct of named fields derives a record, which needs #[repr(C)]: its layout is \
             C's, which the record's DType, NumPy and generated C code share",
        );
    }
    if let Some(other) = reprs.iter().find(|r| r.as_str() == "packed" || r.as_str() == "align") {
        errors.push(
            ident.span(),
            format!(
                "#[derive(Element)] records are plain #[repr(C)], not #[repr({other})]: C's layout with its padding is \
                 what NumPy's aligned structured dtypes and amso's C and CUDA headers share"
            ),
        );
    }
    if !input.generics.params.is_empty() {
        errors.push(input.generics.span(), "#[derive(Element)] types have no generic parameters");
    }
    let fields = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) if !named.named.is_empty() => Some(named.named.iter().collect::<Vec<_>>()),
            Fields::Named(named) => {
                errors.push(named.span(), "a record has at least one field");
                None
            }
            other => {
                errors.push(
                    other.span(),
                    "#[derive(Element)] on a #[repr(C)] type derives a record, a struct of named fields, e.g. \
                     `pub struct Particle { pos: [f32; 3], mass: f64 }`",
                );
                None
            }
        },
        _ => {
            errors.push(
                ident.span(),
                "#[derive(Element)] on a #[repr(C)] type derives a record, a struct of named fields, not an enum or a \
                 union",
            );
            None
        }
    };
    let name = record_name(input, &mut errors);
    errors.finish()?;
    let (fields, name) = (fields.expect("checked"), name.expect("checked"));

    let mut checks = Vec::new();
    let mut descriptions = Vec::new();
    for field in fields {
        let member = field.ident.as_ref().expect("named fields");
        let (element, shape) = peel_arrays(&field.ty);
        // Spanned at the field's type, so that a type that is not an element is reported there.
        let nested = format!(
            "field `{member}` of record `{name}` is itself a record: records of records are not supported yet; \
             list its fields in `{name}` instead"
        );
        checks.push(quote_spanned! {element.span()=>
            const _: fn() = || {
                fn element<T: ::amso_runtime::Element>() {}
                element::<#element>();
            };
            const _: () = ::core::assert!(!<#element as ::amso_runtime::ArrayElement>::DTYPE.is_record(), #nested);
        });
        let field_name = member.to_string();
        descriptions.push(quote! {
            ::amso_runtime::Field {
                name: #field_name,
                dtype: &<#element as ::amso_runtime::ArrayElement>::DTYPE,
                shape: &[#(#shape),*],
                offset: ::core::mem::offset_of!(#ident, #member),
            }
        });
    }
    let c_type = format!("amso_{name}_t");
    let too_big = format!("record `{name}` is over 65535 bytes, the most a DType's lanes state");
    let lanes = quote! {{
        let size = ::core::mem::size_of::<#ident>();
        ::core::assert!(size <= u16::MAX as usize, #too_big);
        size as u16
    }};
    let typestr = quote! {{
        static TYPESTR: [u8; 24] = ::amso_runtime::__private::record_typestr_bytes(::core::mem::size_of::<#ident>());
        ::amso_runtime::__private::record_typestr(&TYPESTR)
    }};
    let impls = element_impls(ident, &quote!(::amso_runtime), &name, &lanes, &c_type, &typestr, &descriptions);
    Ok(quote! {
        #(#checks)*
        #impls
    })
}

/// `[[f32; 3]; 2]` -> (`f32`, [`2`, `3`]): the element type under nested arrays, and their lengths.
fn peel_arrays(ty: &syn::Type) -> (&syn::Type, Vec<&Expr>) {
    let mut shape = Vec::new();
    let mut inner = ty;
    loop {
        match inner {
            syn::Type::Array(array) => {
                shape.push(&array.len);
                inner = &array.elem;
            }
            syn::Type::Paren(paren) => inner = &paren.elem,
            syn::Type::Group(group) => inner = &group.elem,
            _ => return (inner, shape),
        }
    }
}

/// `#[amso(name = "...")]`, or the struct's name in snake_case.
fn record_name(input: &DeriveInput, errors: &mut Errors) -> Option<String> {
    let mut name = None;
    for attr in input.attrs.iter().filter(|attr| attr.path().is_ident("amso")) {
        let items = match attr.parse_args_with(syn::punctuated::Punctuated::<Meta, Token![,]>::parse_terminated) {
            Ok(items) => items,
            Err(e) => {
                errors.push(e.span(), format!("a record's #[amso(...)] takes only `name = \"...\"`: {e}"));
                return None;
            }
        };
        for item in items {
            match &item {
                Meta::NameValue(pair) if pair.path.is_ident("name") => match &pair.value {
                    Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => {
                        if let Err(message) = crate::dtype::check_dtype_name(&s.value()) {
                            errors.push(s.span(), message.replacen("dtype name", "record name", 1));
                        }
                        name = Some(s.value());
                    }
                    other => errors.push(other.span(), "expected a string literal"),
                },
                _ => errors.push(
                    item.span(),
                    "a record's #[amso(...)] takes only `name = \"...\"`: the rest of its facts come from its fields",
                ),
            }
        }
    }
    Some(name.unwrap_or_else(|| snake_case(&input.ident.to_string())))
}

/// `ParticleState` -> `particle_state`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, ch) in name.chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}
