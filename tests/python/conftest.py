"""Shared fixtures: every compiled (dtype, ndim) pair, shapes per ndim, reference data."""

from __future__ import annotations

import os

# JAX takes 75% of the GPU's memory at its first device array unless told not to; the suite
# shares the GPU with PyTorch, CuPy, amso and the soak's own process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402
import pytest

import amso

# The spec's dtypes: name -> (code, bits, lanes, NumPy name, module that defines it or None).
DTYPES = {name: rest for name, *rest in amso._amso._dtypes()}

# The spec's vector dtypes (CUDA's float4: several lanes of 8 bits or more per element).
VECTORS = {name for name, (code, bits, lanes, *_) in DTYPES.items() if lanes > 1 and bits >= 8}

# Every compiled pair of a scalar dtype (the generic suites' subject); records and vectors,
# whose elements are several values, have tests of their own (test_record_arrays.py,
# test_vectors.py).
COMPILED = [(name, ndim) for name, ndim in amso.supported() if name in DTYPES and name not in VECTORS]
RECORD_PAIRS = [(name, ndim) for name, ndim in amso.supported() if name not in DTYPES]
VECTOR_PAIRS = [(name, ndim) for name, ndim in amso.supported() if name in VECTORS]

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


# Dtypes NumPy does not import through DLPack before 2.5 (ml_dtypes' and packed vectors): tests
# reach their NumPy views through __array__ instead.
NOT_NUMPY_DLPACK = frozenset(name for name, (_, _, lanes, _, module) in DTYPES.items() if module or lanes != 1)

# The low-precision floats (float8, float6, float4, and PyTorch's packed float4 pairs).
LOW_PRECISION = frozenset(name for name, (code, *_) in DTYPES.items() if code >= 7)


def dtype_name(a: amso.MemArrayBase) -> str:
    """The spec's name of an amso array's dtype (a packed pair's NumPy dtype is uint8)."""
    return next(name for (name, _), cls in amso.__amso_dispatch__.items() if cls is type(a))


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype amso gives `name` (ml_dtypes' types; a packed pair as its raw byte)."""
    _, _, _, numpy_name, module = DTYPES[name]
    if module is not None:
        return np.dtype(getattr(pytest.importorskip(module), numpy_name))
    return np.dtype(numpy_name)


def sample(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Reproducible values that survive a round trip through `name` exactly."""
    rng = np.random.default_rng(seed)
    dtype = np_dtype(name)
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if name in LOW_PRECISION:
        # Every finite value the type has (its bit patterns; sub-byte ones in the low bits).
        _, bits, lanes, _, _ = DTYPES[name]
        patterns = np.arange(2 ** min(bits * lanes, 8), dtype=np.uint8).view(dtype)
        if dtype != np.uint8:
            patterns = patterns[np.isfinite(patterns.astype(np.float32))]
        return rng.choice(patterns, size=shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype.kind == "c":
        return (rng.integers(-50, 50, size=shape) + 1j * rng.integers(-50, 50, size=shape)).astype(dtype)
    # Small integers and halves are exact in float16, bfloat16, float32 and float64.
    return (rng.integers(-64, 64, size=shape) / 2).astype(dtype)


@pytest.fixture(params=cases(), ids=case_id)
def case(request: pytest.FixtureRequest) -> tuple[str, tuple[int, ...]]:
    return request.param
