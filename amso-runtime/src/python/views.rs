//! What goes through a NumPy view of a whole host array, as `iter(a)` takes its rows: `a[key]`
//! beyond one element (NumPy's basic indexing: integers, slices, `...`, `None`), assignment
//! through such a key (NumPy's broadcasting), comparisons (elementwise, as NumPy's),
//! conversions to Python scalars and `in`, NumPy's ufuncs and the arithmetic operators, and the
//! NumPy methods amso answers with NumPy's (`a.sum()`, `a.T`, ...).
//!
//! The view is `a.__array__()`'s, so its rules are the iteration's: it holds the array's
//! memory (the export's reference), not the array object, so it stays valid after `del a`; it
//! does not stop `move_memory` (after a move it shows the host copy as it was), except for the
//! dtypes NumPy views as raw bytes (ml_dtypes' types, packed vectors), whose buffer pins the
//! data until the view goes. Device (and managed) data is a TypeError that says what to do; a locked array
//! refuses, as every read does.
//!
//! And `iter(a)`: the elements of a 1-D array (as `a[i]` gives them, read live), or the rows of a
//! host array of higher rank as NumPy views (writable unless the array is read-only). Rows of
//! device data are a `TypeError` that says what to do.

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;

use crate::python::base::array::{write_borrow, MemArrayBase};
use crate::python::base::convert::scalar_to_py;
use crate::python::export::numpy_io::array_view;

/// The NumPy view of host data behind indexing and comparisons; device data is a TypeError
/// saying that `doing` needs host memory, and what to do instead.
fn host_view<'py>(slf: &Bound<'py, MemArrayBase>, doing: &str, instead: &str) -> PyResult<Bound<'py, PyAny>> {
    refuse_device(slf, doing, instead)?;
    array_view(slf, None, None)
}

fn refuse_device(slf: &Bound<'_, MemArrayBase>, doing: &str, instead: &str) -> PyResult<()> {
    if !slf.get().header().placement().on_device() {
        return Ok(());
    }
    Err(PyTypeError::new_err(format!(
        "{doing} works on a NumPy view of host memory, and this array is in CUDA device memory: {instead}, move \
         the data first (a.move_memory('cpu')), or work on the GPU through DLPack (cupy.from_dlpack(a), \
         torch.from_dlpack(a))"
    )))
}

/// `a[key]` for a key that is not one element (`Key::Basic`, or fewer integers than
/// dimensions): a NumPy view, or NumPy's IndexError.
pub(super) fn get_item<'py>(slf: &Bound<'py, MemArrayBase>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let doing = "indexing by rows or slices";
    host_view(slf, doing, "index a host copy (a.to_numpy()[...])")?.get_item(key)
}

/// `a[key] = value` for a key that is not one element: assigned through the view, with
/// NumPy's broadcasting and casting. Read-only and locked arrays refuse as an element write
/// does; amso's borrow of the memory is held while NumPy writes.
pub(super) fn set_item(
    slf: &Bound<'_, MemArrayBase>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    refuse_device(slf, "assigning to rows or slices", "assign to a host copy and read it back (read_numpy_array)")?;
    let _borrow = borrow_for_writing(slf)?;
    array_view(slf, None, None)?.set_item(key, value)
}

/// The borrow a write through NumPy's view holds while NumPy writes: refused, as an element
/// write is, for read-only and locked arrays.
fn borrow_for_writing<'py>(slf: &Bound<'py, MemArrayBase>) -> PyResult<Option<crate::borrow::guard::Borrow<'py>>> {
    let py = slf.py();
    slf.get().read(py, |array| -> PyResult<_> {
        array.check_writable(None)?;
        write_borrow(py, array, true)
    })
}

