//! `Element` impls (the DLPack type traits) for every dtype of the spec, written into the
//! runtime crate by its build script.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::dtype::{DType, TypeCode};
use crate::Spec;

/// `impl Element for T` for every dtype, plus a test that each one's default is all-zero bits.
pub fn element_impls(spec: &Spec) -> TokenStream {
    let impls = spec.dtypes.iter().map(element_impl);
    let types: Vec<_> = spec.dtypes.iter().map(DType::rust_type).collect();
    let names: Vec<_> = spec.dtypes.iter().map(|d| quote::format_ident!("{}", d.name)).collect();
    let hidden: Vec<_> = spec.dtypes.iter().map(|d| quote::format_ident!("__dtype_{}", d.name)).collect();
    let docs = spec.dtypes.iter().map(|d| format!("`{}`: the element type of dtype {}.", d.rust, d.name));
    quote! {
        #(#impls)*

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
            #( &<#types as crate::element::Element>::DTYPE ),*
        ];

        /// Calls `f` once per element type of the spec.
        #[cfg(test)]
        pub(crate) fn for_each_element(f: &mut dyn FnMut(&'static crate::element::DType, &dyn Fn() -> bool)) {
            #( f(&<#types as crate::element::Element>::DTYPE, &crate::element::default_is_zero_bits::<#types>); )*
        }
    }
}

fn element_impl(dtype: &DType) -> TokenStream {
    let ty = dtype.rust_type();
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
    let family = match dtype.code {
        TypeCode::Bool => "bool",
        TypeCode::Int => "int",
        TypeCode::UInt => "uint",
        TypeCode::Float | TypeCode::Bfloat => "float",
        TypeCode::Complex => "complex",
    };
    let to_scalar = format_ident!("from_{}", family);
    let from_scalar = format_ident!("to_{}", family);
    let size_message = format!(
        "specs/types.yaml: dtype `{name}` says {bits} bits x {lanes} lanes, which is not the size of `{}`",
        dtype.rust
    );
    quote! {
        unsafe impl crate::element::Element for #ty {
            const DTYPE: crate::element::DType = crate::element::DType {
                name: #name,
                code: #code,
                bits: #bits,
                lanes: #lanes,
                numpy: #numpy,
                numpy_module: #numpy_module,
                c_type: #c_type,
                typestr: #typestr,
            };
            #[inline]
            fn to_scalar(self) -> crate::element::Scalar {
                crate::element::scalar::#to_scalar(self)
            }
            #[inline]
            fn from_scalar(value: crate::element::Scalar) -> crate::Result<Self> {
                crate::element::scalar::#from_scalar(value, &Self::DTYPE)
            }
        }
        const _: () = assert!(
            ::core::mem::size_of::<#ty>() * 8 == #bits as usize * #lanes as usize,
            #size_message
        );
    }
}
