//! What each field of the spec may hold. Each rule is a pure function of one value and what is
//! known of the rest of its row; its `Err` says what arrived, what was expected and what to
//! write instead.

use std::fmt;

use crate::dtype::{check_dtype_name, check_lane_count, TypeCode};
use crate::MAX_NDIM;

/// The Rust types amso-runtime can name as element types, each with the DLPack type it is
/// (code, bits, lanes): Rust's primitives, `half`'s and `num_complex`'s types, `microfloat`'s
/// low-precision floats and the runtime's own packed pair (`amso-runtime/src/element.rs`). The
/// spec's `Element` impls are generated into the runtime, whose dependencies define no other
/// element types, so `rust:` names one of these; the runtime's build asserts each one's size
/// (`expand::traits::element_impls`), so the table cannot drift from the types.
pub(crate) const RUNTIME_TYPES: [(&str, TypeCode, u8, u16); 33] = [
    ("bool", TypeCode::Bool, 8, 1),
    ("i8", TypeCode::Int, 8, 1),
    ("i16", TypeCode::Int, 16, 1),
    ("i32", TypeCode::Int, 32, 1),
    ("i64", TypeCode::Int, 64, 1),
    ("u8", TypeCode::UInt, 8, 1),
    ("u16", TypeCode::UInt, 16, 1),
    ("u32", TypeCode::UInt, 32, 1),
    ("u64", TypeCode::UInt, 64, 1),
    ("half::f16", TypeCode::Float, 16, 1),
    ("f32", TypeCode::Float, 32, 1),
    ("f64", TypeCode::Float, 64, 1),
    ("half::bf16", TypeCode::Bfloat, 16, 1),
    ("num_complex::Complex<f32>", TypeCode::Complex, 64, 1),
    ("num_complex::Complex<f64>", TypeCode::Complex, 128, 1),
    ("microfloat::f8e3m4", TypeCode::Float8E3M4, 8, 1),
    ("microfloat::f8e4m3", TypeCode::Float8E4M3, 8, 1),
    ("microfloat::f8e4m3b11fnuz", TypeCode::Float8E4M3B11Fnuz, 8, 1),
    ("microfloat::f8e4m3fn", TypeCode::Float8E4M3Fn, 8, 1),
    ("microfloat::f8e4m3fnuz", TypeCode::Float8E4M3Fnuz, 8, 1),
    ("microfloat::f8e5m2", TypeCode::Float8E5M2, 8, 1),
    ("microfloat::f8e5m2fnuz", TypeCode::Float8E5M2Fnuz, 8, 1),
    ("microfloat::f8e8m0fnu", TypeCode::Float8E8M0Fnu, 8, 1),
    ("microfloat::f6e2m3fn", TypeCode::Float6E2M3Fn, 6, 1),
    ("microfloat::f6e3m2fn", TypeCode::Float6E3M2Fn, 6, 1),
    ("microfloat::f4e2m1fn", TypeCode::Float4E2M1Fn, 4, 1),
    ("crate::element::Float4E2M1FnX2", TypeCode::Float4E2M1Fn, 4, 2),
    // CUDA's vectors of 32-bit lanes, as Rust arrays (NumPy sees a last axis of lanes).
    ("[f32;2]", TypeCode::Float, 32, 2),
    ("[f32;4]", TypeCode::Float, 32, 4),
    ("[i32;2]", TypeCode::Int, 32, 2),
    ("[i32;4]", TypeCode::Int, 32, 4),
    ("[u32;2]", TypeCode::UInt, 32, 2),
    ("[u32;4]", TypeCode::UInt, 32, 4),
];

/// NumPy's own dtypes (those that need no `numpy_module`), with their DLPack code and bits.
const NUMPY_TYPES: [(&str, TypeCode, u8); 14] = [
    ("bool", TypeCode::Bool, 8),
    ("int8", TypeCode::Int, 8),
    ("int16", TypeCode::Int, 16),
    ("int32", TypeCode::Int, 32),
    ("int64", TypeCode::Int, 64),
    ("uint8", TypeCode::UInt, 8),
    ("uint16", TypeCode::UInt, 16),
    ("uint32", TypeCode::UInt, 32),
    ("uint64", TypeCode::UInt, 64),
    ("float16", TypeCode::Float, 16),
    ("float32", TypeCode::Float, 32),
    ("float64", TypeCode::Float, 64),
    ("complex64", TypeCode::Complex, 64),
    ("complex128", TypeCode::Complex, 128),
];