/// `a == b`, `a < b`, ...: NumPy's elementwise comparison of the host data, a NumPy bool array.
pub(super) fn compare<'py>(
    slf: &Bound<'py, MemArrayBase>,
    other: &Bound<'py, PyAny>,
    op: CompareOp,
) -> PyResult<Bound<'py, PyAny>> {
    let doing = "comparing an amso array (elementwise, as NumPy does)";
    host_view(slf, doing, "compare a host copy (a.to_numpy() == b)")?.rich_compare(other, op)
}

/// `bool(a)`, `float(a)`, `int(a)`, `complex(a)` and `operator.index(a)` (`conversion` names the
/// special method): what NumPy gives for its own array of the same shape and values, errors
/// included, under the installed NumPy's rules. Host data converts through its NumPy view; a
/// device array's one element is read from the device into a NumPy array of its shape (any
/// other size gives NumPy's error, from an empty stand-in, without touching the device).
pub(super) fn convert<'py>(slf: &Bound<'py, MemArrayBase>, conversion: &str) -> PyResult<Bound<'py, PyAny>> {
    let (py, array) = (slf.py(), slf.get());
    let view = if array.header().placement().on_device() && !array.element_type().is_compound() {
        let numpy = crate::python::npyffi::dtype::numpy(py)?;
        let dims = array.header().dims().to_vec();
        let dtype = crate::python::npyffi::dtype::numpy_dtype(py, array.element_type())?;
        let shape = pyo3::types::PyTuple::new(py, &dims)?;
        if dims.iter().product::<i64>() == 1 {
            let value = array.read(py, |array| array.get_scalar(&vec![0; dims.len()], None))?;
            numpy.call_method1(intern!(py, "full"), (shape, scalar_to_py(py, value)?, dtype))?
        } else {
            numpy.call_method1(intern!(py, "empty"), (shape, dtype))?
        }
    } else {
        host_view(slf, "converting an array to a Python scalar", "convert a host copy (float(a.to_numpy()))")?
    };
    view.call_method0(conversion).map_err(|error| {
        // NumPy advises `a.any()`, which amso arrays leave to NumPy: name the one-line way.
        let text = error.value(py).to_string();
        if error.is_instance_of::<pyo3::exceptions::PyValueError>(py) && text.contains("a.any()") {
            pyo3::exceptions::PyValueError::new_err(text.replace(
                "Use a.any() or a.all()",
                "Use np.asarray(a).any() or np.asarray(a).all() (on the GPU: cupy.from_dlpack(a).any())",
            ))
        } else {
            error
        }
    })
}

