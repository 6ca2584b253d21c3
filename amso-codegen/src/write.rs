//! The files under `generated/` (and the stub shipped in the Python package), written from
//! the spec by `amso-generate`. `--check` compares instead of writing, for CI.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::{Spec, HEADER_NOTE};

/// Python type stubs of the compiled extension module `amso._amso`.
pub fn python_stubs(spec: &Spec) -> String {
    let mut out = format!("# {HEADER_NOTE}\n");
    out.push_str(STUB_PRELUDE);
    out.push_str(&operator_stubs());
    out.push_str(STUB_AFTER_OPERATORS);
    for (dtype, ndim) in spec.instances() {
        out.push_str(&crate::stubs::class_stub(dtype, ndim));
    }
    for (record, ndim) in spec.record_instances() {
        out.push_str(&crate::stubs::record_class_stub(record, ndim));
    }
    out
}

/// The binary operators amso arrays take from NumPy's `NDArrayOperatorsMixin`: each plain (a
/// NumPy result), reflected, and in place (the array itself).
const BINARY_OPERATORS: [&str; 13] =
    ["add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and", "xor", "or"];

/// The stubs of `BINARY_OPERATORS`.
fn operator_stubs() -> String {
    BINARY_OPERATORS
        .iter()
        .map(|op| {
            format!(
                "    def __{op}__(self, other: Any, /) -> npt.NDArray[Any]: ...\n    \
                 def __r{op}__(self, other: Any, /) -> npt.NDArray[Any]: ...\n    \
                 def __i{op}__(self, other: Any, /) -> Self: ...\n"
            )
        })
        .collect()
}

const STUB_PRELUDE: &str = r#"from collections.abc import Callable, Sequence
from types import EllipsisType, TracebackType
from typing import Any, ClassVar, Protocol, Self, SupportsIndex, TypeAlias, TypeVar, final, overload

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

# Every compiled class is an `amso.MemArray` (its metaclass says so at run time), so checkers
# accept these arrays wherever `amso.MemArray` is the annotation.
from ._memarray import MemArray

_Shape = Sequence[SupportsIndex] | SupportsIndex
_Index = SupportsIndex | tuple[SupportsIndex, ...]
_Scalar = bool | int | float | complex
# What reads a NumPy view (a row, a slice) rather than one element.
_View = SupportsIndex | slice | EllipsisType | None | tuple[SupportsIndex | slice | EllipsisType | None, ...]
_View1 = slice | EllipsisType | None | tuple[slice | EllipsisType | None, ...]
_T = TypeVar("_T")
# What one element takes: Python's numbers and NumPy's scalars of the kind (as NumPy casts).
_BoolValue: TypeAlias = bool | np.bool_
_IntValue: TypeAlias = int | np.integer[Any] | np.bool_
_FloatValue: TypeAlias = float | np.floating[Any] | np.integer[Any] | np.bool_
_ComplexValue: TypeAlias = complex | np.number[Any] | np.bool_
# What assigns to a view: an element, arrays, or sequences of elements nested as deep as an
# array's dimensions (strings are not elements).
_Values: TypeAlias = (
    _T
    | npt.NDArray[Any]
    | MemArrayBase
    | Sequence[_T | npt.NDArray[Any]]
    | Sequence[Sequence[_T]]
    | Sequence[Sequence[Sequence[_T]]]
    | Sequence[Sequence[Sequence[Sequence[_T]]]]
    | Sequence[Sequence[Sequence[Sequence[Sequence[_T]]]]]
    | Sequence[Sequence[Sequence[Sequence[Sequence[Sequence[_T]]]]]]
    | Sequence[Sequence[Sequence[Sequence[Sequence[Sequence[Sequence[_T]]]]]]]
    | Sequence[Sequence[Sequence[Sequence[Sequence[Sequence[Sequence[Sequence[_T]]]]]]]]
)

class _CudaStream(Protocol):
    def __cuda_stream__(self) -> tuple[int, int]: ...

_Stream = int | _CudaStream | None

__amso_dispatch__: dict[tuple[str, int], type[MemArrayBase]]
MAX_NDIM: int

def cuda_is_available() -> bool: ...
def cuda_device_count() -> int: ...
def cuda_memory_info(device_id: int = 0) -> tuple[int, int]: ...
def set_current_stream(stream: _Stream) -> int | None: ...
def _is_amso_array(obj: object) -> bool: ...
def _is_amso_class(cls: object) -> bool: ...
def _amso_rebuild(
    dtype: str, shape: _Shape, readonly: bool, pinned: bool, device: int | None, data: Any
) -> MemArray: ...
def empty(
    shape: _Shape,
    dtype: Any = None,
    device_id: int = 0,
    *,
    on_device: bool = False,
    managed: bool = False,
    shareable: bool = False,
) -> MemArray:
    """Like ``MemArray`` but, with ``on_device=True``, the device memory is left uninitialised
    (as ``np.empty``); host memory is always zeroed."""
