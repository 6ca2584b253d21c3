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

One module per library (``amso.allocators.torch``, ``.cupy``, ``.numba``, ``.rmm``); the names
above are importable from here. (``amso.allocators.torch``, ``.cupy`` and ``.rmm`` as names of
this package are the adapters, ``torch()`` and the others; their modules are in
``sys.modules``, and `from amso.allocators.torch import ...` reaches them.)
"""

from __future__ import annotations

from typing import Any

from ._plug import Free, Malloc
from .cupy import cupy, cupy_pinned_malloc, cupy_python_malloc
from .rmm import rmm, rmm_resource
from .torch import torch, torch_allocator

__all__ = [
    "NumbaManager", "ShareableNumbaManager", "cupy_malloc", "cupy_python_malloc", "cupy_pinned_malloc",
    "torch_allocator", "rmm_resource", "torch", "cupy", "rmm",
]


def __getattr__(name: str) -> Any:
    """``NumbaManager`` and ``ShareableNumbaManager``, built on first use (Numba is imported only
    then): ``numba.cuda.set_memory_manager(amso.allocators.NumbaManager)``; and ``cupy_malloc``,
    CuPy's C-level allocator over amso's pool (CuPy is imported only then):
    ``cupy.cuda.set_allocator(amso.allocators.cupy_malloc)``."""
    if name == "cupy_malloc":
        from .cupy import c_malloc

        return c_malloc()
    if name in ("NumbaManager", "ShareableNumbaManager"):
        from .numba import manager

        return manager(name == "ShareableNumbaManager")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
