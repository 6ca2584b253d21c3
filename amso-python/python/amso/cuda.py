"""CUDA facts (driver present, device count, memory), the current-stream context, and device
arrays shared between processes (``a.share()``, ``SharedHandle.open()``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ._amso import cuda_device_count as device_count
from ._amso import cuda_is_available as is_available
from ._amso import cuda_memory_info as memory_info
from ._amso import set_current_stream as _set_current_stream

try:  # builds with the CUDA layer
    from ._amso import Kernel, SharedHandle, collect_shared
except ImportError:  # pragma: no cover - a host-only build
    pass

__all__ = ["is_available", "device_count", "memory_info", "stream", "Kernel", "SharedHandle", "collect_shared",
           "share_through_multiprocessing"]


def _open_shared(handle: Any) -> Any:
    return handle.open()


def _reduce_shared(array: Any) -> tuple[Any, tuple[Any]]:
    return _open_shared, (array.share(),)


def share_through_multiprocessing() -> None:
    """From now on, ``multiprocessing`` (queues, pipes, pool arguments and results) sends amso
    device arrays of ``shareable=True`` memory as shared handles, which the receiving process
    opens over the same memory, as PyTorch's ``torch.multiprocessing`` does for CUDA tensors.
    Host arrays, and device arrays of amso's pool, still travel by pickle (a copy)."""
    from multiprocessing.reduction import ForkingPickler

    from . import _DISPATCH

    def reduce(array: Any) -> Any:
        if array.on_device:
            try:
                return _reduce_shared(array)
            except ValueError:
                pass  # not shareable memory: a pickle, as before
        return array.__reduce_ex__(5)

    for cls in set(_DISPATCH.values()):
        ForkingPickler.register(cls, reduce)


def _stream_value(stream: Any) -> Any:
    if stream is None or isinstance(stream, int) or hasattr(type(stream), "__cuda_stream__"):
        return stream  # amso reads __cuda_stream__ itself (torch and cuda.core streams)
    for attribute in ("cuda_stream", "ptr", "handle"):  # older torch, cupy, cuda.core streams
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"expected a stream handle (int) or a torch/cupy stream, got {type(stream).__name__}")


@contextlib.contextmanager
def stream(value: Any) -> Iterator[None]:
    """Within the block, amso works on `value` when a call names no stream (move_memory,
    add_index_tuple, get_dlpack), and reports it as the DLPack exchange API's current work
    stream. Accepts an int handle (0 or 1: the legacy default stream, 2: the per-thread
    default), any object with ``__cuda_stream__`` (torch and cuda.core streams), or a CuPy
    stream."""
    previous = _set_current_stream(_stream_value(value))
    try:
        yield
    finally:
        _set_current_stream(previous)