def _new_array(
    shape: _Shape,
    dtype: Any = None,
    device_id: int | None = None,
    *,
    readonly: bool | None = None,
    pinned: bool | None = None,
    on_device: bool | None = None,
    managed: bool | None = None,
    shareable: bool | None = None,
) -> MemArray: ...
def _set_class_resolver(class_for: Callable[[_Shape, Any], type[MemArrayBase]]) -> None: ...
def _class_cache_len() -> int: ...
def from_dlpack(obj: Any, *, copy: bool | None = None) -> MemArray: ...
def from_cuda_array_interface(obj: Any) -> MemArray: ...
def _wrap(obj: Any, lanes: int | None = None) -> MemArray: ...
def _live_borrows() -> int: ...
def _dtypes() -> list[tuple[str, int, int, int, str, str | None]]: ...
def _uncompiled(dtype: str, ndim: int) -> str: ...
def _set_source_checkout(checkout: bool) -> None: ...
def collect_shared() -> int: ...
def memory_info(device_id: int = 0) -> dict[str, Any]: ...
def set_allocator(malloc: Any = None, free: Any = None, name: str | None = None) -> None: ...
def deferred_limits(count: int | None = None, fraction: float | None = None) -> tuple[int, float]: ...
def set_release_threshold(bytes: int) -> None: ...
def defer_hold() -> None: ...
def defer_release(device_id: int = 0) -> None: ...
def flush_frees() -> None: ...
def empty_cache() -> None: ...
def set_cache_limit(bytes: int) -> int: ...
def _cupy_hooks(stream_function: Any, out_of_memory: Any) -> tuple[int, int]: ...
def _clients() -> list[tuple[str, int]]: ...
def _pool_pair_ns(size: int, stream: int, client_number: int, count: int) -> float: ...
def _lend(size: int, device_id: int, stream: int, client_number: int, shareable: bool = False) -> int: ...
def _reclaim(
    ptr: int, device_id: int, client_number: int, stream: int | None = None, size: int | None = None
) -> None: ...
def _reset_loans(client_number: int, device_id: int) -> int: ...
def _refused_frees() -> int: ...

@final
class _RmmHooks:
    def __new__(cls, device_id: int) -> _RmmHooks: ...
    def allocate(self, size: int, stream: Any) -> int: ...
    def deallocate(self, ptr: int, size: int, stream: Any) -> None: ...

@final
class _Loan:
    def __new__(
        cls, size: int, device_id: int, stream: int, client_number: int, shareable: bool = False
    ) -> _Loan: ...
    @property
    def ptr(self) -> int: ...
    @property
    def size(self) -> int: ...
    def release(self) -> None: ...

@final
class _PinnedLoan:
    def __new__(cls, size: int, mapped: bool = False, write_combined: bool = False) -> _PinnedLoan: ...
    @property
    def ptr(self) -> int: ...
    @property
    def size(self) -> int: ...
    def release(self) -> None: ...

@final
class SharedHandle:
    """A device array of another process, or of this one, to open without a copy."""

    @staticmethod
    def from_bytes(data: bytes) -> SharedHandle: ...
    def __bytes__(self) -> bytes: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def exporter_pid(self) -> int: ...
    def open(self, device_id: int | None = None) -> MemArray: ...

_C_API: Any
_C_TYPED_API: Any

