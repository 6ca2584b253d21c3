//! One element type's facts, as the spec states them and as every emitter reads them.

use serde::Deserialize;

/// A DLPack 1.3 type code for the scalar kinds amso supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum TypeCode {
    /// Signed integer (`kDLInt`, 0).
    #[serde(rename = "kDLInt")]
    Int,
    /// Unsigned integer (`kDLUInt`, 1).
    #[serde(rename = "kDLUInt")]
    UInt,
    /// IEEE floating point (`kDLFloat`, 2).
    #[serde(rename = "kDLFloat")]
    Float,
    /// bfloat16 (`kDLBfloat`, 4).
    #[serde(rename = "kDLBfloat")]
    Bfloat,
    /// Complex, two floats (`kDLComplex`, 5).
    #[serde(rename = "kDLComplex")]
    Complex,
    /// Boolean (`kDLBool`, 6).
    #[serde(rename = "kDLBool")]
    Bool,
}

impl TypeCode {
    /// The numeric DLPack code.
    pub fn dlpack_code(self) -> u8 {
        match self {
            TypeCode::Int => 0,
            TypeCode::UInt => 1,
            TypeCode::Float => 2,
            TypeCode::Bfloat => 4,
            TypeCode::Complex => 5,
            TypeCode::Bool => 6,
        }
    }

    /// The DLPack enumerator's name, as written in C.
    pub fn dlpack_name(self) -> &'static str {
        match self {
            TypeCode::Int => "kDLInt",
            TypeCode::UInt => "kDLUInt",
            TypeCode::Float => "kDLFloat",
            TypeCode::Bfloat => "kDLBfloat",
            TypeCode::Complex => "kDLComplex",
            TypeCode::Bool => "kDLBool",
        }
    }

    /// The array-interface kind character (`__array_interface__` typestr).
    pub fn typestr_kind(self) -> char {
        match self {
            TypeCode::Int => 'i',
            TypeCode::UInt => 'u',
            TypeCode::Float => 'f',
            // The array interface has no bfloat16; it travels as raw 2-byte values.
            TypeCode::Bfloat => 'V',
            TypeCode::Complex => 'c',
            TypeCode::Bool => 'b',
        }
    }
}

/// One element type of the spec's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DType {
    /// NumPy dtype name, e.g. `float32`; also the stem of class and C symbol names.
    pub name: String,
    /// Rust type storing one element, e.g. `f32` or `half::f16`.
    pub rust: String,
    /// DLPack type code.
    pub code: TypeCode,
    /// Bits per lane.
    pub bits: u8,
    /// Vector lanes; 1 for scalars.
    pub lanes: u16,
    /// NumPy dtype name.
    pub numpy: String,
    /// Module defining the NumPy dtype when NumPy itself does not (e.g. `ml_dtypes`).
    pub numpy_module: Option<String>,
    /// C type for generated/amso.h.
    pub c: String,
}

impl DType {
    /// Bytes per element.
    pub fn itemsize(&self) -> usize {
        self.bits as usize * self.lanes as usize / 8
    }

    /// The `__array_interface__` / `__cuda_array_interface__` typestr, e.g. `<f4`.
    pub fn typestr(&self) -> String {
        let order = if self.itemsize() == 1 { '|' } else { '<' };
        format!("{order}{}{}", self.code.typestr_kind(), self.itemsize())
    }

    /// CamelCase stem used in class names: `float32` -> `Float32`.
    pub fn camel(&self) -> String {
        let mut out = String::with_capacity(self.name.len());
        let mut upper = true;
        for ch in self.name.chars() {
            if ch == '_' {
                upper = true;
            } else if upper {
                out.extend(ch.to_uppercase());
                upper = false;
            } else {
                out.push(ch);
            }
        }
        out
    }

    /// The Rust type parsed as tokens.
    pub fn rust_type(&self) -> syn::Type {
        // Validated at parse time (spec.rs), so this cannot fail for a parsed spec.
        syn::parse_str(&self.rust).expect("rust type validated when the spec was parsed")
    }

    /// The path other crates use for this element type: `::amso_runtime::dtypes::float16`.
    pub fn runtime_path(&self) -> syn::Type {
        let name = quote::format_ident!("{}", self.name);
        syn::parse_quote!(::amso_runtime::dtypes::#name)
    }

    /// Name of the bundled Python class for `ndim`: `MemArray3DFloat32`.
    pub fn class_name(&self, ndim: u8) -> String {
        format!("MemArray{ndim}D{}", self.camel())
    }
}
