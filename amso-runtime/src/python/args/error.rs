//! Why a typed argument is refused, as a value a Rust caller can match on: rust-numpy's typed
//! errors (`TypeError`, `DimensionalityError`, `NotContiguousError`, `BorrowError`) as one
//! enum. Extraction raises it as the Python exception of its kind (`From<ArgumentError> for
//! PyErr`); `UntypedArray::into_typed`, `as_slice`, `as_slice_mut`, the indexers and `device_indexer` return
//! it as it is.

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::PyErr;

/// Why an object is not the typed argument a function asks for, or cannot be read as asked.
/// Each variant holds the facts its message says; `arrived` describes the object ("numpy.ndarray
/// on cpu"). Converts into the Python exception amso raises: `Kind` a `TypeError`, `Borrowed` a
/// `BufferError`, `Python` the exception as it was, the rest `ValueError`s.
#[derive(Debug)]
#[non_exhaustive]
pub enum ArgumentError {
    /// Another element type or rank than the argument takes (rust-numpy's `TypeError` and
    /// `DimensionalityError`).
    Kind {
        /// What the argument takes: "a float32 array with 2 dimensions".
        expected: String,
        /// The element type that arrived ("int64", or NumPy's name for kinds DLPack lacks).
        dtype: String,
        /// Its number of dimensions.
        ndim: usize,
        /// The object and where its data lives.
        arrived: String,
    },
    /// A read-only array for a writable argument.
    ReadOnly {
        /// What the argument takes.
        expected: String,
        /// The object and where its data lives.
        arrived: String,
    },
    /// A shape of more elements than an address space holds.
    TooManyElements {
        /// The shape.
        shape: Vec<usize>,
        /// The object and where its data lives.
        arrived: String,
    },
    /// A shape and strides that reach past the address space.
    PastAddressSpace {
        /// The shape.
        shape: Vec<usize>,
        /// The strides, in elements.
        strides: Vec<isize>,
        /// The object and where its data lives.
        arrived: String,
    },
    /// A NULL data address, or device data not aligned for the element type.
    Address {
        /// The data address.
        data: usize,
        /// The element type's name.
        dtype: &'static str,
        /// The object and where its data lives.
        arrived: String,
    },
    /// A writable argument whose strides reach some elements twice (a broadcast view).
    Overlap {
        /// What the argument takes.
        expected: String,
        /// The first axis found to overlap.
        axis: usize,
        /// The shape.
        shape: Vec<usize>,
        /// The strides, in elements.
        strides: Vec<isize>,
        /// The object and where its data lives.
        arrived: String,
    },
    /// A bool array holding bytes other than 0 and 1 (a `bool` must not).
    Bools {
        /// The object and where its data lives.
        arrived: String,
    },
    /// A bool field of records holding bytes other than 0 and 1.
    RecordBools {
        /// The object and where its data lives.
        arrived: String,
    },
    /// An object array with NULL entries (a `Py<PyAny>` is never NULL).
    NullObjects {
        /// The object and where its data lives.
        arrived: String,
    },
    /// Memory another argument holds borrowed, in this call or one still running (rust-numpy's
    /// `BorrowError`).
    Borrowed {
        /// Whether the other borrow is for writing.
        exclusive: bool,
        /// The other borrow's first byte.
        start: usize,
        /// The other borrow's end.
        end: usize,
    },
    /// Device data where host data is needed (`as_slice`, `as_array`).
    DeviceData {
        /// The object and where its data lives.
        arrived: String,
    },
    /// Host data where device data is needed (`device_indexer`).
    HostData {
        /// The object and where its data lives.
        arrived: String,
    },
    /// Not one C-contiguous run (`as_slice`; rust-numpy's `NotContiguousError`).
    NotContiguous {
        /// The call that needs it (`as_slice()`).
        what: &'static str,
        /// The shape.
        shape: Vec<usize>,
        /// The strides, in elements.
        strides: Vec<isize>,
    },
    /// A Python exception met on the way (a producer's protocol call, device data for host
    /// access, ...), as it was raised.
    Python(PyErr),
}