@disjoint_base
class MemArrayBase:
    """Methods shared by every compiled (dtype, ndim) array class."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def device(self) -> str: ...
    @property
    def device_id(self) -> int: ...
    @property
    def on_device(self) -> bool: ...
    @property
    def managed(self) -> bool: ...
    @property
    def locked(self) -> bool: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def export_count(self) -> int: ...
    @property
    def pinned(self) -> bool: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __float__(self) -> float: ...
    def __int__(self) -> int: ...
    def __complex__(self) -> complex: ...
    def __contains__(self, value: object, /) -> bool: ...
    # NumPy's attributes, answered by NumPy over the host data (the runtime's views::FROM_NUMPY), and fill.
    @property
    def T(self) -> npt.NDArray[Any]: ...
    @property
    def mT(self) -> npt.NDArray[Any]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def flags(self) -> Any: ...
    def tolist(self, *args: Any, **kwargs: Any) -> Any: ...
    def item(self, *args: Any, **kwargs: Any) -> Any: ...
    def astype(self, *args: Any, **kwargs: Any) -> npt.NDArray[Any]: ...
    def reshape(self, *args: Any, **kwargs: Any) -> npt.NDArray[Any]: ...
    def ravel(self, *args: Any, **kwargs: Any) -> npt.NDArray[Any]: ...
    def flatten(self, *args: Any, **kwargs: Any) -> npt.NDArray[Any]: ...
    def sum(self, *args: Any, **kwargs: Any) -> Any: ...
    def mean(self, *args: Any, **kwargs: Any) -> Any: ...
    def min(self, *args: Any, **kwargs: Any) -> Any: ...
    def max(self, *args: Any, **kwargs: Any) -> Any: ...
    def any(self, *args: Any, **kwargs: Any) -> Any: ...
    def all(self, *args: Any, **kwargs: Any) -> Any: ...
    def prod(self, *args: Any, **kwargs: Any) -> Any: ...
    def std(self, *args: Any, **kwargs: Any) -> Any: ...
    def var(self, *args: Any, **kwargs: Any) -> Any: ...
    def argmin(self, *args: Any, **kwargs: Any) -> Any: ...
    def argmax(self, *args: Any, **kwargs: Any) -> Any: ...
    def cumsum(self, *args: Any, **kwargs: Any) -> npt.NDArray[Any]: ...
    def cumprod(self, *args: Any, **kwargs: Any) -> npt.NDArray[Any]: ...
    def clip(self, *args: Any, **kwargs: Any) -> npt.NDArray[Any]: ...
    def round(self, *args: Any, **kwargs: Any) -> npt.NDArray[Any]: ...
    def fill(self, value: Any, /) -> None: ...
    # NumPy's arithmetic (numpy.lib.mixins.NDArrayOperatorsMixin's operators, through __array_ufunc__).
"#;

/// The stub after the binary operators (`operator_stubs`).
const STUB_AFTER_OPERATORS: &str = r#"    def __divmod__(self, other: Any, /) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]: ...
    def __rdivmod__(self, other: Any, /) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]: ...
    def __neg__(self) -> npt.NDArray[Any]: ...
    def __pos__(self) -> npt.NDArray[Any]: ...
    def __abs__(self) -> npt.NDArray[Any]: ...
    def __invert__(self) -> npt.NDArray[Any]: ...
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, /, *inputs: Any, **kwargs: Any) -> Any: ...
    # A str is a record field's name (`a["mass"]`); other arrays refuse it at run time.
    def __getitem__(self, index: str | _View, /) -> Any: ...
    def __setitem__(self, index: str | _View, value: Any, /) -> None: ...
    def __eq__(self, other: object, /) -> Any: ...
    def __ne__(self, other: object, /) -> Any: ...
    def __lt__(self, other: object, /) -> Any: ...
    def __le__(self, other: object, /) -> Any: ...
    def __gt__(self, other: object, /) -> Any: ...
    def __ge__(self, other: object, /) -> Any: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]
    def __iter__(self) -> ArrayIterator: ...
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def scalar_view(self) -> MemArray: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def get_dlpack(
        self, device_type: int | str | None = None, device_id: int | None = None, stream: _Stream = None
    ) -> DLPackContext: ...
    __amso_type__: Any
    __dlpack_c_exchange_api__: Any
    __c_dlpack_exchange_api__: int
    def move_memory(
        self, device_type: int | str, device_id: int | None = None, stream: _Stream = None, async_copy: bool = False
    ) -> None: ...
    def add_index_tuple(self, stream: _Stream = None) -> None: ...
    def read_numpy_array(self, array: npt.ArrayLike) -> None: ...
    def to_numpy(self) -> npt.NDArray[Any]: ...
    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]: ...
    def __reduce_ex__(self, protocol: SupportsIndex, /) -> tuple[Any, ...]: ...
    def share(self) -> SharedHandle: ...
    def copy(self) -> Self: ...
    def __copy__(self) -> Self: ...
    def __deepcopy__(self, memo: Any, /) -> Self: ...

class _CompiledArray(MemArray):
    """Stub only (`class_for`'s result): what every compiled class's call takes."""

    def __new__(
        cls,
        shape: _Shape,
        device_id: int = 0,
        *,
        readonly: bool = False,
        pinned: bool = False,
        on_device: bool = False,
        uninitialized: bool = False,
        managed: bool = False,
        shareable: bool = False,
    ) -> Self: ...

@final
class ArrayIterator:
    """What `iter(array)` returns: elements of a 1-D array, rows (NumPy views) of higher ranks."""

    def __iter__(self) -> ArrayIterator: ...
    def __next__(self) -> Any: ...
    def __length_hint__(self) -> int: ...

@final
class Kernel:
    """A CUDA kernel compiled by NVRTC (with amso.cuh) on first use per device; exported as
    `amso.cuda.Kernel`, called as CuPy's RawKernel is."""

    def __new__(cls, source: str, name: str, *, options: Sequence[str] = ()) -> Kernel: ...
    def __call__(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        args: Sequence[Any],
        *,
        stream: _Stream = None,
        shared_mem: int = 0,
    ) -> None: ...

@final
class DLPackContext:
    """Locks an array for the duration of a `with` block and exports it through DLPack."""

    @property
    def lock_id(self) -> int: ...
    def __enter__(self) -> DLPackContext: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
"#;

/// A readable table of the instantiations and the Python dispatch map.
pub fn instantiation_table(spec: &Spec) -> String {
    let mut out = format!("<!-- {HEADER_NOTE} -->\n\n# amso instantiations\n\n");
    out.push_str("## Element types\n\n| dtype | Rust | DLPack (code, bits, lanes) | NumPy | typestr | C |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for d in &spec.dtypes {
        let numpy = match &d.numpy_module {
            Some(module) => format!("{module}.{}", d.numpy),
            None => format!("numpy.{}", d.numpy),
        };
        let _ = writeln!(
            out,
            "| {} | `{}` | {} ({}), {}, {} | {numpy} | `{}` | `{}` |",
            d.name,
            d.rust,
            d.code.dlpack_name(),
            d.code.dlpack_code(),
            d.bits,
            d.lanes,
            d.typestr(),
            d.c
        );
    }
    let _ = write!(
        out,
        "\n## Dispatch map of the bundled module ({} classes)\n\n\
         `amso.MemArray(shape, dtype)` looks up `(np.dtype(dtype).name, len(shape))`:\n\n\
         | (dtype, ndim) | class | Rust type |\n|---|---|---|\n",
        spec.instantiations.len()
    );
    for (d, ndim) in spec.instances() {
        let _ = writeln!(
            out,
            "| ({}, {ndim}) | `amso._amso.{}` | `MemArray<{}, {ndim}>` |",
            d.name,
            d.class_name(ndim),
            d.rust
        );
    }
    for (r, ndim) in spec.record_instances() {
        let _ = writeln!(
            out,
            "| ({}, {ndim}) | `amso._amso.{}` | `MemArray<records::{}, {ndim}>` |",
            r.name,
            r.class_name(ndim),
            r.camel()
        );
    }
    out
}

/// The C header: the handle, error codes, the getter table and the typed exports.
pub fn c_header(spec: &Spec) -> String {
    let mut typed = String::new();
    let records = spec.record_instances().map(|(r, ndim)| (r.name.clone(), r.class_name(ndim), r.c_type(), ndim));
    let pairs = spec.instances().map(|(d, ndim)| (d.name.clone(), d.class_name(ndim), d.c.clone(), ndim));
    let mut inline = String::new();
    for (index, (name, class, c, ndim)) in pairs.chain(records).enumerate() {
        let stem = format!("amso_{name}_{ndim}d");
        let _ = write!(
            inline,
            "\n/* {name}, {ndim}-D ({class}). */\n\
             static inline int {stem}_handle(PyObject *object, amso_handle *out) {{ return amso_typed_api_table->exports[{index}].handle(object, out); }}\n\
             static inline int {stem}_data(PyObject *object, {c} **out) {{ return amso_typed_api_table->exports[{index}].data(object, (void **)out); }}\n\
             static inline int {stem}_shape(PyObject *object, const int64_t **out) {{ return amso_typed_api_table->exports[{index}].shape(object, out); }}\n",
        );
        let _ = write!(
            typed,
            "\n/* {name}, {ndim}-D ({class}). */\n\
             AMSO_EXPORT int {stem}_handle(PyObject *object, amso_handle *out);\n\
             AMSO_EXPORT int {stem}_data(PyObject *object, {c} **out);\n\
             AMSO_EXPORT int {stem}_shape(PyObject *object, const int64_t **out);\n",
        );
    }
    // The low-precision floats (float8, float6, float4) as one-byte storage types: C has no
    // arithmetic for them, so a distinct struct each keeps them from mixing with integers.
    let mut storage = String::new();
    for dtype in spec.dtypes.iter().filter(|d| d.code.dlpack_code() >= 7) {
        let layout = if dtype.lanes > 1 {
            format!("{} packed {}-bit values, the first in the low bits", dtype.lanes, dtype.bits)
        } else if dtype.padded() {
            format!("a {}-bit value in the low bits", dtype.bits)
        } else {
            "its bits".to_string()
        };
        let _ = writeln!(storage, "typedef struct {{ uint8_t bits; }} {}; /* {}: {layout} */", dtype.c, dtype.name);
    }
    // CUDA's vectors (float4, int2, ...): lanes x, y(, z, w), aligned to their size as CUDA's.
    for dtype in spec.dtypes.iter().filter(|d| d.is_vector()) {
        let lane = dtype.code.c_type(dtype.bits).unwrap_or("uint32_t");
        let members = ["x", "y", "z", "w"][..usize::from(dtype.lanes).min(4)].join(", ");
        let (first, rest) = members.split_once(", ").unwrap_or((&members, ""));
        let _ = writeln!(
            storage,
            "typedef struct {{ AMSO_ALIGNAS({align}) {lane} {first}; {lane} {rest}; }} {c}; /* {name}: {lanes} lanes */\n\
             AMSO_STATIC_ASSERT(sizeof({c}) == {size} && AMSO_ALIGNOF({c}) == {align}, \"{c} layout\");",
            align = crate::record::alignment(dtype),
            c = dtype.c,
            name = dtype.name,
            lanes = dtype.lanes,
            size = dtype.itemsize(),
        );
    }
    let records = spec.records.iter().map(|record| c_record(spec, record)).collect::<Vec<_>>().join("\n");
    // DLPack's type codes, from the generator's one table (kDLOpaqueHandle, no element type,
    // is the template's).
    let codes: String =
        crate::dtype::TypeCode::table().map(|(number, name, _)| format!("    {name} = {number},\n")).collect();
    C_HEADER_TEMPLATE
        .replace("@NOTE@", HEADER_NOTE)
        .replace(
            "@TYPED_KEY@",
            &format!(
                "#define AMSO_TYPED_COUNT {}u\n#define AMSO_TYPED_KEY 0x{:016x}ull /* the spec's pairs, in order */",
                spec.typed_stems().len(),
                spec.typed_key()
            ),
        )
        .replace("@TYPED_INLINE@", &inline)
        .replace("@TYPED@", &typed)
        .replace("@STORAGE@", &storage)
        .replace("@RECORDS@", &records)
        .replace("@CODES@", &codes)
}

/// One record of the spec as a C struct, with the generator's layout asserted: each `offsetof`,
/// the `sizeof` and the alignment.
fn c_record(spec: &Spec, record: &crate::Record) -> String {
    let c = record.c_type();
    let mut out = format!(
        "/* record {}: {} bytes, aligned to {} (specs/types.yaml) */\ntypedef struct amso_{} {{\n",
        record.name, record.size, record.align, record.name
    );
    out += &record.members(spec, |dtype| &dtype.c);
    let _ = writeln!(out, "}} {c};");
    for field in &record.fields {
        let _ = writeln!(
            out,
            "AMSO_STATIC_ASSERT(offsetof({c}, {name}) == {offset}, \"{c}.{name} is at {offset}\");",
            name = field.name,
            offset = field.offset
        );
    }
    let _ = writeln!(
        out,
        "AMSO_STATIC_ASSERT(sizeof({c}) == {size} && AMSO_ALIGNOF({c}) == {align}, \"{c} layout\");",
        size = record.size,
        align = record.align
    );
    out
}

const C_HEADER_TEMPLATE: &str = r#"/* @NOTE@ */
/*
 * amso's C ABI: inspect amso arrays from C, C++, Cython or Rust extensions without Python calls.
 *
 * Use:
 *   #include <Python.h>
 *   #include "amso.h"
 *   if (amso_import() < 0) return NULL;          // once, with the GIL: loads the function table
 *   amso_handle h;
 *   if (amso_get_handle(obj, &h) != AMSO_OK) ... amso_last_error() says why
 *   const int64_t *shape; amso_shape(h, &shape);
 *
 * Rules:
 * - Every function returns an int: AMSO_OK (0) or an AMSO_ERR_* code; amso_last_error() gives
 *   the message of this thread's last error (valid until the next amso call on this thread).
 *   NULL arguments are AMSO_ERR_NULL_ARGUMENT, never a crash. No function allocates a Python
 *   object, and none lets a Rust panic cross into C (AMSO_ERR_PANIC).
 * - Call with the GIL held (an attached thread state), as for any Python C API.
 * - Lifetime: a handle borrows the Python object. It is valid while you hold a reference to
 *   the object; there is nothing to free. The shape and strides pointers are valid for as
 *   long as the handle. A handle is a snapshot of the array's description that amso keeps
 *   current: after move_memory the same handle reports the new data pointer and device
 *   (amso_data, amso_device_type, amso_device_id, AMSO_FLAG_ON_DEVICE), and a get_dlpack()
 *   context shows in amso_lock_id. ndim, shape, strides, dtype and itemsize never change.
 * - Strides are in elements, not bytes (multiply by amso_itemsize for bytes); arrays are
 *   C-contiguous.
 * - amso_data is a device pointer while AMSO_FLAG_ON_DEVICE is set, a host pointer otherwise.
 *   Reading it does not synchronise: order your work after the array's with its DLPack
 *   stream handshake, or synchronise.
 */
#ifndef AMSO_H
#define AMSO_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

/* Layout checks and alignment, in C11 and C++11 spellings. */
#ifdef __cplusplus
#define AMSO_STATIC_ASSERT(condition, message) static_assert(condition, message)
#define AMSO_ALIGNOF(type) alignof(type)
#define AMSO_ALIGNAS(bytes) alignas(bytes)
#else
#define AMSO_STATIC_ASSERT(condition, message) _Static_assert(condition, message)
#define AMSO_ALIGNOF(type) _Alignof(type)
#define AMSO_ALIGNAS(bytes) _Alignas(bytes)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Complex elements: C99 complex in C, a layout-equal struct in C++. */
#if defined(__cplusplus) || defined(__STDC_NO_COMPLEX__)
typedef struct { float re, im; } amso_complex64_t;
typedef struct { double re, im; } amso_complex128_t;
#else
typedef float _Complex amso_complex64_t;
typedef double _Complex amso_complex128_t;
#endif

/* Low-precision floats: one byte of storage per element (sub-byte values padded). */
@STORAGE@
/* Records: C structs of the spec's scalars, laid out as the generator computed (asserted). */
@RECORDS@
#ifndef Py_PYTHON_H
typedef struct _object PyObject;
#endif

#if defined(_WIN32)
#define AMSO_EXPORT __declspec(dllimport)
#else
#define AMSO_EXPORT
#endif

/* A borrowed description of one amso array. Read it through the getters below; its layout is
 * published so they can be inline field reads (as NumPy's PyArray_NDIM), and amso_import()
 * refuses a module whose layout version differs. */
struct amso_array_header {
    uint32_t magic;       /* 0x414d534f */
    uint32_t version;     /* AMSO_HEADER_VERSION */
    uintptr_t data;
    int32_t ndim;
    int32_t device_type;
    int32_t device_id;
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
    int64_t itemsize;
    uint32_t flags;
    uint32_t reserved;
    uint64_t lock_id;
    int64_t shape[8];
    int64_t strides[8];
};
#define AMSO_HEADER_VERSION 2u
AMSO_STATIC_ASSERT(sizeof(struct amso_array_header) == 184, "amso_array_header layout");
typedef const struct amso_array_header *amso_handle;

enum amso_error {
    AMSO_OK = 0,
    AMSO_ERR_NULL_ARGUMENT = 1,    /* a NULL argument or handle */
    AMSO_ERR_NOT_AN_AMSO_ARRAY = 2,/* the object is not an amso array (of the requested class) */
    AMSO_ERR_INDEX = 3,            /* IndexError */
    AMSO_ERR_VALUE = 4,            /* ValueError */
    AMSO_ERR_TYPE = 5,             /* TypeError */
    AMSO_ERR_OVERFLOW = 6,         /* OverflowError */
    AMSO_ERR_MEMORY = 7,           /* MemoryError */
    AMSO_ERR_BUFFER = 8,           /* BufferError: locked array, refused export */
    AMSO_ERR_RUNTIME = 9,          /* RuntimeError: no CUDA driver, CUDA failure */
    AMSO_ERR_PANIC = 10            /* an internal error in amso, caught at the boundary */
};

/* amso_flags bits. */
#define AMSO_FLAG_READONLY 1u
#define AMSO_FLAG_ON_DEVICE 2u
#define AMSO_FLAG_PINNED 4u
/* Since version 2: a change of the array (a move, a copy in) is under way in some thread, with
 * the GIL released; the placement describes the array from before it, and the data may be
 * changing. Read the data once the flag is clear. */
#define AMSO_FLAG_CHANGING 8u

/* DLPack device types and type codes (DLPack 1.3). */
#define AMSO_DEVICE_CPU 1
#define AMSO_DEVICE_CUDA 2
#define AMSO_DEVICE_CUDA_HOST 3

/* The function table (capsule amso._amso._C_API). Fields are only ever appended. */
typedef struct amso_c_api {
    uint32_t version;
    uint32_t struct_size;    /* sizeof the table as built */
    uint32_t header_version; /* AMSO_HEADER_VERSION of the module */
    uint32_t header_size;    /* sizeof(struct amso_array_header) of the module */
    int (*get_handle)(PyObject *object, amso_handle *out);
    int (*data)(amso_handle h, void **out);           /* first element, host or device */
    int (*ndim)(amso_handle h, int32_t *out);
    int (*size)(amso_handle h, int64_t *out);         /* number of elements */
    int (*shape)(amso_handle h, const int64_t **out); /* borrowed, ndim entries */
    int (*strides)(amso_handle h, const int64_t **out); /* borrowed, in elements */
    int (*device_type)(amso_handle h, int32_t *out);  /* AMSO_DEVICE_* of the current data */
    int (*device_id)(amso_handle h, int32_t *out);
    int (*dtype_code)(amso_handle h, uint8_t *out);   /* DLPack type code */
    int (*dtype_bits)(amso_handle h, uint8_t *out);
    int (*dtype_lanes)(amso_handle h, uint16_t *out);
    int (*itemsize)(amso_handle h, int64_t *out);     /* bytes per element */
    int (*flags)(amso_handle h, uint32_t *out);       /* AMSO_FLAG_* */
    int (*lock_id)(amso_handle h, uint64_t *out);     /* holder of the lock, 0 if unlocked */
    const char *(*last_error)(void);
} amso_c_api;

#define AMSO_C_API_VERSION 1u

/* The second table (capsule amso._amso._C_TYPED_API): the bundled module's typed exports, one row
 * per compiled (dtype, ndim) in the spec's order, fingerprinted by AMSO_TYPED_KEY. */
typedef struct amso_typed_export {
    int (*handle)(PyObject *object, amso_handle *out);
    int (*data)(PyObject *object, void **out);
    int (*shape)(PyObject *object, const int64_t **out);
} amso_typed_export;
typedef struct amso_typed_api {
    uint32_t version;
    uint32_t count;
    uint64_t key;
    const amso_typed_export *exports;
} amso_typed_api;

#define AMSO_TYPED_API_VERSION 1u
@TYPED_KEY@
#ifdef Py_PYTHON_H
static const amso_c_api *amso_api = NULL;
static const amso_typed_api *amso_typed_api_table = NULL;

/* Load the table (with the GIL held); 0 on success, -1 with a Python exception set. */
static inline int amso_import(void) {
    amso_typed_api_table = NULL;
    amso_api = (const amso_c_api *)PyCapsule_Import("amso._amso._C_API", 0);
    if (amso_api == NULL) return -1;
    if (amso_api->version < AMSO_C_API_VERSION || amso_api->header_version != AMSO_HEADER_VERSION ||
        amso_api->header_size != sizeof(struct amso_array_header)) {
        PyErr_SetString(PyExc_ImportError, "amso's C API does not match this amso.h; rebuild against the installed amso");
        amso_api = NULL;
        return -1;
    }
    amso_typed_api_table = (const amso_typed_api *)PyCapsule_Import("amso._amso._C_TYPED_API", 0);
    if (amso_typed_api_table == NULL || amso_typed_api_table->version != AMSO_TYPED_API_VERSION ||
        amso_typed_api_table->count != AMSO_TYPED_COUNT || amso_typed_api_table->key != AMSO_TYPED_KEY) {
        if (amso_typed_api_table != NULL || !PyErr_Occurred()) {
            PyErr_SetString(PyExc_ImportError, "amso's typed C exports do not match this amso.h (built from another "
                            "spec); rebuild against the installed amso");
        }
        amso_api = NULL;
        amso_typed_api_table = NULL;
        return -1;
    }
    return 0;
}

/* Getters: inline field reads; NULL arguments go through the module for the error message. */
#define AMSO_GETTER(name, type, expression)                                     \
    static inline int amso_##name(amso_handle h, type *out) {                   \
        if (h == NULL || out == NULL) return amso_api->name(h, out);            \
        *out = (expression);                                                    \
        return AMSO_OK;                                                         \
    }

