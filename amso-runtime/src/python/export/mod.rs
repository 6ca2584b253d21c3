//! How an amso array's memory leaves it: DLPack capsules and their destructors, the DLPack
//! exchange API's C table, the locked `get_dlpack()` context, `__cuda_array_interface__`, the
//! buffer protocol, and NumPy views and copies.

pub(crate) mod buffer;
pub(crate) mod capsule;
pub(crate) mod dlpack_context;
pub(crate) mod exchange;
pub(crate) mod interface;
pub(crate) mod numpy_io;
