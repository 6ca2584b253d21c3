//! The bundled module's classes, one per instantiation of the spec, and the function that
//! registers them with their dispatch entries.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Visibility;

use crate::expand::pyclass::{export_names, instantiation_class, typed_exports, ClassNames, ElementType};
use crate::Spec;

/// Every instantiation's class plus `pub fn register_classes(module)`.
pub fn spec_classes(spec: &Spec, module: &str) -> TokenStream {
    let vis: Visibility = syn::parse_quote!(pub);
    let mut classes = Vec::new();
    let mut idents = Vec::new();
    for (dtype, ndim) in spec.instances() {
        let name = dtype.class_name(ndim);
        let ident = format_ident!("{}", name);
        let names = ClassNames { ident: &ident, vis: &vis, attrs: &[], python_name: &name, module: Some(module) };
        classes.push(instantiation_class(&ElementType::of(dtype), ndim, &names));
        classes.push(typed_exports(&dtype.name, ndim, &ident));
        idents.push(ident);
    }
    for (record, ndim) in spec.record_instances() {
        let name = record.class_name(ndim);
        let ident = format_ident!("{}", name);
        let names = ClassNames { ident: &ident, vis: &vis, attrs: &[], python_name: &name, module: Some(module) };
        classes.push(instantiation_class(&ElementType::of_record(record), ndim, &names));
        classes.push(typed_exports(&record.name, ndim, &ident));
        idents.push(ident);
    }
    let stems = spec.typed_stems();
    let rows = stems.iter().map(|stem| {
        let [handle, data, shape] = export_names(stem);
        quote! { ::amso_runtime::__private::TypedExport { handle: #handle, data: #data, shape: #shape } }
    });
    let count = stems.len();
    let key = spec.typed_key();
    quote! {
        #(#classes)*

        /// The typed exports in the spec's order: the table `amso_import()` loads.
        static TYPED_EXPORTS: [::amso_runtime::__private::TypedExport; #count] = [#(#rows),*];

        /// Adds every instantiation's class to `module` with its `(dtype, ndim)` dispatch entry.
        pub fn register_classes(module: &::pyo3::Bound<'_, ::pyo3::types::PyModule>) -> ::pyo3::PyResult<()> {
            #( ::amso_runtime::python::register::<#idents>(module)?; )*
            ::amso_runtime::__private::add_typed_api(module, &TYPED_EXPORTS, #key)
        }
    }
}
