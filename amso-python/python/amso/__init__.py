"""amso: typed CPU/GPU arrays generated from one spec, shared zero-copy through DLPack.

``amso.MemArray(shape, dtype)`` creates an array of the compiled class for ``(dtype, ndim)``;
``amso.supported()`` lists the compiled pairs (see ``specs/types.yaml``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np

from . import cuda, dlpack
from ._amso import __amso_dispatch__, __version__, DLPackContext, MAX_NDIM, MemArrayBase

__all__ = ["MemArray", "MemArrayBase", "DLPackContext", "cuda", "dlpack", "supported", "class_for", "MAX_NDIM", "__version__"]

_DISPATCH: dict[tuple[str, int], type[MemArrayBase]] = dict(__amso_dispatch__)
_DTYPE_NAMES = frozenset(name for name, _ in _DISPATCH)


def supported() -> list[tuple[str, int]]:
    """The compiled ``(dtype name, ndim)`` pairs, sorted."""
    return sorted(_DISPATCH)


def _dtype_name(dtype: Any) -> str:
    if dtype is None:
        return "float64"
    if isinstance(dtype, str) and dtype in _DTYPE_NAMES:
        return dtype  # e.g. "bfloat16", which NumPy itself does not name
    try:
        return np.dtype(dtype).name
    except TypeError as error:
        raise TypeError(f"unknown dtype {dtype!r}: {error}") from None


def _ndim(shape: Sequence[SupportsIndex] | SupportsIndex) -> int:
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


def class_for(shape: Sequence[SupportsIndex] | SupportsIndex, dtype: Any = None) -> type[MemArrayBase]:
    """The compiled class for ``shape``'s ndim and ``dtype``; a TypeError names what is compiled."""
    key = (_dtype_name(dtype), _ndim(shape))
    try:
        return _DISPATCH[key]
    except KeyError:
        compiled = ", ".join(f"({name}, {ndim})" for name, ndim in supported())
        raise TypeError(
            f"amso has no compiled array for dtype {key[0]} with ndim {key[1]}. "
            f"Compiled (dtype, ndim) pairs: {compiled}. To add it, list it under "
            f"`instantiations` in specs/types.yaml and rebuild (python3 scripts/amso.py main)."
        ) from None


class _MemArrayMeta(type):
    def __call__(
        cls,
        shape: Sequence[SupportsIndex] | SupportsIndex,
        dtype: Any = None,
        device_id: int = 0,
        *,
        readonly: bool = False,
        pinned: bool = False,
    ) -> Any:
        return class_for(shape, dtype)(shape, operator.index(device_id), readonly=readonly, pinned=pinned)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, MemArrayBase)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, MemArrayBase)


class MemArray(metaclass=_MemArrayMeta):
    """``MemArray(shape, dtype=None, device_id=0, *, readonly=False, pinned=False)``: a zero-filled array.

    Dispatches to the compiled class for ``(np.dtype(dtype).name, len(shape))``; ``dtype``
    defaults to float64, as in NumPy. Every amso array is an instance of ``MemArray``.
    """
