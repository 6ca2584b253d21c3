//! One element type's facts, as the spec states them and as every emitter reads them.

/// A DLPack 1.3 type code (`DLDataTypeCode`), by the enumerator's name in the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeCode {
    /// Signed integer (`kDLInt`, 0).
    Int,
    /// Unsigned integer (`kDLUInt`, 1).
    UInt,
    /// IEEE floating point (`kDLFloat`, 2).
    Float,
    /// bfloat16 (`kDLBfloat`, 4).
    Bfloat,
    /// Complex, two floats (`kDLComplex`, 5).
    Complex,
    /// Boolean (`kDLBool`, 6).
    Bool,
    /// float8 e3m4 (`kDLFloat8_e3m4`, 7).
    Float8E3M4,
    /// float8 e4m3 (`kDLFloat8_e4m3`, 8).
    Float8E4M3,
    /// float8 e4m3b11fnuz (`kDLFloat8_e4m3b11fnuz`, 9).
    Float8E4M3B11Fnuz,
    /// float8 e4m3fn (`kDLFloat8_e4m3fn`, 10).
    Float8E4M3Fn,
    /// float8 e4m3fnuz (`kDLFloat8_e4m3fnuz`, 11).
    Float8E4M3Fnuz,
    /// float8 e5m2 (`kDLFloat8_e5m2`, 12).
    Float8E5M2,
    /// float8 e5m2fnuz (`kDLFloat8_e5m2fnuz`, 13).
    Float8E5M2Fnuz,
    /// float8 e8m0fnu, a power-of-two scale (`kDLFloat8_e8m0fnu`, 14).
    Float8E8M0Fnu,
    /// float6 e2m3fn (`kDLFloat6_e2m3fn`, 15).
    Float6E2M3Fn,
    /// float6 e3m2fn (`kDLFloat6_e3m2fn`, 16).
    Float6E3M2Fn,
    /// float4 e2m1fn (`kDLFloat4_e2m1fn`, 17).
    Float4E2M1Fn,
}

/// What values of a type code are, for the conversions to and from Python scalars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `bool`.
    Bool,
    /// Signed integers.
    Int,
    /// Unsigned integers.
    UInt,
    /// Real floating point of any width.
    Float,
    /// Complex.
    Complex,
    /// Values are their raw bits (an unsigned integer): packed vectors (lanes > 1).
    Raw,
    /// Several values, one per lane (CUDA's `float4`): no Python scalar; the lanes are read as
    /// a trailing axis of their own dtype.
    Vector,
}

/// Every type code: (code, number, enumerator name, family, bits one lane may have).
const CODES: [(TypeCode, u8, &str, Family, &[u8]); 17] = [
    (TypeCode::Int, 0, "kDLInt", Family::Int, &[8, 16, 32, 64]),
    (TypeCode::UInt, 1, "kDLUInt", Family::UInt, &[8, 16, 32, 64]),
    (TypeCode::Float, 2, "kDLFloat", Family::Float, &[16, 32, 64]),
    (TypeCode::Bfloat, 4, "kDLBfloat", Family::Float, &[16]),
    (TypeCode::Complex, 5, "kDLComplex", Family::Complex, &[64, 128]),
    (TypeCode::Bool, 6, "kDLBool", Family::Bool, &[8]),
    (TypeCode::Float8E3M4, 7, "kDLFloat8_e3m4", Family::Float, &[8]),
    (TypeCode::Float8E4M3, 8, "kDLFloat8_e4m3", Family::Float, &[8]),
    (TypeCode::Float8E4M3B11Fnuz, 9, "kDLFloat8_e4m3b11fnuz", Family::Float, &[8]),
    (TypeCode::Float8E4M3Fn, 10, "kDLFloat8_e4m3fn", Family::Float, &[8]),
    (TypeCode::Float8E4M3Fnuz, 11, "kDLFloat8_e4m3fnuz", Family::Float, &[8]),
    (TypeCode::Float8E5M2, 12, "kDLFloat8_e5m2", Family::Float, &[8]),
    (TypeCode::Float8E5M2Fnuz, 13, "kDLFloat8_e5m2fnuz", Family::Float, &[8]),
    (TypeCode::Float8E8M0Fnu, 14, "kDLFloat8_e8m0fnu", Family::Float, &[8]),
    (TypeCode::Float6E2M3Fn, 15, "kDLFloat6_e2m3fn", Family::Float, &[6]),
    (TypeCode::Float6E3M2Fn, 16, "kDLFloat6_e3m2fn", Family::Float, &[6]),
    (TypeCode::Float4E2M1Fn, 17, "kDLFloat4_e2m1fn", Family::Float, &[4]),
];