const PYTHON_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// What a dtype row says, read leniently before its fields' own checks so that each field's
/// rule can see the others: `None` where a field is missing or not of its kind.
#[derive(Debug, Clone, Default)]
pub(crate) struct Row {
    pub(crate) name: Option<String>,
    pub(crate) code: Option<TypeCode>,
    pub(crate) bits: Option<u8>,
    pub(crate) lanes: Option<u16>,
    pub(crate) has_numpy_module: bool,
}

impl Row {
    /// The row as a YAML value says it.
    pub(crate) fn read(value: &serde_yaml::Value) -> Row {
        let text = |key: &str| value.get(key).and_then(serde_yaml::Value::as_str);
        let number = |key: &str| value.get(key).and_then(serde_yaml::Value::as_u64);
        Row {
            name: text("name").map(String::from),
            code: text("code").and_then(TypeCode::from_dlpack_name),
            bits: number("bits").and_then(|bits| u8::try_from(bits).ok()),
            lanes: number("lanes").and_then(|lanes| u16::try_from(lanes).ok()),
            has_numpy_module: value.get("numpy_module").is_some_and(|module| !module.is_null()),
        }
    }

    /// The row's DLPack type, when its code, bits and lanes are all there and valid.
    pub(crate) fn layout(&self) -> Option<Layout> {
        let (code, bits, lanes) = (self.code?, self.bits?, self.lanes?);
        let valid = code.check_bits(bits.into()).is_ok() && code.check_lanes(bits, lanes.into()).is_ok();
        valid.then_some(Layout { code, bits, lanes })
    }

    /// "dtype `float32`: ", to begin a message about one of the row's fields.
    pub(crate) fn about(&self) -> String {
        self.named().map_or_else(String::new, |name| format!("dtype `{name}`: "))
    }

    /// The row's name, if it has one.
    pub(crate) fn named(&self) -> Option<&str> {
        self.name.as_deref().filter(|name| !name.is_empty())
    }
}

/// A valid DLPack type of one element: code, bits per lane, lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    code: TypeCode,
    bits: u8,
    lanes: u16,
}

impl Layout {
    fn bytes(self) -> usize {
        (usize::from(self.bits) * usize::from(self.lanes)).div_ceil(8)
    }

    /// The runtime's Rust type of this DLPack type (every valid one has one).
    fn runtime_type(self) -> Option<&'static str> {
        RUNTIME_TYPES.iter().find(|row| Layout { code: row.1, bits: row.2, lanes: row.3 } == self).map(|row| row.0)
    }

    /// Whether generated/amso.h defines this element's C type itself, under the spec's `c`.
    fn defines_c_type(self) -> bool {
        self.lanes > 1 || self.code.c_type(self.bits).is_none()
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.lanes == 1 { "" } else { "s" };
        let bytes = self.bytes();
        let byte_plural = if bytes == 1 { "" } else { "s" };
        write!(
            f,
            "{} {} bits x {} lane{plural} ({bytes} byte{byte_plural})",
            self.code.dlpack_name(),
            self.bits,
            self.lanes
        )
    }
}

/// `name:` a dtype name that is also a Rust identifier (it names the dtype's type alias in
/// `amso_runtime::dtypes`).
pub(crate) fn name(name: &str) -> Result<(), String> {
    check_dtype_name(name)?;
    if syn::parse_str::<syn::Ident>(name).is_err() {
        return Err(format!(
            "dtype name `{name}` is a Rust keyword, and it names the dtype's type in amso_runtime::dtypes: pick another \
             name"
        ));
    }
    Ok(())
}

