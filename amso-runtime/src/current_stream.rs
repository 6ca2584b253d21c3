//! The stream amso works on when a call names none: set per thread by `amso.cuda.stream(...)`
//! (Python) and reported to DLPack exchange-API consumers as the current work stream.
//!
//! The context is one per thread for the whole process, whichever copy of the runtime reads
//! it: it lives in the bundled module's copy, and the others reach it through `process.rs`.

use std::cell::Cell;

use crate::stream::Stream;

thread_local! {
    static CURRENT: Cell<Option<i64>> = const { Cell::new(None) };
}

/// The current thread's stream.
pub(crate) fn current() -> Option<Stream> {
    #[cfg(feature = "python")]
    if let Some(table) = crate::process::joined() {
        return decode((table.current_stream)()).map(Stream::reported);
    }
    CURRENT.with(Cell::get).map(Stream::reported)
}

/// Set the current thread's stream, returning the previous one (`amso.cuda.stream(...)`).
#[cfg(feature = "python")]
pub(crate) fn replace(stream: Option<Stream>) -> Option<Stream> {
    let stream = stream.map(Stream::protocol_value);
    let previous = match crate::process::joined() {
        Some(table) => decode((table.replace_stream)(encode(stream))),
        None => CURRENT.with(|c| c.replace(stream)),
    };
    previous.map(Stream::reported)
}

/// `stream` if given, else the current thread's stream, else the legacy default stream.
pub(crate) fn resolve(stream: Option<Stream>) -> Stream {
    stream.or_else(current).unwrap_or(Stream::LEGACY)
}

/// The thread's stream is kept, and crosses the C boundary between runtime copies, as its
/// protocol value (`Option<i64>`): no stream is `NONE` (protocol values are >= 0).
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