impl std::fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        match self {
            ArgumentError::Kind { expected, dtype, ndim, arrived } => write!(
                f,
                "expected {expected}, got {} array with {ndim} dimension{} ({arrived})",
                crate::error::with_article(dtype),
                plural(*ndim)
            ),
            ArgumentError::ReadOnly { expected, arrived } => {
                write!(f, "expected {expected}, got a read-only one ({arrived}); pass a writable array")
            }
            ArgumentError::TooManyElements { shape, arrived } => {
                write!(f, "the array's shape {shape:?} has more elements than an address space holds ({arrived})")
            }
            ArgumentError::PastAddressSpace { shape, strides, arrived } => write!(
                f,
                "the array's shape {shape:?} and strides {strides:?} reach past the address space ({arrived})"
            ),
            ArgumentError::Address { data, dtype, arrived } => write!(
                f,
                "the array's data address 0x{data:x} is NULL or not aligned for {dtype} ({arrived}); pass a copy"
            ),
            ArgumentError::Overlap { expected, axis, shape, strides, arrived } => write!(
                f,
                "expected {expected}, got one whose strides {strides:?} reach some elements twice (axis {axis}, \
                 shape {shape:?}; a broadcast?) ({arrived}); pass a contiguous copy"
            ),
            ArgumentError::Bools { arrived } => write!(
                f,
                "the bool array holds bytes other than 0 and 1 ({arrived}); convert it with x.astype(bool) first"
            ),
            ArgumentError::RecordBools { arrived } => {
                write!(f, "a bool field of the records holds bytes other than 0 and 1 ({arrived}); fix the data first")
            }
            ArgumentError::NullObjects { arrived } => write!(
                f,
                "the object array holds NULL entries (made by C code without filling it) ({arrived}); fill it, e.g. \
                 x[...] = None, or pass a copy"
            ),
            ArgumentError::Borrowed { exclusive, start, end } => write!(
                f,
                "the array overlaps another array argument that is borrowed {} (bytes 0x{start:x}..0x{end:x}), in \
                 this call or in another one still running; a writable argument cannot share memory with any other \
                 argument",
                if *exclusive { "for writing" } else { "for reading" }
            ),
            ArgumentError::DeviceData { arrived } => {
                write!(f, "the array is in CUDA device memory ({arrived}); host views need host data")
            }
            ArgumentError::HostData { arrived } => {
                write!(f, "a device indexer needs CUDA device data; this array is in host memory ({arrived})")
            }
            ArgumentError::NotContiguous { what, shape, strides } => write!(
                f,
                "{what} needs a C-contiguous array; this one has strides {strides:?} for shape {shape:?} (a \
                 transposed, reversed or strided view); use as_array() for strided views, or pass \
                 np.ascontiguousarray(x)"
            ),
            ArgumentError::Python(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ArgumentError {}

impl From<ArgumentError> for PyErr {
    fn from(error: ArgumentError) -> PyErr {
        match error {
            ArgumentError::Python(error) => error,
            ArgumentError::Kind { .. } => PyTypeError::new_err(error.to_string()),
            ArgumentError::Borrowed { .. } => PyBufferError::new_err(error.to_string()),
            _ => PyValueError::new_err(error.to_string()),
        }
    }
}

impl ArgumentError {
    /// The exception for a boxed refusal (`TypedArray::check`'s).
    #[allow(clippy::boxed_local)] // `check` boxes its refusals; this unboxes one for `map_err`
    pub(super) fn raise(self: Box<Self>) -> PyErr {
        PyErr::from(*self)
    }
}

impl From<PyErr> for ArgumentError {
    fn from(error: PyErr) -> ArgumentError {
        ArgumentError::Python(error)
    }
}