static inline int amso_get_handle(PyObject *o, amso_handle *out) { return amso_api->get_handle(o, out); }
AMSO_GETTER(data, void *, (void *)h->data)
AMSO_GETTER(ndim, int32_t, h->ndim)
AMSO_GETTER(shape, const int64_t *, h->shape)
AMSO_GETTER(strides, const int64_t *, h->strides)
AMSO_GETTER(device_type, int32_t, h->device_type)
AMSO_GETTER(device_id, int32_t, h->device_id)
AMSO_GETTER(dtype_code, uint8_t, h->code)
AMSO_GETTER(dtype_bits, uint8_t, h->bits)
AMSO_GETTER(dtype_lanes, uint16_t, h->lanes)
AMSO_GETTER(itemsize, int64_t, h->itemsize)
AMSO_GETTER(flags, uint32_t, h->flags)
AMSO_GETTER(lock_id, uint64_t, h->lock_id)
static inline int amso_size(amso_handle h, int64_t *out) { return amso_api->size(h, out); }
static inline const char *amso_last_error(void) { return amso_api->last_error(); }
#endif /* Py_PYTHON_H */

/*
 * Typed exports of the bundled module, one set per compiled (dtype, ndim). Each fails with
 * AMSO_ERR_NOT_AN_AMSO_ARRAY for an object not of exactly its class. In a CPython extension
 * (Python.h included before this header) they are inline calls through the table amso_import()
 * loads, so the extension needs only amso.get_include(); elsewhere they are symbols of
 * amso/_amso*.so (link against it or dlsym them). The same lifetime rules apply.
 */
