"""``amso.MemArray``: the class every amso array is an instance of, whose call makes an array of
the compiled class for ``(dtype, ndim)``; and ``amso.empty``. Type checkers read
``_memarray.pyi`` (generated from the spec) instead: overloads that know the class a call
returns from a literal dtype and the shape's length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsIndex

from ._amso import MemArrayBase, _is_amso_array, _is_amso_class, _new_array, empty

__all__ = ["MemArray", "empty"]


class _MemArrayMeta(type):
    def __call__(
        cls,
        shape: Sequence[SupportsIndex] | SupportsIndex,
        dtype: Any = None,
        device_id: int = 0,
        *,
        readonly: bool = False,
        pinned: bool = False,
        on_device: bool = False,
        managed: bool = False,
        shareable: bool = False,
    ) -> Any:
        return _new_array(
            shape, dtype, device_id, readonly=readonly, pinned=pinned, on_device=on_device, managed=managed,
            shareable=shareable,
        )

    def __instancecheck__(cls, instance: Any) -> bool:
        # Arrays of every crate's classes: each extension module links its own copy of amso's
        # runtime (and so its own base class); recognised without trusting object attributes.
        return _is_amso_array(instance)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return subclass is cls or _is_amso_class(subclass)


class MemArray(MemArrayBase, metaclass=_MemArrayMeta):
    """``MemArray(shape, dtype=None, device_id=0, *, readonly=False, pinned=False, on_device=False,
    managed=False, shareable=False)``: a zero-filled array, on the host or (``on_device=True``) on
    CUDA device ``device_id``; with ``managed=True`` in CUDA managed memory there, which the host
    reads and writes in place once the device's work is done (exported as ``kDLCUDAManaged``);
    with ``shareable=True`` in device memory other processes can map (``a.share()``).

    Dispatches to the compiled class for ``(np.dtype(dtype).name, len(shape))``; ``dtype``
    defaults to float64, as in NumPy. Every amso array, of this package or of any other
    extension built with amso, is an instance of ``MemArray``.

    The class subclasses ``MemArrayBase`` so that ``help(amso.MemArray)`` lists the methods every
    array has; arrays themselves are of the compiled classes.
    """

    __slots__ = ()
