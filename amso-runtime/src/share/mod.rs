//! Sharing device arrays between processes, below Python: the handle's bytes (`handle.rs`),
//! the lease protocol of an export's folder in `/dev/shm` (`lease.rs`), and the untrusted-file
//! primitives it stands on (`folder.rs`). The Python class, and the CUDA IPC calls it makes,
//! are `python/share.rs`; the threat model is `docs/memory.md`'s.

pub(crate) mod folder;
pub(crate) mod handle;
pub(crate) mod lease;
