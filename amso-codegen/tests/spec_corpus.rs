//! The spec corpus: one file per kind of mistake under `tests/corpus/spec/`, each refused with
//! a `file:line:col` error whose position and text are recorded in `expected.txt`
//! (`name: line:col: substring`). The same files seed the spec fuzzer (`fuzz/`).

use std::path::Path;

use amso_codegen::spec::Spec;

#[test]
fn every_spec_mistake_is_a_located_error() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/spec");
    let expected = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let mut checked = 0;
    for line in expected.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let (name, wanted) = line.split_once(": ").unwrap_or_else(|| panic!("bad line {line:?}"));
        let path = dir.join(format!("{name}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let error = match Spec::parse(&text, &format!("{name}.yaml")) {
            Ok(_) => panic!("{name}: accepted, expected an error containing {wanted:?}"),
            Err(e) => e.to_string(),
        };
        let located = format!("{name}.yaml:{wanted}");
        assert!(error.contains(&located), "{name}: {error:?} lacks {located:?}");
        checked += 1;
    }
    let files = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "yaml"))
        .count();
    assert_eq!(checked, files, "every corpus file has an expectation");
}
