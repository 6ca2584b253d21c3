//! The stream amso works on when a call names none: set per thread by `amso.cuda.stream(...)`
//! (Python) and reported to DLPack exchange-API consumers as the current work stream.
//!
//! The context is one per thread for the whole process, whichever copy of the runtime reads
//! it: it lives in the bundled module's copy, and the others reach it through `borrow/process.rs`.

use std::cell::Cell;

thread_local! {
    static CURRENT: Cell<Option<i64>> = const { Cell::new(None) };
}

/// The current thread's stream (a protocol value: 1 legacy, 2 per-thread, else a handle).
pub(crate) fn current() -> Option<i64> {
    #[cfg(feature = "python")]
    if let Some(table) = crate::borrow::process::joined() {
        return decode((table.current_stream)());
    }
    CURRENT.with(Cell::get)
}

/// Set the current thread's stream, returning the previous one (`amso.cuda.stream(...)`).
#[cfg(feature = "python")]
pub(crate) fn replace(stream: Option<i64>) -> Option<i64> {
    match crate::borrow::process::joined() {
        Some(table) => decode((table.replace_stream)(encode(stream))),
        None => CURRENT.with(|c| c.replace(stream)),
    }
}

/// `stream` if given, else the current thread's stream, else the legacy default stream (0).
pub(crate) fn resolve(stream: Option<i64>) -> i64 {
    stream.or_else(current).unwrap_or(0)
}

/// `Option<i64>` across the C boundary: no stream is `NONE` (protocol values are >= 0).
#[cfg(feature = "python")]
const NONE: i64 = -1;

#[cfg(feature = "python")]
fn encode(stream: Option<i64>) -> i64 {
    stream.unwrap_or(NONE)
}

#[cfg(feature = "python")]
fn decode(value: i64) -> Option<i64> {
    (value != NONE).then_some(value)
}

/// This copy's context, read by other copies through the process table.
#[cfg(feature = "python")]
pub(crate) extern "C" fn current_shared() -> i64 {
    encode(CURRENT.with(Cell::get))
}

/// This copy's context, replaced by other copies through the process table.
#[cfg(feature = "python")]
pub(crate) extern "C" fn replace_shared(stream: i64) -> i64 {
    encode(CURRENT.with(|c| c.replace(decode(stream))))
}
