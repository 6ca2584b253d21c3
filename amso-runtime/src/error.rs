//! The one error type of amso, and its one grouping: `Error::code`, the C error code, which
//! also picks the Python exception type (python/base/error.rs).

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
    #[error("expected {expected} indices for {}-D array, got {got}", with_article(.expected))]
    IndexArity {
        /// The array's ndim.
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// A shape that cannot describe an array.
    #[error("invalid shape: {0}")]
    InvalidShape(String),
    /// A shape whose byte size overflows the address space (NumPy's rule: `shape::byte_size`).
    #[error("array is too big: shape {shape:?} of {itemsize}-byte elements is more than {max} bytes{}", empty_note(.shape.contains(&0)))]
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
    /// A CUDA driver call (or a step of amso's CUDA layer) failed: which one, and the driver's
    /// own code for it, so callers tell out-of-memory from an invalid context without reading text.
    #[error("CUDA error in {call}: {message}")]
    Cuda {
        /// The driver call that failed (`cuMemcpyAsync`), or amso's step.
        call: &'static str,
        /// The driver's `CUresult` (`CUDA_ERROR_OUT_OF_MEMORY` is 2); `None` where the driver
        /// gave none (a plug-in allocator's malformed answer, say).
        code: Option<u32>,
        /// The driver's name and description of the code, or what went wrong.
        message: String,
    },
    /// A kernel's source did not compile: which kernel, for which architecture, NVRTC's
    /// status and its log.
    #[error("NVRTC could not compile kernel `{kernel}` for {arch} ({status}):\n{log}")]
    Compile {
        /// The kernel's entry point.
        kernel: String,
        /// The architecture compiled for (`sm_90`).
        arch: String,
        /// NVRTC's status (`NVRTC_ERROR_COMPILATION`).
        status: String,
        /// NVRTC's log.
        log: String,
    },
    /// An argument of a valid type but an invalid value.
    #[error("{0}")]
    InvalidArgument(String),
    /// An operation a CUDA graph capture in progress does not allow (`cuda/capture.rs`): on
    /// which stream, and why.
    #[error("{}", problem.describe(*stream))]
    Capture {
        /// The capturing stream (or the one the problem is about).
        stream: crate::stream::Stream,
        /// What the capture does not allow.
        problem: CaptureProblem,
    },
}

/// What a CUDA graph capture in progress does not allow (`Error::Capture`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureProblem {
    /// An operation a capture cannot hold (nothing was queued; the capture is still valid).
    Uncapturable {
        /// The operation.
        operation: &'static str,
        /// What to do instead.
        remedy: &'static str,
    },
    /// The capture was invalidated by an earlier call.
    Invalidated,
    /// The legacy default stream, used while a blocking stream of its device captures.
    LegacyStream,
    /// Work ordered between two streams that capture different graphs.
    TwoGraphs {
        /// The other capturing stream.
        other: crate::stream::Stream,
    },
}

impl CaptureProblem {
    fn describe(&self, stream: crate::stream::Stream) -> String {
        match self {
            CaptureProblem::Uncapturable { operation, remedy } => format!(
                "{operation} cannot be captured into a CUDA graph (stream 0x{stream:x} is capturing); {remedy}. \
                 Nothing was queued: the capture is still valid"
            ),
            CaptureProblem::Invalidated => format!(
                "the CUDA graph capture on stream 0x{stream:x} was invalidated by an earlier call; end the capture \
                 (its graph is lost) and capture again"
            ),
            CaptureProblem::LegacyStream => "the legacy default stream cannot be used while a blocking stream of its \
                                             device is capturing; pass the capturing stream (stream=...) or a \
                                             non-blocking one"
                .into(),
            CaptureProblem::TwoGraphs { other } => format!(
                "streams 0x{stream:x} and 0x{other:x} are capturing two different CUDA graphs; work cannot be \
                 ordered across them"
            ),
        }
    }
}

/// What a too-big message adds for an empty shape (`empty`): why it can be too big at all.
pub(crate) fn empty_note(empty: bool) -> &'static str {
    match empty {
        true => " (the nonzero dimensions count even when one is zero, as in NumPy)",
        false => "",
    }
}

/// `word` after its indefinite article, for messages: "an int64", "a float32", "an 8-D", "an
/// S4", "a uint8" (by sound: a letter read out, as in `S4`, or a number starting with a vowel
/// sound takes "an").
pub(crate) fn with_article(word: impl std::fmt::Display) -> String {
    let word = word.to_string();
    let mut chars = word.chars();
    let (first, second) = (chars.next().unwrap_or(' '), chars.next().unwrap_or(' '));
    let spelled_letter = first.is_ascii_uppercase() && !second.is_ascii_lowercase();
    let vowel_sound = match first {
        'a' | 'e' | 'i' | 'o' | 'A' | 'E' | 'I' | 'O' => true,
        'F' | 'H' | 'L' | 'M' | 'N' | 'R' | 'S' | 'X' => spelled_letter,
        '8' => true,
        // eleven, eighteen, eleven hundred...; every other number starts with a consonant
        '1' => word.starts_with("11") || word.starts_with("18"),
        _ => false,
    };
    format!("{} {word}", if vowel_sound { "an" } else { "a" })
}

