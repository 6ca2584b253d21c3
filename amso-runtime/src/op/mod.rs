//! Rust functions inside compiled graphs. One function over [`Buffer`]s (read), [`BufferMut`]s
//! (written), scalar attributes and the [`Stream`] to work on, marked `#[amso_macros::op]`,
//! becomes three entries:
//!
//! - an eager `#[pyfunction]` that takes any framework's arrays (the typed arguments), with the
//!   outputs passed in;
//! - an XLA FFI handler (the typed FFI, `api_version=1`) for `jax.jit`, through
//!   `amso.ops.jax(module.function)`, with the outputs made by XLA from their shape rules;
//! - a `torch.library` custom op for `torch.compile`, through `amso.ops.torch(module.function)`,
//!   with the outputs as mutated arguments.
//!
//! ```ignore
//! use amso_runtime::op::{Buffer, BufferMut};
//! use amso_runtime::Stream;
//!
//! /// `moved = positions + dt * velocities`.
//! #[amso_macros::op(outputs(moved = like(positions)))]
//! fn drift(positions: Buffer<'_, f32, 2>, velocities: Buffer<'_, f32, 2>, mut moved: BufferMut<'_, f32, 2>,
//!          dt: f64, stream: Stream) -> Result<(), String> { ... }
//!
//! // in the #[pymodule]:
//! amso_runtime::op::add(module, &drift::OP)?;
//! ```
//!
//! The function runs with no Python and no GIL: it reads and writes the buffers on the device
//! they are on (host slices and ndarray views on the CPU, `device_indexer()` for a kernel on
//! CUDA, launched on `stream`), and every output element must be written (XLA's and torch's
//! outputs come uninitialised). An `Err` or a panic becomes the caller's error (a Python
//! exception eagerly, an XLA error under `jax.jit`), never an abort. docs/ops.md.

mod buffer;
mod eager;
mod signature;
mod xla;

pub use buffer::{Buffer, BufferMut};
pub use eager::add;
pub use signature::Op;

/// What `#[amso_macros::op]` generates code against. Not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use super::eager::Eager;
    pub use super::signature::{AttrKind, Dim, OpResult, Param, Platforms, XlaHandler};
    pub use super::xla::{call, AttrValue, Frame};
}
