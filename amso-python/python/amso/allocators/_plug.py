"""What every plug-in of ``amso.allocators`` shares: the pool's client numbers (defined once, in
the runtime, and read here), importing a library only when its plug-in is used, and a
finalizer that gives a loan back."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from .. import _amso

Malloc = Callable[[int, int, int], int]
Free = Callable[[int, int, int, int], None]

# Client numbers of the pool's statistics (amso.memory_info()["clients"]), as the runtime defines them.
CLIENTS = dict(_amso._clients()) if hasattr(_amso, "_clients") else {}


def require(module: str, package: str, plug_in: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"amso.allocators.{plug_in} needs {module}, which is not installed: pip install {package}") from error


def give_back(loan: Any) -> Callable[[], None]:
    """A finalizer that gives `loan` back, and reports (as a RuntimeWarning) a give-back amso
    refuses, such as one after a reset took the memory back: a finalizer must not raise."""

    def finalize() -> None:
        try:
            loan.release()
        except ValueError as error:
            warnings.warn(str(error), RuntimeWarning, stacklevel=1)

    return finalize
