//! The spec (`specs/types.yaml`): its model, and a reading that validates every field and
//! reports every mistake with the file, line and column of the value it is about
//! (`reading.rs` says how; `rules.rs` says what each field may hold).

use std::collections::HashSet;
use std::fmt;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::dtype::{class_stem, DType};
use crate::record::Record;
use reading::{check, raise, Facts};

mod reading;
mod rules;

pub(crate) use rules::RUNTIME_TYPES;

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
    /// The records (C structs of the table's scalars), in file order, laid out.
    pub records: Vec<Record>,
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

/// The stem of one pair's typed C exports (`amso_float32_3d`: `_handle`, `_data`, `_shape`).
pub fn typed_stem(name: &str, ndim: u8) -> String {
    format!("amso_{name}_{ndim}d")
}

impl Spec {
    /// Parse and validate spec text; `path` names the file in error messages.
    pub fn parse(text: &str, path: &str) -> Result<Spec, SpecError> {
        // Malformed YAML is the one mistake reported: the rules would read the other fields of
        // a row from a file that does not parse, and blame rows that are fine.
        if let Err(err) = serde_yaml::from_str::<serde_yaml::Value>(text) {
            return Err(SpecError { messages: vec![locate(path, &err)] });
        }
        let facts = Facts::read(text);
        let mut suppressed = HashSet::new();
        let mut messages = Vec::new();
        // Each reading either succeeds, stops on a mistake that is no rule's, or finds one more
        // failing rule, which the next reading skips: there are finitely many rules to fail.
        loop {
            let (result, failed_rule) = reading::read_once::<RawSpec>(text, &facts, &suppressed);
            match result {
                Ok(raw) if messages.is_empty() => return Ok(raw.into_spec()),
                Ok(_) => break,
                Err(err) => {
                    messages.push(locate(path, &err));
                    match failed_rule {
                        Some(rule) if suppressed.insert(rule) => {}
                        _ => break,
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
        self.instantiations.iter().filter_map(|inst| Some((self.dtype(&inst.dtype)?, inst.ndim)))
    }

    /// Each instantiation of a record (its classes hold amso's own record arrays), in file order.
    pub fn record_instances(&self) -> impl Iterator<Item = (&Record, u8)> + '_ {
        self.instantiations.iter().filter_map(|inst| Some((self.record(&inst.dtype)?, inst.ndim)))
    }

    /// The typed C exports' stems in the bundled module's table order (every dtype pair, then
    /// every record pair, as the classes are generated): `amso_float32_3d`.
    pub fn typed_stems(&self) -> Vec<String> {
        let pairs = self.instances().map(|(d, ndim)| typed_stem(&d.name, ndim));
        pairs.chain(self.record_instances().map(|(r, ndim)| typed_stem(&r.name, ndim))).collect()
    }

    /// A fingerprint of `typed_stems` (64-bit FNV-1a over the stems, each ended by `;`): the
    /// header's `AMSO_TYPED_KEY`, which `amso_import()` compares with the module's table.
    pub fn typed_key(&self) -> u64 {
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        for byte in self.typed_stems().iter().flat_map(|stem| stem.bytes().chain(std::iter::once(b';'))) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        hash
    }

    /// The record called `name`.
    pub fn record(&self, name: &str) -> Option<&Record> {
        self.records.iter().find(|r| r.name == name)
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of `dtypes:`, `instantiations:` and, optionally, `records:`")]
struct RawSpec {
    dtypes: Vec<RawDType>,
    instantiations: Vec<RawEntry>,
    #[serde(default)]
    records: Vec<RawRecord>,
}

/// One row of the dtype table, each field checked as it is read.
struct RawDType(DType);

impl<'de> Deserialize<'de> for RawDType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, expecting = "a dtype: {name, rust, code, bits, lanes, numpy, c}")]
        struct Fields {
            name: Name,
            rust: RustType,
            code: Code,
            bits: Bits,
            lanes: Lanes,
            numpy: Numpy,
            #[serde(default)]
            numpy_module: Option<NumpyModule>,
            c: CType,
        }
        reading::begin_row();
        let f = Fields::deserialize(d)?;
        Ok(RawDType(DType {
            name: f.name.0,
            rust: f.rust.0,
            // A failed rule's value is only read on to find further mistakes: the spec is refused.
            code: f.code.0.unwrap_or(crate::TypeCode::UInt),
            bits: u8::try_from(f.bits.0).unwrap_or_default(),
            lanes: u16::try_from(f.lanes.0).unwrap_or_default(),
            numpy: f.numpy.0,
            numpy_module: f.numpy_module.map(|module| module.0),
            c: f.c.0,
        }))
    }
}

/// "dtype `float32`: " and the rule's message.
fn about_row(ctx: &reading::Context, rule: Result<(), String>) -> Result<(), String> {
    rule.map_err(|message| format!("{}{message}", ctx.about()))
}

struct Name(String);

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |name| {
            check(|_| rules::name(name))?;
            check(|ctx| {
                let stem = class_stem(name);
                let index = ctx.row_index();
                match ctx.names.get(&stem) {
                    None => {
                        ctx.names.insert(stem, (name.to_string(), index));
                        Ok(())
                    }
                    Some((first, at)) if first == name => Err(format!(
                        "duplicate dtype `{name}` (dtypes[{at}] is `{name}` already): list each dtype once"
                    )),
                    Some((first, at)) => Err(format!(
                        "dtype `{name}` has the class names of dtype `{first}` (dtypes[{at}]), MemArray1D{stem} and so \
                         on: rename one"
                    )),
                }
            })
        })
        .map(Name)
    }
}

