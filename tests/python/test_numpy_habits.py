"""NumPy habits on amso arrays (issue 38): rows and basic slicing as NumPy views, assignment
through them, elementwise ==, a repr with values, `.device` and device names in `move_memory`,
and `help(amso.MemArray)`. NumPy is the reference: an equal NumPy array built independently
(`sample`) given the same key or the same operation, NumPy's own exception types, and NumPy's
own repr of the same values."""

from __future__ import annotations

import gc
import pydoc
import re

import numpy as np
import pytest
from conftest import COMPILED, LOW_PRECISION, np_dtype, sample

import amso

GPU = amso.cuda.is_available()
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device")

# One compiled pair per rank, and every pair of rank >= 2.
RANKED = [(name, ndim) for name, ndim in COMPILED if ndim >= 2]
SHAPE = {1: (7,), 2: (4, 5), 3: (3, 4, 5)} | {n: (2,) * (n - 3) + (3, 4, 5) for n in range(4, 9)}


def filled(name, shape, seed=0):
    a = amso.MemArray(shape, name)
    a.read_numpy_array(sample(name, shape, seed))
    return a


def same(got, expected):
    """Equal values, shape and dtype (bit patterns for the low-precision floats, where NaN-free
    equality is what `assert_array_equal` checks anyway)."""
    got = np.asarray(got)
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(expected).view(np.uint8))


# --- rows ---


@pytest.mark.parametrize("name, ndim", RANKED, ids=[f"{n}-{d}d" for n, d in RANKED])
def test_rows_are_numpy_views_as_iteration_gives_them(name, ndim):
    shape = SHAPE[ndim]
    a, ref = filled(name, shape), sample(name, shape)
    rows = list(a)
    for i in range(-shape[0], shape[0]):
        row = a[i]
        assert isinstance(row, np.ndarray)
        same(row, ref[i])
        same(row, rows[i])
        assert row.ctypes.data == rows[i].ctypes.data  # the same memory iteration views
    a[1][(0,) * (ndim - 1)] = a[0][(0,) * (ndim - 1)]  # written through the row
    assert a[(1,) + (0,) * (ndim - 1)] == a[(0,) + (0,) * (ndim - 1)]


def test_a_full_integer_index_is_still_a_python_scalar():
    a = filled("float32", (4, 5))
    assert type(a[1, 2]) is float and a[1, 2] == float(sample("float32", (4, 5))[1, 2])
    assert type(a[-1, -1]) is float
    b = filled("int64", (2, 3, 4))
    assert type(b[1, 2, 3]) is int and b[1, 2, 3] == int(sample("int64", (2, 3, 4))[1, 2, 3])
    c = filled("int32", (7,))
    assert type(c[3]) is int  # a 1-D array's a[i] is an element


def test_rows_follow_the_arrays_rules():
    a = filled("float64", (3, 4))
    readonly = amso.MemArray((3, 4), np.float64, readonly=True)
    assert a[0].flags.writeable and not readonly[0].flags.writeable
    row = a[2]
    del a
    gc.collect()
    same(row, sample("float64", (3, 4))[2])  # the view holds the memory, not the array
    b = filled("float64", (3, 4))
    row = b[1]
    b.move_memory("cpu")  # a row does not pin the data (as iteration's rows)
    with b.get_dlpack():
        with pytest.raises(BufferError, match="locked"):
            b[0]
        with pytest.raises(BufferError, match="locked"):
            b[0] = 1.0
    same(row, sample("float64", (3, 4))[1])


# --- basic slicing ---

