"""amso: typed CPU/GPU arrays generated from one spec, shared zero-copy through DLPack.

``amso.MemArray(shape, dtype)`` creates an array of the compiled class for ``(dtype, ndim)``;
``amso.supported()`` lists the compiled pairs (see ``specs/types.yaml``).
"""

from __future__ import annotations

import operator
import os

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex

import numpy as np

from . import allocators, cuda, dlpack
from ._amso import __amso_dispatch__, __version__, DLPackContext, MAX_NDIM, MemArrayBase, from_cuda_array_interface
from ._amso import _dtypes, _set_source_checkout, _uncompiled, _is_amso_array, _set_class_resolver, _wrap
from ._memarray import MemArray, empty
from ._constructors import empty_like, full, full_like, ones, ones_like, zeros, zeros_like
from ._amso import from_dlpack as _from_dlpack

if TYPE_CHECKING:
    from ._amso import _CompiledArray

try:  # the memory-management API exists in builds with the CUDA layer
    from .memory import (
        defer_cleanup, deferred_limits, empty_cache, flush_frees, memory_info, set_allocator, set_cache_limit,
        set_release_threshold,
    )
except ImportError:  # pragma: no cover - a host-only build
    pass

__all__ = [
    "MemArray", "MemArrayBase", "DLPackContext", "asarray", "empty", "from_dlpack", "cuda", "dlpack", "supported", "class_for",
    "allocators", "set_allocator", "defer_cleanup", "deferred_limits", "flush_frees", "memory_info",
    "set_release_threshold", "empty_cache", "set_cache_limit", "MAX_NDIM", "__version__",
    "get_include", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like",
]

_DISPATCH: dict[tuple[str, int], type[MemArrayBase]] = dict(__amso_dispatch__)

# Imported from a source checkout (an editable install: this file is
# amso-python/python/amso/__init__.py beside specs/types.yaml), an uncompiled pair's error says
# how to add it to the spec; from a wheel, how to declare a type of one's own.
_CHECKOUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir)
_set_source_checkout(os.path.isfile(os.path.join(_CHECKOUT, "specs", "types.yaml")))
_DTYPE_NAMES = frozenset(name for name, _ in _DISPATCH)

# dtypes NumPy does not define come from the package the spec names (bfloat16 and the float8,
# float6 and float4 types: ml_dtypes, a dependency of this wheel); importing it makes their
# names valid np.dtype names.
import ml_dtypes  # noqa: E402, F401


def _register_dlpack_dtypes() -> None:
    """NumPy 2.5 imports and exports dtypes of other packages through DLPack once told their
    (code, bits): tell it those of ml_dtypes the spec names, unless something else did. Sub-byte
    types are left out: NumPy would export their bytes as packed elements."""
    register = getattr(getattr(np, "dtypes", None), "register_dlpack_dtype", None)
    if register is None:
        return
    for _name, code, bits, lanes, numpy_name, module in _dtypes():
        if module != "ml_dtypes" or lanes != 1 or bits % 8:
            continue
        try:
            register((code, bits), np.dtype(getattr(ml_dtypes, numpy_name)))
        except ValueError:
            pass  # registered already (by ml_dtypes, say): theirs stands


_register_dlpack_dtypes()


def supported() -> list[tuple[str, int]]:
    """The compiled ``(dtype name, ndim)`` pairs, sorted."""
    return sorted(_DISPATCH)


def get_include() -> str:
    """The folder holding ``amso.h`` (the C getters) and ``amso.cuh`` (the CUDA header), for a
    compiler's ``-I``, as ``numpy.get_include()``; ``python -m amso --include`` prints it."""
    import os

    return os.path.join(os.path.dirname(__file__), "include")