impl TypeCode {
    fn row(self) -> &'static (TypeCode, u8, &'static str, Family, &'static [u8]) {
        CODES.iter().find(|row| row.0 == self).expect("every code has a row")
    }

    /// The numeric DLPack code.
    pub fn dlpack_code(self) -> u8 {
        self.row().1
    }

    /// The DLPack enumerator's name, as written in C and in the spec.
    pub fn dlpack_name(self) -> &'static str {
        self.row().2
    }

    /// The code whose enumerator is called `name` (`kDLFloat8_e5m2`).
    pub fn from_dlpack_name(name: &str) -> Option<TypeCode> {
        CODES.iter().find(|row| row.2 == name).map(|row| row.0)
    }

    /// Every enumerator name, for messages.
    pub fn dlpack_names() -> impl Iterator<Item = &'static str> {
        CODES.iter().map(|row| row.2)
    }

    /// Every code: (number, enumerator name, bits one lane may have).
    pub fn table() -> impl Iterator<Item = (u8, &'static str, &'static [u8])> {
        CODES.iter().map(|row| (row.1, row.2, row.4))
    }

    /// What the values are.
    pub fn family(self) -> Family {
        self.row().3
    }

    /// The array-interface kind character (`__array_interface__` typestr).
    pub fn typestr_kind(self) -> char {
        match self {
            TypeCode::Int => 'i',
            TypeCode::UInt => 'u',
            TypeCode::Float => 'f',
            TypeCode::Complex => 'c',
            TypeCode::Bool => 'b',
            // The array interface has no bfloat16 or float8: they travel as raw bytes.
            _ => 'V',
        }
    }

    /// Whether a lane of this code may have `bits` bits: the widths DLPack defines for the
    /// code. `Err` says which those are.
    pub(crate) fn check_bits(self, bits: i64) -> Result<(), String> {
        let allowed = self.row().4;
        if allowed.iter().any(|&b| i64::from(b) == bits) {
            return Ok(());
        }
        let list = allowed.iter().map(u8::to_string).collect::<Vec<_>>().join(", ");
        Err(format!("{} has {list} bits per lane, not {bits}", self.dlpack_name()))
    }

    /// Whether an element of this code may have `lanes` lanes of `bits` bits (bits already
    /// checked): one lane; sub-byte lanes packed into exactly one byte (PyTorch's
    /// `float4_e2m1fn_x2`); or a vector of 2 or 4 lanes of a 32-bit float or integer, CUDA's
    /// `float2`/`float4`, `int2`/`int4`, `uint2`/`uint4` (aligned to their size). NumPy and the
    /// array interfaces have no vectors: they see the lanes as a last axis of the lane's type.
    /// `Err` says what is allowed.
    pub(crate) fn check_lanes(self, bits: u8, lanes: i64) -> Result<(), String> {
        const PACKED: &str = "2 lanes of 4 bits, PyTorch's float4_e2m1fn_x2";
        check_lane_count(lanes)?;
        if lanes == 1 || (bits < 8 && i64::from(bits).saturating_mul(lanes) == 8) {
            return Ok(());
        }
        let name = self.dlpack_name();
        let vector_kind = matches!(self, TypeCode::Float | TypeCode::Int | TypeCode::UInt) && bits == 32;
        if vector_kind && matches!(lanes, 2 | 4) {
            return Ok(());
        }
        if bits >= 8 {
            let fix = if vector_kind { "write lanes: 1, 2 or 4" } else { "write lanes: 1" };
            return Err(format!(
                "{lanes} lanes of {bits}-bit {name}: amso's vector element types are CUDA's, 2 or 4 lanes of a 32-bit \
                 float or integer (float2, float4, int2, int4, uint2, uint4), besides sub-byte values packed into \
                 one byte ({PACKED}); {fix}"
            ));
        }
        let total = i64::from(bits).saturating_mul(lanes);
        let fix = if 8 % bits == 0 {
            format!("write lanes: {} or 1", 8 / bits)
        } else {
            format!("no number of {bits}-bit lanes does, so write lanes: 1")
        };
        Err(format!(
            "{lanes} lanes of {bits} bits are {total} bits, not one byte: packed sub-byte lanes fill exactly one \
             byte ({PACKED}); {fix}"
        ))
    }

    /// The C type generated/amso.h gives an element of this code and `bits` (one lane), where
    /// C or amso.h's preamble has one; `None` for the low-precision floats, each of which
    /// amso.h defines as a one-byte struct under the spec's `c` name.
    pub(crate) fn c_type(self, bits: u8) -> Option<&'static str> {
        Some(match (self, bits) {
            (TypeCode::Bool, 8) => "bool",
            (TypeCode::Int, 8) => "int8_t",
            (TypeCode::Int, 16) => "int16_t",
            (TypeCode::Int, 32) => "int32_t",
            (TypeCode::Int, 64) => "int64_t",
            (TypeCode::UInt, 8) => "uint8_t",
            (TypeCode::UInt, 16) => "uint16_t",
            (TypeCode::UInt, 32) => "uint32_t",
            (TypeCode::UInt, 64) => "uint64_t",
            // C has no portable half-precision type: the bits, as an unsigned integer.
            (TypeCode::Float | TypeCode::Bfloat, 16) => "uint16_t",
            (TypeCode::Float, 32) => "float",
            (TypeCode::Float, 64) => "double",
            (TypeCode::Complex, 64) => "amso_complex64_t",
            (TypeCode::Complex, 128) => "amso_complex128_t",
            _ => return None,
        })
    }
}

