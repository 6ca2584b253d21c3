"""Adapters that make amso allocate device memory from PyTorch's or CuPy's pool, so one
process keeps a single pool: ``amso.set_allocator(*amso.allocators.torch())``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Malloc = Callable[[int, int, int], int]
Free = Callable[[int, int, int, int], None]


def torch() -> tuple[Malloc, Free]:
    """PyTorch's CUDA caching allocator (``torch.cuda.caching_allocator_alloc``)."""
    import torch as _torch

    def malloc(size: int, device_id: int, stream: int) -> int:
        try:
            return int(_torch.cuda.caching_allocator_alloc(size, device_id, stream if stream > 2 else None))
        except _torch.cuda.OutOfMemoryError as error:
            raise MemoryError(str(error)) from error

    def free(pointer: int, size: int, device_id: int, stream: int) -> None:
        _torch.cuda.caching_allocator_delete(pointer)

    return malloc, free


def cupy(pool: Any = None) -> tuple[Malloc, Free]:
    """CuPy's memory pool (the default one unless ``pool`` is given)."""
    import cupy as _cupy

    pool = pool or _cupy.get_default_memory_pool()
    live: dict[int, Any] = {}

    def malloc(size: int, device_id: int, stream: int) -> int:
        with _cupy.cuda.Device(device_id):
            try:
                memory = pool.malloc(size)
            except _cupy.cuda.memory.OutOfMemoryError as error:
                raise MemoryError(str(error)) from error
        live[memory.ptr] = memory
        return memory.ptr

    def free(pointer: int, size: int, device_id: int, stream: int) -> None:
        live.pop(pointer, None)  # the MemoryPointer goes back to CuPy's pool

    return malloc, free
