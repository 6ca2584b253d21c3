//! Pinned staging for copies between pageable host memory and a device: a crew of host
//! threads (`crew`) that copy through a ring of pinned buffers while the copy engine moves the
//! previous ones (`streaming_copy`). `cuda/transfer.rs` is their one user.

pub(crate) mod crew;
pub(crate) mod streaming_copy;
