//! Compile-time misuse of amso, one file per mistake under `tests/ui/`, each with the
//! compiler's expected message beside it (`TRYBUILD=overwrite` regenerates them).

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/ui/*.rs"));
}
