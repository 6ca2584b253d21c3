"""RMM and amso's pool, both ways: ``rmm_resource()`` (a ``CallbackMemoryResource`` over methods
of amso's extension), and ``rmm()``, an RMM resource as amso's allocator."""

from __future__ import annotations

from typing import Any

from .. import _amso
from ._plug import Free, Malloc
from ._plug import require as _require


def _device_of_rmm(rmm: Any) -> int:
    from cuda.bindings import runtime

    error, device = runtime.cudaGetDevice()
    if int(error) != 0:
        raise RuntimeError(f"cudaGetDevice failed ({error}); RMM resources belong to a device")
    return int(device)


def rmm_resource(device_id: int | None = None) -> Any:
    """An RMM memory resource backed by amso's pool (an ``rmm.mr.CallbackMemoryResource`` whose
    two callbacks are methods of amso's extension: no Python frame per call), for
    ``rmm.mr.set_current_device_resource``: every RMM-aware library (cuDF, cuML, dask-cuda)
    then allocates from amso, on RMM's stream. It serves ``device_id`` (the current device if
    None)."""
    rmm = _require("rmm", "rmm-cu13", "rmm_resource")
    device = _device_of_rmm(rmm) if device_id is None else device_id
    hooks = _amso._RmmHooks(device)
    return rmm.mr.CallbackMemoryResource(hooks.allocate, hooks.deallocate)


class _RawStream:
    """A stream handle as RMM's ``Stream`` takes one (the CUDA stream protocol)."""

    __slots__ = ("handle",)

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def rmm(resource: Any = None) -> tuple[Malloc, Free]:
    """RMM's current device resource (or ``resource``): amso's arrays then allocate wherever RMM
    does (a pool, managed memory, ...). Take it before plugging amso into RMM the other way."""
    rmm_module = _require("rmm", "rmm-cu13", "rmm")
    from rmm.pylibrmm.stream import Stream

    resource = resource or rmm_module.mr.get_current_device_resource()

    def malloc(size: int, device_id: int, stream: int) -> int:
        # amso's protocol values 1 and 2 are CUDA's legacy and per-thread default stream handles.
        return int(resource.allocate(size, Stream(_RawStream(stream))))

    def free(pointer: int, size: int, device_id: int, stream: int) -> None:
        resource.deallocate(pointer, size, Stream(_RawStream(stream)))

    return malloc, free
