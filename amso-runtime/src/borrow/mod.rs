//! Borrowing, in one home: which host memory Rust code holds right now. The registry
//! (`registry`) decides whether a new borrow may join the others (the process table,
//! `process.rs`, shares it between every copy of the runtime in a process); the guard
//! (`guard`) is one registered borrow, released when it drops: a typed argument's, and amso's
//! own while Rust code changes an amso array.

pub(crate) mod guard;
pub(crate) mod registry;
