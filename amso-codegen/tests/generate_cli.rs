//! `amso-generate` end to end: writes generated/ from a spec, reports staleness with --check,
//! and turns spec mistakes into file:line:col messages and a failing exit code.

use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("amso-generate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn generate(spec: &Path, root: &Path, check: bool) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_amso-generate"));
    command.arg("--spec").arg(spec).arg("--root").arg(root);
    if check {
        command.arg("--check");
    }
    command.output().unwrap()
}

/// The bundled spec's dtype table with `instantiations` of our own.
fn spec_with(instantiations: &str) -> String {
    let dtypes = amso_codegen::BUNDLED_SPEC.split("\ninstantiations:").next().unwrap();
    format!("{dtypes}\ninstantiations:\n{instantiations}")
}

#[test]
fn edited_spec_regenerates_with_the_new_class_and_check_detects_staleness() {
    let root = scratch("edit");
    let spec = root.join("types.yaml");
    let base = spec_with("  - {dtype: int32, ndim: [1]}\n");
    std::fs::write(&spec, &base).unwrap();
    assert!(generate(&spec, &root, false).status.success());
    assert!(generate(&spec, &root, true).status.success(), "fresh output is not stale");

    let edited = format!("{base}  - {{dtype: uint16, ndim: [4]}}\n");
    std::fs::write(&spec, edited).unwrap();
    let stale = generate(&spec, &root, true);
    assert!(!stale.status.success());
    assert!(String::from_utf8_lossy(&stale.stdout).contains("stale: generated/_amso.pyi"));
    assert!(generate(&spec, &root, false).status.success());
    let stubs = std::fs::read_to_string(root.join("generated/_amso.pyi")).unwrap();
    assert!(stubs.contains("class MemArray4DUint16(MemArray):"));
    let table = std::fs::read_to_string(root.join("generated/instantiations.md")).unwrap();
    assert!(table.contains("| (uint16, 4) | `amso._amso.MemArray4DUint16` | `MemArray<u16, 4>` |"));
}

#[test]
fn spec_errors_fail_with_positions() {
    let root = scratch("error");
    let spec = root.join("types.yaml");
    // The user's report: a typo in `rust:` passed generate and failed late in the Rust build.
    let broken =
        spec_with("  - {dtype: boolean,   ndim: [1, 12]}\n").replace("rust: \"half::f16\",", "rust: \"half::f61\",");
    std::fs::write(&spec, &broken).unwrap();
    let output = generate(&spec, &root, false);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let shown = spec.display().to_string();
    assert!(stderr.contains(&format!("{shown}:")) && stderr.contains("unknown dtype `boolean`"), "{stderr}");
    assert!(stderr.contains("ndim 12 is outside"), "{stderr}");
    let line = broken.lines().position(|l| l.contains("half::f61")).unwrap();
    let column = broken.lines().nth(line).unwrap().find("\"half::f61\"").unwrap();
    let located = format!("{shown}:{}:{}: dtypes[", line + 1, column + 1);
    assert!(stderr.contains(&located) && stderr.contains("write rust: \"half::f16\""), "{stderr} lacks {located}");
    assert!(!root.join("generated").exists(), "nothing is written from an invalid spec");
}

#[test]
fn a_checkout_with_an_edited_spec_refuses_to_build_with_the_command_to_run() {
    use amso_codegen::write::{check_checkout, REGENERATE_COMMAND};
    let root = scratch("checkout");
    assert_eq!(check_checkout(&root), Ok(()), "no spec: not a checkout, nothing to compare");
    std::fs::create_dir_all(root.join("specs")).unwrap();
    let spec = root.join("specs/types.yaml");
    let base = spec_with("  - {dtype: int32, ndim: [1]}\n");
    std::fs::write(&spec, &base).unwrap();
    assert!(generate(&spec, &root, false).status.success());
    assert_eq!(check_checkout(&root), Ok(()), "freshly generated");

    std::fs::write(&spec, format!("{base}  - {{dtype: int16, ndim: [2]}}\n")).unwrap();
    let refused = check_checkout(&root).unwrap_err();
    assert!(refused.contains(REGENERATE_COMMAND) && refused.contains("generated/_amso.pyi"), "{refused}");
    assert!(generate(&spec, &root, false).status.success());
    assert_eq!(check_checkout(&root), Ok(()));

    std::fs::write(root.join("generated/amso.h"), "/* edited by hand */").unwrap();
    assert!(check_checkout(&root).unwrap_err().contains("generated/amso.h"));
}
