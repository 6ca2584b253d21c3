//! The stream amso works on when a call names none: set per thread by `amso.cuda.stream(...)`
//! (Python) and reported to DLPack exchange-API consumers as the current work stream.

use std::cell::Cell;

thread_local! {
    static CURRENT: Cell<Option<i64>> = const { Cell::new(None) };
}

/// The current thread's stream (a protocol value: 1 legacy, 2 per-thread, else a handle).
pub fn current() -> Option<i64> {
    CURRENT.with(Cell::get)
}

/// Set the current thread's stream, returning the previous one (`amso.cuda.stream(...)`).
#[cfg(feature = "python")]
pub fn replace(stream: Option<i64>) -> Option<i64> {
    CURRENT.with(|c| c.replace(stream))
}

/// `stream` if given, else the current thread's stream, else the legacy default stream (0).
pub fn resolve(stream: Option<i64>) -> i64 {
    stream.or_else(current).unwrap_or(0)
}