/// `rust:` a Rust type the runtime knows, whose DLPack type is the row's. `Ok` is the type as
/// the table writes it (`num_complex::Complex<f32>`), to find two dtypes of one type.
pub(crate) fn rust_type(row: &Row, text: &str) -> Result<String, String> {
    let ty = syn::parse_str::<syn::Type>(text)
        .map_err(|e| format!("`{text}` is not a Rust type ({e}): write a type path such as `f32` or `half::f16`"))?;
    let compact: String = quote::quote!(#ty).to_string().chars().filter(|c| !c.is_whitespace()).collect();
    let written = compact.strip_prefix("::").unwrap_or(&compact);
    let wanted = row.layout().and_then(|layout| layout.runtime_type().map(|ty| (layout, ty)));
    let Some(&(known, code, bits, lanes)) = RUNTIME_TYPES.iter().find(|row| row.0 == written) else {
        let names: Vec<&str> = RUNTIME_TYPES.iter().map(|row| row.0).collect();
        let fix = match (wanted, closest(written, &names)) {
            (Some((layout, ty)), _) => format!("a {layout} element is `{ty}`: write rust: \"{ty}\""),
            (None, Some(near)) => format!("did you mean `{near}`?"),
            (None, None) => "write one of them".to_string(),
        };
        let own =
            if written.starts_with("crate::") { " (a `crate::` path names amso-runtime's own types)" } else { "" };
        return Err(format!(
            "`{text}` is not a Rust type amso-runtime holds as an element{own}; it knows {}; {fix}. (A type it lacks is \
             declared in your own crate with #[derive(amso_macros::Element)].)",
            names.join(", ")
        ));
    };
    let theirs = Layout { code, bits, lanes };
    match wanted {
        Some((layout, ty)) if layout != theirs => Err(format!(
            "`{text}` is {theirs}, but this dtype says {layout}: write rust: \"{ty}\", or fix code, bits and lanes"
        )),
        _ => Ok(known.to_string()),
    }
}

/// `code:` a DLPack 1.3 element type code, by its enumerator's name.
pub(crate) fn code(text: &str) -> Result<TypeCode, String> {
    TypeCode::from_dlpack_name(text).ok_or_else(|| {
        let names = TypeCode::dlpack_names().collect::<Vec<_>>().join(", ");
        let note = if text == "kDLOpaqueHandle" { " (kDLOpaqueHandle has no elements)" } else { "" };
        format!("unknown DLPack type code `{text}`{note}; DLPack 1.3's element type codes are {names}")
    })
}

/// `bits:` a width the row's code has.
pub(crate) fn bits(row: &Row, bits: i64) -> Result<(), String> {
    match row.code {
        Some(code) => code.check_bits(bits).map_err(|e| format!("{e}; write one of those")),
        // An unknown code is reported at `code:`; its widths are unknown.
        None => Ok(()),
    }
}

/// `lanes:` 1, or sub-byte lanes that fill one byte.
pub(crate) fn lanes(row: &Row, lanes: i64) -> Result<(), String> {
    match (row.code, row.bits) {
        (Some(code), Some(bits)) if code.check_bits(bits.into()).is_ok() => code.check_lanes(bits, lanes),
        _ => check_lane_count(lanes),
    }
}

/// `numpy:` NumPy's own dtype of the row's DLPack type (the raw bits, `uint8`, for packed
/// lanes), unless `numpy_module` names the package that defines it.
pub(crate) fn numpy(row: &Row, numpy: &str) -> Result<(), String> {
    if row.has_numpy_module {
        // `import amso` looks the name up in that module: NumPy's own types are NumPy's.
        let own = row
            .layout()
            .filter(|layout| layout.lanes == 1)
            .and_then(|layout| NUMPY_TYPES.iter().find(|(_, code, bits)| (*code, *bits) == (layout.code, layout.bits)));
        if let Some((name, _, _)) = own.or_else(|| NUMPY_TYPES.iter().find(|(name, _, _)| *name == numpy)) {
            return Err(format!(
                "`{numpy}` with a numpy_module: NumPy defines this type itself as `{name}`, and `import amso` would \
                 look it up in that module instead; drop numpy_module and write numpy: {name}"
            ));
        }
        return python_identifier(numpy).map_err(|why| {
            format!("numpy `{numpy}` {why}: write the dtype's name as its module spells it (ml_dtypes' `float8_e5m2`)")
        });
    }
    let elsewhere = "a dtype of another package names the package in numpy_module (ml_dtypes for bfloat16 and the \
                     float8, float6 and float4 types)";
    let Some(&(_, code, bits)) = NUMPY_TYPES.iter().find(|row| row.0 == numpy) else {
        let names = NUMPY_TYPES.iter().map(|row| row.0).collect::<Vec<_>>().join(", ");
        return Err(format!("`{numpy}` is not a dtype of NumPy itself ({names}); {elsewhere}"));
    };
    let Some(layout) = row.layout() else {
        return Ok(());
    };
    let (wanted, why) = if layout.lanes > 1 && layout.bits >= 8 {
        ((layout.code, layout.bits), "NumPy shows a vector as its lanes, an axis of its lane type")
    } else if layout.lanes > 1 {
        (
            (TypeCode::UInt, u8::try_from(layout.bytes() * 8).unwrap_or(0)),
            "packed lanes show in NumPy as their raw bits",
        )
    } else {
        ((layout.code, layout.bits), "NumPy would read its values as another type")
    };
    if (code, bits) == wanted {
        return Ok(());
    }
    let fix = match NUMPY_TYPES.iter().find(|row| (row.1, row.2) == wanted) {
        Some(row) => format!("write numpy: {}", row.0),
        None => format!("NumPy has no such dtype: {elsewhere}"),
    };
    Err(format!("NumPy's `{numpy}` is {} {bits}-bit, but this dtype is {layout}: {why}; {fix}", code.dlpack_name()))
}

/// `numpy_module:` a module name that `import` takes.
pub(crate) fn numpy_module(module: &str) -> Result<(), String> {
    if module.split('.').all(|part| python_identifier(part).is_ok()) {
        return Ok(());
    }
    let hint = if module.contains('-') {
        format!(" (the package `{module}` is imported as `{}`)", module.replace('-', "_"))
    } else {
        String::new()
    };
    Err(format!(
        "`{module}` is not a Python module name{hint}: write the name `import` takes, dotted identifiers such as \
         ml_dtypes"
    ))
}

/// `c:` the C type generated/amso.h gives the row's elements: C's own (`float`, `int32_t`)
/// where there is one, else a name of amso's that amso.h defines (`amso_float8_e5m2_t`).
pub(crate) fn c_type(row: &Row, c: &str) -> Result<(), String> {
    let identifier = c.chars().next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
    if !identifier {
        return Err(format!(
            "`{c}` is not a C type name (letters, digits and `_`, not starting with a digit): write e.g. c: float"
        ));
    }
    let Some(layout) = row.layout() else {
        return Ok(());
    };
    if !layout.defines_c_type() {
        let wanted = layout.code.c_type(layout.bits).expect("checked by defines_c_type");
        return if c == wanted {
            Ok(())
        } else {
            Err(format!(
                "`{c}` is not the C type of a {layout} element, which generated/amso.h spells `{wanted}`: write c: \
                 {wanted}"
            ))
        };
    }
    let taken = TypeCode::table().any(|(_, name, widths)| {
        let code = TypeCode::from_dlpack_name(name).expect("the table's own names");
        widths.iter().any(|&bits| code.c_type(bits) == Some(c))
    });
    if c.starts_with("amso_") && c.ends_with("_t") && !taken {
        return Ok(());
    }
    let suggestion = format!("amso_{}_t", row.named().unwrap_or("NAME"));
    Err(format!(
        "generated/amso.h defines the C type of a {layout} element as a struct named by c, so c is a new name of \
         amso's (amso_..._t), not `{c}`: write c: {suggestion}"
    ))
}

/// Whether generated/amso.h defines the row's C type (so two rows may not share its name).
pub(crate) fn defines_c_type(row: &Row) -> bool {
    row.layout().is_some_and(Layout::defines_c_type)
}

/// An `instantiations` entry's `dtype:` a name of the dtype table or a record (`None`: the
/// table is unreadable, and that is the mistake reported).
pub(crate) fn dtype_ref(known: Option<&[String]>, records: &[Option<String>], name: &str) -> Result<(), String> {
    let Some(known) = known else {
        return Ok(());
    };
    if known.iter().any(|k| k == name) || records.iter().flatten().any(|record| record == name) {
        return Ok(());
    }
    let names: Vec<&str> = known.iter().map(String::as_str).collect();
    let near = closest(name, &names).map_or_else(String::new, |near| format!(" (did you mean `{near}`?)"));
    Err(format!(
        "unknown dtype `{name}`; the dtype table has: {}{near}; use one of them, or add `{name}` to the table",
        names.join(", ")
    ))
}

/// A record's `name:` a dtype-like name (lowercase; it becomes `amso_NAME_t` in C and a CamelCase
/// struct in Rust) that no dtype of the table has.
pub(crate) fn record_name(known: Option<&[String]>, name: &str) -> Result<(), String> {
    check_dtype_name(name).map_err(|e| e.replacen("dtype name", "record name", 1))?;
    if C_KEYWORDS.contains(&name) {
        return Err(format!(
            "record name `{name}` is a C or C++ keyword, and amso.cuh declares amso::{name}: pick another name"
        ));
    }
    if known.unwrap_or_default().iter().any(|k| k == name) {
        return Err(format!(
            "record `{name}` is named like a dtype of the table, and a name is one element type's: rename the record"
        ));
    }
    Ok(())
}

/// A record field's `name:` an identifier of C, C++ and Rust.
pub(crate) fn field_name(name: &str) -> Result<(), String> {
    let identifier = name.chars().next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
    if !identifier {
        return Err(format!(
            "field name `{name}` is not an identifier (letters, digits and `_`, not starting with a digit): it names \
             a member of a C struct and a Rust field"
        ));
    }
    if C_KEYWORDS.contains(&name) || syn::parse_str::<syn::Ident>(name).is_err() {
        return Err(format!("field name `{name}` is a C, C++ or Rust keyword: pick another name"));
    }
    Ok(())
}

/// A record field's `dtype:` a scalar dtype of the table (lanes 1): not a record (records of
/// records are not supported yet), not a vector.
pub(crate) fn field_dtype(
    known: Option<&[String]>,
    records: &[Option<String>],
    rows: &[Row],
    name: &str,
) -> Result<(), String> {
    let Some(known) = known else {
        return Ok(());
    };
    if records.iter().flatten().any(|record| record == name) {
        return Err(format!(
            "field dtype `{name}` is a record: records of records are not supported yet; write its fields out"
        ));
    }
    if !known.iter().any(|k| k == name) {
        let names: Vec<&str> = known.iter().map(String::as_str).collect();
        let near = closest(name, &names).map_or_else(String::new, |near| format!(" (did you mean `{near}`?)"));
        return Err(format!(
            "unknown field dtype `{name}`; a field is a scalar dtype of the table: {}{near}",
            names.join(", ")
        ));
    }
    match rows.iter().find(|row| row.named() == Some(name)).and_then(|row| row.lanes) {
        Some(lanes) if lanes != 1 => Err(format!(
            "field dtype `{name}` has {lanes} lanes: a field is a scalar (lanes: 1); give it a shape instead, e.g. \
             shape: [{lanes}] of its lane type"
        )),
        _ => Ok(()),
    }
}

/// One length of a record field's `shape:`.
pub(crate) fn shape_length(length: i64) -> Result<(), String> {
    if (1..=1 << 24).contains(&length) {
        Ok(())
    } else {
        Err(format!("a shape's length is a positive number (at most 2^24), not {length}: write e.g. shape: [3]"))
    }
}

/// Words that C, C++ or CUDA's headers reserve, which a record or field name may not be.
const C_KEYWORDS: [&str; 52] = [
    "alignas",
    "alignof",
    "auto",
    "bool",
    "break",
    "case",
    "char",
    "class",
    "const",
    "constexpr",
    "continue",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "explicit",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "namespace",
    "new",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "true",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
];

/// One value of an entry's `ndim:` list.
pub(crate) fn ndim(ndim: i64) -> Result<(), String> {
    if (1..=i64::from(MAX_NDIM)).contains(&ndim) {
        Ok(())
    } else {
        Err(format!("ndim {ndim} is outside the supported range 1..={MAX_NDIM}: list ndims from 1 to {MAX_NDIM}"))
    }
}

fn python_identifier(text: &str) -> Result<(), &'static str> {
    let identifier = text.chars().next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && text.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
    if !identifier {
        Err("is not a Python identifier (letters, digits and `_`, not starting with a digit)")
    } else if PYTHON_KEYWORDS.contains(&text) {
        Err("is a Python keyword")
    } else {
        Ok(())
    }
}

/// The candidate nearest to `text` by edit distance, if it is near (a typo away).
fn closest<'a>(text: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut previous: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut current = vec![i + 1];
            for (j, &cb) in b.iter().enumerate() {
                current.push((previous[j] + usize::from(ca != cb)).min(previous[j + 1] + 1).min(current[j] + 1));
            }
            previous = current;
        }
        previous[b.len()]
    };
    let limit = (text.chars().count() / 4).clamp(1, 2);
    candidates
        .iter()
        .map(|&c| (distance(text, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}
