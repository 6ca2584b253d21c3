"""amso quickstart: create typed arrays, fill them from NumPy, share them zero-copy."""

import numpy as np

import amso
from amso.dlpack import kDLCPU

# One constructor; the compiled class is picked from (dtype, ndim).
positions = amso.MemArray((4, 3), dtype=np.float32)
print(repr(positions), "->", type(positions).__name__)

# Copy data in (same_kind casting, like NumPy) and read single elements.
positions.read_numpy_array(np.arange(12).reshape(4, 3))
positions[0, 0] = 0.5
print("positions[-1, 2] =", positions[-1, 2])

# Zero-copy NumPy view through DLPack (versioned capsule, writable).
view = np.from_dlpack(positions)
view[1] *= 10
print("after writing through the NumPy view:", positions[1, 0], positions[1, 1], positions[1, 2])

# The MemArray design's locking context: while it is open, only it may touch the array.
with positions.get_dlpack(kDLCPU) as exported:
    locked_view = np.from_dlpack(exported)
    print("locked:", positions.locked, "sum =", float(locked_view.sum()))
print("locked after the block:", positions.locked)

print("compiled (dtype, ndim) pairs:", len(amso.supported()))
try:
    amso.MemArray((2, 2, 2, 2), dtype=np.float16)
except TypeError as error:
    print("uncompiled combination ->", str(error).split(".")[0])

print("copy out:", positions.to_numpy().tolist())