KEYS = [
    slice(None), slice(1, 3), slice(None, None, 2), slice(None, None, -1), slice(-2, None), slice(5, 10),
    (slice(None), 1), (slice(1, None), slice(None, None, -2)), (Ellipsis, 0), (0, Ellipsis), (Ellipsis,), (),
    (None, 1), (1, None), (slice(None), None), (-1, slice(None, 3)), (Ellipsis, slice(1, -1)),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
@pytest.mark.parametrize("name", ["float32", "int64", "uint8", "complex64", "float8_e4m3fn"])
def test_basic_slicing_gives_numpys_views(name, key):
    ndim = max(d for n, d in COMPILED if n == name)
    shape = SHAPE[ndim]
    a, ref = filled(name, shape), sample(name, shape)
    got = a[key]
    assert isinstance(got, np.ndarray)
    same(got, ref[key])
    if got.size:
        assert np.shares_memory(got, np.asarray(a))


@pytest.mark.parametrize("name", ["bfloat16", "float32", "float4_e2m1fn_x2", "bool"])
def test_one_dimensional_slices(name):
    a, ref = filled(name, (7,)), sample(name, (7,))
    for key in [slice(1, 5), slice(None, None, -3), (Ellipsis,), (), (None, slice(2, 4))]:
        same(a[key], ref[key])


@pytest.mark.parametrize(
    "key",
    [5, -6, (slice(None), 7), (0, 0, 0, 0), (Ellipsis, Ellipsis), (4, 0, 0)],
    ids=repr,
)
def test_out_of_range_and_malformed_keys_raise_numpys_exception_type(key):
    a, ref = filled("float32", (4, 5, 6)), sample("float32", (4, 5, 6))
    with pytest.raises(Exception) as expected:
        ref[key]
    with pytest.raises(expected.type):
        a[key]
    with pytest.raises(expected.type):
        a[key] = 1.0


FANCY = [[0, 1], np.array([0, 2]), True, np.array([True, False, True, False]), (0, [1])]


@pytest.mark.parametrize("key", [*FANCY, 1.5, "0"], ids=repr)
def test_fancy_and_boolean_indices_point_at_a_numpy_view(key):
    a = filled("float32", (4, 5))
    for attempt in (lambda: a[key], lambda: a.__setitem__(key, 0.0)):
        with pytest.raises(TypeError, match=re.escape("np.asarray(a)[...]")):
            attempt()
    if any(key is fancy for fancy in FANCY):
        same(np.asarray(a)[key], sample("float32", (4, 5))[key])  # where the message points works


# --- assignment ---

ASSIGNMENTS = [
    (1, 7),  # a row from a scalar
    (-1, np.arange(5)),  # a row from a row
    ((slice(None), 2), [1, 2, 3, 4]),  # a column from a list
    ((slice(None, None, 2), slice(1, None, 2)), 9),  # a strided block, broadcast
    ((Ellipsis, 0), np.array([5, 6, 7, 8])),
    (slice(1, 3), np.arange(5)),  # rows broadcast from one row
    ((), 3),
    ((None, 0), np.arange(5)[None]),
]


@pytest.mark.parametrize("key, value", ASSIGNMENTS, ids=[repr(k) for k, _ in ASSIGNMENTS])
@pytest.mark.parametrize("name", ["float64", "int32", "uint8"])
def test_assignment_broadcasts_as_numpy(name, key, value):
    a, ref = filled(name, (4, 5)), sample(name, (4, 5)).copy()
    ref[key] = value
    a[key] = value
    same(np.asarray(a), ref)


def test_assignment_from_another_amso_array_and_from_itself():
    a, ref = filled("float64", (4, 5)), sample("float64", (4, 5)).copy()
    other = filled("float64", (5,), seed=3)
    a[0] = other
    ref[0] = sample("float64", (5,), seed=3)
    a[1:3] = a[2:4]  # overlapping, as NumPy handles it
    ref[1:3] = ref[2:4].copy()
    same(np.asarray(a), ref)


def test_assignment_that_does_not_broadcast_is_numpys_error():
    a, ref = filled("float32", (4, 5)), sample("float32", (4, 5))
    with pytest.raises(ValueError) as expected:
        ref.copy()[0] = np.arange(3)
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        a[0] = np.arange(3)
    same(np.asarray(a), ref)


def test_readonly_arrays_refuse_assignment_to_rows_and_slices():
    a = amso.MemArray((3, 4), np.float32, readonly=True)
    for key in (0, -1, slice(None), (slice(None), 1), Ellipsis):
        with pytest.raises(ValueError, match="array is read-only"):  # the element write's error
            a[key] = 1.0
    with pytest.raises(ValueError, match="array is read-only"):
        a[0, 0] = 1.0
    same(np.asarray(a), np.zeros((3, 4), np.float32))


# --- == ---


def test_equality_is_elementwise_as_numpys():
    a, ref = filled("int32", (4, 5)), sample("int32", (4, 5))
    b = a.copy()
    equal = a == b
    assert isinstance(equal, np.ndarray) and equal.dtype == bool and equal.shape == (4, 5) and equal.all()
    assert not (a != b).any()
    b[1, 2] = a[1, 2] + 1
    np.testing.assert_array_equal(a == b, ref == np.asarray(b))
    np.testing.assert_array_equal(a < b, ref < np.asarray(b))
    np.testing.assert_array_equal(a >= 0, ref >= 0)
    np.testing.assert_array_equal(a == ref[0], ref == ref[0])  # broadcast, amso on the left
    np.testing.assert_array_equal(ref == a, np.ones((4, 5), bool))  # and on the right
    assert np.array_equal(a, a.copy()) and not np.array_equal(a, b)


def test_arrays_are_unhashable_as_numpys():
    a = amso.MemArray(3, np.float32)
    with pytest.raises(TypeError, match="unhashable"):
        hash(a)
    with pytest.raises(TypeError, match="unhashable"):
        {a}
    assert type(a).__hash__ is None and amso.MemArrayBase.__hash__ is None
    assert {id(a): a}[id(a)] is a  # what to key a dict by instead


# --- repr ---


def numpy_repr(a, ref) -> str:
    """NumPy's own repr of `ref` under `a`'s class name (a NumPy subclass of that name)."""
    named = type(type(a).__name__, (np.ndarray,), {})
    return repr(ref.view(named))


def numpy_layout(a, ref, extras: str) -> str:
    """NumPy's repr of `ref` under `a`'s class name, with amso's `extras` in place of NumPy's:
    after the values, on their last line if it stays within the line width, else on a line of
    their own under the first value (NumPy's rule for its own `dtype=`)."""
    text = numpy_repr(a, ref)
    values = text[: text.rindex("]") + 1] + ","
    last_line = values.rsplit("\n", 1)[-1]
    fits = len(last_line) + 1 + len(extras) <= np.get_printoptions()["linewidth"]
    return values + (" " if fits else "\n" + " " * len(type(a).__name__ + "(")) + extras


@pytest.mark.parametrize(
    "name, shape",
    [("float32", (2, 3)), ("float32", (4, 5, 3)), ("int32", (3,)), ("complex64", (2, 2)), ("uint8", (3, 4)),
     ("bfloat16", (4,)), ("float8_e4m3fn", (2, 3)), ("float64", (2, 2)), ("int64", (5,))],
)
def test_repr_shows_the_values_as_numpy_does(name, shape):
    a, ref = filled(name, shape), sample(name, shape)
    assert repr(a) == numpy_layout(a, ref, f"dtype={name}, device='cpu')")


def test_repr_of_a_small_array_is_numpys_with_the_device():
    a = filled("float32", (2, 3))
    assert repr(a) == numpy_repr(a, sample("float32", (2, 3)))[: -len(")")] + ", device='cpu')"


def test_repr_summarises_large_arrays_as_numpy_does():
    a = amso.MemArray((200, 300), np.float32)
    a.read_numpy_array(np.arange(60000, dtype=np.float32).reshape(200, 300))
    expected = numpy_repr(a, np.asarray(a).copy())
    values = expected[: expected.rindex("]") + 1]
    assert "..." in values and repr(a).startswith(values)
    assert re.fullmatch(r",\s+shape=\(200, 300\), dtype=float32, device='cpu'\)", repr(a)[len(values):])
    with np.printoptions(threshold=5, precision=2, linewidth=40):
        b = filled("float64", (10,))
        values = numpy_repr(b, sample("float64", (10,)))
        assert repr(b).startswith(values[: values.rindex("]") + 1]) and "..." in repr(b)


def test_repr_of_empty_arrays_names_the_shape_as_numpy_does():
    assert repr(amso.MemArray((0, 4), np.uint8)) == "MemArray2DUint8([], shape=(0, 4), dtype=uint8, device='cpu')"
    assert repr(amso.MemArray(0, np.float32)) == "MemArray1DFloat32([], dtype=float32, device='cpu')"


def test_repr_of_a_locked_array_has_no_values():
    a = filled("float32", (2, 3))
    with a.get_dlpack():
        assert repr(a) == "MemArray2DFloat32(shape=(2, 3), dtype=float32, device='cpu', locked=True)"
    assert repr(a).startswith("MemArray2DFloat32([[")


def test_repr_of_a_subclass_uses_its_name():
    subclass = type("Positions", (type(amso.MemArray((2, 2), np.float32)),), {})
    assert repr(subclass((1, 2))) == "Positions([[0., 0.]], dtype=float32, device='cpu')"


# --- .device and move_memory's names ---


def test_device_is_a_name_move_memory_takes():
    a = filled("float64", (3,))
    assert a.device == "cpu" and isinstance(a.device, str)
    for target in ("cpu", amso.dlpack.kDLCPU, 1):
        a.move_memory(target)  # a no-op on the host
        assert a.device == "cpu" and not a.on_device
    a.move_memory("cpu", device_id=0)
    same(np.asarray(a), sample("float64", (3,)))


@pytest.mark.parametrize("name", ["gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cuda:0:0", "cpu:0", ""])
def test_unknown_device_names_list_the_accepted_forms(name):
    a = amso.MemArray(3, np.float64)
    with pytest.raises(ValueError, match=re.escape(f"unknown device {name!r}; accepted: 'cpu', 'cuda', 'cuda:N'")):
        a.move_memory(name)


def test_device_arguments_that_conflict_or_are_no_device():
    a = amso.MemArray(3, np.float64)
    with pytest.raises(ValueError, match="'cuda:1' names device 1, but device_id=2 was given"):
        a.move_memory("cuda:1", device_id=2)
    with pytest.raises(ValueError, match="kDLCPU has device id 0 only, got 1"):
        a.move_memory("cpu", device_id=1)
    for junk in (None, 1.5, b"cpu"):
        with pytest.raises(TypeError, match="device_type must be 'cpu', 'cuda', 'cuda:N'"):
            a.move_memory(junk)
    assert a.device == "cpu"


@pytest.mark.skipif(GPU, reason="needs a machine without a CUDA driver")
def test_cuda_names_without_a_driver_say_so():
    a = amso.MemArray(3, np.float64)
    for name in ("cuda", "cuda:0"):
        with pytest.raises(RuntimeError, match="no CUDA driver found"):
            a.move_memory(name)
    assert a.device == "cpu"


# --- help() ---


def test_help_lists_the_methods():
    text = pydoc.plain(pydoc.render_doc(amso.MemArray))
    for method in ("move_memory", "to_numpy", "read_numpy_array", "get_dlpack", "device", "__getitem__"):
        assert method in text, method
    assert issubclass(amso.MemArray, amso.MemArrayBase)
    a = amso.MemArray((2, 2), np.float32)
    assert type(a) is amso.class_for((2, 2), np.float32) and type(a) is not amso.MemArray
    assert isinstance(a, amso.MemArray) and not isinstance(np.zeros(2), amso.MemArray)
    assert issubclass(type(a), amso.MemArray) and not issubclass(np.ndarray, amso.MemArray)


# --- on the GPU ---


@gpu
def test_device_names_move_the_data():
    a = filled("float32", (2, 3))
    a.move_memory("cuda")
    assert a.device == "cuda:0" and a.on_device
    a.move_memory("cuda:0")  # there already
    assert a.device == "cuda:0"
    a.move_memory("cpu")
    assert a.device == "cpu"
    same(np.asarray(a), sample("float32", (2, 3)))
    a.move_memory("cuda:0", device_id=0)
    assert a.device == "cuda:0" and a.__dlpack_device__() == (amso.dlpack.kDLCUDA, 0)


@gpu
def test_device_arrays_refuse_rows_slices_and_comparisons_clearly():
    a = filled("float32", (2, 3))
    a.move_memory("cuda")
    for attempt in (lambda: a[0], lambda: a[:, 1], lambda: a[...]):
        with pytest.raises(TypeError, match=r"CUDA device memory: index a host copy \(a.to_numpy\(\)\[...\]\)"):
            attempt()
    with pytest.raises(TypeError, match=re.escape("a.move_memory('cpu')")):
        a[0] = 1.0
    with pytest.raises(TypeError, match="cupy.from_dlpack"):
        a == a
    assert a[1, 2] == float(sample("float32", (2, 3))[1, 2])  # one element still reads
    b = filled("float32", (7,))
    b.move_memory("cuda")
    with pytest.raises(TypeError, match="to_numpy"):
        b[1:3]
    assert b[3] == float(sample("float32", (7,))[3])


@gpu
def test_repr_of_device_and_managed_arrays_has_no_values():
    a = filled("float32", (2, 3))
    a.move_memory("cuda")
    assert repr(a) == "MemArray2DFloat32(shape=(2, 3), dtype=float32, device='cuda:0')"
    managed = amso.MemArray((2, 3), np.float32, managed=True)
    assert managed.device == "cuda:0"
    assert repr(managed) == "MemArray2DFloat32(shape=(2, 3), dtype=float32, device='cuda:0', managed=True)"
    pinned = amso.MemArray(3, np.float32, pinned=True)
    assert pinned.device == "cpu"
    assert repr(pinned) == "MemArray1DFloat32([0., 0., 0.], dtype=float32, device='cpu', pinned=True)"


@gpu
def test_a_row_lives_across_a_move_to_the_device():
    a = filled("float64", (3, 4))
    row = a[1]
    a.move_memory("cuda")  # not pinned by the row
    assert a.device == "cuda:0"
    same(row, sample("float64", (3, 4))[1])  # the host copy as it was
    a.move_memory("cpu")
    same(a[1], sample("float64", (3, 4))[1])


@gpu
def test_raw_byte_views_pin_the_data_as_buffers_do():
    a = filled("bfloat16", (7,))
    view = a[1:3]  # NumPy views bfloat16 as raw bytes: a buffer export
    with pytest.raises(BufferError, match="1 live buffer export"):
        a.move_memory("cuda")
    del view
    assert repr(a).startswith("MemArray1DBfloat16([")  # the repr's view is gone once it returns
    a.move_memory("cuda")
    assert a.device == "cuda:0"


def test_low_precision_rows_are_the_dtypes_numpy_names():
    for name in sorted(LOW_PRECISION & {n for n, d in RANKED}):
        shape = SHAPE[max(d for n, d in RANKED if n == name)]
        assert filled(name, shape)[0].dtype == np_dtype(name)