/// The CamelCase stem of a dtype name in class names: `float8_e5m2` -> `Float8E5m2`.
pub(crate) fn class_stem(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for ch in name.chars() {
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

/// Whether an element may have `lanes` lanes whatever its code: at least one.
pub(crate) fn check_lane_count(lanes: i64) -> Result<(), String> {
    if lanes < 1 {
        Err(format!("lanes must be at least 1, not {lanes} (1 for a scalar element)"))
    } else {
        Ok(())
    }
}

/// Name of the bundled Python class of element type `name` (a dtype's or a record's) for
/// `ndim`: `MemArray3DFloat32`.
pub(crate) fn class_name(name: &str, ndim: u8) -> String {
    format!("MemArray{ndim}D{}", class_stem(name))
}

/// Whether `name` may name a dtype: lowercase letters, digits and `_`, starting with a letter
/// (it becomes part of class and C symbol names).
pub(crate) fn check_dtype_name(name: &str) -> Result<(), String> {
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!("dtype name `{name}` must be lowercase letters, digits and `_`, starting with a letter"))
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
    /// Bytes per element: a sub-byte element takes one byte (padded).
    pub fn itemsize(&self) -> usize {
        (self.bits as usize * self.lanes as usize).div_ceil(8)
    }

    /// Whether this is a vector of whole-byte lanes (CUDA's `float4`, `int2`, ...).
    pub fn is_vector(&self) -> bool {
        self.lanes > 1 && self.bits >= 8
    }

    /// Whether an element leaves bits of its byte unused (a single sub-byte lane): DLPack's
    /// padded sub-byte layout.
    pub fn padded(&self) -> bool {
        !(self.bits as usize * self.lanes as usize).is_multiple_of(8)
    }

    /// How values convert to and from Python scalars: by the code's family, as raw bits for a
    /// packed vector.
    pub fn family(&self) -> Family {
        if self.is_vector() {
            Family::Vector
        } else if self.lanes > 1 {
            Family::Raw
        } else {
            self.code.family()
        }
    }

    /// An unsigned C integer type of `bytes` bytes (the storage a C caller sees for a type C
    /// has no name for), else an opaque `void`.
    pub fn c_storage(bytes: usize) -> &'static str {
        match bytes {
            1 => "uint8_t",
            2 => "uint16_t",
            4 => "uint32_t",
            8 => "uint64_t",
            _ => "void",
        }
    }

    /// The `__array_interface__` / `__cuda_array_interface__` typestr, e.g. `<f4`; a vector's
    /// is its lane's (the interfaces show the lanes as a trailing axis).
    pub fn typestr(&self) -> String {
        let size = if self.is_vector() { self.itemsize() / usize::from(self.lanes) } else { self.itemsize() };
        let order = if size == 1 { '|' } else { '<' };
        format!("{order}{}{size}", self.code.typestr_kind())
    }

    /// CamelCase stem used in class names: `float32` -> `Float32`.
    pub fn camel(&self) -> String {
        class_stem(&self.name)
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
        class_name(&self.name, ndim)
    }
}
