"""Sharing with NumPy and DLPack consumers; arrays whose dtype or shape a checker cannot know."""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

import amso


def total(array: amso.MemArrayBase) -> float:
    return float(np.asarray(array).sum())


def make(shape: Sequence[int], dtype: npt.DTypeLike) -> amso.MemArrayBase:
    return amso.MemArray(shape, dtype)


values = np.linspace(0.0, 1.0, 12).reshape(3, 4)
wrapped = amso.asarray(values)
print(total(wrapped), wrapped.shape)
copy = amso.from_dlpack(values, copy=True)
print(copy.to_numpy().sum())
dynamic = make([2, 2, 2], "uint16")
dynamic[0, 0, 0] = 3
print(float(dynamic[0, 0, 0]), total(dynamic))
cube = amso.MemArray((2, 2, 2), np.uint16)
cube[1, 1, 1] = 9
nine: int = cube[1, 1, 1]
image = amso.MemArray((4, 4, 3), np.uint8, readonly=False, pinned=False)
print(image.readonly, image.pinned, image.on_device, image.device_id)
grid: npt.NDArray[np.float64] = amso.MemArray((2, 2), np.float64).to_numpy()
capsule = wrapped.__dlpack__()
with wrapped.get_dlpack() as context:
    print(np.from_dlpack(context).shape)
print(amso.cuda.device_count(), amso.cuda.is_available())
