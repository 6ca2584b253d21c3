//! The Python stubs' typed parts: each instantiation's class with item access typed by its
//! element (a float32 array's `a[i, j]` is a `float`), and `generated/_memarray.pyi`, where
//! `amso.MemArray(shape, dtype)` and `amso.empty` are overloaded on literal dtypes and on the
//! shape's length so that a type checker knows the class they return.

use std::fmt::Write as _;

use crate::dtype::{DType, TypeCode};
use crate::Spec;

/// What one element takes in assignment (`a[i, j] = v`): Python's type and NumPy's scalars of
/// the kind (aliases of the stub's prelude).
fn element_value(dtype: &DType) -> &'static str {
    match dtype.code {
        _ if dtype.lanes > 1 => "_IntValue",
        TypeCode::Bool => "_BoolValue",
        TypeCode::Int | TypeCode::UInt => "_IntValue",
        TypeCode::Complex => "_ComplexValue",
        _ => "_FloatValue",
    }
}

/// The Python type one element reads as (`a[i, j]`).
fn python_scalar(dtype: &DType) -> &'static str {
    match dtype.code {
        _ if dtype.lanes > 1 => "int", // packed lanes read as their raw bits
        TypeCode::Bool => "bool",
        TypeCode::Int | TypeCode::UInt => "int",
        TypeCode::Complex => "complex",
        _ => "float",
    }
}

/// The NumPy scalar type of the arrays NumPy sees (`np.float32`), where NumPy defines it.
fn numpy_scalar(dtype: &DType) -> Option<String> {
    if dtype.numpy_module.is_some() {
        return None;
    }
    Some(if dtype.numpy == "bool" { "np.bool_".to_owned() } else { format!("np.{}", dtype.numpy) })
}

/// `npt.NDArray[...]` of what `to_numpy()` and views return.
fn numpy_array(dtype: &DType) -> String {
    format!("npt.NDArray[{}]", numpy_scalar(dtype).unwrap_or_else(|| "Any".to_owned()))
}

/// The index that reads one element: `ndim` integers.
fn element_index(ndim: u8) -> String {
    match ndim {
        1 => "SupportsIndex | tuple[SupportsIndex]".to_owned(),
        n => format!("tuple[{}]", vec!["SupportsIndex"; n as usize].join(", ")),
    }
}

/// A compiled class's `__new__` (every class's call takes the same arguments), returning `returns`.
fn constructor(returns: &str) -> String {
    format!(
        "def __new__(\n        cls,\n        shape: _Shape,\n        device_id: int = 0,\n        *,\n        \
         readonly: bool = False,\n        pinned: bool = False,\n        on_device: bool = False,\n        \
         uninitialized: bool = False,\n        managed: bool = False,\n        shareable: bool = False,\n    ) -> {returns}: ...\n"
    )
}

/// `_CompiledArray`, a stub-only class (`class_for`'s result): what every compiled class's call
/// takes, without naming the class.
pub(crate) fn compiled_array_stub() -> String {
    format!(
        "\nclass _CompiledArray(MemArray):\n    \"\"\"Stub only (`class_for`'s result): what every compiled class's call takes.\"\"\"\n\n    {}",
        constructor("Self")
    )
}

/// One instantiation's class in `_amso.pyi`.
pub(crate) fn class_stub(dtype: &DType, ndim: u8) -> String {
    if dtype.is_vector() {
        return vector_class_stub(dtype, ndim);
    }
    let class = dtype.class_name(ndim);
    let scalar = python_scalar(dtype);
    let value = element_value(dtype);
    let array = numpy_array(dtype);
    let element = element_index(ndim);
    let view = if ndim == 1 { "_View1" } else { "_View" };
    // A str (a record's field name, which other arrays refuse at run time) is a key as NumPy's
    // stubs take it on every array.
    // From 2-D on, an integer tuple of the full length is also a view key (of another length):
    // the first overload, which reads one element, wins, as the runtime's scalar path does.
    // A 1-D class narrows the base's keys (which take any tuple): mypy's override check, told
    // on the first overload's decorator; the overlap is told on its `def`.
    let (decorator, def) = match ndim {
        1 => ("  # type: ignore[override]", ""),
        _ => ("", "  # type: ignore[overload-overlap]"),
    };
    format!(
        "\nclass {class}(MemArray):\n    \"\"\"{ndim}-D array of {name} ({rust}).\"\"\"\n\n    \
         {constructor}    \
         @overload{decorator}\n    def __getitem__(self, index: {element}, /) -> {scalar}: ...{def}\n    \
         @overload\n    def __getitem__(self, index: {view} | str, /) -> {array}: ...\n    \
         @overload{decorator}\n    def __setitem__(self, index: {element}, value: {value}, /) -> None: ...\n    \
         @overload\n    def __setitem__(self, index: {view} | str, value: _Values[{value}], /) -> None: ...\n    \
         def to_numpy(self) -> {array}: ...\n",
        name = dtype.name,
        rust = dtype.rust,
        constructor = constructor(&class),
    )
}