/// `value in a`: NumPy's `(a == value).any()` over the host data, at every rank.
pub(super) fn contains(slf: &Bound<'_, MemArrayBase>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let array = slf.get();
    let device = array.header().placement().on_device();
    if device && array.header().dims().len() == 1 && !array.element_type().is_compound() {
        // A 1-D device array's elements, read one by one as iteration reads them.
        for item in iterate(slf)?.into_pyobject(slf.py())?.try_iter()? {
            if item?.eq(value)? {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    host_view(slf, "`value in a`", "test a host copy (value in a.to_numpy())")?.contains(value)
}

/// `__array_ufunc__`: NumPy's ufuncs (and the operators `install_numpy_habits` gives) over the
/// host data, as over any array-like: each amso array of this runtime among the inputs is its
/// NumPy view, and each among the outputs (`out=`) is written in place, checked writable and
/// borrowed for writing while NumPy runs (the lock rules of `a[...] = v`), and returned itself.
/// Device data is a `TypeError` naming the GPU libraries.
pub(super) fn array_ufunc<'py>(
    ufunc: &Bound<'py, PyAny>,
    method: &str,
    inputs: &Bound<'py, pyo3::types::PyTuple>,
    kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = ufunc.py();
    let doing = "NumPy's ufuncs and arithmetic on an amso array";
    let view = |object: &Bound<'py, PyAny>| match object.cast::<MemArrayBase>() {
        Ok(array) => host_view(array, doing, "compute on a host copy (np.add(a.to_numpy(), 1))"),
        Err(_) => Ok(object.clone()),
    };
    // Each output array with its write borrow, held while NumPy runs.
    let mut borrows = Vec::new();
    let mut borrow_output = |array: &Bound<'py, MemArrayBase>| -> PyResult<()> {
        refuse_device(array, doing, "compute on a host copy and read it back (read_numpy_array)")?;
        if borrows.iter().any(|(held, _)| *held == array.as_ptr()) {
            return Ok(()); // one array given as two outputs: borrowed once
        }
        borrows.push((array.as_ptr(), borrow_for_writing(array)?));
        Ok(())
    };
    // `ufunc.at(a, indices, ...)` writes its first operand in place.
    if let (true, Ok(first)) = (method == "at", inputs.get_item(0).and_then(|f| Ok(f.cast_into::<MemArrayBase>()?))) {
        borrow_output(&first)?;
    }
    let viewed: Vec<Bound<'py, PyAny>> = inputs.iter().map(|input| view(&input)).collect::<PyResult<_>>()?;
    let kwargs = kwargs.map(|k| k.copy()).transpose()?.unwrap_or_else(|| pyo3::types::PyDict::new(py));
    let outputs = match kwargs.get_item(intern!(py, "out"))? {
        Some(out) => {
            let out = out.cast_into::<pyo3::types::PyTuple>()?; // NumPy passes `out` as a tuple
            let mut views = Vec::with_capacity(out.len());
            for output in out.iter() {
                if let Ok(array) = output.cast::<MemArrayBase>() {
                    borrow_output(array)?;
                }
                views.push(view(&output)?);
            }
            kwargs.set_item(intern!(py, "out"), pyo3::types::PyTuple::new(py, views)?)?;
            Some(out)
        }
        None => None,
    };
    let result = ufunc.getattr(method)?.call(pyo3::types::PyTuple::new(py, viewed)?, Some(&kwargs))?;
    drop(borrows);
    // NumPy's result, with each amso output in place of its view (a `None` output slot keeps
    // the array NumPy made for it); `at` returns None.
    let Some(out) = outputs.filter(|_| method != "at") else { return Ok(result) };
    let own = |index: usize, made: Bound<'py, PyAny>| -> PyResult<Bound<'py, PyAny>> {
        let given = out.get_item(index)?;
        Ok(if given.cast::<MemArrayBase>().is_ok() { given } else { made })
    };
    match result.cast::<pyo3::types::PyTuple>() {
        Ok(results) if out.len() > 1 => {
            let items: Vec<_> = results.iter().enumerate().map(|(i, made)| own(i, made)).collect::<PyResult<_>>()?;
            Ok(pyo3::types::PyTuple::new(py, items)?.into_any())
        }
        _ => own(0, result),
    }
}

