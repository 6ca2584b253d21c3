//! The one error type of amso. Python exceptions (python/error.rs) and, later, C error codes
//! are mappings of it, each defined once.

/// Everything that can go wrong in the runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An index outside `0..size` on some axis.
    #[error("index {index} is out of bounds for axis {axis} with size {size}")]
    IndexOutOfBounds {
        /// The index as given (negative indices count from the end).
        index: i64,
        /// The axis.
        axis: usize,
        /// That axis' length.
        size: usize,
    },
    /// An index with the wrong number of components.
    #[error("expected {expected} indices for a {expected}-D array, got {got}")]
    IndexArity {
        /// The array's ndim.
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// A shape that cannot describe an array.
    #[error("invalid shape: {0}")]
    InvalidShape(String),
    /// A shape whose byte size overflows the address space.
    #[error("array is too big: shape {shape:?} of {itemsize}-byte elements is more than {max} bytes")]
    TooLarge {
        /// The requested shape.
        shape: Vec<u64>,
        /// Bytes per element.
        itemsize: usize,
        /// The largest allocation possible.
        max: usize,
    },
    /// The allocator could not provide the memory.
    #[error("cannot allocate {bytes} bytes of {what} memory")]
    OutOfMemory {
        /// The size asked for.
        bytes: usize,
        /// Which memory (host, pinned, device).
        what: &'static str,
    },
    /// Access without the lock id of the context that holds the array.
    #[error("array is locked by context {holder}; use it inside that `with` block, or wait until it exits")]
    Locked {
        /// The holder's lock id.
        holder: u64,
    },
    /// Access with a lock id that does not hold the array (an exited context).
    #[error("lock {id} does not hold this array (its context has exited); open a new context with get_dlpack()")]
    StaleLock {
        /// The stale id.
        id: u64,
    },
    /// A write to a read-only array.
    #[error("array is read-only")]
    ReadOnly,
    /// A value that does not fit the element type.
    #[error("{0}")]
    ValueOutOfRange(String),
    /// A value of a kind the element type cannot hold (complex into float, say).
    #[error("{0}")]
    WrongValueType(String),
    /// A device type amso does not handle.
    #[error("unsupported device type {0}; supported: kDLCPU (1), kDLCUDA (2)")]
    UnsupportedDevice(i32),
    /// A request this build or machine cannot serve (no CUDA driver, say).
    #[error("{0}")]
    Unavailable(String),
    /// An export the protocol lets the producer refuse (DLPack's BufferError cases).
    #[error("{0}")]
    ExportRefused(String),
    /// A CUDA driver or NVRTC call failed.
    #[error("CUDA error: {0}")]
    Cuda(String),
    /// An argument of a valid type but an invalid value.
    #[error("{0}")]
    InvalidArgument(String),
}

/// `Result` with amso's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
