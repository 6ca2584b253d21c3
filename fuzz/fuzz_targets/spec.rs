//! The spec parser and generator under arbitrary text: every input is either refused with a
//! located error or generates Rust that parses as a file (Element impls, the classes and
//! dispatch of the bundled module, `#[amso_array]` for each pair, the records' structs) and the
//! generated stubs, tables and C and CUDA headers (which declare each record). A panic anywhere
//! is a finding.
#![no_main]

use std::str::FromStr;

use amso_codegen::{expand, write, Spec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let spec = match Spec::parse(text, "fuzz.yaml") {
        Ok(spec) => spec,
        Err(error) => {
            let message = error.to_string();
            assert!(message.starts_with("fuzz.yaml:"), "unlocated error: {message}");
            return;
        }
    };
    let parses = |tokens: proc_macro2::TokenStream, what: &str| {
        if let Err(e) = syn::parse2::<syn::File>(tokens.clone()) {
            panic!("{what} does not parse: {e}\n{tokens}");
        }
    };
    parses(expand::traits::element_impls(&spec), "element impls");
    parses(expand::record::record_impls(&spec), "record structs");
    parses(expand::dispatch::spec_classes(&spec, "amso._amso"), "spec classes");
    for (dtype, ndim) in spec.instances().take(4) {
        let args = proc_macro2::TokenStream::from_str(&format!("{}, {ndim}", dtype.name)).unwrap();
        let item = proc_macro2::TokenStream::from_str("pub struct Fuzzed;").unwrap();
        match expand::array::amso_array(args, item, &spec, "fuzz.yaml") {
            Ok(tokens) => parses(tokens, "#[amso_array]"),
            Err(e) => panic!("a spec pair refused by #[amso_array]: {e}"),
        }
    }
    for (path, contents) in write::generated_files(&spec) {
        assert!(!contents.is_empty(), "{} is empty", path.display());
        for record in &spec.records {
            let declaration = match path.extension().and_then(|extension| extension.to_str()) {
                Some("h") => format!("struct amso_{} {{", record.name),
                Some("cuh") => format!("struct {} {{", record.name),
                _ => continue,
            };
            assert!(contents.contains(&declaration), "{} lacks {declaration}", path.display());
        }
    }
});