/// Give this runtime copy's base class, once, what NumPy's arrays have and amso leaves to NumPy.
/// Every generated class inherits both.
/// - NumPy's arithmetic operators: those of `numpy.lib.mixins.NDArrayOperatorsMixin` (`a + 1`,
///   `-a`, `abs(a)`, `a += 1`, ...), each a call of the ufunc that reaches `__array_ufunc__`;
///   the comparisons stay amso's own (`compare`).
/// - A descriptor for each public attribute of NumPy's arrays the class lacks (`a.sum`, `a.T`,
///   `a.fill`, ...: `numpy_attribute` answers). Not a `__getattr__`: a class with its own
///   attribute hook loses CPython's specialised attribute lookups and method calls, which every
///   `a.__dlpack__()` and `a.shape` would pay.
///
/// Without NumPy (an extension crate's module in a Python that lacks it) there is nothing to
/// compute with, and nothing is installed.
pub(super) fn install_numpy_habits(py: Python<'_>) -> PyResult<()> {
    static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if INSTALLED.load(Ordering::Acquire) {
        return Ok(());
    }
    let class = <MemArrayBase as pyo3::PyTypeInfo>::type_object(py);
    let mixins = match py.import(intern!(py, "numpy.lib.mixins")) {
        Ok(mixins) => mixins,
        Err(error) if error.is_instance_of::<pyo3::exceptions::PyImportError>(py) => return Ok(()),
        Err(error) => return Err(error),
    };
    let mixin = mixins.getattr(intern!(py, "NDArrayOperatorsMixin"))?;
    let namespace = mixin.getattr(intern!(py, "__dict__"))?;
    for item in namespace.call_method0(intern!(py, "items"))?.try_iter()? {
        let (name, function): (String, Bound<'_, PyAny>) = item?.extract()?;
        let comparison = ["__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"].contains(&name.as_str());
        if name.starts_with("__") && name.ends_with("__") && function.is_callable() && !comparison {
            class.setattr(name.as_str(), function)?;
        }
    }
    let ndarray = py.import(intern!(py, "numpy"))?.getattr(intern!(py, "ndarray"))?;
    for name in ndarray.dir()? {
        let name = name.cast_into::<pyo3::types::PyString>()?;
        if !name.to_cow()?.starts_with('_') && !class.hasattr(&name)? {
            class.setattr(&name, NumpyAttribute { name: name.clone().unbind() })?;
        }
    }
    INSTALLED.store(true, Ordering::Release);
    Ok(())
}

/// A NumPy attribute an amso array leaves to NumPy, as a descriptor of the base class
/// (`install_numpy_habits`): the class itself gets the descriptor, an array the answer of
/// `numpy_attribute`.
#[pyclass(frozen, module = "amso._amso", name = "_NumpyAttribute")]
pub struct NumpyAttribute {
    name: Py<pyo3::types::PyString>,
}

#[pymethods]
impl NumpyAttribute {
    fn __get__<'py>(
        slf: &Bound<'py, Self>,
        instance: Option<&Bound<'py, PyAny>>,
        _owner: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match instance.map(|object| object.cast::<MemArrayBase>()) {
            Some(Ok(array)) => numpy_attribute(array, slf.get().name.bind(slf.py())),
            Some(Err(error)) => Err(error.into()),
            None => Ok(slf.clone().into_any()),
        }
    }
}

/// NumPy attributes an amso array answers with NumPy's own, over its host data: NumPy results,
/// or NumPy views of the same memory (`T`, `reshape`), as `np.asarray(a).<name>` gives them.
const FROM_NUMPY: [&str; 25] = [
    "T", "mT", "strides", "flags", "tolist", "item", "astype", "reshape", "ravel", "flatten", "sum", "mean", "min",
    "max", "any", "all", "prod", "std", "var", "argmin", "argmax", "cumsum", "cumprod", "clip", "round",
];

