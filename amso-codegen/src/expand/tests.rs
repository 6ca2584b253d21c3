use quote::quote;

use super::{array, dispatch, pyclass, traits};
use crate::{bundled_spec, Spec};

fn compact(tokens: proc_macro2::TokenStream) -> String {
    tokens.to_string().split_whitespace().collect()
}

#[test]
fn element_impls_cover_the_dtype_table_with_size_checks() {
    let spec = bundled_spec().unwrap();
    let code = compact(traits::element_impls(&spec));
    for dtype in &spec.dtypes {
        assert!(code.contains(&format!("name:\"{}\"", dtype.name)), "{}", dtype.name);
        assert!(code.contains(&format!("pubusesuper::__dtype_{}as{};", dtype.name, dtype.name)));
    }
    assert!(code.contains("unsafeimplcrate::Elementforhalf::bf16"));
    assert_eq!(code.matches("constIN_SPEC:bool=true;").count(), spec.dtypes.len());
    assert!(code.contains("code:4u8"), "bfloat16 is kDLBfloat (4)");
    let runtime_types = crate::spec::RUNTIME_TYPES.len();
    assert_eq!(
        code.matches("size_of::<").count(),
        spec.dtypes.len() + runtime_types,
        "one size assertion per dtype, and one per Rust type the spec may name"
    );
}

#[test]
fn instantiation_class_is_a_thin_delegation() {
    let spec = bundled_spec().unwrap();
    let dtype = spec.dtype("float32").unwrap();
    let ident = quote::format_ident!("MemArray3DFloat32");
    let vis: syn::Visibility = syn::parse_quote!(pub);
    let names = pyclass::ClassNames {
        ident: &ident,
        vis: &vis,
        attrs: &[],
        python_name: "MemArray3DFloat32",
        module: Some("amso._amso"),
    };
    let code = compact(pyclass::instantiation_class(&pyclass::ElementType::of(dtype), 3, &names));
    assert!(code.contains("extends=::amso_runtime::python::MemArrayBase,frozen,subclass"));
    assert!(code.contains("::amso_runtime::__private::new_base::<Self>"));
    assert!(code.contains("typeArray=::amso_runtime::MemArray<::amso_runtime::dtypes::float32,3usize>;"));
    assert_eq!(code.matches("fn").count(), 1, "one constructor, every other method lives in the base class");
    assert!(code.len() < 1200, "per-instantiation code stays small: {} bytes", code.len());
    let exports = compact(pyclass::typed_exports(&dtype.name, 3, &ident));
    for name in ["amso_float32_3d_handle", "amso_float32_3d_data", "amso_float32_3d_shape"] {
        assert!(exports.contains(&format!("fn{name}(")), "{name}");
    }
    assert_eq!(exports.matches("typed_").count(), 3, "each export is one delegation");
}

#[test]
fn spec_classes_register_every_instantiation() {
    let spec = bundled_spec().unwrap();
    let code = compact(dispatch::spec_classes(&spec, "amso._amso"));
    for (dtype, ndim) in spec.instances() {
        let class = dtype.class_name(ndim);
        assert!(code.contains(&format!("::amso_runtime::python::register::<{class}>(module)?;")), "{class}");
    }
}

#[test]
fn amso_array_accepts_names_and_rust_types() {
    let spec = bundled_spec().unwrap();
    for (arg, path) in [(quote!(f32, 2), "float32"), (quote!(float32, 2), "float32"), (quote!(half::f16, 1), "float16")]
    {
        let code = compact(
            array::amso_array(
                arg,
                quote!(
                    pub struct Grid;
                ),
                &spec,
                "specs/types.yaml",
            )
            .unwrap(),
        );
        assert!(
            code.contains(&format!("pubtypeGridArray=::amso_runtime::MemArray<::amso_runtime::dtypes::{path}")),
            "{code}"
        );
        assert!(code.contains("name=\"Grid\""));
    }
}

#[test]
fn amso_array_errors_say_what_to_do() {
    let spec = bundled_spec().unwrap();
    let error = |args, item| array::amso_array(args, item, &spec, "specs/types.yaml").unwrap_err();
    let unknown = error(
        quote!(f17, 3),
        quote!(
            struct A;
        ),
    )
    .to_string();
    assert!(
        unknown.contains("unknown amso dtype `f17`")
            && unknown.contains("float32 (f32)")
            && unknown.contains("specs/types.yaml")
            && unknown.contains("#[derive(amso_macros::Element)]"),
        "{unknown}"
    );
    assert!(error(
        quote!(f32, 0),
        quote!(
            struct A;
        )
    )
    .to_string()
    .contains("1..=8, got `0`"));
    assert!(error(
        quote!(f32),
        quote!(
            struct A;
        )
    )
    .to_string()
    .contains("expected `,`"));
    assert!(error(
        quote!(f32, 2, 3),
        quote!(
            struct A;
        )
    )
    .to_string()
    .contains("#[amso_array(DTYPE, NDIM)]"));
    assert!(error(
        quote!(f32, 2),
        quote!(
            fn f() {}
        )
    )
    .to_string()
    .contains("unit struct"));
    let both = error(
        quote!(f17, 99),
        quote!(
            struct A;
        ),
    );
    assert_eq!(both.into_iter().count(), 2, "every mistake is reported at once");
}

#[test]
fn a_spec_edit_adds_a_class_without_rust_edits() {
    // Every Rust type the runtime knows is in the table already (a type is one dtype's), so the
    // new dtype is float16's row under another name.
    let dtypes = crate::BUNDLED_SPEC.split("\ninstantiations:").next().unwrap();
    let text = format!("{dtypes}\ninstantiations:\n  - {{dtype: int8, ndim: [5]}}\n  - {{dtype: half2, ndim: [1]}}\n")
        .replace("{name: float16,", "{name: half2,");
    let spec = Spec::parse(&text, "edited.yaml").unwrap();
    let classes = compact(dispatch::spec_classes(&spec, "amso._amso"));
    assert!(classes.contains("pubstructMemArray5DInt8;"));
    assert!(classes.contains("pubstructMemArray1DHalf2;"));
    assert!(compact(traits::element_impls(&spec)).contains("name:\"half2\""));
    assert!(crate::write::python_stubs(&spec).contains("class MemArray5DInt8(MemArray):"));
}

#[test]
fn derive_element_has_the_specs_lanes_rule() {
    let vector = quote! {
        #[repr(transparent)]
        #[amso(name = "float32x3", code = kDLFloat, bits = 32, lanes = 3, scalar = f32)]
        pub struct Triple([f32; 3]);
    };
    let error = super::element::derive_element(vector).unwrap_err().to_string();
    assert!(error.contains("3 lanes of 32-bit kDLFloat: amso's vector element types are CUDA's"), "{error}");
    let cuda_vector = quote! {
        #[repr(transparent)]
        #[amso(name = "float32x2", code = kDLFloat, bits = 32, lanes = 2, scalar = u64)]
        pub struct Pair([f32; 2]);
    };
    assert!(super::element::derive_element(cuda_vector).is_ok());
    let packed = quote! {
        #[repr(transparent)]
        #[amso(name = "fp4x2", code = kDLFloat4_e2m1fn, bits = 4, lanes = 2, scalar = u8)]
        pub struct Fp4x2(u8);
    };
    assert!(super::element::derive_element(packed).is_ok());
}
