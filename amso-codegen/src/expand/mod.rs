//! One module per thing emitted from the spec or from a macro invocation.

pub mod array;
pub mod dispatch;
pub mod element;
pub mod op;
pub mod pyclass;
pub mod record;
pub mod traits;

#[cfg(test)]
mod tests;
