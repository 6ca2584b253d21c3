"""Creation, properties and item access for every compiled (dtype, ndim), against NumPy."""

from __future__ import annotations

import dis
import itertools

import numpy as np
import pytest
from conftest import COMPILED, np_dtype, sample

import amso


def test_every_compiled_pair_is_in_the_dispatch_map_and_stubs():
    from pathlib import Path

    stubs = (Path(amso.__file__).parent / "_amso.pyi").read_text()
    assert len(COMPILED) >= 12
    for name, ndim in COMPILED:
        cls = amso.class_for((1,) * ndim, name)
        assert issubclass(cls, amso.MemArrayBase)
        assert issubclass(cls, amso.MemArray)  # what the stubs declare: every compiled class is a MemArray
        assert f"class {cls.__name__}(MemArray)" in stubs


def test_amso_set_is_compiled():
    for name in ["int32", "int64", "float32", "float64"]:
        for ndim in (1, 2, 3):
            assert (name, ndim) in COMPILED


def test_every_class_has_its_own_dlpack_method_descriptors():
    """CPython specialises a method call only for the descriptor's own type: each class carries
    the hot DLPack methods itself, as PyO3 defines them on the base class."""
    base = amso._amso.MemArrayBase
    for cls in amso._amso.__amso_dispatch__.values():
        for name in ("__dlpack__", "__dlpack_device__"):
            descriptor = cls.__dict__[name]
            assert descriptor.__objclass__ is cls and descriptor.__doc__ == base.__dict__[name].__doc__, (cls, name)
    a = amso.MemArray((2, 3), np.int32)
    np.testing.assert_array_equal(np.from_dlpack(a), np.zeros((2, 3), np.int32))
    other = amso.MemArray(3, np.float32)
    with pytest.raises(TypeError, match="MemArray2DInt32"):
        type(a).__dlpack__(other)  # another class's instance: refused by the descriptor itself

    class Mine(type(other)):
        pass

    mine = Mine(4)
    mine[1] = 2.5
    np.testing.assert_array_equal(np.from_dlpack(mine), [0, 2.5, 0, 0])
    assert mine.__dlpack_device__() == (1, 0)


def test_method_calls_on_every_class_are_specialised():
    """No class has an attribute hook of its own (NumPy's attributes are descriptors of the base
    class), so CPython specialises `a.__dlpack__()` as it does NumPy's: with a hook, every
    call looked the method up and made a bound method (`__dlpack__()` cost 137 ns against
    NumPy's 90 in the 2026-11-30 H200 report, 81 against 96 without)."""
    for cls in (amso._amso.MemArrayBase, *amso._amso.__amso_dispatch__.values()):
        assert cls.__getattribute__ is object.__getattribute__ and "__getattr__" not in dir(cls), cls

    def export(array):
        return array.__dlpack__()

    def load_of(function):
        return next(i.opname for i in dis.get_instructions(function, adaptive=True) if i.argval == "__dlpack__")

    for array in (np.zeros(3, np.float32), amso.MemArray(3, np.float32)):
        for _ in range(100):
            export(array)
        assert load_of(export) not in GENERIC_LOADS, (type(array), load_of(export))
        export.__code__ = export.__code__.replace()  # a fresh code object: unspecialised again


# The attribute loads of an unspecialised (or de-specialised) method call, CPython 3.11 to 3.14.
GENERIC_LOADS = {"LOAD_ATTR", "LOAD_METHOD", "LOAD_ATTR_ADAPTIVE", "LOAD_METHOD_ADAPTIVE"}


def test_create_matches_numpy_zeros(case):
    name, shape = case
    a = amso.MemArray(shape, name)
    expected = np.zeros(shape, np_dtype(name))
    assert isinstance(a, amso.MemArray)
    assert a.shape == expected.shape
    assert a.ndim == expected.ndim
    assert a.size == expected.size
    assert a.nbytes == expected.nbytes
    assert a.itemsize == expected.itemsize
    assert a.dtype == expected.dtype
    assert (a.device_id, a.on_device, a.locked, a.readonly) == (0, False, False, False)
    np.testing.assert_array_equal(a.to_numpy(), expected)


def test_default_dtype_is_float64_and_int_shapes_work():
    a = amso.MemArray(5)
    assert (a.dtype, a.shape) == (np.dtype(np.float64), (5,))
    assert amso.MemArray(np.array([2, 3]), "int32").shape == (2, 3)
    assert amso.MemArray([np.int64(2)], float).dtype == np.float64


def test_every_spelling_of_a_dtype_and_shape_reaches_the_class_class_for_names():
    # amso.MemArray and amso.empty look classes up by the dtype object's identity; each spelling
    # must land where amso.class_for (NumPy's reading of the dtype) says, on every call.
    class Dims(int):  # an int subclass: resolved through class_for, not the cache
        pass

    name_at_run_time = "".join(["float", "32"])  # a str object that no literal shares
    spellings = [np.float32, np.dtype(np.float32), "float32", name_at_run_time, "f4", np.dtype("f4").newbyteorder("=")]
    shapes = [4, Dims(4), (4,), [4], np.array([4]), (np.int64(4),)]
    for _ in range(3):  # the first call fills the cache, the later ones read it
        for dtype, shape in itertools.product(spellings, shapes):
            for array in (amso.MemArray(shape, dtype), amso.empty(shape, dtype)):
                assert type(array) is amso.class_for(4, np.float32)
                assert (array.dtype, array.shape) == (np.dtype(np.float32), (4,))
    for _ in range(2):  # one dtype object, one cache entry per ndim
        for ndim in (1, 2, 3):
            assert type(amso.empty((2,) * ndim, np.float32)) is amso.class_for((2,) * ndim, np.float32)
    assert type(amso.empty(2)) is amso.class_for(2, None) is amso.class_for(2, np.float64)


