//! How the spec is read so that each mistake is placed at the value it is about.
//!
//! serde_yaml gives an error the line and column (and the path, `dtypes[3].bits`) of the node
//! it was reading when the error arose: an error raised in a visitor of a scalar is placed at
//! that scalar, but one raised after a node was read is placed at the collection around it (a
//! `bits:` checked at the end of its row was reported at the start of the dtype list). So every
//! rule runs in the visitor that receives its value (`string`, `integer`), and a rule that looks
//! at other fields of its row reads them from `Facts`, a lenient reading of the whole file made
//! first. To report every mistake rather than the first, a failing rule is remembered and
//! switched off, and the (small) file is read again, until it reads through or a mistake that is
//! no rule's (malformed YAML, a missing or unknown field) stops the reading.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};

use super::rules::Row;

/// What the file says, read leniently before the checked reading: what rules about one field
/// need to know of the others.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// The dtype table's names; `None` when there is no readable table (that is reported
    /// instead of every reference to it).
    pub(crate) known: Option<Vec<String>>,
    /// Each dtype row, in file order.
    pub(crate) rows: Vec<Row>,
    /// Each instantiation entry's `dtype:`, in file order.
    pub(crate) entries: Vec<Option<String>>,
    /// Each record's `name:`, in file order.
    pub(crate) records: Vec<Option<String>>,
}

impl Facts {
    pub(crate) fn read(text: &str) -> Facts {
        let Ok(value) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
            return Facts::default();
        };
        let list = |key: &str| value.get(key).and_then(serde_yaml::Value::as_sequence).cloned().unwrap_or_default();
        let table = value.get("dtypes").and_then(serde_yaml::Value::as_sequence);
        let known = table.map(|rows| {
            rows.iter()
                .filter_map(|row| row.get("name").and_then(serde_yaml::Value::as_str).map(String::from))
                .collect()
        });
        Facts {
            known,
            rows: list("dtypes").iter().map(Row::read).collect(),
            entries: list("instantiations")
                .iter()
                .map(|entry| entry.get("dtype").and_then(serde_yaml::Value::as_str).map(String::from))
                .collect(),
            records: list("records")
                .iter()
                .map(|record| record.get("name").and_then(serde_yaml::Value::as_str).map(String::from))
                .collect(),
        }
    }
}

/// The state of one reading of the file, shared by the rules.
pub(crate) struct Context {
    pub(crate) facts: Facts,
    suppressed: HashSet<usize>,
    next_check: usize,
    failed: Option<usize>,
    /// The dtype row and the instantiation entry being read (their index in the file).
    row: usize,
    entry: usize,
    in_rows: bool,
    rows_begun: usize,
    entries_begun: usize,
    /// Per dtype name's class-name stem (`Float32`): the name and row that has it.
    pub(crate) names: HashMap<String, (String, usize)>,
    /// Per Rust type (as the runtime's table writes it): the dtype that has it.
    pub(crate) rust_types: HashMap<String, String>,
    /// Per C type that generated/amso.h defines: the dtype that has it.
    pub(crate) c_types: HashMap<String, String>,
    pub(crate) pairs: HashSet<(String, u8)>,
    /// The record being read (its index in the file), and how many have begun.
    record: usize,
    records_begun: usize,
    /// Per record name's Rust stem (`Particle`): the name and index that has it.
    pub(crate) record_names: HashMap<String, (String, usize)>,
    /// The field names of the record being read.
    pub(crate) field_names: HashSet<String>,
}

impl Context {
    /// What the file says of the dtype row being read.
    pub(crate) fn row(&self) -> Row {
        self.facts.rows.get(self.row).cloned().unwrap_or_default()
    }

    /// "dtype `float32`: " while a dtype row is read, to begin a message about its fields.
    pub(crate) fn about(&self) -> String {
        if self.in_rows {
            self.row().about()
        } else {
            String::new()
        }
    }

    /// The index of the dtype row being read.
    pub(crate) fn row_index(&self) -> usize {
        self.row
    }

    /// The dtype row being read, in a message: "dtype `float32`", or "dtypes[3]" unnamed.
    pub(crate) fn row_label(&self) -> String {
        match self.row().named() {
            Some(name) => format!("dtype `{name}`"),
            None => format!("dtypes[{}]", self.row),
        }
    }

    /// The index of the record being read.
    pub(crate) fn record_index(&self) -> usize {
        self.record
    }

    /// "record `particle`: " (or "records[2]: " unnamed), to begin a message about a record.
    pub(crate) fn about_record(&self) -> String {
        match self.facts.records.get(self.record).cloned().flatten() {
            Some(name) if !name.is_empty() => format!("record `{name}`: "),
            _ => format!("records[{}]: ", self.record),
        }
    }

