"""read_numpy_array (copy in, same_kind casting) and to_numpy (copy out) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import np_dtype, sample

import amso


def test_round_trip_every_pair(case):
    name, shape = case
    a = amso.MemArray(shape, name)
    reference = sample(name, shape, seed=1)
    a.read_numpy_array(reference)
    out = a.to_numpy()
    assert out.dtype == reference.dtype and out.shape == reference.shape
    np.testing.assert_array_equal(out, reference)
    out[...] = 0 if out.size else out
    np.testing.assert_array_equal(a.to_numpy(), reference)  # to_numpy is a copy


def test_same_kind_casts_are_applied_like_numpy():
    a = amso.MemArray((2, 3), np.float32)
    source = np.arange(6, dtype=np.int64).reshape(2, 3)
    a.read_numpy_array(source)
    np.testing.assert_array_equal(a.to_numpy(), source.astype(np.float32))
    b = amso.MemArray(3, np.float32)
    with np.errstate(over="ignore"):  # NumPy warns about 1e40 -> inf, as it does for astype
        b.read_numpy_array(np.array([0.1, 1e40, -2.5], dtype=np.float64))  # same_kind narrowing
        expected = np.array([0.1, 1e40, -2.5]).astype(np.float32)
    np.testing.assert_array_equal(b.to_numpy(), expected)
    c = amso.MemArray(2, np.int64)
    c.read_numpy_array([7, -8])  # any array-like
    assert c.to_numpy().tolist() == [7, -8]


def test_unsafe_casts_are_refused_and_data_kept():
    a = amso.MemArray(3, np.int32)
    a.read_numpy_array(np.array([1, 2, 3]))
    with pytest.raises(TypeError, match="same_kind"):
        a.read_numpy_array(np.array([1.5, 2.5, 3.5]))
    with pytest.raises(TypeError, match="same_kind"):
        a.read_numpy_array(np.array([1 + 1j, 0, 0]))
    np.testing.assert_array_equal(a.to_numpy(), [1, 2, 3])


def test_shape_mismatch_is_a_value_error_and_data_kept():
    a = amso.MemArray((2, 3), np.float64)
    a.read_numpy_array(np.ones((2, 3)))
    for bad in [np.zeros((3, 2)), np.zeros(6), np.zeros((2, 3, 1)), np.float64(1.0)]:
        with pytest.raises(ValueError, match="shape mismatch"):
            a.read_numpy_array(bad)
    np.testing.assert_array_equal(a.to_numpy(), np.ones((2, 3)))


def test_non_contiguous_and_read_only_inputs_are_copied_correctly():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    strided = base[::2, ::3]
    transposed = base.T
    readonly = base.copy()
    readonly.flags.writeable = False
    a = amso.MemArray(strided.shape, np.float64)
    a.read_numpy_array(strided)
    np.testing.assert_array_equal(a.to_numpy(), strided)
    b = amso.MemArray(transposed.shape, np.float64)
    b.read_numpy_array(transposed)
    np.testing.assert_array_equal(b.to_numpy(), transposed)
    c = amso.MemArray(readonly.shape, np.float64)
    c.read_numpy_array(readonly)
    np.testing.assert_array_equal(c.to_numpy(), readonly)


def test_bfloat16_round_trip_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = amso.MemArray(4, "bfloat16")
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)
    a.read_numpy_array(np.array([1.0, -2.5, 3.0, 1e3], dtype=np.float32))
    np.testing.assert_array_equal(a.to_numpy().astype(np.float32), [1.0, -2.5, 3.0, 1000.0])
    a[0] = 0.5
    assert a[0] == 0.5
