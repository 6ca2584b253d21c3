"""What a spawned process of tests/python/test_pool.py runs: a Numba IPC handle opened and read."""

from __future__ import annotations

from typing import Any


def ipc_sum(handle: Any) -> float:
    import numpy as np

    np.row_stack = np.vstack  # Numba's JIT with NumPy 2.5 (test_pool.py)
    array = handle.open()
    try:
        return float(array.copy_to_host().sum())
    finally:
        handle.close()