#ifdef Py_PYTHON_H
@TYPED_INLINE@#else
@TYPED@#endif /* Py_PYTHON_H */
/*
 * The DLPack C exchange API (DLPack >= 1.2). Every amso array type carries
 * __dlpack_c_exchange_api__, a "dlpack_exchange_api" capsule pointing at a static
 * DLPackExchangeAPI, and __c_dlpack_exchange_api__, the same address as an int. The ABI
 * structs follow (DLPack 1.3); include the official dlpack.h first to use its definitions.
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 } DLDeviceType;
typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
typedef enum {
@CODES@    kDLOpaqueHandle = 3
} DLDataTypeCode;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
typedef int (*DLPackManagedTensorAllocator)(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                                            void (*SetError)(void *error_ctx, const char *kind, const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object, DLManagedTensorVersioned **out);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor, void **out_py_object);
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id, void **out_current_stream);
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct DLPackExchangeAPI {
    DLPackExchangeAPIHeader header;
    DLPackManagedTensorAllocator managed_tensor_allocator;
    DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
    DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
    DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
    DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;
#endif /* DLPACK_DLPACK_H_ */

#ifdef __cplusplus
}
#endif

#endif /* AMSO_H */
"#;

/// Every generated file: its path under `root` and its content.
pub fn generated_files(spec: &Spec) -> Vec<(PathBuf, String)> {
    // The package's amso-python/python/amso/_amso.pyi and include/amso.h, include/amso.cuh
    // are symlinks to these files, so each exists once; maturin packs the links' targets into
    // the wheel and the sdist (scripts/amso.py checks both archives).
    vec![
        (PathBuf::from("generated/_amso.pyi"), python_stubs(spec)),
        (PathBuf::from("generated/_memarray.pyi"), crate::stubs::memarray_stub(spec, HEADER_NOTE)),
        (PathBuf::from("generated/instantiations.md"), instantiation_table(spec)),
        (PathBuf::from("generated/amso.h"), c_header(spec)),
        (PathBuf::from("generated/amso.cuh"), crate::cuda_header::cuda_header(spec)),
    ]
}