def test_the_class_cache_keeps_what_callers_pass_again_and_not_equal_copies():
    from amso._amso import _class_cache_len

    cached = _class_cache_len()
    for _ in range(3):  # a type, NumPy's own dtype instance and a literal name: cached once each
        for dtype in (np.float64, np.dtype(np.float64), "float64"):
            amso.empty((2, 2), dtype)
            amso.empty((2, 2, 2), dtype)
    assert _class_cache_len() <= cached + 6
    grown = _class_cache_len()
    # Equal copies (as unpickled dtypes and names built at run time are) resolve through
    # class_for every time and take no slot.
    copies = [np.dtype("f8").newbyteorder("=") for _ in range(100)] + ["".join(["float", "64"]) for _ in range(100)]
    for dtype in copies:
        assert type(amso.empty((2, 2), dtype)) is amso.class_for((2, 2), np.float64)
    assert _class_cache_len() == grown


def test_bad_options_name_the_argument_in_every_constructor():
    cls = amso.class_for(2, np.float32)
    for make in (lambda **kw: amso.MemArray(2, np.float32, **kw), lambda **kw: cls(2, **kw)):
        with pytest.raises(TypeError, match="device_id must be an int, got str"):
            make(device_id="0")
        with pytest.raises(TypeError, match="readonly must be a bool, got int"):
            make(readonly=1)
    with pytest.raises(TypeError, match="on_device must be a bool, got str"):
        amso.empty(2, np.float32, on_device="yes")
    with pytest.raises(TypeError, match="device_id must be an int, got float"):
        amso.empty(2, np.float32, 0.0)


def test_item_get_and_set_match_numpy(case):
    name, shape = case
    a = amso.MemArray(shape, name)
    if 0 in shape:
        with pytest.raises(IndexError, match="out of bounds"):
            a[(0,) * len(shape)]
        return
    reference = sample(name, shape)
    for index in itertools.islice(np.ndindex(*shape), 40):
        a[index] = reference[index].item()
    for index in itertools.islice(np.ndindex(*shape), 40):
        expected = reference[index].item()
        got = a[index]
        assert got == expected and type(got) is type(expected), (index, got, expected)


def test_negative_indices_and_one_d_integer_keys():
    a = amso.MemArray((3, 4), np.int64)
    a[-1, -1] = 7
    a[0, -4] = 3
    assert a.to_numpy()[2, 3] == 7 and a.to_numpy()[0, 0] == 3
    b = amso.MemArray(3, np.int32)
    b[np.int64(-1)] = 9
    assert b[2] == 9 and len(b) == 3


@pytest.mark.parametrize(
    "value, expected",
    [(True, 1), (2.9, 2), (-2.9, -2), (np.float32(5.5), 5), (np.uint8(200), 200)],
)
def test_assignment_casts_like_numpy(value, expected):
    a = amso.MemArray(1, np.int32)
    reference = np.zeros(1, np.int32)
    a[0] = value
    reference[0] = value
    assert a[0] == reference[0] == expected


def test_float_and_complex_assignment():
    f = amso.MemArray(2, np.float32)
    with pytest.warns(RuntimeWarning, match="overflow encountered in cast"):  # as NumPy 2 warns
        f[0] = 1e300
    assert f[0] == np.inf
    c = amso.MemArray((1, 1), np.complex64)
    c[0, 0] = 1.5 - 2j
    assert c[0, 0] == 1.5 - 2j
    c[0, 0] = np.complex64(3 + 4j)
    assert c[0, 0] == 3 + 4j
    b = amso.MemArray(1, bool)
    b[0] = 5
    assert b[0] is True


def test_repr_says_what_the_array_is():
    a = amso.MemArray((2, 3), np.float32, readonly=True)
    assert repr(a) == (
        "MemArray2DFloat32([[0., 0., 0.],\n"
        "                   [0., 0., 0.]],\n"
        "                  dtype=float32, device='cpu', readonly=True)"
    )
    with a.get_dlpack():  # a locked array is not read: its repr has no values
        assert repr(a) == "MemArray2DFloat32(shape=(2, 3), dtype=float32, device='cpu', readonly=True, locked=True)"


def test_readonly_arrays_refuse_writes_and_keep_data():
    a = amso.MemArray(3, np.float64, readonly=True)
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        a.read_numpy_array(np.ones(3))
    np.testing.assert_array_equal(a.to_numpy(), np.zeros(3))


def test_move_memory_to_host_is_a_no_op():
    a = amso.MemArray(3, np.float64)
    a[1] = 2.0
    a.move_memory(amso.dlpack.kDLCPU)
    assert a[1] == 2.0 and not a.on_device
    assert a.__dlpack_device__() == (amso.dlpack.kDLCPU, 0)
