use super::*;

const DTYPES: &str = "dtypes:
  - {name: float32, rust: f32, code: kDLFloat, bits: 32, lanes: 1, numpy: float32, c: float}
  - {name: int64, rust: i64, code: kDLInt, bits: 64, lanes: 1, numpy: int64, c: int64_t}
";

fn parse(instantiations: &str) -> Result<Spec, SpecError> {
    Spec::parse(&format!("{DTYPES}instantiations:\n{instantiations}"), "t.yaml")
}

/// The messages for the two good rows plus `row` (line 4, `  - {row}`), with no instantiations.
fn row_errors(row: &str) -> Vec<String> {
    let text = format!("{DTYPES}  - {{{row}}}\ninstantiations: []\n");
    Spec::parse(&text, "t.yaml").expect_err("the row has a mistake").messages
}

/// `t.yaml:LINE:COL:` where COL is where `needle` starts on line `line` of `text` (1-based),
/// found from the text itself rather than from the parser.
fn at(text: &str, line: usize, needle: &str) -> String {
    let column = text.lines().nth(line - 1).unwrap().find(needle).unwrap_or_else(|| panic!("{needle:?} not on {line}"));
    format!("t.yaml:{line}:{}:", column + 1)
}

/// The one message for a mistake in row `row` (on line 4), checked to start at `needle`'s
/// position with `path` and to contain each of `words`.
fn assert_row_error(row: &str, needle: &str, path: &str, words: &[&str]) {
    let messages = row_errors(row);
    assert_eq!(messages.len(), 1, "{messages:#?}");
    let text = format!("{DTYPES}  - {{{row}}}\n");
    let prefix = format!("{} {path}: ", at(&text, 4, needle));
    assert!(messages[0].starts_with(&prefix), "{:?} does not start with {prefix:?}", messages[0]);
    for word in words {
        assert!(messages[0].contains(word), "{:?} lacks {word:?}", messages[0]);
    }
}

#[test]
fn bundled_spec_is_valid_and_has_the_amso_set() {
    let spec = crate::bundled_spec().unwrap();
    for dtype in ["int32", "int64", "float32", "float64"] {
        for ndim in 1..=3 {
            assert!(spec.instantiations.contains(&Instantiation { dtype: dtype.into(), ndim }), "{dtype} {ndim}");
        }
    }
    let names: Vec<_> = spec.dtypes.iter().map(|d| d.name.as_str()).collect();
    for expected in [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ] {
        assert!(names.contains(&expected), "{expected} missing from the dtype table");
    }
}

#[test]
fn workspace_spec_parses_clean() {
    // The file people edit (absent from a packaged crate, whose bundled copy is tested above).
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../specs/types.yaml");
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Err(e) = Spec::parse(&text, "specs/types.yaml") {
            panic!("specs/types.yaml has mistakes:\n{e}");
        }
    }
}

#[test]
fn a_bad_bits_late_in_the_real_file_is_reported_on_its_own_line() {
    // The user's report: a mistake on a late line was placed at the start of the dtype list.
    let line = crate::BUNDLED_SPEC.lines().position(|l| l.contains("{name: float64,")).unwrap() + 1;
    assert!(line > 25, "float64 is a late row of the table (line {line})");
    let text: String = crate::BUNDLED_SPEC
        .lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == line { l.replace("bits: 64,", "bits: 46,") } else { l.to_string() } + "\n")
        .collect();
    let err = Spec::parse(&text, "t.yaml").unwrap_err();
    assert_eq!(err.messages.len(), 1, "{err}");
    let prefix = at(&text, line, "46,");
    assert!(err.messages[0].starts_with(&format!("{prefix} dtypes[")), "{err} does not start with {prefix}");
    assert!(
        err.messages[0].contains("].bits: dtype `float64`: kDLFloat has 16, 32, 64 bits per lane, not 46"),
        "{err}"
    );
}

#[test]
fn expands_ndim_lists_in_order() {
    let spec = parse("  - {dtype: float32, ndim: [1, 3]}\n  - {dtype: int64, ndim: [2]}\n").unwrap();
    let pairs: Vec<_> = spec.instantiations.iter().map(|i| (i.dtype.as_str(), i.ndim)).collect();
    assert_eq!(pairs, [("float32", 1), ("float32", 3), ("int64", 2)]);
    assert_eq!(spec.dtype("int64").unwrap().typestr(), "<i8");
}