/// One vector instantiation's class in `_amso.pyi`: an element reads as the array of its lanes
/// (`v[i]`, NumPy's view with the lanes as a last axis), a lane as the lane's NumPy scalar
/// (`v[i, k]`); an element is written from a sequence of lanes, a lane from a scalar.
fn vector_class_stub(dtype: &DType, ndim: u8) -> String {
    let class = dtype.class_name(ndim);
    let lane = numpy_scalar(dtype).unwrap_or_else(|| "Any".to_owned());
    let lane_value = match dtype.code {
        TypeCode::Int | TypeCode::UInt => "_IntValue",
        _ => "_FloatValue",
    };
    let array = numpy_array(dtype);
    let element = element_index(ndim);
    let lane_index = format!("tuple[{}]", vec!["SupportsIndex"; ndim as usize + 1].join(", "));
    let view = if ndim == 1 { "_View1" } else { "_View" };
    // From 2-D on, the lane index (one integer more than the element's) is also a view key: the
    // overlap is told on its `def`; a 1-D class's narrower keys on the first decorator.
    let (decorator, overlap) = match ndim {
        1 => ("  # type: ignore[override]", ""),
        _ => ("", "  # type: ignore[overload-overlap]"),
    };
    format!(
        "\nclass {class}(MemArray):\n    \"\"\"{ndim}-D array of {name} ({rust}): `v[i]` is an element's {lanes} lanes, `v[i, k]` one lane.\"\"\"\n\n    \
         {constructor}    \
         @overload{decorator}\n    def __getitem__(self, index: {lane_index}, /) -> {lane}: ...{overlap}\n    \
         @overload\n    def __getitem__(self, index: {element} | {view} | str, /) -> {array}: ...\n    \
         @overload{decorator}\n    def __setitem__(self, index: {lane_index}, value: {lane_value}, /) -> None: ...\n    \
         @overload\n    def __setitem__(self, index: {element} | {view} | str, value: _Values[{lane_value}], /) -> None: ...\n    \
         def to_numpy(self) -> {array}: ...\n",
        name = dtype.name,
        rust = dtype.rust,
        lanes = dtype.lanes,
        constructor = constructor(&class),
    )
}

/// One record instantiation's class in `_amso.pyi`: records and fields read and write through
/// NumPy's structured view (`a[i]` is an `np.void`, `a["mass"]` a field's array).
pub(crate) fn record_class_stub(record: &crate::record::Record, ndim: u8) -> String {
    let class = record.class_name(ndim);
    let fields: Vec<&str> = record.fields.iter().map(|f| f.name.as_str()).collect();
    format!(
        "\nclass {class}(MemArray):\n    \"\"\"{ndim}-D array of record {name} (records::{camel}; fields {fields}).\"\"\"\n\n    \
         {constructor}    \
         @overload\n    def __getitem__(self, index: str, /) -> npt.NDArray[Any]: ...\n    \
         @overload\n    def __getitem__(self, index: _View, /) -> Any: ...\n    \
         def __setitem__(self, index: str | _View, value: Any, /) -> None: ...\n    \
         def to_numpy(self) -> npt.NDArray[np.void]: ...\n",
        name = record.name,
        camel = record.camel(),
        fields = fields.join(", "),
        constructor = constructor(&class),
    )
}

/// The dtype arguments that name `dtype`: its name, and NumPy's scalar type and dtype object
/// where NumPy defines it (Python's own `bool`, `int`, `float` and `complex` as NumPy maps them).
fn dtype_forms(dtype: &DType) -> String {
    let mut forms = vec![format!("Literal[\"{}\"]", dtype.name)];
    // A dtype NumPy stores as another (float4_e2m1fn_x2's uint8) is named by its name only.
    if let Some(scalar) = numpy_scalar(dtype).filter(|_| dtype.numpy == dtype.name) {
        forms.push(format!("type[{scalar}]"));
        forms.push(format!("np.dtype[{scalar}]"));
        match dtype.name.as_str() {
            "bool" => forms.push("type[bool]".into()),
            "int64" => forms.push("type[int]".into()),
            "float64" => forms.push("type[float]".into()),
            "complex128" => forms.push("type[complex]".into()),
            _ => {}
        }
    }
    forms.join(" | ")
}

/// The shape arguments of `ndim` dimensions whose length a checker can know.
fn shape_forms(ndim: u8) -> String {
    element_index(ndim)
}

