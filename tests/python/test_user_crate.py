"""The user-crate example: #[amso_array] classes in a separate extension module."""

from __future__ import annotations

import numpy as np
import pytest

ue = pytest.importorskip("amso_user_example")


def test_classes_and_dispatch_entries():
    assert ue.__amso_dispatch__ == {("float32", 2): ue.Positions, ("float64", 3): ue.Density, ("float16", 1): ue.Weights,
                                    ("particle", 1): ue.Particles}
    p = ue.Positions((5, 3))
    assert (p.shape, p.dtype) == ((5, 3), np.dtype(np.float32))
    w = ue.Weights(4)
    w[0] = 0.5
    assert w.dtype == np.float16 and w[0] == 0.5


def test_rust_function_on_the_typed_array_matches_numpy():
    shape = (2, 3, 4)
    d = ue.Density(shape)
    start = np.linspace(0, 1, 24).reshape(shape)
    d.read_numpy_array(start)
    ue.add_index_sum(d)
    np.testing.assert_array_equal(np.from_dlpack(d), start + np.indices(shape).sum(axis=0))


def test_rust_function_rejects_other_arrays():
    with pytest.raises(TypeError, match="expected a writable float64 array with 3 dimensions, got a float32 array"):
        ue.add_index_sum(ue.Positions((2, 3)))