#[test]
fn block_style_rows_are_located_too() {
    let text = "dtypes:
  - name: float32
    rust: f32
    code: kDLFloat
    bits: 33
    lanes: 1
    numpy: float32
    c: float
instantiations: []
";
    let err = Spec::parse(text, "t.yaml").unwrap_err();
    assert_eq!(err.messages.len(), 1, "{err}");
    assert!(err.messages[0].starts_with("t.yaml:5:11: dtypes[0].bits: dtype `float32`: kDLFloat has"), "{err}");
}

#[test]
fn bits_the_code_lacks() {
    assert_row_error(
        "name: half, rust: \"half::f16\", code: kDLFloat, bits: 12, lanes: 1, numpy: float16, c: uint16_t",
        "12,",
        "dtypes[2].bits",
        &["dtype `half`", "kDLFloat has 16, 32, 64 bits per lane, not 12", "write one of those"],
    );
    assert_row_error(
        "name: half, rust: \"half::f16\", code: kDLFloat, bits: eight, lanes: 1, numpy: float16, c: uint16_t",
        "eight",
        "dtypes[2].bits",
        &["bits is a whole number, not `eight`"],
    );
}

#[test]
fn lanes_other_than_one_are_packed_sub_byte_lanes_or_cuda_vectors() {
    assert_row_error(
        "name: vec3, rust: f64, code: kDLFloat, bits: 32, lanes: 3, numpy: float32, c: float",
        "3, numpy",
        "dtypes[2].lanes",
        &["3 lanes of 32-bit kDLFloat", "amso's vector element types are CUDA's", "write lanes: 1, 2 or 4"],
    );
    assert_row_error(
        "name: double2, rust: f64, code: kDLFloat, bits: 64, lanes: 2, numpy: float64, c: amso_double2_t",
        "2, numpy",
        "dtypes[2].lanes",
        &["2 lanes of 64-bit kDLFloat", "2 or 4 lanes of a 32-bit float or integer", "); write lanes: 1"],
    );
    assert_row_error(
        "name: short4, rust: i16, code: kDLInt, bits: 16, lanes: 4, numpy: int16, c: amso_short4_t",
        "4, numpy",
        "dtypes[2].lanes",
        &["4 lanes of 16-bit kDLInt", "); write lanes: 1"],
    );
    assert_row_error(
        "name: fp4x3, rust: u8, code: kDLFloat4_e2m1fn, bits: 4, lanes: 3, numpy: uint8, c: amso_fp4x3_t",
        "3, numpy",
        "dtypes[2].lanes",
        &["3 lanes of 4 bits are 12 bits, not one byte", "write lanes: 2 or 1"],
    );
    assert_row_error(
        "name: fp6x4, rust: u8, code: kDLFloat6_e2m3fn, bits: 6, lanes: 4, numpy: uint8, c: amso_fp6x4_t",
        "4, numpy",
        "dtypes[2].lanes",
        &["no number of 6-bit lanes does, so write lanes: 1"],
    );
    assert_row_error(
        "name: many, rust: u8, code: kDLFloat4_e2m1fn, bits: 4, lanes: 9223372036854775807, numpy: uint8, c: amso_m_t",
        "9223372036854775807",
        "dtypes[2].lanes",
        &["lanes of 4 bits are", "write lanes: 2 or 1"],
    );
    assert_row_error(
        "name: none, rust: f64, code: kDLFloat, bits: 32, lanes: 0, numpy: float32, c: float",
        "0, numpy",
        "dtypes[2].lanes",
        &["lanes must be at least 1, not 0"],
    );
}

#[test]
fn rust_types_are_ones_the_runtime_knows() {
    // The user's typos: each was accepted, and failed in the Rust build without a location.
    assert_row_error(
        "name: half, rust: \"half::f61\", code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: uint16_t",
        "\"half::f61\"",
        "dtypes[2].rust",
        &[
            "`half::f61` is not a Rust type amso-runtime holds as an element",
            "it knows bool, i8,",
            "half::bf16",
            "crate::element::Float4E2M1FnX2",
            "a kDLFloat 16 bits x 1 lane (2 bytes) element is `half::f16`: write rust: \"half::f16\"",
        ],
    );
    assert_row_error(
        "name: single, rust: \"f33\", code: kDLFloat, bits: 32, lanes: 1, numpy: float32, c: float",
        "\"f33\"",
        "dtypes[2].rust",
        &["`f33` is not a Rust type", "write rust: \"f32\""],
    );
    assert_row_error(
        "name: packed, rust: \"crate::element::Packed\", code: kDLFloat4_e2m1fn, bits: 4, lanes: 2, numpy: uint8, \
         c: amso_packed_t",
        "\"crate::",
        "dtypes[2].rust",
        &["a `crate::` path names amso-runtime's own types", "write rust: \"crate::element::Float4E2M1FnX2\""],
    );
    assert_row_error(
        "name: half, rust: \"f32; drop\", code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: uint16_t",
        "\"f32",
        "dtypes[2].rust",
        &["`f32; drop` is not a Rust type (", "write a type path"],
    );
}

