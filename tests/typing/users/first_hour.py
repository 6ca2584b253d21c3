"""A first hour with amso, as the README and docs/python.md show it."""

import numpy as np

import amso

a = amso.MemArray((2, 3), "float32")
a[0, 1] = 2.5
value: float = a[0, 1]
total = float(a[1, 2]) + value
a.read_numpy_array(np.arange(6, dtype=np.float32).reshape(2, 3))
host = a.to_numpy()
assert host.dtype == np.float32 and host.shape == (2, 3)
view = np.asarray(a)
shared = np.from_dlpack(a)
assert isinstance(a, amso.MemArray) and isinstance(a, amso.MemArrayBase)

counts = amso.MemArray(4, np.int64)
counts[0] = 7
first: int = counts[0]
flags = amso.MemArray((5,), bool)
flags[0] = True
on: bool = flags[0]
z = amso.MemArray((2, 2), np.complex128)
z[0, 0] = 1 + 2j
c: complex = z[0, 0]
d = amso.MemArray((2, 2))  # float64, as in NumPy
d[1, 1] = 3.0
x: float = d[1, 1]
bf = amso.MemArray((3,), "bfloat16")
bf[0] = 0.5
y: float = bf[0]

for row in a:
    print(row)
print(len(a), a.shape, a.ndim, a.size, a.nbytes, a.itemsize, a.dtype)
b = a.copy()
e = amso.empty((4, 4), np.float32)
e[0, 0] = 1.0
print(amso.supported()[:3], amso.class_for((2, 3), "float32").__name__)

# NumPy habits: rows and slices are NumPy views, == is elementwise, the device is a string.
row = a[0]
print(row.sum(), a[:, 1], a[..., 0], a[1:, ::2])
a[1] = [1.0, 2.0, 3.0]
a[:, 0] = 0.0
a[0, :] = np.ones(3, np.float32)
print(a.device)
a.move_memory("cpu")
print(bool((a == a.copy()).all()), np.array_equal(a, b))

# NumPy's scalars and nested lists go in as Python's numbers do.
a[0, 0] = np.float32(1.5)
a[1:] = np.float32(2)
a[0] = [np.float32(1), np.float32(2), np.float32(3)]
counts[1] = np.int64(3)
flags[1] = np.True_
z[1, 1] = np.complex64(1 + 1j)
cube3 = amso.MemArray((2, 2, 2), np.float64)
cube3[:] = [[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]


def describe(array: amso.MemArray) -> str:
    """amso.MemArray annotates any amso array, as isinstance says."""
    return f"{array.shape} {array.dtype}"


print(describe(a), describe(counts), describe(amso.asarray(np.zeros(3))))
held: amso.MemArray = amso.MemArray((2, 2), "float32")

# NumPy's habits: arithmetic gives NumPy arrays, in-place arithmetic keeps the amso array,
# conversions and membership follow NumPy.
plus = held + 1
scaled: np.ndarray = -held * 2.0
held += 1
still: amso.MemArray = held
one = amso.MemArray(1, "float32")
flag: bool = bool(one) and 0.0 in held
with held.get_dlpack("cpu") as context:
    print(plus, scaled, still, flag, context.lock_id)
transposed: np.ndarray = held.T
print(held.sum(), held.mean(axis=0), held.strides, held.astype(np.float64).dtype, held.tolist())
held.fill(0.5)
print(amso.zeros((2, 2), "float32"), amso.full(3, 2.5), amso.ones_like(held), transposed)
