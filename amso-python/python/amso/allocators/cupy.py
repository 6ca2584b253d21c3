"""CuPy and amso's pool, both ways: ``cupy_malloc`` (a C-level ``CFunctionAllocator``),
``cupy_python_malloc``, ``cupy_pinned_malloc``, and ``cupy()``, CuPy's pool as amso's allocator."""

from __future__ import annotations

from typing import Any

from .. import _amso
from ._plug import CLIENTS, Free, Malloc
from ._plug import require as _require

_CUPY = CLIENTS.get("cupy", -1)


_cupy_allocator: Any = None


def c_malloc() -> Any:
    """CuPy's allocator over amso's pool: a ``cupy.cuda.memory.CFunctionAllocator`` whose
    malloc and free are two C functions of amso's extension (``amso_cupy_malloc``,
    ``amso_cupy_free``), with no Python frame per allocation. Memory is lent on CuPy's current
    stream (read through CuPy's own C function: ``get_stream_ptr`` of the device CuPy passes,
    where CuPy exports it, else the ``get_current_stream_ptr`` CuPy's pool calls) and given back
    on it."""
    global _cupy_allocator
    if _cupy_allocator is None:
        cupy = _require("cupy", "cupy-cuda13x", "cupy_malloc")
        import cupy.cuda.stream

        if int(cupy.__version__.split(".")[0]) < 13:
            # Older CuPy is built with Cython 0.29, whose code would not see the error a C malloc
            # sets and would keep -1 as an address.
            raise ImportError(f"amso.allocators.cupy_malloc needs CuPy 13 or later (found {cupy.__version__}); "
                              "use amso.allocators.cupy_python_malloc with this CuPy")

        stream_function = _stream_function(cupy)
        malloc, free = _amso._cupy_hooks(stream_function, cupy.cuda.memory.OutOfMemoryError)
        _cupy_allocator = cupy.cuda.memory.CFunctionAllocator(0, malloc, free, _amso)
    return _cupy_allocator.malloc


def _stream_function(cupy: Any) -> Any:
    """CuPy's C function for its current stream: by device (one thread-local read) where CuPy
    exports it, else the one CuPy's own pool calls."""
    try:
        import cupy_backends.cuda.stream as backend
    except ImportError:
        backend = None
    by_device = getattr(backend, "__pyx_capi__", {}).get("get_stream_ptr")
    return by_device or getattr(cupy.cuda.stream, "__pyx_capi__", {}).get("get_current_stream_ptr")


_cupy_names: tuple[Any, ...] | None = None


def cupy_python_malloc(size: int) -> Any:
    """CuPy's allocator in Python, for a CuPy build whose current-stream function amso's C
    allocator cannot reach (``cupy_malloc`` says so): device memory from amso's pool, lent on
    CuPy's current stream and given back on it."""
    global _cupy_names
    if _cupy_names is None:  # looked up once: this runs for every CuPy allocation
        cuda = _require("cupy", "cupy-cuda13x", "cupy_python_malloc").cuda
        _cupy_names = (cuda.runtime.getDevice, cuda.get_current_stream, cuda.UnownedMemory, cuda.MemoryPointer,
                       cuda.memory.OutOfMemoryError)
    get_device, current_stream, unowned, pointer, out_of_memory = _cupy_names
    device = get_device()
    try:
        loan = _amso._Loan(size, device, current_stream().ptr, _CUPY)
    except MemoryError as error:
        raise out_of_memory(size, 0, 0) from error
    return pointer(unowned(loan.ptr, size, loan, device), 0)


class _PinnedOwner:
    """What CuPy's ``PinnedMemoryPointer`` holds: an address, a size and the loan behind them."""

    __slots__ = ("loan", "ptr", "size")

    def __init__(self, loan: Any) -> None:
        self.loan, self.ptr, self.size = loan, loan.ptr, loan.size


def cupy_pinned_malloc(size: int) -> Any:
    """CuPy's pinned-memory allocator (``cupy.cuda.set_pinned_memory_allocator(...)``): page-locked
    host memory from amso, freed when CuPy lets go of it."""
    cupy = _require("cupy", "cupy-cuda13x", "cupy_pinned_malloc")
    return cupy.cuda.PinnedMemoryPointer(_PinnedOwner(_amso._PinnedLoan(size)), 0)


def cupy(pool: Any = None) -> tuple[Malloc, Free]:
    """CuPy's memory pool (the default one unless ``pool`` is given)."""
    cupy_module = _require("cupy", "cupy-cuda13x", "cupy")
    pool = pool or cupy_module.get_default_memory_pool()
    live: dict[int, Any] = {}

    def malloc(size: int, device_id: int, stream: int) -> int:
        with cupy_module.cuda.Device(device_id):
            try:
                memory = pool.malloc(size)
            except cupy_module.cuda.memory.OutOfMemoryError as error:
                raise MemoryError(str(error)) from error
        live[memory.ptr] = memory
        return memory.ptr

    def free(pointer: int, size: int, device_id: int, stream: int) -> None:
        live.pop(pointer, None)  # the MemoryPointer goes back to CuPy's pool

    return malloc, free