#[test]
fn a_rust_type_has_the_rows_size_and_code() {
    assert_row_error(
        "name: half, rust: f32, code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: uint16_t",
        "f32,",
        "dtypes[2].rust",
        &[
            "`f32` is kDLFloat 32 bits x 1 lane (4 bytes), but this dtype says kDLFloat 16 bits x 1 lane (2 bytes)",
            "write rust: \"half::f16\"",
        ],
    );
    assert_row_error(
        "name: e5m2, rust: u8, code: kDLFloat8_e5m2, bits: 8, lanes: 1, numpy: e5m2, c: amso_e5m2_t, numpy_module: m",
        "u8,",
        "dtypes[2].rust",
        &["`u8` is kDLUInt 8 bits x 1 lane (1 byte)", "write rust: \"microfloat::f8e5m2\""],
    );
    // A spelling of the same type is the same type.
    let text = format!("{DTYPES}instantiations: []\n").replace("rust: i64", "rust: \"::i64\"");
    assert!(Spec::parse(&text, "t.yaml").is_ok());
}

#[test]
fn a_rust_type_is_one_dtypes() {
    assert_row_error(
        "name: single, rust: \"f32\", code: kDLFloat, bits: 32, lanes: 1, numpy: float32, c: float",
        "\"f32\"",
        "dtypes[2].rust",
        &["`f32` is already the Rust type of dtype `float32`", "conflicting Element impls"],
    );
}

#[test]
fn unknown_type_code_lists_dlpacks() {
    assert_row_error(
        "name: half, rust: \"half::f16\", code: kDLFloaty, bits: 16, lanes: 1, numpy: float16, c: uint16_t",
        "kDLFloaty",
        "dtypes[2].code",
        &["unknown DLPack type code `kDLFloaty`", "kDLInt, kDLUInt, kDLFloat, kDLBfloat", "kDLFloat4_e2m1fn"],
    );
}

