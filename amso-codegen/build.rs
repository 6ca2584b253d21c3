//! Warns when the workspace's `specs/types.yaml` was edited without regenerating this crate's
//! bundled copy (`bundled/types.yaml`), which is what every build reads. A packaged crate has
//! no workspace spec, and nothing to compare.

fn main() {
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let (spec, copy) = (manifest.join("../specs/types.yaml"), manifest.join("bundled/types.yaml"));
    println!("cargo:rerun-if-changed={}", copy.display());
    if spec.exists() {
        println!("cargo:rerun-if-changed={}", spec.display());
        if std::fs::read(&spec).ok() != std::fs::read(&copy).ok() {
            println!(
                "cargo:warning=specs/types.yaml differs from amso-codegen/bundled/types.yaml, which builds read: run \
                 `python3 scripts/amso.py bundled` (or `python3 scripts/amso.py generate` to regenerate only)"
            );
        }
    }
}
