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
    out.push_str(&crate::stubs::compiled_array_stub());
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
class _Lender:
    def __new__(cls, device_id: int, stream: int, client_number: int, shareable: bool = False) -> _Lender: ...
    def lend(self, size: int) -> _Loan: ...

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

/// Every generated file: its path under `root` and its content.
pub fn generated_files(spec: &Spec) -> Vec<(PathBuf, String)> {
    // The package's amso-python/python/amso/_amso.pyi and include/amso.h, include/amso.cuh
    // are symlinks to these files, so each exists once; maturin packs the links' targets into
    // the wheel and the sdist (scripts/amso.py checks both archives).
    vec![
        (PathBuf::from("generated/_amso.pyi"), python_stubs(spec)),
        (PathBuf::from("generated/_memarray.pyi"), crate::stubs::memarray_stub(spec, HEADER_NOTE)),
        (PathBuf::from("generated/instantiations.md"), instantiation_table(spec)),
        (PathBuf::from("generated/amso.h"), crate::c_header::c_header(spec)),
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