struct RustType(String);

impl<'de> Deserialize<'de> for RustType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |text| {
            let mut known = None;
            check(|ctx| {
                known = Some(rules::rust_type(&ctx.row(), text).map_err(|e| format!("{}{e}", ctx.about()))?);
                Ok(())
            })?;
            let Some(known) = known else {
                return Ok(());
            };
            check(|ctx| {
                let label = ctx.row_label();
                match ctx.rust_types.get(&known) {
                    None => {
                        ctx.rust_types.insert(known, label);
                        Ok(())
                    }
                    Some(first) => Err(format!(
                        "{}`{text}` is already the Rust type of {first}; a Rust type is one dtype's (two would be \
                         conflicting Element impls)",
                        ctx.about()
                    )),
                }
            })
        })
        .map(RustType)
    }
}

struct Code(Option<crate::TypeCode>);

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = reading::string(d, |text| check(|ctx| about_row(ctx, rules::code(text).map(drop))))?;
        Ok(Code(crate::TypeCode::from_dlpack_name(&text)))
    }
}

struct Bits(i64);

impl<'de> Deserialize<'de> for Bits {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::integer(d, "bits", |bits| check(|ctx| about_row(ctx, rules::bits(&ctx.row(), bits)))).map(Bits)
    }
}

struct Lanes(i64);

impl<'de> Deserialize<'de> for Lanes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::integer(d, "lanes", |lanes| check(|ctx| about_row(ctx, rules::lanes(&ctx.row(), lanes)))).map(Lanes)
    }
}

struct Numpy(String);

impl<'de> Deserialize<'de> for Numpy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |numpy| check(|ctx| about_row(ctx, rules::numpy(&ctx.row(), numpy)))).map(Numpy)
    }
}

struct NumpyModule(String);

impl<'de> Deserialize<'de> for NumpyModule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |module| check(|ctx| about_row(ctx, rules::numpy_module(module)))).map(NumpyModule)
    }
}

struct CType(String);

impl<'de> Deserialize<'de> for CType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |c| {
            check(|ctx| about_row(ctx, rules::c_type(&ctx.row(), c)))?;
            check(|ctx| {
                let row = ctx.row();
                if !rules::defines_c_type(&row) {
                    return Ok(());
                }
                let label = ctx.row_label();
                match ctx.c_types.get(c) {
                    None => {
                        ctx.c_types.insert(c.to_string(), label);
                        Ok(())
                    }
                    Some(first) => Err(format!(
                        "{}`{c}` is already the C type of {first}, and generated/amso.h would define it twice: give \
                         each its own (amso_{}_t)",
                        ctx.about(),
                        row.named().unwrap_or("NAME")
                    )),
                }
            })
        })
        .map(CType)
    }
}

