"""PyTorch and amso's pool, both ways: ``torch_allocator()`` (a ``CUDAPluggableAllocator`` over
two C functions of amso's extension), and ``torch()``, PyTorch's caching allocator as amso's."""

from __future__ import annotations

from typing import Any

from .. import _amso
from ._plug import Free, Malloc
from ._plug import require as _require


def torch_allocator() -> Any:
    """A ``torch.cuda.memory.CUDAPluggableAllocator`` over amso's pool, for
    ``torch.cuda.memory.change_current_allocator`` (before PyTorch's first CUDA allocation, as
    PyTorch requires). PyTorch calls two C functions of amso's extension with its stream; amso's
    stream-ordered pool uses that stream."""
    torch = _require("torch", "torch", "torch_allocator")
    return torch.cuda.memory.CUDAPluggableAllocator(_amso.__file__, "amso_torch_alloc", "amso_torch_free")


def torch() -> tuple[Malloc, Free]:
    """PyTorch's CUDA caching allocator (``torch.cuda.caching_allocator_alloc``)."""
    torch_module = _require("torch", "torch", "torch")

    def malloc(size: int, device_id: int, stream: int) -> int:
        try:
            return int(torch_module.cuda.caching_allocator_alloc(size, device_id, stream if stream > 2 else None))
        except torch_module.cuda.OutOfMemoryError as error:
            raise MemoryError(str(error)) from error

    def free(pointer: int, size: int, device_id: int, stream: int) -> None:
        torch_module.cuda.caching_allocator_delete(pointer)

    return malloc, free