    /// The `dtype:` of the instantiation entry being read, as the file says it.
    pub(crate) fn entry_dtype(&self) -> Option<String> {
        self.facts.entries.get(self.entry).cloned().flatten()
    }
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Read `text` once as a `T`, with the rules numbered `suppressed` switched off. Returns the
/// result and, when it failed on a rule, that rule's number.
pub(crate) fn read_once<T: DeserializeOwned>(
    text: &str,
    facts: &Facts,
    suppressed: &HashSet<usize>,
) -> (Result<T, serde_yaml::Error>, Option<usize>) {
    let context = Context {
        facts: facts.clone(),
        suppressed: suppressed.clone(),
        next_check: 0,
        failed: None,
        row: 0,
        entry: 0,
        in_rows: false,
        rows_begun: 0,
        entries_begun: 0,
        names: HashMap::new(),
        rust_types: HashMap::new(),
        c_types: HashMap::new(),
        pairs: HashSet::new(),
        record: 0,
        records_begun: 0,
        record_names: HashMap::new(),
        field_names: HashSet::new(),
    };
    CONTEXT.with(|c| *c.borrow_mut() = Some(context));
    let result = serde_yaml::from_str::<T>(text);
    let failed = CONTEXT.with(|c| c.borrow_mut().take().and_then(|ctx| ctx.failed));
    (result, failed)
}

/// The next dtype row begins.
pub(crate) fn begin_row() {
    with_context(|ctx| {
        ctx.row = ctx.rows_begun;
        ctx.rows_begun += 1;
        ctx.in_rows = true;
    });
}

/// The next instantiation entry begins.
pub(crate) fn begin_entry() {
    with_context(|ctx| {
        ctx.entry = ctx.entries_begun;
        ctx.entries_begun += 1;
        ctx.in_rows = false;
    });
}

/// The next record begins.
pub(crate) fn begin_record() {
    with_context(|ctx| {
        ctx.record = ctx.records_begun;
        ctx.records_begun += 1;
        ctx.in_rows = false;
        ctx.field_names.clear();
    });
}

fn with_context(f: impl FnOnce(&mut Context)) {
    CONTEXT.with(|c| {
        if let Some(ctx) = c.borrow_mut().as_mut() {
            f(ctx);
        }
    });
}

/// A rule failed: its message, to be raised in the visitor of the value it is about.
pub(crate) struct Failed(String);

/// Run one rule: `Err(message)` fails the reading unless this rule failed in an earlier
/// reading (and was reported then). Outside `read_once`, rules are not run.
pub(crate) fn check(rule: impl FnOnce(&mut Context) -> Result<(), String>) -> Result<(), Failed> {
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
        rule(ctx).map_err(|message| {
            ctx.failed = Some(id);
            Failed(message)
        })
    })
}

/// A failed rule as the error of the visitor that ran it (serde_yaml places it there).
pub(crate) fn raise<E: de::Error>(failed: Failed) -> E {
    E::custom(failed.0)
}

/// Read a string scalar, running `rules` on it while serde_yaml reads it.
pub(crate) fn string<'de, D: Deserializer<'de>>(
    d: D,
    rules: impl FnOnce(&str) -> Result<(), Failed>,
) -> Result<String, D::Error> {
    struct Visit<F>(F);
    impl<'de, F: FnOnce(&str) -> Result<(), Failed>> Visitor<'de> for Visit<F> {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
            (self.0)(value).map_err(raise)?;
            Ok(value.to_string())
        }
    }
    d.deserialize_str(Visit(rules))
}

/// Read a whole number (`what` names it in messages), running `rules` on it while serde_yaml
/// reads it. Anything else is a failed rule too, read as 0 once reported.
pub(crate) fn integer<'de, D: Deserializer<'de>>(
    d: D,
    what: &'static str,
    rules: impl FnOnce(i64) -> Result<(), Failed>,
) -> Result<i64, D::Error> {
    struct Visit<F> {
        what: &'static str,
        rules: F,
    }
    impl<F> Visit<F> {
        fn not_a_number<E: de::Error>(self, found: fmt::Arguments<'_>) -> Result<i64, E> {
            let what = self.what;
            check(|ctx| Err(format!("{}{what} is a whole number, not {found}", ctx.about()))).map_err(raise)?;
            Ok(0)
        }
    }
    impl<'de, F: FnOnce(i64) -> Result<(), Failed>> Visitor<'de> for Visit<F> {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a whole number ({})", self.what)
        }
        fn visit_i64<E: de::Error>(self, value: i64) -> Result<i64, E> {
            (self.rules)(value).map_err(raise)?;
            Ok(value)
        }
        fn visit_u64<E: de::Error>(self, value: u64) -> Result<i64, E> {
            self.visit_i64(i64::try_from(value).unwrap_or(i64::MAX))
        }
        fn visit_f64<E: de::Error>(self, value: f64) -> Result<i64, E> {
            self.not_a_number(format_args!("{value:?}"))
        }
        fn visit_bool<E: de::Error>(self, value: bool) -> Result<i64, E> {
            self.not_a_number(format_args!("`{value}`"))
        }
        fn visit_str<E: de::Error>(self, value: &str) -> Result<i64, E> {
            self.not_a_number(format_args!("`{value}`"))
        }
        fn visit_unit<E: de::Error>(self) -> Result<i64, E> {
            self.not_a_number(format_args!("empty"))
        }
        fn visit_none<E: de::Error>(self) -> Result<i64, E> {
            self.visit_unit()
        }
    }
    d.deserialize_any(Visit { what, rules })
}
