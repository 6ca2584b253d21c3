//! `repr(a)`: the values as NumPy prints them (`np.array2string` with NumPy's print options:
//! line width, precision, summarisation of large arrays, indentation under the class name),
//! then the dtype, device and flags. A repr never touches device memory, does not wait for a
//! change in progress and does not raise: device and managed data, locked arrays, arrays
//! another thread is changing (a move, a copy in) and anything NumPy fails to print get the
//! values-free form, `MemArray2DFloat32(shape=(2, 3), dtype=float32, device='cpu')`.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::device::DeviceType;
use crate::python::base::array::MemArrayBase;
use crate::python::base::header::{FLAG_PINNED, FLAG_READONLY};
use crate::python::export::numpy_io::array_view;
use crate::python::npyffi::dtype::numpy;

/// `repr(a)`.
pub(super) fn repr(slf: &Bound<'_, MemArrayBase>) -> PyResult<String> {
    let (py, array) = (slf.py(), slf.get());
    let name = slf.get_type().name()?.to_string();
    let placement = array.header().placement();
    let mut extras =
        vec![format!("dtype={}", array.element_type().name), format!("device='{}'", placement.device_name())];
    for (set, flag) in [
        (placement.flags & FLAG_READONLY != 0, "readonly=True"),
        (placement.flags & FLAG_PINNED != 0, "pinned=True"),
        (placement.device_type == DeviceType::CudaManaged as i32, "managed=True"),
        (placement.lock_id != 0, "locked=True"),
    ] {
        if set {
            extras.push(flag.to_string());
        }
    }
    let shape = format!("shape={}", PyTuple::new(py, array.header().dims())?.repr()?);
    // Only unlocked host data that no thread is changing now is read.
    let readable = !placement.on_device() && placement.lock_id == 0 && array.idle(py);
    // A failure to print the values (NumPy's own) falls back to the values-free form; an
    // interrupt or another BaseException that is not an Exception goes on.
    match readable.then(|| with_values(slf, &name, &shape, &extras)) {
        Some(Ok(text)) => Ok(text),
        Some(Err(error)) if !error.is_instance_of::<pyo3::exceptions::PyException>(py) => Err(error),
        _ => Ok(format!("{name}({shape}, {})", extras.join(", "))),
    }
}

/// NumPy's `array_repr` layout with this class's name and amso's extras: the values, then
/// `shape=` where NumPy adds it (empty and summarised arrays), then the extras, on the last
/// line if they fit in the line width, else on a new one.
fn with_values(slf: &Bound<'_, MemArrayBase>, name: &str, shape: &str, extras: &[String]) -> PyResult<String> {
    let py = slf.py();
    let np = numpy(py)?;
    let view = array_view(slf, None, None)?;
    let prefix = format!("{name}(");
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "separator"), ", ")?;
    kwargs.set_item(intern!(py, "prefix"), &prefix)?;
    kwargs.set_item(intern!(py, "suffix"), ")")?;
    let values: String = np.call_method(intern!(py, "array2string"), (&view,), Some(&kwargs))?.extract()?;
    let options = np.call_method0(intern!(py, "get_printoptions"))?;
    let width: usize = options.get_item(intern!(py, "linewidth"))?.extract()?;
    let threshold: i64 = options.get_item(intern!(py, "threshold"))?.extract()?;
    let legacy = options.get_item(intern!(py, "legacy"))?.is_truthy()?;
    let dims = slf.get().header().dims();
    let size: i64 = dims.iter().product();
    let mut tail = Vec::with_capacity(extras.len() + 1);
    if (size == 0 && dims != [0]) || (!legacy && size > threshold) {
        tail.push(shape.to_string());
    }
    tail.extend(extras.iter().cloned());
    let head = format!("{prefix}{values},");
    let tail = tail.join(", ") + ")";
    let last_line = head[head.rfind('\n').map_or(0, |newline| newline + 1)..].chars().count();
    let spacer = match last_line + tail.chars().count() + 1 > width {
        true => format!("\n{}", " ".repeat(prefix.chars().count())),
        false => " ".to_string(),
    };
    Ok(format!("{head}{spacer}{tail}"))
}
