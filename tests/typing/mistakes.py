"""Deliberate mistakes: mypy and pyright must each report an error on every line marked as one
(and on no other line). Never run: some lines would raise."""

import numpy as np
import numpy.typing as npt

import amso

a = amso.MemArray((2, 3), "float32")
a.to_nunpy()  # mistake: a misspelled method
a.read_numpy_aray(np.zeros((2, 3)))  # mistake: a misspelled method
b = amso.MemArray("3", "float32")  # mistake: a str for the shape
a[0, 1] = "x"  # mistake: a str written into a float array
text: str = a[0, 1]  # mistake: an element of a float32 array is a float
a.move_memory(amso.dlpack.kDLCPU, "0")  # mistake: a str for the device id
amso.MemArray((4,), "int32", readonly="yes")  # mistake: a str for a flag
c = amso.MemArray((4,), "int32")
n: str = c[0]  # mistake: an element of an int32 array is an int
a.shape = (3, 2)  # mistake: shape is read-only
wrong: npt.NDArray[np.int64] = a.to_numpy()  # mistake: a float32 array is not int64
e = amso.empty((2,), "float32", pinned=True)  # mistake: empty takes no pinned=
f = amso.MemArray((2, 2), "float32", device=0)  # mistake: the keyword is device_id
g = amso.MemArray((2,), "bool")
g[0] = 1.5  # mistake: a float written into a bool array


def describe(array: amso.MemArray) -> str:
    return str(array.shape)


describe(np.zeros(3))  # mistake: a NumPy array is not an amso array
g[0:1] = ["x"]  # mistake: strings are not elements
v4 = amso.MemArray(2, "float32x4")
v4[0, 1] = "x"  # mistake: a lane of float32x4 is a float
text: str = v4[0, 1]  # mistake: a lane reads as np.float32
k = amso.class_for((2, 3), "float64")
k((2, 3), readonly="yes")  # mistake: readonly is a bool
k((2, 3), "float64")  # mistake: a compiled class takes no dtype (its second argument is device_id)
