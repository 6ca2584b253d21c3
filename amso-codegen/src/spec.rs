//! The spec (`specs/types.yaml`): serde types, and validation that reports every mistake with
//! its file, line and column.
//!
//! serde_yaml attaches the position of the node being read to errors raised while reading it,
//! so each semantic check runs inside the `Deserialize` impl of the node it is about. To report
//! every mistake rather than the first, a failing check is remembered and switched off, and the
//! (small) file is read again until it passes or a syntax error stops the reading.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::Deserializer;
use serde::Deserialize;

use crate::dtype::{check_dtype_name, DType, TypeCode};
use crate::MAX_NDIM;

/// One `(dtype, ndim)` pair to compile.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Instantiation {
    /// Name of the element type (a key of the dtype table).
    pub dtype: String,
    /// Number of dimensions, `1..=MAX_NDIM`.
    pub ndim: u8,
}

/// A parsed, validated spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The element types, in file order.
    pub dtypes: Vec<DType>,
    /// The instantiations, in file order.
    pub instantiations: Vec<Instantiation>,
}

/// Every mistake found in a spec, each with `file:line:column`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// One line per mistake.
    pub messages: Vec<String>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.messages.join("\n"))
    }
}

impl std::error::Error for SpecError {}

impl Spec {
    /// Parse and validate spec text; `path` names the file in error messages.
    pub fn parse(text: &str, path: &str) -> Result<Spec, SpecError> {
        let known = known_dtype_names(text);
        let mut suppressed = HashSet::new();
        let mut messages = Vec::new();
        // Each round either succeeds, stops on a syntax error, or finds one more semantic
        // mistake; the bound only guards against a check that fails without being recorded.
        for _ in 0..64 {
            CONTEXT.with(|c| {
                *c.borrow_mut() = Some(Context::new(known.clone(), suppressed.clone()));
            });
            let result = serde_yaml::from_str::<RawSpec>(text);
            let failed_check = CONTEXT.with(|c| c.borrow_mut().take().and_then(|ctx| ctx.failed));
            match result {
                Ok(raw) if messages.is_empty() => return Ok(raw.into_spec()),
                Ok(_) => break,
                Err(err) => {
                    messages.push(locate(path, &err));
                    match failed_check {
                        Some(check) => {
                            suppressed.insert(check);
                        }
                        None => break,
                    }
                }
            }
        }
        Err(SpecError { messages })
    }

    /// The element type called `name`.
    pub fn dtype(&self, name: &str) -> Option<&DType> {
        self.dtypes.iter().find(|d| d.name == name)
    }

    /// The element type whose name or Rust type is `name` (`float32` or `f32`).
    pub fn dtype_by_name_or_rust(&self, name: &str) -> Option<&DType> {
        let compact: String = name.chars().filter(|c| !c.is_whitespace()).collect();
        self.dtypes
            .iter()
            .find(|d| d.name == name || d.rust.chars().filter(|c| !c.is_whitespace()).collect::<String>() == compact)
    }

    /// Each instantiation with its element type, in file order.
    pub fn instances(&self) -> impl Iterator<Item = (&DType, u8)> + '_ {
        self.instantiations.iter().map(|inst| (self.dtype(&inst.dtype).expect("validated"), inst.ndim))
    }

    /// The dtype names, comma-separated, for error messages.
    pub fn dtype_names(&self) -> String {
        self.dtypes.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
    }
}

fn locate(path: &str, err: &serde_yaml::Error) -> String {
    let text = err.to_string();
    // serde_yaml appends " at line L column C"; the position goes in front instead.
    let message = match text.rfind(" at line ") {
        Some(cut) => &text[..cut],
        None => &text,
    };
    match err.location() {
        Some(loc) => format!("{path}:{}:{}: {message}", loc.line(), loc.column()),
        None => format!("{path}: {message}"),
    }
}

/// Names in the dtype table, read leniently so instantiations may refer to any of them
/// wherever the table stands in the file; `None` when there is no readable table (that error
/// is reported instead of every reference to it).
fn known_dtype_names(text: &str) -> Option<Vec<String>> {
    let value = serde_yaml::from_str::<serde_yaml::Value>(text).ok()?;
    let table = value.get("dtypes")?.as_sequence()?;
    Some(table.iter().filter_map(|entry| entry.get("name").and_then(|n| n.as_str()).map(String::from)).collect())
}

/// State shared by the checks during one reading of the file.
struct Context {
    known: Option<Vec<String>>,
    suppressed: HashSet<usize>,
    next_check: usize,
    failed: Option<usize>,
    seen_dtypes: HashSet<String>,
    seen_pairs: HashSet<(String, u8)>,
    /// The dtype of the instantiation entry being read, once its `dtype:` was read.
    entry_dtype: Option<String>,
    /// The ndims of that entry already checked for duplicates.
    entry_checked: Vec<u8>,
}

