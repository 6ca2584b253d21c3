"""NumPy habits on amso arrays (issue 38): rows and basic slicing as NumPy views, assignment
through them, elementwise ==, a repr with values, `.device` and device names in `move_memory`,
and `help(amso.MemArray)`. NumPy is the reference: an equal NumPy array built independently
(`sample`) given the same key or the same operation, NumPy's own exception types, and NumPy's
own repr of the same values."""

from __future__ import annotations

import gc
import operator
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


# --- conversions, membership, byte order, overflow (issue 56) ---

CONVERSIONS = [bool, float, int, complex, operator.index]
SHAPES = [(1,), (1, 1), (3,), (3, 4), (0,), (2, 0)]


def numpy_says(convert, x):
    """What NumPy gives for `convert(x)`: ('value', v) or (exception type, message)."""
    try:
        return "value", convert(x)
    except (TypeError, ValueError) as error:
        return type(error), str(error)


@pytest.mark.parametrize("convert", CONVERSIONS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", ["float32", "int64", "uint8", "complex128", "bool"])
def test_conversions_to_python_scalars_are_numpys(name, shape, convert):
    """bool/float/int/complex/operator.index of an amso array give what NumPy gives for the same
    array under the installed NumPy: the value, or NumPy's exception type and message (with
    NumPy's `a.any()` advice naming np.asarray, which amso arrays leave to NumPy)."""
    x = sample(name, shape, 3) if 0 not in shape else np.zeros(shape, np_dtype(name))
    a = amso.asarray(x)
    kind, expected = numpy_says(convert, x)
    if kind == "value":
        assert convert(a) == expected and type(convert(a)) is type(expected)
    else:
        with pytest.raises(kind) as error:
            convert(a)
        assert str(error.value) == expected.replace("Use a.any() or a.all()",
                                                    "Use np.asarray(a).any() or np.asarray(a).all() "
                                                    "(on the GPU: cupy.from_dlpack(a).any())")


def test_a_byte_array_holding_digits_is_no_number():
    """CPython reads any buffer exporter as text in float() and int() when its class defines no
    __float__/__int__: b"3.5" must not become 3.5."""
    u = amso.asarray(np.frombuffer(b"3.5", np.uint8))
    assert numpy_says(float, u) == numpy_says(float, np.frombuffer(b"3.5", np.uint8))
    assert numpy_says(int, u) == numpy_says(int, np.frombuffer(b"3.5", np.uint8))
    if numpy_says(float, u)[0] == "value":  # a NumPy that converts size-1 arrays: never the text
        assert float(u) != 3.5


def test_truth_of_zero_and_one_element_arrays_is_the_elements():
    assert bool(amso.asarray(np.zeros(1, np.float32))) is False
    assert bool(amso.asarray(np.ones((1, 1), np.float32))) is True
    with pytest.raises(ValueError, match=re.escape("np.asarray(a).any()")):
        bool(amso.asarray(np.zeros((3, 4), np.float32)))


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4)], ids=str)
def test_membership_is_numpys_at_every_rank(shape):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    a = amso.asarray(x)
    for value in (3.0, 5, -1.0, 1e9, float("nan")):
        assert (value in a) == (value in x)


def test_a_non_native_byte_order_is_refused_as_asarray_refuses_it():
    for spelling in (">f4", ">i8", np.dtype(">c16")):
        with pytest.raises(ValueError, match=r"big-endian; amso arrays hold the machine's byte order: pass '"):
            amso.MemArray(3, spelling)
        with pytest.raises(ValueError, match="big-endian"):
            amso.asarray(np.zeros(3, spelling))
    assert amso.MemArray(3, "<f4").dtype == "float32" and amso.MemArray(3, "=i8").dtype == "int64"
    with pytest.raises(ValueError, match="big-endian"):  # a subarray's element too (a vector's lanes)
        amso.MemArray(3, np.dtype((">f4", (4,))))


@pytest.mark.parametrize("name, value", [("float32", 1e40), ("float16", 1e6), ("complex64", complex(1e40, 1)),
                                         ("float16", 100000)])
def test_an_overflowing_float_write_warns_as_numpy_does(name, value):
    x = np.zeros(2, np_dtype(name))
    with pytest.warns(RuntimeWarning, match="overflow encountered in cast") as numpys:
        x[0] = value
    a = amso.MemArray(2, name)
    with pytest.warns(RuntimeWarning, match="overflow encountered in cast") as amsos:
        a[0] = value
    assert len(amsos) == len(numpys) == 1
    same(a, x)
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("error")
        a[1] = 3.0  # in range: no warning
        a[1] = float("inf")  # already infinite: NumPy does not warn either
        x[1] = float("inf")
    same(a, x)


