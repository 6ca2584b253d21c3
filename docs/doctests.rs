//! README's and the guide's Rust code blocks, run as doctests by `cargo test --workspace`:
//! each chapter is this crate's documentation, so every ```rust block in it must compile, and
//! runs unless it is marked `no_run` (blocks that need a GPU).

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct Readme;

#[cfg(doctest)]
#[doc = include_str!("rust.md")]
pub struct Rust;

#[cfg(doctest)]
#[doc = include_str!("kernels.md")]
pub struct Kernels;

#[cfg(doctest)]
#[doc = include_str!("memory.md")]
pub struct Memory;

#[cfg(doctest)]
#[doc = include_str!("dtypes.md")]
pub struct Dtypes;

#[cfg(doctest)]
#[doc = include_str!("ops.md")]
pub struct Ops;
