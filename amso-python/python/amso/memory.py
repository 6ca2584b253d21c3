"""Device memory management: plug in another library's allocator, hold frees, read statistics."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from . import _amso

__all__ = [
    "set_allocator", "defer_cleanup", "deferred_limits", "flush_frees", "memory_info", "set_release_threshold",
    "empty_cache", "set_cache_limit",
]


def set_allocator(
    malloc: Callable[[int, int, int], int] | None = None,
    free: Callable[[int, int, int, int], None] | None = None,
    *,
    name: str | None = None,
) -> None:
    """Route new device allocations through ``malloc(size, device_id, stream) -> pointer`` and
    ``free(pointer, size, device_id, stream)`` (raise MemoryError when out of memory).
    ``set_allocator()`` goes back to amso's pool. Arrays free through the allocator that made
    them. Ready adapters: ``amso.allocators.torch()``, ``amso.allocators.cupy()`` and
    ``amso.allocators.rmm()``. The setting holds for every copy of amso's runtime in the
    process."""
    _amso.set_allocator(malloc, free, name)


@contextlib.contextmanager
def defer_cleanup(device_id: int = 0) -> Iterator[None]:
    """Hold every device free until the block ends (nesting allowed), so a chain of
    asynchronous work is not broken by a synchronising free. Frees due then run at the end."""
    _amso.defer_hold()
    try:
        yield
    finally:
        _amso.defer_release(device_id)


def deferred_limits(count: int | None = None, fraction: float | None = None) -> tuple[int, float]:
    """Flush queued frees at ``count`` frees (default 10) or ``fraction`` of the device's memory
    (default 0.2); returns the previous limits."""
    return _amso.deferred_limits(count, fraction)


def flush_frees() -> None:
    """Run every queued free now (unless a defer_cleanup block holds them)."""
    _amso.flush_frees()


def set_release_threshold(nbytes: int) -> None:
    """Bytes the driver's stream-ordered pool keeps reserved after frees (amso's pool)."""
    _amso.set_release_threshold(nbytes)


def empty_cache() -> None:
    """Give every block amso's pool caches back to the driver (PyTorch's
    ``torch.cuda.empty_cache()``). It synchronises each device first, so that no stream's work
    still uses a block; the allocate and free paths never do."""
    _amso.empty_cache()


def set_cache_limit(nbytes: int) -> int:
    """Bound the bytes amso's pool caches per device (``0``: half of the device's memory, the
    default); returns the previous bound (``0`` for the default). A freed block the cache cannot
    hold goes back to the driver."""
    return _amso.set_cache_limit(nbytes)


def memory_info(device_id: int = 0) -> dict[str, Any]:
    """Free and total device memory, and the statistics of the process's one pool (shared by
    the bundled module and every user crate): bytes in use, bytes cached, pending frees, cache
    hits (``cross_stream_hits`` of them from another stream's blocks after an event), misses and
    hit rate, large blocks split, blocks handed back because the cache was full (``evictions``),
    cached blocks waiting for another stream's event (``waiting_on_events``), the current
    allocator and the deferral limits; ``cache`` lists the cached blocks by ``stream`` and
    ``size_class``; ``clients`` maps each client library (``amso``, ``numba``, ``cupy``,
    ``torch``, ``rmm``) to its ``in_use`` bytes and ``allocations`` served."""
    return _amso.memory_info(device_id)