#[test]
fn c_types_are_amso_hs() {
    assert_row_error(
        "name: half, rust: \"half::f16\", code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: \"unsigned short\"",
        "\"unsigned",
        "dtypes[2].c",
        &["`unsigned short` is not a C type name", "write e.g. c: float"],
    );
    assert_row_error(
        "name: half, rust: \"half::f16\", code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: float",
        "float}",
        "dtypes[2].c",
        &["`float` is not the C type of a kDLFloat 16 bits x 1 lane (2 bytes) element", "write c: uint16_t"],
    );
    assert_row_error(
        "name: e5m2, rust: \"microfloat::f8e5m2\", code: kDLFloat8_e5m2, bits: 8, lanes: 1, numpy: float8_e5m2, \
         c: uint8_t, numpy_module: ml_dtypes",
        "uint8_t",
        "dtypes[2].c",
        &["a struct named by c", "not `uint8_t`", "write c: amso_e5m2_t"],
    );
    let text = "dtypes:
  - {name: e5m2, rust: \"microfloat::f8e5m2\", code: kDLFloat8_e5m2, bits: 8, lanes: 1, numpy: e5m2, c: amso_f8_t, numpy_module: m}
  - {name: e4m3, rust: \"microfloat::f8e4m3\", code: kDLFloat8_e4m3, bits: 8, lanes: 1, numpy: e4m3, c: amso_f8_t, numpy_module: m}
instantiations: []
";
    let err = Spec::parse(text, "t.yaml").unwrap_err();
    assert_eq!(err.messages.len(), 1, "{err}");
    assert!(err.messages[0].starts_with(&format!("{} dtypes[1].c: ", at(text, 3, "amso_f8_t"))), "{err}");
    assert!(err.messages[0].contains("`amso_f8_t` is already the C type of dtype `e5m2`"), "{err}");
}

#[test]
fn numpy_names_are_numpys_or_a_modules() {
    assert_row_error(
        "name: half, rust: \"half::f16\", code: kDLFloat, bits: 16, lanes: 1, numpy: half, c: uint16_t",
        "half, c",
        "dtypes[2].numpy",
        &["`half` is not a dtype of NumPy itself (bool, int8", "names the package in numpy_module"],
    );
    assert_row_error(
        "name: int, rust: i32, code: kDLInt, bits: 32, lanes: 1, numpy: float32, c: int32_t",
        "float32",
        "dtypes[2].numpy",
        &["NumPy's `float32` is kDLFloat 32-bit, but this dtype is kDLInt 32 bits", "write numpy: int32"],
    );
    assert_row_error(
        "name: brain, rust: \"half::bf16\", code: kDLBfloat, bits: 16, lanes: 1, numpy: float16, c: uint16_t",
        "float16",
        "dtypes[2].numpy",
        &["NumPy has no such dtype", "ml_dtypes for bfloat16"],
    );
    assert_row_error(
        "name: brain, rust: \"half::bf16\", code: kDLBfloat, bits: 16, lanes: 1, numpy: \"bfloat-16\", c: uint16_t, \
         numpy_module: ml_dtypes",
        "\"bfloat-16\"",
        "dtypes[2].numpy",
        &["`bfloat-16` is not a Python identifier"],
    );
    assert_row_error(
        "name: brain, rust: \"half::bf16\", code: kDLBfloat, bits: 16, lanes: 1, numpy: bfloat16, c: uint16_t, \
         numpy_module: ml-dtypes",
        "ml-dtypes",
        "dtypes[2].numpy_module",
        &["`ml-dtypes` is not a Python module name", "imported as `ml_dtypes`"],
    );
}

#[test]
fn dtype_names_are_identifiers_and_distinct() {
    assert_row_error(
        "name: type, rust: \"half::f16\", code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: uint16_t",
        "type,",
        "dtypes[2].name",
        &["dtype name `type` is a Rust keyword", "pick another name"],
    );
    assert_row_error(
        "name: \"float 16\", rust: \"half::f16\", code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: uint16_t",
        "\"float 16\"",
        "dtypes[2].name",
        &["dtype name `float 16` must be lowercase letters"],
    );
    assert_row_error(
        "name: float_32, rust: \"half::f16\", code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: uint16_t",
        "float_32",
        "dtypes[2].name",
        &["has the class names of dtype `float32` (dtypes[0]), MemArray1DFloat32"],
    );
}

#[test]
fn duplicate_dtype_is_an_error() {
    let messages =
        row_errors("name: int64, rust: \"half::f16\", code: kDLFloat, bits: 16, lanes: 1, numpy: float16, c: uint16_t");
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(
        messages[0].starts_with("t.yaml:4:12: dtypes[2].name: duplicate dtype `int64` (dtypes[1] is `int64` already)"),
        "{messages:#?}"
    );
}

#[test]
fn unknown_dtype_points_at_the_name() {
    let err = parse("  - {dtype: float17, ndim: [1]}\n").unwrap_err();
    assert_eq!(err.messages.len(), 1, "{err}");
    let msg = &err.messages[0];
    assert!(msg.starts_with("t.yaml:5:13: instantiations[0].dtype:"), "{msg}");
    assert!(msg.contains("unknown dtype `float17`") && msg.contains("float32, int64"), "{msg}");
    let err = parse("  - {dtype: floa32, ndim: [1]}\n").unwrap_err();
    assert!(err.messages[0].contains("(did you mean `float32`?)"), "{err}");
}

#[test]
fn ndim_out_of_range_is_reported_for_each_value() {
    let err = parse("  - {dtype: float32, ndim: [0, 2, 9]}\n").unwrap_err();
    assert_eq!(err.messages.len(), 2, "{err}");
    assert!(
        err.messages[0].starts_with("t.yaml:5:29: instantiations[0].ndim[0]: ndim 0 is outside the supported range"),
        "{err}"
    );
    assert!(err.messages[1].starts_with("t.yaml:5:35: instantiations[0].ndim[2]: ndim 9"), "{err}");
    // An ndim out of range twice is that mistake twice, not also a duplicate.
    let err = parse(
        "  - {dtype: float32, ndim: [0, 0]}
",
    )
    .unwrap_err();
    assert_eq!(err.messages.len(), 2, "{err}");
    assert!(err.messages.iter().all(|m| m.contains("ndim 0 is outside")), "{err}");
}

#[test]
fn ndim_is_a_non_empty_list() {
    let err = parse("  - {dtype: float32, ndim: []}\n  - {dtype: int64, ndim: 3}\n").unwrap_err();
    assert_eq!(err.messages.len(), 2, "{err}");
    assert!(err.messages[0].starts_with("t.yaml:5:28: instantiations[0].ndim: ndim is empty: list the ndims"), "{err}");
    assert!(
        err.messages[1].starts_with("t.yaml:6:26: instantiations[1].ndim: ndim is a list: write ndim: [3]"),
        "{err}"
    );
}

#[test]
fn duplicate_instantiation_is_an_error() {
    let err = parse("  - {dtype: float32, ndim: [1, 2]}\n  - {ndim: [2], dtype: float32}\n").unwrap_err();
    assert_eq!(err.messages.len(), 1, "{err}");
    assert!(err.messages[0].contains("duplicate instantiation (float32, ndim 2)"), "{err}");
    // At the repeated value, whichever key comes first.
    assert!(err.messages[0].starts_with("t.yaml:6:13: instantiations[1].ndim[0]"), "{err}");
}

#[test]
fn every_mistake_is_collected() {
    let text = "dtypes:
  - {name: Bad, rust: 'not a type', code: kDLInt, bits: 12, lanes: 0, numpy: x, c: x}
instantiations:
  - {dtype: nope, ndim: [11]}
";
    let err = Spec::parse(text, "t.yaml").unwrap_err();
    let all = err.to_string();
    for needle in [
        "t.yaml:2:12: dtypes[0].name: dtype name `Bad`",
        "t.yaml:2:23: dtypes[0].rust: dtype `Bad`: `not a type` is not a Rust type",
        "t.yaml:2:57: dtypes[0].bits: dtype `Bad`: kDLInt has 8, 16, 32, 64 bits per lane, not 12",
        "t.yaml:2:68: dtypes[0].lanes: dtype `Bad`: lanes must be at least 1",
        "t.yaml:2:78: dtypes[0].numpy: dtype `Bad`: `x` is not a dtype of NumPy itself",
        "t.yaml:4:13: instantiations[0].dtype: unknown dtype `nope`",
        "t.yaml:4:26: instantiations[0].ndim[0]: ndim 11",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(err.messages.len(), 7, "{all}");
}

#[test]
fn malformed_yaml_reports_its_position() {
    let err = Spec::parse("dtypes: [\ninstantiations: {", "t.yaml").unwrap_err();
    assert_eq!(err.messages.len(), 1);
    assert!(err.messages[0].starts_with("t.yaml:"), "{err}");
    let pos: Vec<&str> = err.messages[0].splitn(4, ':').collect();
    assert!(pos[1].parse::<u32>().is_ok() && pos[2].parse::<u32>().is_ok(), "{err}");
}

#[test]
fn unknown_fields_are_errors() {
    let err = parse("  - {dtype: float32, ndims: [1]}\n").unwrap_err();
    assert!(err.messages[0].contains("unknown field `ndims`"), "{err}");
}

#[test]
fn every_valid_layout_has_one_runtime_type() {
    for (_, name, widths) in crate::TypeCode::table() {
        let code = crate::TypeCode::from_dlpack_name(name).unwrap();
        for &bits in widths {
            for lanes in 1..=16u16 {
                if code.check_lanes(bits, lanes.into()).is_err() {
                    continue;
                }
                let found = RUNTIME_TYPES.iter().filter(|t| (t.1, t.2, t.3) == (code, bits, lanes)).count();
                assert_eq!(found, 1, "{name} {bits} bits x {lanes} lanes");
            }
        }
    }
}

#[test]
fn dtype_lookup_by_rust_type() {
    let spec = crate::bundled_spec().unwrap();
    assert_eq!(spec.dtype_by_name_or_rust("f32").unwrap().name, "float32");
    assert_eq!(spec.dtype_by_name_or_rust("half :: f16").unwrap().name, "float16");
    assert_eq!(spec.dtype_by_name_or_rust("num_complex::Complex<f32>").unwrap().name, "complex64");
    assert!(spec.dtype_by_name_or_rust("f17").is_none());
}

#[test]
fn malformed_yaml_is_the_one_mistake_reported() {
    // A tab on a later line: the rows above it are fine and must not be blamed.
    let text = format!("{DTYPES}instantiations:\n  - {{dtype: float32, ndim: [1]}}\n\t- {{dtype: int64, ndim: [1]}}\n");
    let messages = Spec::parse(&text, "t.yaml").unwrap_err().messages;
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(messages[0].starts_with("t.yaml:6:1:") && messages[0].contains("cannot start any token"), "{messages:#?}");
}

#[test]
fn a_numpy_type_is_not_looked_up_in_another_module() {
    let messages = row_errors(
        "name: f32b, rust: f32, code: kDLFloat, bits: 32, lanes: 1, numpy: float32, numpy_module: ml_dtypes, c: float",
    );
    assert!(messages.iter().any(|m| m.contains("NumPy defines this type itself as `float32`")), "{messages:#?}");
}

/// The spec `DTYPES` (float32, int64) plus int8, float64, complex128 and `records` (text after
/// `records:`), with no instantiations.
fn records_spec(records: &str) -> String {
    format!(
        "{DTYPES}  - {{name: int8, rust: i8, code: kDLInt, bits: 8, lanes: 1, numpy: int8, c: int8_t}}
  - {{name: float64, rust: f64, code: kDLFloat, bits: 64, lanes: 1, numpy: float64, c: double}}
  - {{name: complex128, rust: \"num_complex::Complex<f64>\", code: kDLComplex, bits: 128, lanes: 1, numpy: complex128, c: amso_complex128_t}}
  - {{name: float32x4, rust: \"[f32; 4]\", code: kDLFloat, bits: 32, lanes: 4, numpy: float32, c: amso_float32x4_t}}
instantiations: []
records:
{records}"
    )
}

/// The one message for a mistake in `records`, checked to start at `needle`'s position on the
/// spec's line `line` and to contain each of `words`.
fn assert_record_error(records: &str, line: usize, needle: &str, words: &[&str]) {
    let text = records_spec(records);
    let messages = Spec::parse(&text, "t.yaml").expect_err("the record has a mistake").messages;
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(messages[0].starts_with(&at(&text, line, needle)), "{:?} is not at {needle:?} of line {line}", messages[0]);
    for word in words {
        assert!(messages[0].contains(word), "{:?} lacks {word:?}", messages[0]);
    }
}

/// Line 10 of `records_spec` is the first line after `records:`.
const FIRST: usize = 10;

#[test]
fn the_bundled_particle_is_laid_out_as_c_does() {
    let spec = crate::bundled_spec().unwrap();
    let particle = spec.record("particle").expect("the bundled spec's worked example");
    let layout: Vec<_> =
        particle.fields.iter().map(|f| (f.name.as_str(), f.dtype.as_str(), f.shape.clone(), f.offset)).collect();
    assert_eq!(
        layout,
        [
            ("pos", "float32", vec![3], 0),
            ("vel", "float32", vec![3], 12),
            ("mass", "float64", vec![], 24),
            ("id", "int64", vec![], 32)
        ]
    );
    assert_eq!((particle.size, particle.align), (40, 8));
    assert_eq!(
        (particle.camel(), particle.c_type(), particle.typestr()),
        ("Particle".into(), "amso_particle_t".into(), "|V40".into())
    );
}

#[test]
fn records_are_padded_as_c_pads() {
    let spec = Spec::parse(
        &records_spec(
            "  - {name: padded, fields: [{name: a, dtype: int8}, {name: b, dtype: float64}]}
  - {name: tail, fields: [{name: b, dtype: float64}, {name: a, dtype: int8}]}
  - {name: grid, fields: [{name: a, dtype: int8}, {name: m, dtype: float32, shape: [2, 3]}, {name: c, dtype: int8, shape: [3]}]}
  - {name: wave, fields: [{name: a, dtype: int8}, {name: z, dtype: complex128}]}
  - {name: bytes, fields: [{name: a, dtype: int8, shape: [5]}]}
",
        ),
        "t.yaml",
    )
    .unwrap();
    let layout = |name: &str| {
        let record = spec.record(name).unwrap();
        (record.fields.iter().map(|f| f.offset).collect::<Vec<_>>(), record.size, record.align)
    };
    assert_eq!(layout("padded"), (vec![0, 8], 16, 8));
    assert_eq!(layout("tail"), (vec![0, 8], 16, 8));
    // 2x3 float32 at 4 (24 bytes), 3 int8 at 28, size 31 rounded up to 32.
    assert_eq!(layout("grid"), (vec![0, 4, 28], 32, 4));
    // complex128 aligns as its float64 parts.
    assert_eq!(layout("wave"), (vec![0, 8], 24, 8));
    assert_eq!(layout("bytes"), (vec![0], 5, 1));
}

#[test]
fn a_field_of_an_unknown_dtype_is_located_and_named() {
    assert_record_error(
        "  - {name: p, fields: [{name: a, dtype: float33}]}\n",
        FIRST,
        "float33",
        &["records[0].fields[0].dtype: record `p`: unknown field dtype `float33`", "did you mean `float32`?"],
    );
}

#[test]
fn duplicate_fields_and_records_are_refused() {
    assert_record_error(
        "  - {name: p, fields: [{name: a, dtype: int8}, {name: a, dtype: float64}]}\n",
        FIRST,
        "a, dtype: float64",
        &["records[0].fields[1].name: record `p`: duplicate field `a`"],
    );
    let twice = "  - {name: p, fields: [{name: a, dtype: int8}]}\n  - {name: p, fields: [{name: a, dtype: int8}]}\n";
    assert_record_error(twice, FIRST + 1, "p, fields", &["records[1].name: duplicate record `p` (records[0]"]);
    assert_record_error(
        "  - {name: float64, fields: [{name: a, dtype: int8}]}\n",
        FIRST,
        "float64, fields",
        &["records[0].name: record `float64` is named like a dtype of the table"],
    );
}

#[test]
fn a_record_has_fields_and_shapes_have_positive_lengths() {
    assert_record_error(
        "  - {name: p, fields: []}\n",
        FIRST,
        "[]",
        &["records[0].fields: record `p`: a record has at least one field"],
    );
    assert_record_error(
        "  - {name: p, fields: [{name: a, dtype: int8, shape: []}]}\n",
        FIRST,
        "[]",
        &["records[0].fields[0].shape: record `p`: shape is empty"],
    );
    assert_record_error(
        "  - {name: p, fields: [{name: a, dtype: int8, shape: [3, 0]}]}\n",
        FIRST,
        "0]",
        &["records[0].fields[0].shape[1]: record `p`: a shape's length is a positive number", "not 0"],
    );
}

#[test]
fn records_of_records_and_vector_fields_are_refused() {
    let nested = "  - {name: p, fields: [{name: a, dtype: int8}]}\n  - {name: q, fields: [{name: inner, dtype: p}]}\n";
    assert_record_error(
        nested,
        FIRST + 1,
        "p}]}",
        &["records[1].fields[0].dtype: record `q`: field dtype `p` is a record: records of records are not supported yet"],
    );
    assert_record_error(
        "  - {name: p, fields: [{name: v, dtype: float32x4}]}\n",
        FIRST,
        "float32x4",
        &["field dtype `float32x4` has 4 lanes: a field is a scalar (lanes: 1)"],
    );
    assert_record_error(
        "  - {name: p, fields: [{name: struct, dtype: int8}]}\n",
        FIRST,
        "struct, dtype",
        &["field name `struct` is a C, C++ or Rust keyword"],
    );
}

#[test]
fn a_record_is_instantiated_by_name() {
    let text = records_spec("  - {name: p, fields: [{name: a, dtype: int8}]}\n")
        .replace("instantiations: []", "instantiations:\n  - {dtype: p, ndim: [1, 2]}");
    let spec = Spec::parse(&text, "t.yaml").unwrap();
    let pairs: Vec<(String, u8)> = spec.record_instances().map(|(r, n)| (r.name.clone(), n)).collect();
    assert_eq!(pairs, [("p".to_string(), 1), ("p".to_string(), 2)]);
    assert_eq!(spec.instances().count(), 0, "records are not dtypes of the table");
}

#[test]
fn cuda_vectors_are_dtypes_of_their_own() {
    let spec = Spec::parse(&records_spec("  - {name: p, fields: [{name: a, dtype: int8}]}\n"), "t.yaml").unwrap();
    let vector = spec.dtype("float32x4").unwrap();
    assert!(vector.is_vector() && vector.itemsize() == 16 && crate::record::alignment(vector) == 16);
}
