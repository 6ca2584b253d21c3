"""Shared fixtures: every compiled (dtype, ndim) pair, shapes per ndim, reference data."""

from __future__ import annotations

import os

# JAX takes 75% of the GPU's memory at its first device array unless told not to; the suite
# shares the GPU with PyTorch, CuPy, amso and the soak's own process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402
import pytest

import amso

COMPILED = amso.supported()

# Shapes per ndim, with size-1 and zero-size dimensions.
SHAPES = {
    1: [(1,), (7,), (0,)],
    2: [(1, 1), (3, 5), (0, 4), (4, 0)],
    3: [(1, 1, 1), (2, 3, 4), (2, 0, 3)],
}


def shapes_for(ndim: int) -> list[tuple[int, ...]]:
    return SHAPES.get(ndim, [(2,) * ndim, (1,) * ndim, (0,) + (2,) * (ndim - 1)])


def cases() -> list[tuple[str, tuple[int, ...]]]:
    return [(dtype, shape) for dtype, ndim in COMPILED for shape in shapes_for(ndim)]


def case_id(case: tuple[str, tuple[int, ...]]) -> str:
    return f"{case[0]}-{'x'.join(map(str, case[1])) or 'scalar'}"


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def sample(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Reproducible values that survive a round trip through `name` exactly."""
    rng = np.random.default_rng(seed)
    dtype = np_dtype(name)
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype.kind == "c":
        return (rng.integers(-50, 50, size=shape) + 1j * rng.integers(-50, 50, size=shape)).astype(dtype)
    # Small integers and halves are exact in every float type, bfloat16 included.
    return (rng.integers(-64, 64, size=shape) / 2).astype(dtype)


@pytest.fixture(params=cases(), ids=case_id)
def case(request: pytest.FixtureRequest) -> tuple[str, tuple[int, ...]]:
    return request.param