/// One entry of `instantiations`: a dtype and its list of ndims.
struct RawEntry {
    dtype: String,
    ndims: Vec<u8>,
}

impl<'de> Deserialize<'de> for RawEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, expecting = "an instantiation: {dtype, ndim: [...]}")]
        struct Fields {
            dtype: DTypeRef,
            ndim: NdimList,
        }
        reading::begin_entry();
        let fields = Fields::deserialize(d)?;
        Ok(RawEntry { dtype: fields.dtype.0, ndims: fields.ndim.0 })
    }
}

struct DTypeRef(String);

impl<'de> Deserialize<'de> for DTypeRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |name| check(|ctx| rules::dtype_ref(ctx.facts.known.as_deref(), &ctx.facts.records, name)))
            .map(DTypeRef)
    }
}

struct NdimList(Vec<u8>);

impl<'de> Deserialize<'de> for NdimList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl Visit {
            fn not_a_list<E: serde::de::Error>(written: fmt::Arguments<'_>) -> Result<Vec<u8>, E> {
                check(|_| Err(format!("ndim is a list: write ndim: [{written}]"))).map_err(raise)?;
                Ok(Vec::new())
            }
        }
        impl<'de> Visitor<'de> for Visit {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of ndims, e.g. [1, 2, 3]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut ndims = Vec::new();
                while let Some(Ndim(ndim)) = seq.next_element()? {
                    ndims.push(ndim);
                }
                if ndims.is_empty() {
                    check(|_| {
                        Err("ndim is empty: list the ndims to compile, e.g. ndim: [1, 2, 3], or remove the entry"
                            .to_string())
                    })
                    .map_err(raise)?;
                }
                Ok(ndims)
            }
            fn visit_u64<E: serde::de::Error>(self, ndim: u64) -> Result<Vec<u8>, E> {
                Visit::not_a_list(format_args!("{ndim}"))
            }
            fn visit_i64<E: serde::de::Error>(self, ndim: i64) -> Result<Vec<u8>, E> {
                Visit::not_a_list(format_args!("{ndim}"))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
                Visit::not_a_list(format_args!("{text}"))
            }
        }
        d.deserialize_any(Visit).map(NdimList)
    }
}

struct Ndim(u8);

impl<'de> Deserialize<'de> for Ndim {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ndim = reading::integer(d, "ndim", |ndim| {
            check(|_| rules::ndim(ndim))?;
            // An ndim out of range is reported above, and not again as a duplicate.
            let Some(ndim) = u8::try_from(ndim).ok().filter(|_| rules::ndim(ndim).is_ok()) else {
                return Ok(());
            };
            check(|ctx| match ctx.entry_dtype() {
                Some(dtype) if !ctx.pairs.insert((dtype.clone(), ndim)) => {
                    Err(format!("duplicate instantiation ({dtype}, ndim {ndim}): list each pair once"))
                }
                _ => Ok(()),
            })
        })?;
        Ok(Ndim(u8::try_from(ndim).unwrap_or_default()))
    }
}

impl RawSpec {
    fn into_spec(self) -> Spec {
        let dtypes: Vec<DType> = self.dtypes.into_iter().map(|raw| raw.0).collect();
        let instantiations = self
            .instantiations
            .into_iter()
            .flat_map(|entry| {
                let dtype = entry.dtype;
                entry.ndims.into_iter().map(move |ndim| Instantiation { dtype: dtype.clone(), ndim })
            })
            .collect();
        let records = self
            .records
            .into_iter()
            .map(|raw| {
                let fields = raw.fields.into_iter().map(|f| (f.name, f.dtype, f.shape)).collect();
                Record::lay_out(raw.name, fields, |name| dtypes.iter().find(|d: &&DType| d.name == name))
            })
            .collect();
        Spec { dtypes, instantiations, records }
    }
}

/// One entry of `records`: a name and its fields.
struct RawRecord {
    name: String,
    fields: Vec<RawField>,
}

impl<'de> Deserialize<'de> for RawRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, expecting = "a record: {name, fields: [{name, dtype, shape?}, ...]}")]
        struct Fields {
            name: RecordName,
            fields: FieldList,
        }
        reading::begin_record();
        let f = Fields::deserialize(d)?;
        Ok(RawRecord { name: f.name.0, fields: f.fields.0 })
    }
}