def _dtype_name(dtype: Any) -> str:
    if dtype is None:
        return "float64"
    if isinstance(dtype, str) and dtype in _DTYPE_NAMES:
        return dtype  # e.g. "bfloat16", which NumPy itself does not name
    try:
        resolved = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"unknown dtype {dtype!r}: {error}") from None
    if not resolved.base.isnative and resolved.names is None:  # `base`: a subarray's element
        # As asarray refuses a big-endian NumPy array: never silently the native type.
        native = resolved.newbyteorder("=")
        raise ValueError(
            f"dtype {dtype!r} is {'big' if resolved.base.byteorder == '>' else 'little'}-endian; amso arrays hold the "
            f"machine's byte order: pass {native.name if native.subdtype is None else str(native)!r}, and convert "
            "such data with x.astype(x.dtype.newbyteorder('='))"
        )
    if resolved.names is not None:
        # A structured dtype names the compiled record whose layout it is: the same field names,
        # types, shapes and offsets, in order, and itemsize (titles aside, as typed arguments
        # compare them).
        for name, layout in _record_dtypes().items():
            if _layout(resolved) == _layout(layout):
                return name
        records = ", ".join(f"{name} {layout}" for name, layout in _record_dtypes().items()) or "none"
        raise TypeError(
            f"the structured dtype {resolved} is the layout of no compiled record (the records: {records}); "
            "make the dtype from a record's layout (same field names, types, shapes and offsets, and itemsize)"
        )
    if resolved.subdtype is not None:
        # NumPy's subarray dtype of one axis names the vector of those lanes: (float32, 4) is float32x4.
        base, shape = resolved.subdtype
        name = f"{base.name}x{shape[0]}" if len(shape) == 1 else ""
        if name in _VECTORS:
            return name
        vectors = ", ".join(f"{name} {np.dtype((lane, lanes))}" for name, (lane, lanes) in _VECTORS.items())
        raise TypeError(
            f"the subarray dtype {resolved} is no compiled vector dtype (the vectors: {vectors or 'none'}); "
            "for an array with a trailing axis, add the axis to the shape instead"
        )
    return resolved.name


# The compiled vector dtypes (CUDA's float4, ...): name -> (lane dtype name, lanes).
_VECTORS = {row[0]: (row[4], row[3]) for row in _dtypes() if row[3] > 1 and row[2] >= 8 and row[0] in _DTYPE_NAMES}


def _layout(dtype: np.dtype) -> tuple:
    """A structured dtype's fields (name, type, offset, in order) and itemsize, titles aside."""
    assert dtype.names is not None
    return tuple((name, *dtype.fields[name][:2]) for name in dtype.names), dtype.itemsize


_RECORD_DTYPES: dict[str, np.dtype] | None = None


def _record_dtypes() -> dict[str, np.dtype]:
    """The compiled records' NumPy dtypes, by record name (made once, from a 1-element array)."""
    global _RECORD_DTYPES
    if _RECORD_DTYPES is None:
        scalars = {row[0] for row in _dtypes()}
        records = {}
        for (name, ndim), cls in _DISPATCH.items():
            if name not in scalars and name not in records:
                records[name] = cls((1,) * ndim).dtype
        _RECORD_DTYPES = records
    return _RECORD_DTYPES


def _ndim(shape: Sequence[SupportsIndex] | SupportsIndex) -> int:
    if isinstance(shape, (str, bytes)):
        raise TypeError(f"shape must be an integer or a sequence of integers, got {type(shape).__name__}")
    if not isinstance(shape, bool):
        try:
            operator.index(shape)
            return 1
        except TypeError:
            pass
    try:
        return len(shape)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"shape must be an integer or a sequence of integers, got {type(shape).__name__}"
        ) from None


def class_for(shape: Sequence[SupportsIndex] | SupportsIndex, dtype: Any = None) -> type[_CompiledArray]:
    """The compiled class for ``shape``'s ndim and ``dtype``; a TypeError names what is compiled.
    Every compiled class is a subclass of ``MemArray``; its call takes ``(shape, device_id=0, *,
    readonly, pinned, on_device, uninitialized, managed, shareable)``, without a dtype."""
    key = (_dtype_name(dtype), _ndim(shape))
    try:
        return _DISPATCH[key]  # type: ignore[return-value]  # each compiled class has _CompiledArray's call
    except KeyError:
        raise TypeError(_uncompiled(*key)) from None


# amso.MemArray and amso.empty find the class for (dtype as given, ndim) in a cache of the
# compiled module, without resolving the dtype through NumPy (which costs microseconds);
# class_for resolves what that cache has not seen.
_set_class_resolver(class_for)


def from_dlpack(obj: Any, *, copy: bool | None = None) -> MemArray:
    """An amso array over ``obj``'s memory, without copying (``copy=True``: the producer's
    copy), for anything with ``__dlpack__`` (NumPy, PyTorch, CuPy, JAX, amso). The producer's
    tensor stays alive until the amso array and every view of it are gone. amso arrays are
    C-contiguous: other layouts raise BufferError (``asarray(obj, copy=True)`` copies host data)."""
    return _from_dlpack(obj, copy=copy)


