"""One memory pool for every library in a process, both ways.

amso as the pool of other libraries, each through its own plug-in point::

    numba.cuda.set_memory_manager(amso.allocators.NumbaManager)
    cupy.cuda.set_allocator(amso.allocators.cupy_malloc)
    cupy.cuda.set_pinned_memory_allocator(amso.allocators.cupy_pinned_malloc)
    torch.cuda.memory.change_current_allocator(amso.allocators.torch_allocator())
    rmm.mr.set_current_device_resource(amso.allocators.rmm_resource())

and amso drawing from another library's pool: ``amso.set_allocator(*amso.allocators.torch())``,
``.cupy()`` or ``.rmm()``. Each library is imported only when its plug-in is used: without it,
the plug-in raises an ImportError that says what to install.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import warnings

from . import _amso

__all__ = [
    "NumbaManager", "ShareableNumbaManager", "cupy_malloc", "cupy_python_malloc", "cupy_pinned_malloc",
    "torch_allocator", "rmm_resource", "torch", "cupy", "rmm",
]

Malloc = Callable[[int, int, int], int]
Free = Callable[[int, int, int, int], None]

# Client numbers of the pool's statistics (amso.memory_info()["clients"]), as the runtime defines them.
_CLIENTS = dict(_amso._clients()) if hasattr(_amso, "_clients") else {}
_NUMBA, _CUPY = _CLIENTS.get("numba", -1), _CLIENTS.get("cupy", -1)


def _require(module: str, package: str, plug_in: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"amso.allocators.{plug_in} needs {module}, which is not installed: pip install {package}") from error


# --- amso as the pool of other libraries ---


_cupy_allocator: Any = None


def _cupy_c_malloc() -> Any:
    """CuPy's allocator over amso's pool: a ``cupy.cuda.memory.CFunctionAllocator`` whose
    malloc and free are two C functions of amso's extension (``amso_cupy_malloc``,
    ``amso_cupy_free``), with no Python frame per allocation. Memory is lent on CuPy's current
    stream (read through CuPy's own C function, as CuPy's pool reads it) and given back on it."""
    global _cupy_allocator
    if _cupy_allocator is None:
        cupy = _require("cupy", "cupy-cuda13x", "cupy_malloc")
        import cupy.cuda.stream

        if int(cupy.__version__.split(".")[0]) < 13:
            # Older CuPy is built with Cython 0.29, whose code would not see the error a C malloc
            # sets and would keep -1 as an address.
            raise ImportError(f"amso.allocators.cupy_malloc needs CuPy 13 or later (found {cupy.__version__}); "
                              "use amso.allocators.cupy_python_malloc with this CuPy")

        stream_function = getattr(cupy.cuda.stream, "__pyx_capi__", {}).get("get_current_stream_ptr")
        malloc, free = _amso._cupy_hooks(stream_function, cupy.cuda.memory.OutOfMemoryError)
        _cupy_allocator = cupy.cuda.memory.CFunctionAllocator(0, malloc, free, _amso)
    return _cupy_allocator.malloc


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


def torch_allocator() -> Any:
    """A ``torch.cuda.memory.CUDAPluggableAllocator`` over amso's pool, for
    ``torch.cuda.memory.change_current_allocator`` (before PyTorch's first CUDA allocation, as
    PyTorch requires). PyTorch calls two C functions of amso's extension with its stream; amso's
    stream-ordered pool uses that stream."""
    torch = _require("torch", "torch", "torch_allocator")
    return torch.cuda.memory.CUDAPluggableAllocator(_amso.__file__, "amso_torch_alloc", "amso_torch_free")


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


def _give_back(loan: Any) -> Callable[[], None]:
    """A finalizer that gives `loan` back, and reports (as a RuntimeWarning) a give-back amso
    refuses, such as one after a reset took the memory back: a finalizer must not raise."""

    def finalize() -> None:
        try:
            loan.release()
        except ValueError as error:
            warnings.warn(str(error), RuntimeWarning, stacklevel=1)

    return finalize


def _numba_manager_class(shareable: bool) -> type:
    numba_cuda = _require("numba.cuda", "numba-cuda", "ShareableNumbaManager" if shareable else "NumbaManager")
    from cuda.bindings.driver import CUdeviceptr
    from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MappedMemory, MemoryInfo, MemoryPointer, PinnedMemory

    class LoanPointer(MemoryPointer):
        """Numba's pointer to a loan of amso's pool (its ``_loan``), which owns the loan: no
        finalizer, the loan goes back when the pointer goes (or at ``free()``)."""

        _loan: Any

        def free(self) -> None:
            _give_back(self._loan)()

    class Manager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
        """Numba's memory manager over amso: device memory from amso's pool, pinned and mapped
        host memory from amso's pinned memory, frees deferred with ``amso.defer_cleanup()``."""

        def initialize(self) -> None:
            pass  # amso's pool needs no set-up per context

        def memalloc(self, size: int) -> Any:
            device = self.context.device.id
            loan = _amso._Loan(size, device, 1, _NUMBA, shareable)  # memalloc has no stream: the legacy default
            pointer = LoanPointer(weakref.proxy(self.context), CUdeviceptr(loan.ptr), size)
            pointer._loan = loan
            return pointer

        def memhostalloc(self, size: int, mapped: bool = False, portable: bool = False, wc: bool = False) -> Any:
            loan = _amso._PinnedLoan(size, mapped, wc)  # always portable: usable from every context
            allocations = self.allocations
            if not mapped:
                return PinnedMemory(weakref.proxy(self.context), loan.ptr, size, finalizer=loan.release)

            def finalizer() -> None:
                allocations.pop(loan.ptr, None)
                loan.release()

            memory = MappedMemory(weakref.proxy(self.context), loan.ptr, size, finalizer=finalizer)
            allocations[loan.ptr] = memory
            return memory.own()

        def get_ipc_handle(self, memory: Any) -> Any:
            if not shareable:
                raise RuntimeError(
                    "amso.allocators.NumbaManager lends memory of amso's stream-ordered pool, which CUDA IPC cannot "
                    "export; set numba.cuda.set_memory_manager(amso.allocators.ShareableNumbaManager) (cuMemAlloc "
                    "memory, as amso's shareable=True arrays) to share Numba arrays between processes"
                )
            return super().get_ipc_handle(memory)

        def get_memory_info(self) -> Any:
            info = _amso.memory_info(self.context.device.id)
            return MemoryInfo(free=info["free"], total=info["total"])

        def reset(self) -> None:
            super().reset()
            # The context's memory is gone with it: what Numba still holds is taken back now,
            # and its later finalizers are refused, never freed twice.
            _amso._reset_loans(_NUMBA, self.context.device.id)

        @contextlib.contextmanager
        def defer_cleanup(self) -> Iterator[None]:
            with super().defer_cleanup():
                _amso.defer_hold()
                try:
                    yield
                finally:
                    _amso.defer_release(self.context.device.id)

        @property
        def interface_version(self) -> int:
            return 1

    Manager.__name__ = Manager.__qualname__ = "ShareableNumbaManager" if shareable else "NumbaManager"
    Manager.__module__ = __name__
    return Manager


_MANAGERS: dict[bool, type] = {}


def __getattr__(name: str) -> Any:
    """``NumbaManager`` and ``ShareableNumbaManager``, built on first use (Numba is imported only
    then): ``numba.cuda.set_memory_manager(amso.allocators.NumbaManager)``; and ``cupy_malloc``,
    CuPy's C-level allocator over amso's pool (CuPy is imported only then):
    ``cupy.cuda.set_allocator(amso.allocators.cupy_malloc)``."""
    if name == "cupy_malloc":
        return _cupy_c_malloc()
    if name in ("NumbaManager", "ShareableNumbaManager"):
        shareable = name == "ShareableNumbaManager"
        if shareable not in _MANAGERS:
            _MANAGERS[shareable] = _numba_manager_class(shareable)
        return _MANAGERS[shareable]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- amso drawing from another library's pool: amso.set_allocator(*amso.allocators.X()) ---


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
