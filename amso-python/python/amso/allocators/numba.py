"""Numba and amso's pool: ``NumbaManager`` and ``ShareableNumbaManager``, Numba's external memory
management plug-in over amso's pool, built on first use (Numba is imported only then)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

from .. import _amso
from ._plug import CLIENTS, give_back
from ._plug import require as _require

_NUMBA = CLIENTS.get("numba", -1)
_MANAGERS: dict[bool, type] = {}


def manager(shareable: bool) -> type:
    """``NumbaManager`` (or, ``shareable``, ``ShareableNumbaManager``), built once."""
    if shareable not in _MANAGERS:
        _MANAGERS[shareable] = manager_class(shareable)
    return _MANAGERS[shareable]


def manager_class(shareable: bool) -> type:
    numba_cuda = _require("numba.cuda", "numba-cuda", "ShareableNumbaManager" if shareable else "NumbaManager")
    from cuda.bindings.driver import CUdeviceptr
    from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MappedMemory, MemoryInfo, MemoryPointer, PinnedMemory

    class LoanPointer(MemoryPointer):
        """Numba's pointer to a loan of amso's pool (its ``_loan``), which owns the loan: no
        finalizer, the loan goes back when the pointer goes (or at ``free()``)."""

        _loan: Any

        def free(self) -> None:
            give_back(self._loan)()

    class Manager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
        """Numba's memory manager over amso: device memory from amso's pool, pinned and mapped
        host memory from amso's pinned memory, frees deferred with ``amso.defer_cleanup()``."""

        def initialize(self) -> None:
            # The context's device, the legacy default stream (memalloc names none) and the
            # kind are fixed: one lender per context, and `memalloc` a closure over it (an
            # instance attribute, called without a method lookup).
            lend = _amso._Lender(self.context.device.id, 1, _NUMBA, shareable).lend
            context = weakref.proxy(self.context)

            def memalloc(size: int) -> Any:
                loan = lend(size)
                pointer = LoanPointer(context, CUdeviceptr(loan.ptr), size)
                pointer._loan = loan
                return pointer

            self.memalloc = memalloc  # type: ignore[method-assign]

        def memalloc(self, size: int) -> Any:
            # Before `initialize` (Numba calls it first): set up, then allocate.
            self.initialize()
            return self.memalloc(size)

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
    Manager.__module__ = "amso.allocators"
    return Manager


_MANAGERS: dict[bool, type] = {}
