//! Writes the `Element` impls for every dtype of `specs/types.yaml`, and the CUDA header
//! kernels include, into OUT_DIR. They must
//! live in this crate (the orphan rule), and generating them here means an edit of the spec
//! and a rebuild is all a new dtype needs.

fn main() {
    println!("cargo:rerun-if-changed={}", amso_codegen::BUNDLED_SPEC_PATH);
    let spec = match amso_codegen::bundled_spec() {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("invalid amso spec:\n{e}");
            std::process::exit(1);
        }
    };
    // In a source checkout, an edited spec without regenerated files stops the build (pip,
    // maturin and cargo alike) with the command to run, instead of building the old pairs.
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("..");
    if root.join("specs/types.yaml").is_file() {
        for path in amso_codegen::write::checkout_inputs(&spec, &root) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    if let Err(message) = amso_codegen::write::check_checkout(&root) {
        eprintln!("{message}");
        std::process::exit(1);
    }
    let tokens = amso_codegen::expand::traits::element_impls(&spec);
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("element_impls.rs"), tokens.to_string()).expect("OUT_DIR is writable");
    // The spec's records as #[repr(C)] structs, for the `records` module.
    let records = amso_codegen::expand::record::record_impls(&spec);
    std::fs::write(out.join("record_impls.rs"), records.to_string()).expect("OUT_DIR is writable");
    // The CUDA header kernels include, the same text as generated/amso.cuh.
    std::fs::write(out.join("amso.cuh"), amso_codegen::cuda_header::cuda_header(&spec)).expect("OUT_DIR is writable");
}
