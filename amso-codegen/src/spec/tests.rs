use super::*;

const DTYPES: &str = "dtypes:
  - {name: float32, rust: f32, code: kDLFloat, bits: 32, lanes: 1, numpy: float32, c: float}
  - {name: int64, rust: i64, code: kDLInt, bits: 64, lanes: 1, numpy: int64, c: int64_t}
";

fn parse(instantiations: &str) -> Result<Spec, SpecError> {
    Spec::parse(&format!("{DTYPES}instantiations:\n{instantiations}"), "t.yaml")
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
fn expands_ndim_lists_in_order() {
    let spec = parse("  - {dtype: float32, ndim: [1, 3]}\n  - {dtype: int64, ndim: [2]}\n").unwrap();
    let pairs: Vec<_> = spec.instantiations.iter().map(|i| (i.dtype.as_str(), i.ndim)).collect();
    assert_eq!(pairs, [("float32", 1), ("float32", 3), ("int64", 2)]);
    assert_eq!(spec.dtype("int64").unwrap().typestr(), "<i8");
}

#[test]
fn unknown_dtype_points_at_the_name() {
    let err = parse("  - {dtype: float17, ndim: [1]}\n").unwrap_err();
    assert_eq!(err.messages.len(), 1, "{err}");
    let msg = &err.messages[0];
    assert!(msg.starts_with("t.yaml:5:5: instantiations[0]:"), "{msg}");
    assert!(msg.contains("unknown dtype `float17`") && msg.contains("float32, int64"), "{msg}");
}

#[test]
fn ndim_out_of_range_is_reported_for_each_value() {
    let err = parse("  - {dtype: float32, ndim: [0, 2, 9]}\n").unwrap_err();
    assert_eq!(err.messages.len(), 2, "{err}");
    assert!(
        err.messages[0].starts_with("t.yaml:5:28: instantiations[0].ndim:") && err.messages[0].contains("ndim 0"),
        "{err}"
    );
    assert!(err.messages[1].starts_with("t.yaml:5:28:") && err.messages[1].contains("ndim 9"), "{err}");
}

#[test]
fn duplicate_instantiation_is_an_error() {
    let err = parse("  - {dtype: float32, ndim: [1, 2]}\n  - {dtype: float32, ndim: [2]}\n").unwrap_err();
    assert_eq!(err.messages.len(), 1, "{err}");
    assert!(err.messages[0].contains("duplicate instantiation (float32, ndim 2)"), "{err}");
    assert!(err.messages[0].starts_with("t.yaml:6:28: instantiations[1].ndim"), "{err}");
}

#[test]
fn duplicate_dtype_is_an_error() {
    let text = format!("{DTYPES}  - {{name: int64, rust: i64, code: kDLInt, bits: 64, lanes: 1, numpy: int64, c: x}}\ninstantiations: []\n");
    let err = Spec::parse(&text, "t.yaml").unwrap_err();
    assert!(
        err.messages[0].starts_with("t.yaml:4:5: dtypes[2]") && err.messages[0].contains("duplicate dtype `int64`"),
        "{err}"
    );
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
        "dtype name `Bad`",
        "not a Rust type",
        "kDLInt has 8, 16, 32, 64 bits per lane, not 12",
        "unknown dtype `nope`",
        "ndim 11",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(err.messages.len(), 5, "{all}");
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
fn unknown_fields_and_type_codes_are_errors() {
    let err = parse("  - {dtype: float32, ndims: [1]}\n").unwrap_err();
    assert!(err.messages[0].contains("unknown field `ndims`"), "{err}");
    let bad_code = DTYPES.replace("kDLInt", "kDLInteger");
    let err = Spec::parse(&format!("{bad_code}instantiations: []\n"), "t.yaml").unwrap_err();
    assert!(err.messages[0].starts_with("t.yaml:3:") && err.messages[0].contains("kDLInteger"), "{err}");
}

#[test]
fn dtype_lookup_by_rust_type() {
    let spec = crate::bundled_spec().unwrap();
    assert_eq!(spec.dtype_by_name_or_rust("f32").unwrap().name, "float32");
    assert_eq!(spec.dtype_by_name_or_rust("half :: f16").unwrap().name, "float16");
    assert_eq!(spec.dtype_by_name_or_rust("num_complex::Complex<f32>").unwrap().name, "complex64");
    assert!(spec.dtype_by_name_or_rust("f17").is_none());
}
