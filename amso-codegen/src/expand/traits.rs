//! `Element` impls (the DLPack type traits) for every dtype of the spec, written into the
//! runtime crate by its build script.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::dtype::{DType, Family};
use crate::Spec;

/// `impl Element for T` for every dtype, plus a test that each one's default is all-zero bits.
pub fn element_impls(spec: &Spec) -> TokenStream {
    let impls = spec.dtypes.iter().map(|dtype| {
        let conversion = Conversion::Family(dtype.family());
        element_impl(dtype, &dtype.rust_type(), &quote!(crate), &conversion, true, Span::call_site())
    });
    let types: Vec<_> = spec.dtypes.iter().map(DType::rust_type).collect();
    let names: Vec<_> = spec.dtypes.iter().map(|d| quote::format_ident!("{}", d.name)).collect();
    let hidden: Vec<_> = spec.dtypes.iter().map(|d| quote::format_ident!("__dtype_{}", d.name)).collect();
    let docs = spec.dtypes.iter().map(|d| format!("`{}`: the element type of dtype {}.", d.rust, d.name));
    let table: Vec<_> = crate::dtype::TypeCode::table().collect();
    let codes: Vec<u8> = table.iter().map(|row| row.0).collect();
    let code_names = table.iter().map(|row| row.1);
    let code_consts = table.iter().map(|row| format_ident!("{}", row.1.trim_start_matches("kDL").to_uppercase()));
    let code_docs = table.iter().map(|row| format!("`{}`.", row.1));
    let code_bits = table.iter().map(|row| {
        let bits = row.2;
        quote!(#(#bits),*)
    });
    let runtime_types = crate::spec::RUNTIME_TYPES.iter().map(|&(path, _, bits, lanes)| {
        let ty: syn::Type = syn::parse_str(path).expect("the table's types parse");
        let bytes = (usize::from(bits) * usize::from(lanes)).div_ceil(8);
        let message = format!("amso-codegen's RUNTIME_TYPES says `{path}` is {bytes} byte(s)");
        quote!(::core::assert!(::core::mem::size_of::<#ty>() == #bytes, #message);)
    });
    let max_ndim = usize::from(crate::MAX_NDIM);
    quote! {
        #(#impls)*

        /// The largest number of dimensions amso compiles (the spec's ndim range is
        /// `1..=MAX_NDIM`): amso-codegen's, the one definition.
        pub(crate) const MAX_NDIM: usize = #max_ndim;

        // The Rust types a spec may name (amso-codegen's `RUNTIME_TYPES`, which `rust:` is
        // checked against): each one exists here, with the size the table gives it.
        const _: () = { #(#runtime_types)* };

        // Aliases are declared here, where primitive names are not shadowed (dtype `bool` is
        // Rust's `bool`), and re-exported under the dtype's name below.
        #(
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            pub type #hidden = #types;
        )*

        /// One alias per dtype of the spec, named as the dtype, so generated code outside this
        /// crate names element types without depending on the crates that define them.
        pub mod dtypes {
            #(
                #[doc = #docs]
                pub use super::#hidden as #names;
            )*
        }

        /// Every element type of the spec, in the spec's order: the one table that names a
        /// DLPack (code, bits, lanes), a NumPy dtype or an array-interface typestr.
        pub(crate) static ALL: &[&crate::element::DType] = &[
            #( &<#types as crate::element::ArrayElement>::DTYPE ),*
        ];

        /// DLPack's type codes by name (`dlpack_code::FLOAT` is `kDLFloat`), from the
        /// generator's one table.
        #[allow(dead_code)]
        pub(crate) mod dlpack_code {
            #( #[doc = #code_docs] pub(crate) const #code_consts: u8 = #codes; )*
        }

        /// DLPack's type codes, from the generator's one table: (number, enumerator name, bits
        /// one lane may have).
        #[cfg_attr(not(feature = "python"), allow(dead_code))]
        pub(crate) static DLPACK_CODES: &[(u8, &str, &[u8])] = &[
            #( (#codes, #code_names, &[#code_bits]) ),*
        ];

        /// Calls `f` once per element type of the spec.
        #[cfg(test)]
        pub(crate) fn for_each_element(f: &mut dyn FnMut(&'static crate::element::DType, &dyn Fn() -> bool)) {
            #( f(&<#types as crate::element::ArrayElement>::DTYPE, &crate::element::default_is_zero_bits::<#types>); )*
        }
    }
}

/// How an element type's values become Python scalars and back.
pub enum Conversion {
    /// By the family's rules in the runtime (`num-traits` conversions): the spec's types.
    Family(Family),
    /// Through another element type `V`: `V::from(self)` and `Self::from(v)`, with `V`'s
    /// rules (a user's `#[amso(scalar = f32)]`).
    Via(Box<syn::Type>),
}

/// `unsafe impl Element for ty` from `dtype`'s facts, naming the runtime as `krate` (`crate`
/// inside amso-runtime, `::amso_runtime` elsewhere), with a compile-time check that the facts'
/// bits x lanes are the type's size, reported at `size_span`. The one builder behind the
/// spec's table and `#[derive(Element)]`.
pub fn element_impl(
    dtype: &DType,
    ty: &syn::Type,
    krate: &TokenStream,
    conversion: &Conversion,
    in_spec: bool,
    size_span: Span,
) -> TokenStream {
    let name = &dtype.name;
    let code = dtype.code.dlpack_code();
    let bits = dtype.bits;
    let lanes = dtype.lanes;
    let numpy = &dtype.numpy;
    let numpy_module = match &dtype.numpy_module {
        Some(module) => quote!(Some(#module)),
        None => quote!(None),
    };
    let c_type = &dtype.c;
    let typestr = dtype.typestr();
    let (to_scalar, from_scalar) = match conversion {
        Conversion::Family(Family::Vector) => {
            let refusal = quote!(::core::result::Result::Err(#krate::__private::scalar::lanes_are_not_one_value(
                &<Self as #krate::ArrayElement>::DTYPE
            )));
            (refusal.clone(), quote!({ let _ = value; #refusal }))
        }
        Conversion::Family(family) => {
            let family = match family {
                Family::Bool => "bool",
                Family::Int => "int",
                Family::UInt => "uint",
                Family::Float => "float",
                Family::Complex => "complex",
                Family::Raw => "raw",
                Family::Vector => unreachable!("matched above"),
            };
            let (to, from) = (format_ident!("from_{}", family), format_ident!("to_{}", family));
            (
                quote!(::core::result::Result::Ok(#krate::__private::scalar::#to(self))),
                quote!(#krate::__private::scalar::#from(value, &<Self as #krate::ArrayElement>::DTYPE)),
            )
        }
        // Spanned at `via`, so that a missing `From` is reported where `scalar = ...` says it.
        Conversion::Via(via) => (
            quote_spanned!(via.span()=> <#via as #krate::Element>::to_scalar(<#via as ::core::convert::From<Self>>::from(self))),
            quote_spanned!(via.span()=> <#via as #krate::Element>::from_scalar(value).map(<Self as ::core::convert::From<#via>>::from)),
        ),
    };
    let itemsize = dtype.itemsize();
    let size_message = format!(
        "amso dtype `{name}` says {bits} bits x {lanes} lanes ({itemsize} byte{}), which is not the size of `{}`",
        if itemsize == 1 { "" } else { "s" },
        quote!(#ty).to_string().replace(' ', "")
    );
    let size_check = quote_spanned! {size_span=>
        const _: () = ::core::assert!(::core::mem::size_of::<#ty>() == #itemsize, #size_message);
    };
    quote! {
        unsafe impl #krate::ArrayElement for #ty {
            const DTYPE: #krate::DType = #krate::DType {
                name: #name,
                code: #code,
                bits: #bits,
                lanes: #lanes,
                numpy: #numpy,
                numpy_module: #numpy_module,
                c_type: #c_type,
                typestr: #typestr,
                fields: &[],
            };
            #[doc(hidden)]
            const IN_SPEC: bool = #in_spec;
        }
        unsafe impl #krate::Element for #ty {
            #[inline]
            fn to_scalar(self) -> #krate::Result<#krate::Scalar> {
                #to_scalar
            }
            #[inline]
            fn from_scalar(value: #krate::Scalar) -> #krate::Result<Self> {
                #from_scalar
            }
        }
        #size_check
    }
}