impl Context {
    fn new(known: Option<Vec<String>>, suppressed: HashSet<usize>) -> Self {
        Context {
            known,
            suppressed,
            next_check: 0,
            failed: None,
            seen_dtypes: HashSet::new(),
            seen_pairs: HashSet::new(),
            entry_dtype: None,
            entry_checked: Vec::new(),
        }
    }
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Run one semantic check: `Err(message)` fails the reading at the current node unless this
/// check was already reported in an earlier round.
fn check<E: serde::de::Error>(run: impl FnOnce(&mut Context) -> Result<(), String>) -> Result<(), E> {
    CONTEXT.with(|c| {
        let mut guard = c.borrow_mut();
        let Some(ctx) = guard.as_mut() else {
            return Ok(());
        };
        let id = ctx.next_check;
        ctx.next_check += 1;
        if ctx.suppressed.contains(&id) {
            return Ok(());
        }
        match run(ctx) {
            Ok(()) => Ok(()),
            Err(message) => {
                ctx.failed = Some(id);
                Err(E::custom(message))
            }
        }
    })
}

fn with_context<R>(f: impl FnOnce(&mut Context) -> R) -> Option<R> {
    CONTEXT.with(|c| c.borrow_mut().as_mut().map(f))
}

fn check_unique_pair<E: serde::de::Error>(dtype: &str, ndim: u8) -> Result<(), E> {
    check(|ctx| {
        if ctx.seen_pairs.insert((dtype.to_string(), ndim)) {
            Ok(())
        } else {
            Err(format!("duplicate instantiation ({dtype}, ndim {ndim}): list each pair once"))
        }
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    dtypes: Vec<RawDType>,
    instantiations: Vec<RawEntry>,
}

struct RawDType {
    name: DTypeName,
    rust: RustType,
    code: TypeCode,
    bits: u8,
    lanes: u16,
    numpy: String,
    numpy_module: Option<String>,
    c: String,
}

impl<'de> Deserialize<'de> for RawDType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            name: DTypeName,
            rust: RustType,
            code: TypeCode,
            bits: u8,
            lanes: u16,
            numpy: String,
            #[serde(default)]
            numpy_module: Option<String>,
            c: String,
        }
        let f = Fields::deserialize(d)?;
        // The one layout rule, shared with `#[derive(Element)]`: the bits DLPack defines for
        // the code, whole bytes, at least one lane.
        check(|_| f.code.check_layout(f.bits, f.lanes).map_err(|e| format!("dtype `{}`: {e}", f.name.0)))?;
        Ok(RawDType {
            name: f.name,
            rust: f.rust,
            code: f.code,
            bits: f.bits,
            lanes: f.lanes,
            numpy: f.numpy,
            numpy_module: f.numpy_module,
            c: f.c,
        })
    }
}

struct DTypeName(String);

impl<'de> Deserialize<'de> for DTypeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        check(|_| check_dtype_name(&name))?;
        check(|ctx| {
            if ctx.seen_dtypes.insert(name.clone()) {
                Ok(())
            } else {
                Err(format!("duplicate dtype `{name}`: each dtype is listed once"))
            }
        })?;
        Ok(DTypeName(name))
    }
}

struct RustType(String);

impl<'de> Deserialize<'de> for RustType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        check(|_| match syn::parse_str::<syn::Type>(&text) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("`{text}` is not a Rust type: {e}")),
        })?;
        Ok(RustType(text))
    }
}

struct DTypeRef(String);

impl<'de> Deserialize<'de> for DTypeRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        check(|ctx| match &ctx.known {
            None => Ok(()),
            Some(known) if known.contains(&name) => Ok(()),
            Some(known) => Err(format!("unknown dtype `{name}`; the dtype table has: {}", known.join(", "))),
        })?;
        with_context(|ctx| ctx.entry_dtype = Some(name.clone()));
        Ok(DTypeRef(name))
    }
}

struct Ndim(u8);

impl<'de> Deserialize<'de> for Ndim {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ndim = i64::deserialize(d)?;
        check(|_| {
            if (1..=MAX_NDIM as i64).contains(&ndim) {
                Ok(())
            } else {
                Err(format!("ndim {ndim} is outside the supported range 1..={MAX_NDIM}"))
            }
        })?;
        let ndim = ndim.clamp(1, MAX_NDIM as i64) as u8;
        // With `dtype:` already read, the duplicate check can point at this ndim's list.
        if let Some(dtype) = with_context(|ctx| ctx.entry_dtype.clone()).flatten() {
            check_unique_pair(&dtype, ndim)?;
            with_context(|ctx| ctx.entry_checked.push(ndim));
        }
        Ok(Ndim(ndim))
    }
}

struct RawEntry {
    dtype: String,
    ndims: Vec<u8>,
}

impl<'de> Deserialize<'de> for RawEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            dtype: DTypeRef,
            ndim: Vec<Ndim>,
        }
        let fields = Fields::deserialize(d)?;
        let dtype = fields.dtype.0;
        let ndims: Vec<u8> = fields.ndim.into_iter().map(|n| n.0).collect();
        let checked = with_context(|ctx| {
            ctx.entry_dtype = None;
            std::mem::take(&mut ctx.entry_checked)
        })
        .unwrap_or_default();
        for &ndim in ndims.iter().filter(|n| !checked.contains(n)) {
            check_unique_pair::<D::Error>(&dtype, ndim)?;
        }
        Ok(RawEntry { dtype, ndims })
    }
}

impl RawSpec {
    fn into_spec(self) -> Spec {
        let dtypes = self
            .dtypes
            .into_iter()
            .map(|raw| DType {
                name: raw.name.0,
                rust: raw.rust.0,
                code: raw.code,
                bits: raw.bits,
                lanes: raw.lanes,
                numpy: raw.numpy,
                numpy_module: raw.numpy_module,
                c: raw.c,
            })
            .collect();
        let instantiations = self
            .instantiations
            .into_iter()
            .flat_map(|entry| {
                let dtype = entry.dtype;
                entry.ndims.into_iter().map(move |ndim| Instantiation { dtype: dtype.clone(), ndim })
            })
            .collect();
        Spec { dtypes, instantiations }
    }
}

#[cfg(test)]
mod tests;