/// `a.<name>` for a public name of NumPy's arrays the class lacks (`NumpyAttribute`): NumPy's
/// attribute of the host view for the names of `FROM_NUMPY`; `fill`, written under the write
/// rules of `a[...] = v`; any other name NumPy arrays have is an `AttributeError` naming
/// `np.asarray(a).<name>`. Always an `AttributeError` when the answer is no (`hasattr` probes
/// stay safe), device data included.
fn numpy_attribute<'py>(
    slf: &Bound<'py, MemArrayBase>,
    name: &Bound<'py, pyo3::types::PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let text = name.to_cow()?;
    let kind = slf.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "MemArray".into());
    let missing = |advice: String| {
        pyo3::exceptions::PyAttributeError::new_err(format!("'{kind}' object has no attribute '{text}'{advice}"))
    };
    // `name` is a public attribute of NumPy's arrays (`install_numpy_habits` made the descriptor
    // from `dir(numpy.ndarray)`).
    let ndarray = crate::python::npyffi::dtype::numpy(py)?.getattr(intern!(py, "ndarray"))?;
    let call = if ndarray.getattr(name)?.is_callable() { "()" } else { "" };
    let numpy_way = format!("np.asarray(a).{text}{call}");
    if slf.get().header().placement().on_device() {
        return Err(missing(format!(
            ": NumPy's works on host memory, and this array is in CUDA device memory: use \
             cupy.from_dlpack(a).{text}{call} or torch.from_dlpack(a), or move the data first (a.move_memory('cpu'))"
        )));
    }
    if text == "fill" {
        let array = slf.clone().unbind();
        let fill = move |args: &Bound<'_, pyo3::types::PyTuple>,
                         kwargs: Option<&Bound<'_, pyo3::types::PyDict>>|
              -> PyResult<()> {
            let py = args.py();
            if args.len() != 1 || kwargs.is_some_and(|k| !k.is_empty()) {
                return Err(PyTypeError::new_err(format!(
                    "fill() takes one value (as NumPy's fill(value)), got {} positional and {} keyword arguments",
                    args.len(),
                    kwargs.map_or(0, |k| k.len())
                )));
            }
            let ellipsis = py.Ellipsis();
            set_item(array.bind(py), ellipsis.bind(py), &args.get_item(0)?)
        };
        let doc = Some(c"fill(value): every element");
        return Ok(pyo3::types::PyCFunction::new_closure(py, Some(c"fill"), doc, fill)?.into_any());
    }
    if FROM_NUMPY.contains(&text.as_ref()) && slf.get().element_type().lanes <= 1 {
        // Any refusal (a locked array) is an AttributeError with its cause, so `hasattr` and
        // `getattr(a, name, default)` stay safe.
        return array_view(slf, None, None).and_then(|view| view.getattr(name)).map_err(|cause| {
            let error = missing(format!(": NumPy's view of the data is refused ({}); {numpy_way}", cause.value(py)));
            error.set_cause(py, Some(cause));
            error
        });
    }
    let lanes = if slf.get().element_type().lanes > 1 { ", whose vectors are a last axis of lanes" } else { "" };
    Err(missing(format!("; amso leaves it to NumPy: {numpy_way} (a NumPy view of the host data{lanes})")))
}

/// An iterator over an amso array (Python name `amso._amso.ArrayIterator`).
#[pyclass(frozen, module = "amso._amso", name = "ArrayIterator")]
pub struct ArrayIterator {
    array: Py<MemArrayBase>,
    /// A NumPy view of a host array of rank > 1, whose rows are yielded.
    rows: Option<Py<PyAny>>,
    next: AtomicUsize,
    len: usize,
}

/// `iter(a)`.
pub(super) fn iterate(slf: &Bound<'_, MemArrayBase>) -> PyResult<ArrayIterator> {
    let array = slf.get();
    let dims = array.header().dims();
    // Rows of a higher rank, a record array's records (`np.void`) and a vector array's lanes
    // come from a NumPy view.
    let rows = if dims.len() > 1 || array.element_type().is_compound() {
        if array.header().placement().on_device() {
            return Err(PyTypeError::new_err(format!(
                "iterating over {}-D array yields its rows as NumPy views of host memory, and this array is on \
                 the device: iterate over a.to_numpy(), or move_memory(kDLCPU) first",
                crate::error::with_article(dims.len())
            )));
        }
        Some(slf.call_method0(intern!(slf.py(), "__array__"))?.unbind())
    } else {
        None
    };
    Ok(ArrayIterator { array: slf.clone().unbind(), rows, next: AtomicUsize::new(0), len: dims[0] as usize })
}

#[pymethods]
impl ArrayIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        if index >= self.len {
            self.next.store(self.len, Ordering::Relaxed);
            return Ok(None);
        }
        if let Some(rows) = &self.rows {
            return Ok(Some(rows.bind(py).get_item(index)?));
        }
        let value = self.array.get().read(py, |array| array.get_scalar(&[index as i64], None))?;
        Ok(Some(scalar_to_py(py, value)?))
    }

    fn __length_hint__(&self) -> usize {
        self.len.saturating_sub(self.next.load(Ordering::Relaxed))
    }
}
