//! Writes `generated/` and the crate's bundled copy of the spec (`amso-codegen/bundled/types.yaml`)
//! from the spec: `amso-generate [--check] [--spec PATH] [--root DIR]`.

use std::path::PathBuf;
use std::process::ExitCode;

use amso_codegen::{write, Spec};

fn main() -> ExitCode {
    let mut check = false;
    let mut spec_path = PathBuf::from("specs/types.yaml");
    let mut root = PathBuf::from(".");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--spec" => spec_path = args.next().map(PathBuf::from).unwrap_or(spec_path),
            "--root" => root = args.next().map(PathBuf::from).unwrap_or(root),
            _ => {
                eprintln!("usage: amso-generate [--check] [--spec PATH] [--root DIR]");
                return ExitCode::from(2);
            }
        }
    }
    let text = match std::fs::read_to_string(&spec_path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("amso-generate: cannot read {}: {e}", spec_path.display());
            return ExitCode::from(2);
        }
    };
    let spec = match Spec::parse(&text, &spec_path.display().to_string()) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match write::write_all(&spec, &text, &root, check) {
        Ok(stale) if stale.is_empty() => {
            println!("amso-generate: generated files are up to date");
            ExitCode::SUCCESS
        }
        Ok(stale) => {
            for path in &stale {
                println!("{} {}", if check { "stale:" } else { "wrote:" }, path.display());
            }
            if check {
                eprintln!(
                    "amso-generate: generated files are stale; run `{}` (or `python3 scripts/amso.py generate` to \
                     regenerate only)",
                    write::REGENERATE_COMMAND
                );
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("amso-generate: {e}");
            ExitCode::FAILURE
        }
    }
}