/// The type of a keyword `MemArray(...)` and `empty(...)` do not take, in their last overload.
/// With no overload taking a keyword, mypy lists every overload (220 lines) after its "did you
/// mean"; this one takes any keyword, so mypy checks the call against it alone and says
/// `Argument "device" to "MemArray" has incompatible type "int"; expected "NotAKeyword[Never]"`
/// (pyright names the keyword likewise). Every value but `None` fits `NotAKeyword[Any]`, which is
/// how mypy picks that overload, and none fits `NotAKeyword[Never]`: every `__repr__` returns a
/// `str`. The limits (docs/python.md): a value typed `Any` fits anything, so such a keyword is
/// not caught; with `None` (which mypy lets fit a protocol only by its name) or beside another
/// mistake in the call, mypy lists the overloads as before.
const NOT_A_KEYWORD: &str = "_T_co = TypeVar(\"_T_co\", bound=str, covariant=True)\n\n\
     @type_check_only\nclass NotAKeyword(Protocol[_T_co]):\n    \
     \"\"\"The type of a keyword `MemArray(...)` and `empty(...)` do not take: no value fits it, so a\n    \
     misspelt keyword is one error naming it.\"\"\"\n\n    \
     def __repr__(self) -> _T_co: ...\n\n";

/// Keyword arguments of `MemArray(...)` and of `empty(...)` after `device_id`.
const MEMARRAY_KEYWORDS: &str = "readonly: bool = False, pinned: bool = False, on_device: bool = False, \
                                 managed: bool = False, shareable: bool = False";
const EMPTY_KEYWORDS: &str = "on_device: bool = False, managed: bool = False, shareable: bool = False";

/// `generated/_memarray.pyi`: `MemArray` and `empty`, overloaded per instantiation.
pub(crate) fn memarray_stub(spec: &Spec, header_note: &str) -> String {
    let mut out = format!(
        "# {header_note}\n# mypy: disable-error-code=\"overload-overlap\"\n\
         # (The first overload that matches wins: bool's before int64's, as `type[bool]` is also a\n\
         # `type[int]`.)\n\"\"\"The typed face of `amso.MemArray` and `amso.empty`: the class a \
         call returns, known\nfrom a literal dtype and the shape's length; other calls give `MemArray`.\"\"\"\n\n\
         from collections.abc import Sequence\nfrom typing import Literal, Never, Protocol, SupportsIndex, TypeAlias, \
         TypeVar, overload, type_check_only\n\n\
         import numpy as np\nimport numpy.typing as npt\n\nfrom . import _amso\nfrom ._amso import MemArrayBase\n\n"
    );
    out.push_str(NOT_A_KEYWORD);
    for dtype in &spec.dtypes {
        let _ = writeln!(out, "_{}: TypeAlias = {}", dtype.name, dtype_forms(dtype));
    }
    for record in &spec.records {
        let _ = writeln!(out, "_{}: TypeAlias = Literal[\"{}\"]", record.name, record.name);
    }
    out.push_str("\nclass MemArray(MemArrayBase):\n");
    out.push_str(
        "    \"\"\"``MemArray(shape, dtype=None, device_id=0, *, readonly=False, pinned=False, \
         on_device=False,\n    managed=False, shareable=False)``: a zero-filled array of the compiled \
         class for\n    ``(dtype, len(shape))``; every amso array is an instance.\"\"\"\n\n",
    );
    let calls: Vec<(String, String, u8)> = spec
        .instances()
        .map(|(d, ndim)| (d.name.clone(), d.class_name(ndim), ndim))
        .chain(spec.record_instances().map(|(r, ndim)| (r.name.clone(), r.class_name(ndim), ndim)))
        .collect();
    overloads(&mut out, &calls, "    ", "def __new__(cls, ", MEMARRAY_KEYWORDS);
    out.push('\n');
    overloads(&mut out, &calls, "", "def empty(", EMPTY_KEYWORDS);
    out
}

/// One `@overload` of `{indent}{head}shape, dtype, device_id, *, keywords)` per instantiation,
/// returning its class, then the fallback returning `MemArray`, then the one that takes any other
/// keyword, as `NotAKeyword[Never]`.
fn overloads(out: &mut String, calls: &[(String, String, u8)], indent: &str, head: &str, keywords: &str) {
    // First, a shape whose length a checker cannot know but whose items are `Any` (NumPy's
    // `NDArray[Any].shape`, `tuple[Any, ...]`): both checkers would let it match the 1-D overload
    // below (an `Any` item fits every fixed-length tuple). No known length fits `tuple[Never, ...]`
    // (only the empty shape, which no class has), so it takes exactly those: the array of any rank.
    let _ = writeln!(
        out,
        "{indent}@overload\n{indent}{head}shape: tuple[Never, ...], dtype: npt.DTypeLike | None = None, \
         device_id: int = 0, *, {keywords}) -> MemArray: ..."
    );
    for (name, class, ndim) in calls {
        let default = if name == "float64" { " | None = None" } else { "" };
        let _ = writeln!(
            out,
            "{indent}@overload\n{indent}{head}shape: {}, dtype: _{name}{default}, device_id: int = 0, *, {keywords}) -> _amso.{class}: ...",
            shape_forms(*ndim),
        );
    }
    for unknown in ["", ", **unknown: NotAKeyword[Never]"] {
        let _ = writeln!(
            out,
            "{indent}@overload\n{indent}{head}shape: Sequence[SupportsIndex] | SupportsIndex, dtype: npt.DTypeLike | None = None, \
             device_id: int = 0, *, {keywords}{unknown}) -> MemArray: ..."
        );
    }
}