def test_get_dlpack_takes_the_device_names_move_memory_takes():
    a = filled("float32", (2, 3))
    with a.get_dlpack("cpu") as context:
        same(np.from_dlpack(context), sample("float32", (2, 3)))
    with a.get_dlpack(amso.dlpack.kDLCPU) as context:
        assert context.lock_id != 0
    with pytest.raises(ValueError, match="unknown device 'gpu'; accepted: 'cpu', 'cuda', 'cuda:N'"):
        a.get_dlpack("gpu")


# --- arithmetic and ufuncs through NumPy (issue 56) ---

BINARY = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod, operator.pow,
          divmod]
UNARY = [operator.neg, operator.pos, abs]


def _pair(name="float32", shape=(3, 4)):
    x = sample(name, shape, 5)
    return amso.asarray(x.copy()), x


@pytest.mark.parametrize("operation", BINARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("other", [2, 1.5, "array"], ids=str)
def test_binary_operators_return_numpys_result(operation, other):
    a, x = _pair()
    other = np.full(4, 3, np.float32) if other == "array" else other
    with np.errstate(all="ignore"):
        for got, expected in ((operation(a, other), operation(x, other)), (operation(other, a), operation(other, x))):
            for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
                assert type(g) is np.ndarray
                np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("operation", UNARY, ids=lambda f: f.__name__)
def test_unary_operators_return_numpys_result(operation):
    a, x = _pair()
    np.testing.assert_array_equal(operation(a), operation(x))
    integers, ints = _pair("int32")
    np.testing.assert_array_equal(~integers, ~ints)
    np.testing.assert_array_equal(integers & 6, ints & 6)
    np.testing.assert_array_equal(integers << 1, ints << 1)


def test_in_place_operators_write_amsos_memory_and_keep_the_array():
    a, x = _pair()
    before = a
    a += 1
    a *= 2
    x += 1
    x *= 2
    assert a is before and isinstance(a, amso.MemArray)
    same(a, x)
    assert np.add(a, 1, out=a) is a
    same(a, x + 1)
    out = amso.MemArray((3, 4), "float32")
    assert np.multiply(a, 2, out=out) is out
    same(out, (x + 1) * 2)
    q, r = amso.MemArray((3, 4), "float32"), np.empty((3, 4), np.float32)
    got = np.divmod(a, 3, out=(q, r))
    assert got[0] is q and got[1] is r
    same(q, (x + 1) // 3)
    got = np.divmod(a, 3, out=(q, None))  # a None slot keeps the array NumPy made for it
    assert got[0] is q and type(got[1]) is np.ndarray
    np.testing.assert_array_equal(got[1], (x + 1) % 3)
    whole, fraction = np.modf(a, out=(out, out))  # one array as two outputs: borrowed once
    assert whole is out and fraction is out


def test_ufuncs_take_amso_arrays_as_numpy_arrays():
    a, x = _pair()
    np.testing.assert_array_equal(np.sin(a), np.sin(x))
    np.testing.assert_array_equal(np.add.reduce(a, axis=1), np.add.reduce(x, axis=1))
    np.testing.assert_array_equal(np.maximum(a, x[::-1]), np.maximum(x, x[::-1]))
    np.add.at(a, (0, 0), 10)
    assert a[0, 0] == x[0, 0] + 10


def test_in_place_arithmetic_follows_the_write_rules():
    readonly = amso.MemArray(3, "float32", readonly=True)
    with pytest.raises(ValueError, match="read-only"):
        readonly += 1
    a, x = _pair()
    with pytest.raises(ValueError, match="read-only"):
        np.add.at(readonly, [0], 1)  # `at` writes its first operand in place
    with a.get_dlpack():
        with pytest.raises(Exception, match="lock"):
            a += 1
        with pytest.raises(Exception, match="lock"):
            np.add.at(a, (0, 0), 1)
    same(a, x)  # nothing written by a refused operation
    assert (a == x).all()  # comparisons stay amso's elementwise ones


# --- NumPy's methods: answered by NumPy, or an AttributeError naming np.asarray(a) (issue 56) ---

FROM_NUMPY = [
    ("T", lambda x: x.T), ("mT", lambda x: x.mT), ("strides", lambda x: x.strides), ("tolist", lambda x: x.tolist()),
    ("item", lambda x: x.item(5)), ("astype", lambda x: x.astype(np.int16)), ("reshape", lambda x: x.reshape(4, 3)),
    ("ravel", lambda x: x.ravel()), ("flatten", lambda x: x.flatten()), ("sum", lambda x: x.sum()),
    ("sum-axis", lambda x: x.sum(axis=0)), ("mean", lambda x: x.mean()), ("min", lambda x: x.min(axis=1)),
    ("max", lambda x: x.max()), ("any", lambda x: x.any()), ("all", lambda x: x.all(axis=0)),
    ("prod", lambda x: x.prod()), ("std", lambda x: x.std()), ("var", lambda x: x.var()),
    ("argmin", lambda x: x.argmin()), ("argmax", lambda x: x.argmax(axis=1)), ("cumsum", lambda x: x.cumsum()),
    ("cumprod", lambda x: x.cumprod(axis=0)), ("clip", lambda x: x.clip(2, 5)), ("round", lambda x: x.round(1)),
    ("flags-writeable", lambda x: x.flags.writeable), ("flags-c", lambda x: x.flags.c_contiguous),
]


@pytest.mark.parametrize("name, use", FROM_NUMPY, ids=[n for n, _ in FROM_NUMPY])
def test_numpys_methods_give_numpys_results(name, use):
    a, x = _pair()
    got, expected = use(a), use(x)
    if isinstance(expected, np.ndarray):
        assert type(got) is np.ndarray
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == expected.dtype
    else:
        assert got == expected and type(got) is type(expected)


def test_views_among_them_share_the_memory():
    a, _ = _pair()
    assert np.shares_memory(a.T, np.asarray(a)) and np.shares_memory(a.reshape(12), np.asarray(a))
    a.T[0, 1] = 42  # a NumPy view of the same memory, as NumPy's `T` is
    assert a[1, 0] == 42


def test_attribute_probes_of_a_locked_array_stay_attribute_errors():
    a, _ = _pair()
    with a.get_dlpack():
        for name in ("T", "strides", "flags", "sum"):
            assert not hasattr(a, name) and getattr(a, name, None) is None
        with pytest.raises(AttributeError, match="view of the data is refused") as error:
            a.sum  # noqa: B018
        assert error.value.__cause__ is not None
    assert hasattr(a, "sum")


def test_vector_arrays_leave_numpys_attributes_to_the_lanes_view():
    v = amso.MemArray(3, "float32x4")
    assert v.shape == (3,) and not hasattr(v, "strides") and not hasattr(v, "T")
    with pytest.raises(AttributeError, match=re.escape("np.asarray(a).sum() (a NumPy view of the host data, whose "
                                                       "vectors are a last axis of lanes)")):
        v.sum()


def test_fill_writes_under_the_write_rules():
    a, x = _pair()
    a.fill(3)
    same(a, np.full_like(x, 3))
    for wrong in (lambda: a.fill(1, 2), lambda: a.fill(value=1), lambda: a.fill()):
        with pytest.raises(TypeError, match=r"fill\(\) takes one value"):
            wrong()
    with pytest.raises(ValueError, match="read-only"):
        amso.MemArray(3, "float32", readonly=True).fill(1)
    with a.get_dlpack():
        with pytest.raises(Exception, match="lock"):
            a.fill(0)
    same(a, np.full_like(x, 3))


@pytest.mark.parametrize("name", ["sort", "argsort", "transpose", "searchsorted", "dot", "view", "nonzero"])
def test_other_numpy_methods_name_the_numpy_way(name):
    a, _ = _pair()
    with pytest.raises(AttributeError, match=re.escape(f"has no attribute '{name}'; amso leaves it to NumPy: "
                                                       f"np.asarray(a).{name}()")):
        getattr(a, name)
    assert not hasattr(a, name)
    with pytest.raises(AttributeError, match=r"has no attribute 'no_such_thing'$"):
        a.no_such_thing  # noqa: B018
    assert not hasattr(a, "__array_priority__")  # protocol probes stay plain AttributeErrors


# --- NumPy's constructors (issue 56) ---

CONSTRUCTORS = [
    ("zeros", lambda m: m.zeros((2, 3), "float32"), np.zeros((2, 3), np.float32)),
    ("zeros-default-dtype", lambda m: m.zeros(4), np.zeros(4)),
    ("ones", lambda m: m.ones((2, 3), np.int32), np.ones((2, 3), np.int32)),
    ("ones-default-dtype", lambda m: m.ones(3), np.ones(3)),
    ("full", lambda m: m.full((2, 2), 7, "int64"), np.full((2, 2), 7, np.int64)),
    ("full-dtype-from-value", lambda m: m.full(3, 2.5), np.full(3, 2.5)),
    ("full-cast", lambda m: m.full(3, 300, "uint16"), np.full(3, 300, np.uint16)),
    ("zeros_like", lambda m: m.zeros_like(np.ones((2, 5), np.float32)), np.zeros((2, 5), np.float32)),
    ("ones_like", lambda m: m.ones_like(np.zeros((3,), np.complex64)), np.ones(3, np.complex64)),
    ("full_like", lambda m: m.full_like(np.zeros((2, 2), np.int16), 9), np.full((2, 2), 9, np.int16)),
    ("full_like-dtype", lambda m: m.full_like(np.zeros(2, np.int16), 1.5, dtype=np.float64), np.full(2, 1.5)),
    ("like-shape", lambda m: m.zeros_like(np.zeros(2, np.int8), shape=(3, 1)), np.zeros((3, 1), np.int8)),
]


@pytest.mark.parametrize("case, make, expected", CONSTRUCTORS, ids=[c[0] for c in CONSTRUCTORS])
def test_numpys_constructors_make_amso_arrays_of_numpys_values(case, make, expected):
    a = make(amso)
    assert isinstance(a, amso.MemArray) and not a.on_device
    same(a, make(np) if case != "like-shape" else expected)
    same(a, expected)


def test_like_constructors_follow_an_amso_prototype():
    prototype = filled("float32", (2, 3))
    for made in (amso.zeros_like(prototype), amso.ones_like(prototype), amso.full_like(prototype, 4),
                 amso.empty_like(prototype)):
        assert type(made) is type(prototype) and made.shape == (2, 3) and made.device == prototype.device
    same(amso.full_like(prototype, 4), np.full((2, 3), 4, np.float32))
    with pytest.raises(TypeError, match="read-only"):
        amso.full(3, 1.0, readonly=True)
    assert amso.zeros(3, readonly=True).readonly


# --- on the GPU ---


@gpu
def test_device_arrays_convert_one_element_and_say_numpys_error_otherwise():
    one = filled("float32", (1, 1))
    one.move_memory("cuda")
    x = sample("float32", (1, 1))
    assert bool(one) == bool(x) and numpy_says(float, one) == numpy_says(float, x)
    many = filled("float32", (3, 4))
    many.move_memory("cuda")
    with pytest.raises(ValueError, match=re.escape("cupy.from_dlpack(a).any()")):
        bool(many)
    with pytest.raises(TypeError, match=re.escape("value in a.to_numpy()")):
        3.0 in many
    row = filled("float32", (7,))
    row.move_memory("cuda")
    x = sample("float32", (7,))
    assert float(x[3]) in row and 1e9 not in row  # a 1-D device array's elements, read one by one
    with one.get_dlpack("cuda:0"):
        assert one.on_device


@gpu
def test_device_arithmetic_names_the_gpu_libraries():
    a = filled("float32", (2, 3))
    a.move_memory("cuda")
    for attempt in (lambda: a + 1, lambda: -a, lambda: np.sin(a)):
        with pytest.raises(TypeError, match=re.escape("cupy.from_dlpack(a), torch.from_dlpack(a)")):
            attempt()
    with pytest.raises(TypeError, match="cupy.from_dlpack"):
        a += 1
    assert a.on_device and a[0, 0] == float(sample("float32", (2, 3))[0, 0])


@gpu
def test_constructors_on_the_device():
    a = amso.full((2, 3), 5, "float32", on_device=True)
    assert a.on_device
    same(a.to_numpy(), np.full((2, 3), 5, np.float32))
    like = amso.ones_like(a)
    assert like.on_device and like.device == a.device
    same(like.to_numpy(), np.ones((2, 3), np.float32))
    assert not amso.zeros_like(a, on_device=False).on_device


@gpu
def test_device_arrays_answer_numpys_names_with_an_attribute_error_naming_the_gpu():
    a = filled("float32", (2, 3))
    a.move_memory("cuda")
    for name in ("sum", "T", "fill", "sort"):
        assert not hasattr(a, name)
        with pytest.raises(AttributeError, match=re.escape(f"cupy.from_dlpack(a).{name}")):
            getattr(a, name)


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