struct RecordName(String);

impl<'de> Deserialize<'de> for RecordName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |name| {
            check(|ctx| rules::record_name(ctx.facts.known.as_deref(), name))?;
            check(|ctx| {
                let stem = class_stem(name);
                let index = ctx.record_index();
                match ctx.record_names.get(&stem) {
                    None => {
                        ctx.record_names.insert(stem, (name.to_string(), index));
                        Ok(())
                    }
                    Some((first, at)) if first == name => Err(format!(
                        "duplicate record `{name}` (records[{at}] is `{name}` already): list each record once"
                    )),
                    Some((first, at)) => Err(format!(
                        "record `{name}` has the Rust name of record `{first}` (records[{at}]), {stem}: rename one"
                    )),
                }
            })
        })
        .map(RecordName)
    }
}

/// A record's `fields:`, a non-empty list.
struct FieldList(Vec<RawField>);

impl<'de> Deserialize<'de> for FieldList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Vec<RawField>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of fields, e.g. [{name: mass, dtype: float64}]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<RawField>, A::Error> {
                let mut fields = Vec::new();
                while let Some(field) = seq.next_element()? {
                    fields.push(field);
                }
                if fields.is_empty() {
                    check(|ctx| {
                        Err(format!(
                            "{}a record has at least one field: list them, e.g. fields: [{{name: mass, dtype: \
                             float64}}], or remove the record",
                            ctx.about_record()
                        ))
                    })
                    .map_err(raise)?;
                }
                Ok(fields)
            }
        }
        d.deserialize_seq(Visit).map(FieldList)
    }
}

/// One field of a record: a name, a scalar dtype of the table and an optional fixed shape.
struct RawField {
    name: String,
    dtype: String,
    shape: Vec<usize>,
}

impl<'de> Deserialize<'de> for RawField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, expecting = "a record field: {name, dtype, shape?}")]
        struct Fields {
            name: FieldName,
            dtype: FieldDType,
            #[serde(default)]
            shape: Option<Shape>,
        }
        let f = Fields::deserialize(d)?;
        Ok(RawField { name: f.name.0, dtype: f.dtype.0, shape: f.shape.map(|s| s.0).unwrap_or_default() })
    }
}

struct FieldName(String);

impl<'de> Deserialize<'de> for FieldName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |name| {
            check(|ctx| rules::field_name(name).map_err(|e| format!("{}{e}", ctx.about_record())))?;
            check(|ctx| {
                if ctx.field_names.insert(name.to_string()) {
                    Ok(())
                } else {
                    Err(format!("{}duplicate field `{name}`: name each field once", ctx.about_record()))
                }
            })
        })
        .map(FieldName)
    }
}

struct FieldDType(String);

impl<'de> Deserialize<'de> for FieldDType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        reading::string(d, |name| {
            check(|ctx| {
                rules::field_dtype(ctx.facts.known.as_deref(), &ctx.facts.records, &ctx.facts.rows, name)
                    .map_err(|e| format!("{}{e}", ctx.about_record()))
            })
        })
        .map(FieldDType)
    }
}

/// A field's `shape:`, a non-empty list of positive lengths.
struct Shape(Vec<usize>);

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Vec<usize>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a shape, a list of lengths such as [3]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<usize>, A::Error> {
                let mut shape = Vec::new();
                while let Some(Length(length)) = seq.next_element()? {
                    shape.push(length);
                }
                if shape.is_empty() {
                    check(|ctx| {
                        Err(format!(
                            "{}shape is empty: write the field's lengths, e.g. shape: [3], or drop shape for one \
                             element",
                            ctx.about_record()
                        ))
                    })
                    .map_err(raise)?;
                }
                Ok(shape)
            }
        }
        d.deserialize_seq(Visit).map(Shape)
    }
}

struct Length(usize);

impl<'de> Deserialize<'de> for Length {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let length = reading::integer(d, "a shape's length", |length| {
            check(|ctx| rules::shape_length(length).map_err(|e| format!("{}{e}", ctx.about_record())))
        })?;
        Ok(Length(usize::try_from(length).unwrap_or(1).max(1)))
    }
}

#[cfg(test)]
mod tests;
