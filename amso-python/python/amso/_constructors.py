"""NumPy's constructors for amso arrays: ``zeros``, ``ones``, ``full`` and their ``*_like`` forms
(``empty`` and ``empty_like`` too), with NumPy's signatures plus amso's memory keywords
(``device_id``, ``on_device``, ``managed``, ``shareable``, ``pinned``; ``readonly`` for zeros)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np

from ._memarray import MemArray, empty

Shape = Sequence[SupportsIndex] | SupportsIndex


def zeros(shape: Shape, dtype: Any = None, device_id: int = 0, **memory: bool) -> MemArray:
    """An array of zeros (``amso.MemArray(shape, dtype, ...)``, which zero-fills)."""
    return MemArray(shape, dtype, device_id, **memory)


def full(shape: Shape, fill_value: Any, dtype: Any = None, device_id: int = 0, **memory: bool) -> MemArray:
    """An array filled with ``fill_value``, of its NumPy dtype unless ``dtype`` is given (as
    ``np.full``); the values are cast as NumPy casts them, then copied in (on the device too)."""
    if "readonly" in memory:
        raise TypeError("full() cannot make a read-only array; make it, fill it, then share a read-only copy "
                        "(amso.asarray(np.full(...)) with readonly=True through amso.MemArray)")
    if dtype is None:
        dtype = np.asarray(fill_value).dtype
    array = MemArray(shape, dtype, device_id, **memory)
    array.read_numpy_array(np.full(array.shape, fill_value, dtype=array.dtype))
    return array


def ones(shape: Shape, dtype: Any = None, device_id: int = 0, **memory: bool) -> MemArray:
    """An array of ones (float64 unless ``dtype`` is given, as ``np.ones``)."""
    return full(shape, 1, np.float64 if dtype is None else dtype, device_id, **memory)


def _like(prototype: Any, dtype: Any, shape: Shape | None, device_id: int | None,
          memory: dict[str, bool]) -> tuple[Any, Any, int]:
    """The shape, dtype and device of an array made like ``prototype`` (an amso array, NumPy's or
    anything with ``shape`` and ``dtype``): on the prototype's device unless told otherwise."""
    if isinstance(prototype, MemArray) and prototype.on_device and not memory.get("managed"):
        memory.setdefault("on_device", True)
        device_id = prototype.__dlpack_device__()[1] if device_id is None else device_id
    shape = prototype.shape if shape is None else shape
    return shape, prototype.dtype if dtype is None else dtype, 0 if device_id is None else device_id


def zeros_like(prototype: Any, dtype: Any = None, shape: Shape | None = None, device_id: int | None = None,
               **memory: bool) -> MemArray:
    """``zeros`` of ``prototype``'s shape and dtype, on its device."""
    shape, dtype, device_id = _like(prototype, dtype, shape, device_id, memory)
    return zeros(shape, dtype, device_id, **memory)


def ones_like(prototype: Any, dtype: Any = None, shape: Shape | None = None, device_id: int | None = None,
              **memory: bool) -> MemArray:
    """``ones`` of ``prototype``'s shape and dtype, on its device."""
    shape, dtype, device_id = _like(prototype, dtype, shape, device_id, memory)
    return ones(shape, dtype, device_id, **memory)


def full_like(prototype: Any, fill_value: Any, dtype: Any = None, shape: Shape | None = None,
              device_id: int | None = None, **memory: bool) -> MemArray:
    """``full`` of ``prototype``'s shape and dtype, on its device."""
    shape, dtype, device_id = _like(prototype, dtype, shape, device_id, memory)
    return full(shape, fill_value, dtype, device_id, **memory)


def empty_like(prototype: Any, dtype: Any = None, shape: Shape | None = None, device_id: int | None = None,
               **memory: bool) -> MemArray:
    """``empty`` (uninitialized memory) of ``prototype``'s shape and dtype, on its device."""
    shape, dtype, device_id = _like(prototype, dtype, shape, device_id, memory)
    return empty(shape, dtype, device_id, **memory)