def asarray(obj: Any, dtype: Any = None, *, copy: bool | None = None) -> MemArray:
    """``obj`` as an amso array, sharing its memory whenever possible.

    amso arrays are returned as they are; anything that exposes its memory (NumPy arrays, the
    DLPack exchange API, ``__dlpack__``, ``__cuda_array_interface__``, the buffer protocol) is
    wrapped without a copy, read the way typed arguments read it; anything else NumPy accepts
    (sequences, scalars) goes through ``np.asarray``. With ``copy=False`` a copy is never made
    (BufferError or ValueError instead); with ``copy=None`` host data that is not C-contiguous,
    or not of ``dtype``, is copied; with ``copy=True`` it always is.
    """
    if isinstance(obj, MemArrayBase) and copy is not True and (dtype is None or _is_class_for(obj, dtype)):
        return obj
    if dtype is not None and _dtype_name(dtype) in _VECTORS:
        return _asarray_lanes(obj, _dtype_name(dtype), copy)
    on_device = _device_type(obj) == dlpack.kDLCUDA
    if dtype is None and (copy is not True or hasattr(obj, "__dlpack__")):
        try:  # copy=True asks the producer for its own copy (NumPy cannot import every dtype)
            return _from_dlpack(obj, copy=True) if copy is True else _wrap(obj)
        except BufferError:
            if copy is False or on_device:
                raise
    if on_device:
        raise BufferError(
            "amso.asarray copies or casts only host data; make the device array C-contiguous and of the "
            "wanted dtype with its own library first (e.g. tensor.contiguous().to(dtype))"
        )
    # NumPy's own arrays are copied by NumPy (its DLPack export lacks structured dtypes).
    # (amso's own arrays through their NumPy view, which records have and DLPack lacks.)
    source = np.from_dlpack(obj) if hasattr(obj, "__dlpack__") and not isinstance(obj, (np.ndarray, MemArrayBase)) else obj
    host = np.asarray(source, dtype=None if dtype is None else _numpy_dtype(dtype), copy=copy)
    if not host.flags.c_contiguous:
        if copy is False:
            raise BufferError("the input is not C-contiguous and copy=False forbids the copy amso needs")
        host = np.ascontiguousarray(host)
    class_for(host.shape, host.dtype)  # a TypeError naming the compiled pairs, before DLPack's own
    # Records reach amso as NumPy structured arrays (DLPack has no record type).
    return _wrap(host) if host.dtype.names is not None else _from_dlpack(host)


def _is_class_for(array: Any, dtype: Any) -> bool:
    """Whether ``array`` is already of the compiled class for its shape and ``dtype`` (False for a
    pair that is not compiled: the conversion below may still give one, as float32x4 lanes do)."""
    try:
        return class_for(array.shape, dtype) is type(array)
    except TypeError:
        return False


def _device_type(obj: Any) -> int:
    try:
        return int(obj.__dlpack_device__()[0])
    except (AttributeError, TypeError):
        return dlpack.kDLCUDA if hasattr(obj, "__cuda_array_interface__") else dlpack.kDLCPU


def _asarray_lanes(obj: Any, name: str, copy: bool | None) -> MemArray:
    """``asarray(obj, dtype=name)`` for a vector dtype: ``obj``'s last axis holds the lanes."""
    lane, lanes = _VECTORS[name]
    if isinstance(obj, MemArrayBase) and obj.dtype == np.dtype((lane, lanes)):
        return obj.copy() if copy is True else obj
    if copy is not True:
        try:  # the memory as it is: lanes of the lane dtype, C-contiguous, aligned to the vector
            return _wrap(obj, lanes)
        except (BufferError, TypeError, ValueError):
            if copy is False or _device_type(obj) == dlpack.kDLCUDA:
                raise  # device data is not copied through the host
    host = np.asarray(obj, dtype=lane)
    if host.ndim < 2 or host.shape[-1] != lanes:
        raise ValueError(f"an array of {name} needs a last axis of {lanes} {lane} lanes; the input has shape {host.shape}")
    out = MemArray(host.shape[:-1], name)
    out.read_numpy_array(host)
    return out


def _numpy_dtype(dtype: Any) -> np.dtype:
    name = _dtype_name(dtype)
    if name in _VECTORS:
        return np.dtype(_VECTORS[name])
    if name in _record_dtypes():
        return _record_dtypes()[name]
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
