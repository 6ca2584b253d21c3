//! The thin PyO3 class of one instantiation: a subclass of the runtime's type-erased base
//! class that adds only its constructor and its `(dtype, ndim)` identity.

use proc_macro2::{Ident, TokenStream};
use quote::quote;
use syn::{Attribute, Visibility};

use crate::dtype::DType;

/// What names one instantiation's class.
pub struct ClassNames<'a> {
    /// The Rust struct.
    pub ident: &'a Ident,
    /// Its visibility.
    pub vis: &'a Visibility,
    /// Attributes kept from the user's item (docs, cfgs).
    pub attrs: &'a [Attribute],
    /// The Python class name.
    pub python_name: &'a str,
    /// The Python module the class reports (`__module__`).
    pub module: Option<&'a str>,
}

/// An instantiation's element type: the path its code names it by (`::amso_runtime::dtypes::
/// float32`, or a user's own type), and how docs show it.
pub struct ElementType {
    /// The type, as generated code names it.
    pub ty: syn::Type,
    /// The type as docs show it (`f32`).
    pub shown: String,
}

impl ElementType {
    /// A dtype of the spec.
    pub fn of(dtype: &DType) -> ElementType {
        ElementType { ty: dtype.runtime_path(), shown: dtype.rust.clone() }
    }

    /// A record of the spec (`amso_runtime::records::Particle`).
    pub fn of_record(record: &crate::record::Record) -> ElementType {
        let ident = quote::format_ident!("{}", record.camel());
        ElementType { ty: syn::parse_quote!(::amso_runtime::records::#ident), shown: format!("records::{ident}") }
    }
}

/// The class, its constructor and its `Instantiation` impl.
pub fn instantiation_class(element: &ElementType, ndim: u8, names: &ClassNames<'_>) -> TokenStream {
    let ClassNames { ident, vis, attrs, python_name, module } = names;
    let ty = &element.ty;
    let ndim = ndim as usize;
    let module = module.map(|m| quote!(module = #m,));
    let doc = format!("amso `MemArray<{}, {ndim}>` as a Python class.", element.shown);
    let doc = if attrs.iter().any(|a| a.path().is_ident("doc")) { quote!() } else { quote!(#[doc = #doc]) };
    quote! {
        #doc
        #(#attrs)*
        #[::pyo3::pyclass(extends = ::amso_runtime::python::MemArrayBase, frozen, subclass, #module name = #python_name)]
        #[derive(Default)]
        #vis struct #ident;

        #[::pyo3::pymethods]
        impl #ident {
            #[new]
            #[pyo3(signature = (*args, **kwargs), text_signature = "(shape, device_id=0, *, readonly=False, pinned=False, on_device=False, uninitialized=False, managed=False, shareable=False)")]
            fn __new__(
                args: &::pyo3::Bound<'_, ::pyo3::types::PyTuple>,
                kwargs: ::std::option::Option<&::pyo3::Bound<'_, ::pyo3::types::PyDict>>,
            ) -> ::pyo3::PyResult<::pyo3::PyClassInitializer<Self>> {
                ::amso_runtime::__private::new_base::<Self>(args, kwargs).map(|base| base.add_subclass(#ident))
            }
        }

        impl ::amso_runtime::__private::Instantiation for #ident {
            type Array = ::amso_runtime::MemArray<#ty, #ndim>;
        }
    }
}

/// The three export functions of a typed stem (`typed_stem`): `_handle`, `_data`, `_shape`.
pub fn export_names(stem: &str) -> [Ident; 3] {
    ["handle", "data", "shape"].map(|what| quote::format_ident!("{stem}_{what}"))
}

/// The typed C exports of one bundled instantiation, named from the spec
/// (`amso_float32_3d_handle`, `_data`, `_shape`), each a delegation to the runtime.
pub fn typed_exports(dtype: &str, ndim: u8, class: &Ident) -> TokenStream {
    let [handle, data, shape] = export_names(&crate::spec::typed_stem(dtype, ndim));
    let doc = format!("C getter exports of the {dtype} {ndim}-D class (see generated/amso.h).");
    quote! {
        #[doc = #doc]
        ///
        /// # Safety
        /// As `amso_get_handle`: a live object (or NULL), a writable output, the GIL held.
        #[no_mangle]
        pub unsafe extern "C" fn #handle(object: *mut ::pyo3::ffi::PyObject, out: *mut ::amso_runtime::__private::Handle) -> ::std::ffi::c_int {
            // SAFETY: forwarded from the caller.
            unsafe { ::amso_runtime::__private::typed_handle::<#class>(object, out) }
        }
        #[doc = #doc]
        ///
        /// # Safety
        /// As above.
        #[no_mangle]
        pub unsafe extern "C" fn #data(object: *mut ::pyo3::ffi::PyObject, out: *mut *mut ::std::ffi::c_void) -> ::std::ffi::c_int {
            // SAFETY: forwarded from the caller.
            unsafe { ::amso_runtime::__private::typed_data::<#class>(object, out) }
        }
        #[doc = #doc]
        ///
        /// # Safety
        /// As above.
        #[no_mangle]
        pub unsafe extern "C" fn #shape(object: *mut ::pyo3::ffi::PyObject, out: *mut *const i64) -> ::std::ffi::c_int {
            // SAFETY: forwarded from the caller.
            unsafe { ::amso_runtime::__private::typed_shape::<#class>(object, out) }
        }
    }
}
