"""A NumPy user's first hour, as written: shapes taken from NumPy arrays, vector lanes, record
fields and a class from class_for (correct code both checkers must pass, and that runs)."""

from typing import Any

import numpy as np
import numpy.typing as npt

import amso


def like(x: npt.NDArray[Any]) -> amso.MemArray:
    """A NumPy shape of unknown length gives the class of any rank: a[i, j] type-checks."""
    a = amso.MemArray(x.shape, "float32")
    a[1, 2] = 5.0
    return a


a = like(np.zeros((3, 4)))
print(a[1, 2], a.shape)

v = amso.MemArray(4, "float32x4")
v[0] = (1.0, 2.0, 3.0, 4.0)  # an element: its four lanes
v[1] = np.ones(4, dtype=np.float32)
v[2, 3] = 2.5  # one lane
lanes: npt.NDArray[np.float32] = v[0]
lane = float(v[2, 3]) + float(lanes.sum())
assert lane == 12.5, lane

records = amso.asarray(np.asarray(amso.MemArray(3, "particle")))
masses = records["mass"]  # a field of a record array
masses[:] = 2.0
assert float(np.asarray(records["mass"]).sum()) == 6.0

cls = amso.class_for((2, 3), "float64")
b = cls((2, 3))
b[0, 1] = 2.0
assert isinstance(b, amso.MemArray) and b.shape == (2, 3) and float(b[0, 1]) == 2.0