/// Write (or with `check`, compare) every generated file under `root`, and the bundled copy of
/// the spec (`spec_text`, verbatim); returns the paths that differed from what is on disk.
pub fn write_all(spec: &Spec, spec_text: &str, root: &Path, check: bool) -> std::io::Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    let copy = (PathBuf::from(crate::BUNDLED_SPEC_COPY), spec_text.to_owned());
    for (relative, content) in generated_files(spec).into_iter().chain([copy]) {
        let path = root.join(&relative);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(content.as_str()) {
            continue;
        }
        stale.push(relative);
        if !check {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, content)?;
        }
    }
    Ok(stale)
}

/// The command that regenerates `generated/` and rebuilds the bundled module.
pub const REGENERATE_COMMAND: &str = "python3 scripts/amso.py bundled";

/// In a source checkout at `root` (one with `specs/types.yaml`), an error naming the command to
/// run when `generated/` or the bundled copy of the spec is stale for the spec: build scripts
/// call it, so that pip, maturin and cargo refuse to build the old pairs. Outside a checkout
/// (a packaged crate) there is nothing to compare, and nothing is refused.
pub fn check_checkout(root: &Path) -> Result<(), String> {
    let spec_path = root.join("specs/types.yaml");
    let Ok(text) = std::fs::read_to_string(&spec_path) else {
        return Ok(());
    };
    let spec = Spec::parse(&text, "specs/types.yaml").map_err(|e| format!("invalid amso spec:\n{e}"))?;
    let stale = write_all(&spec, &text, root, true).map_err(|e| format!("cannot read generated files: {e}"))?;
    if stale.is_empty() {
        return Ok(());
    }
    let stale: Vec<String> = stale.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "amso: the generated files are stale for specs/types.yaml ({}).\n\
         Run `{REGENERATE_COMMAND}` to regenerate them and rebuild the bundled module \
         (or `python3 scripts/amso.py generate` to regenerate only), then build again.",
        stale.join(", ")
    ))
}

/// The paths a build script watches for `check_checkout` under `root`.
pub fn checkout_inputs(spec: &Spec, root: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = generated_files(spec).into_iter().map(|(path, _)| root.join(path)).collect();
    paths.push(root.join("specs/types.yaml"));
    paths.push(root.join(crate::BUNDLED_SPEC_COPY));
    paths
}