/// C error codes (generated/amso.h), one per Python exception kind; 0 is success.
pub mod code {
    /// Success.
    pub const OK: i32 = 0;
    /// A NULL argument.
    pub const NULL_ARGUMENT: i32 = 1;
    /// The object is not an amso array (or not of the requested instantiation).
    pub const NOT_AN_AMSO_ARRAY: i32 = 2;
    /// IndexError.
    pub const INDEX: i32 = 3;
    /// ValueError.
    pub const VALUE: i32 = 4;
    /// TypeError.
    pub const TYPE: i32 = 5;
    /// OverflowError.
    pub const OVERFLOW: i32 = 6;
    /// MemoryError.
    pub const MEMORY: i32 = 7;
    /// BufferError (locked, refused export).
    pub const BUFFER: i32 = 8;
    /// RuntimeError (no CUDA, CUDA failure).
    pub const RUNTIME: i32 = 9;
    /// A panic inside amso, caught at the boundary (a bug: please report it).
    pub const PANIC: i32 = 10;
}

impl Error {
    /// The C error code of this error (the same grouping as the Python exception types).
    pub fn code(&self) -> i32 {
        match self {
            Error::IndexOutOfBounds { .. } | Error::IndexArity { .. } => code::INDEX,
            Error::InvalidShape(_)
            | Error::TooLarge { .. }
            | Error::ReadOnly
            | Error::InvalidArgument(_)
            | Error::UnsupportedDevice(_) => code::VALUE,
            Error::ValueOutOfRange(_) => code::OVERFLOW,
            Error::WrongValueType(_) => code::TYPE,
            Error::OutOfMemory { .. } | Error::Cuda { code: Some(OUT_OF_MEMORY), .. } => code::MEMORY,
            Error::Locked { .. } | Error::StaleLock { .. } | Error::ExportRefused(_) => code::BUFFER,
            Error::Unavailable(_) | Error::Cuda { .. } | Error::Compile { .. } | Error::Capture { .. } => code::RUNTIME,
        }
    }
}

/// The driver's `CUDA_ERROR_OUT_OF_MEMORY`: a `Cuda` error of this code is a memory error.
const OUT_OF_MEMORY: u32 = 2;

/// `Result` with amso's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::{code, with_article, Error};

    #[test]
    fn a_cuda_error_keeps_the_call_and_the_drivers_code() {
        let oom = Error::Cuda {
            call: "cuModuleLoadData",
            code: Some(2),
            message: "CUDA_ERROR_OUT_OF_MEMORY: out of memory".into(),
        };
        assert_eq!(oom.code(), code::MEMORY, "out of memory by its code, whatever the text");
        assert_eq!(oom.to_string(), "CUDA error in cuModuleLoadData: CUDA_ERROR_OUT_OF_MEMORY: out of memory");
        let context = Error::Cuda { call: "cuCtxPushCurrent", code: Some(201), message: "out of memory?".into() };
        assert_eq!(context.code(), code::RUNTIME, "an invalid context is not a memory error, whatever the text");
        let no_code = Error::Cuda { call: "the allocator's malloc", code: None, message: "it raised".into() };
        assert_eq!(no_code.code(), code::RUNTIME);
    }

    #[test]
    fn a_compile_error_keeps_the_kernel_the_arch_and_the_log() {
        let error = Error::Compile {
            kernel: "scale".into(),
            arch: "sm_90".into(),
            status: "NVRTC_ERROR_COMPILATION".into(),
            log: "amso_kernel.cu(3): error: identifier \"undefined_name\" is undefined".into(),
        };
        assert_eq!(error.code(), code::RUNTIME);
        assert_eq!(
            error.to_string(),
            "NVRTC could not compile kernel `scale` for sm_90 (NVRTC_ERROR_COMPILATION):\n\
             amso_kernel.cu(3): error: identifier \"undefined_name\" is undefined"
        );
    }

    #[test]
    fn a_capture_error_keeps_the_stream_and_the_problem() {
        use super::CaptureProblem;
        use crate::stream::Stream;
        // SAFETY: these values are formatted, never given to the driver.
        let (stream, other) = unsafe { (Stream::from_handle(0x7f00), Stream::from_handle(0x7f10)) };
        let problem = CaptureProblem::Uncapturable { operation: "a synchronous move", remedy: "pass async_copy=True" };
        let cases = [
            (
                problem,
                "a synchronous move cannot be captured into a CUDA graph (stream 0x7f00 is capturing); pass \
                 async_copy=True. Nothing was queued: the capture is still valid",
            ),
            (
                CaptureProblem::Invalidated,
                "the CUDA graph capture on stream 0x7f00 was invalidated by an earlier call; end the capture (its \
                 graph is lost) and capture again",
            ),
            (
                CaptureProblem::LegacyStream,
                "the legacy default stream cannot be used while a blocking stream of its device is capturing; pass \
                 the capturing stream (stream=...) or a non-blocking one",
            ),
            (
                CaptureProblem::TwoGraphs { other },
                "streams 0x7f00 and 0x7f10 are capturing two different CUDA graphs; work cannot be ordered across \
                 them",
            ),
        ];
        for (problem, text) in cases {
            let error = Error::Capture { stream, problem };
            assert_eq!((error.to_string().as_str(), error.code()), (text, code::RUNTIME));
        }
    }

    #[test]
    fn articles_follow_the_sound() {
        for (word, expected) in [
            ("int64", "an int64"),
            ("object", "an object"),
            ("float32", "a float32"),
            ("uint8", "a uint8"),
            ("bool", "a bool"),
            ("S4", "an S4"),
            ("U3", "a U3"),
            ("NoneType", "a NoneType"),
            ("8", "an 8"),
            ("11", "an 11"),
            ("2", "a 2"),
            ("1", "a 1"),
        ] {
            assert_eq!(with_article(word), expected);
        }
    }
}
