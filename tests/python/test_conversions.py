"""Issue 39's conversions, misaligned arrays and linear algebra views (benchmarks/peers'
`conversions.rs`): `ArrayLike` arguments against rust-numpy's `PyArrayLike` (its
tests/array_like.rs, ported) and NumPy; misaligned views read and written for each element
size; nested-Vec constructors, cast and resize of owned arrays; results over memory a Rust
value owns. (nalgebra and faer: test_linalg.py.)"""

from __future__ import annotations

import functools
import gc
import operator
import re
import warnings

import amso
import numpy as np
import pytest

peers = pytest.importorskip("amso_peers")


def both(name, value):
    """amso's and rust-numpy's answer for `value` (shape, elements), or their exception types."""
    answers = []
    for function in (getattr(peers, name), getattr(peers, "numpy_" + name)):
        try:
            shape, values, _ = function(value)
            answers.append((list(shape), list(values)))
        except Exception as error:  # noqa: BLE001 - the type is what is compared
            answers.append(type(error))
    return answers


# --- ArrayLike, ported from rust-numpy's tests/array_like.rs ---


def test_an_array_of_the_type_is_read_in_place():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    shape, values, converted = peers.like_f64(x)
    assert (shape, values, converted) == ([2, 2], [1.0, 2.0, 3.0, 4.0], False)


@pytest.mark.parametrize(
    "value",
    [
        [[1.0, 2.0], [3.0, 4.0]],
        [np.array([1.0, 2.0]), [3.0, 4.0]],
        [[[1, 2], [3, 4]], [[5, 6], [7, 8]]],
        2.5,
        (1, 2, 3),
    ],
    ids=["list", "array-in-list", "3-d-ints", "scalar", "tuple"],
)
def test_lists_and_scalars_are_converted_as_rust_numpy_converts_them(value):
    ours, theirs = both("like_f64", value)
    assert ours == theirs
    reference = np.asarray(value, dtype=np.float64)
    assert ours == (list(reference.shape), reference.ravel().tolist())
    assert peers.like_f64(value)[2] is True


FLAT = [
    ("like_i32", "int32", [1, 2, 3]), ("like_i32", "int32", (4, -5)), ("like_i32", "int32", []),
    ("like_i32", "int32", [2**31 - 1, -(2**31)]), ("like_i32", "int32", [2**40]), ("like_i32", "int32", [2**70]),
    ("like_i32", "int32", [1.5, 2]), ("like_i32", "int32", [True, 2]), ("like_i32", "int32", [np.int64(3), 4]),
    ("like_i32", "int32", [1, "2"]), ("like_u8", "uint8", [0, 255]), ("like_u8", "uint8", [-1]),
    ("like_u8", "uint8", [256]), ("like_bool", "bool", [True, False]), ("like_bool", "bool", [1, True]),
    ("like_bool", "bool", [0, 1]), ("like_f32", "float32", [1.0, 0.1, -2.5]), ("like_f32", "float32", [1.0, 1e300]),
    ("like_f32", "float32", [1e-300, 0.0]), ("like_f32", "float32", [1, 2.5]), ("like_f32", "float32", [float("nan")]),
    ("like_f64", "float64", [0.1, float("inf")]), ("like_f64", "float64", [2**70, 1.0]),
    ("like_f64", "float64", [[1.0], [2.0]]),
]


class _Int(int):
    pass


FLAT += [("like_i32", "int32", [_Int(7)]), ("like_i32", "int32", type("L", (list,), {})([1, 2]))]


@pytest.mark.parametrize("name, dtype, value", FLAT, ids=[f"{n}-{v!r}"[:60] for n, _, v in FLAT])
def test_flat_sequences_convert_as_numpy_asarray(name, dtype, value):
    """Flat lists and tuples of exact ints, floats and bools are read element by element; every
    other value goes to NumPy: either way, the answer, warnings and errors are NumPy's."""
    with warnings.catch_warnings(record=True) as theirs_warned:
        warnings.simplefilter("always")
        try:
            reference = np.asarray(value, dtype=dtype)
            expected = (list(reference.shape), reference.ravel().tolist())
        except Exception as error:  # noqa: BLE001 - compared by type below
            expected = type(error)
    with warnings.catch_warnings(record=True) as ours_warned:
        warnings.simplefilter("always")
        try:
            shape, values, converted = getattr(peers, name)(value)
            ours = (list(shape), list(values))
            assert converted is True
        except Exception as error:  # noqa: BLE001 - compared by type below
            ours = type(error) if not isinstance(expected, type) else type(error.__cause__ or error)
    if isinstance(expected, tuple):
        np.testing.assert_equal(ours, expected)
    else:
        assert ours is expected
    assert [w.category for w in ours_warned] == [w.category for w in theirs_warned]


def test_a_1d_list_of_ints():
    assert both("like_i32", [1, 2, 3, 4]) == [([4], [1, 2, 3, 4])] * 2


def test_trailing_singleton_dimensions_are_kept():
    shape, _, converted = peers.like_f64_coerce(np.array([[1], [2], [3]], dtype="int32"))
    assert (shape, converted) == ([3, 1], True)


def test_an_unsafe_cast_of_an_array_fails_unless_allowed():
    floats = np.array([1.1, 2.2, 3.3, 4.4])
    ours, theirs = both("like_i32", floats)
    assert ours is TypeError and theirs is TypeError
    with pytest.raises(TypeError, match=r"expected an int32 array with 1 dimension, got a float64 array"):
        peers.like_i32(floats)
    assert both("like_i32_coerce", floats) == [([4], [1, 2, 3, 4])] * 2


@pytest.mark.parametrize("shape", [(4,), (2, 2)])
def test_arrays_of_another_float_type_fail_without_coercion(shape):
    floats = np.arange(1.0, 5.0).reshape(shape)
    name = "like_f32_2d" if len(shape) == 2 else None
    if name:
        assert both(name, floats) == [TypeError, TypeError]
        assert both(name, floats.astype(np.float32)) == [([2, 2], [1.0, 2.0, 3.0, 4.0])] * 2
    assert peers.like_f64(floats)[2] is False


def test_conversion_errors_say_what_arrived_and_what_was_expected():
    with pytest.raises(TypeError, match=r"expected a float32 array with 2 dimensions, got list that converts to 1"):
        peers.like_f32_2d([1.0, 2.0])


@pytest.mark.parametrize("value, dtype", [
    ([[1.0, 2.0], [3.0]], np.float64),  # ragged: NumPy's ValueError
    ("not a number", np.float64),  # NumPy's ValueError
    ([1.0, object()], np.float64),  # NumPy's TypeError
    ([1, 2, 1 << 40], np.int32),  # NumPy 2's OverflowError
], ids=["ragged", "text", "object", "overflow"])
def test_conversion_errors_are_numpys_own_as_rust_numpy_raises_them(value, dtype):
    """What numpy.asarray(x, dtype=T) cannot convert raises NumPy's own exception, of its type and
    with its message, as rust-numpy's `PyArrayLike<T, AllowTypeChange>` does (which passes the
    dtype too); amso adds the argument's name, as it does to every argument error, and a note of
    what it expected. Without AllowTypeChange amso converts values the same way."""
    with pytest.raises(Exception) as numpy_error:
        np.asarray(value, dtype=dtype)
    kind, message = type(numpy_error.value), str(numpy_error.value)
    name = "like_i32" if dtype == np.int32 else "like_f64"
    assert both(name + "_coerce", value) == [kind, kind]
    for function in (name, name + "_coerce"):
        with pytest.raises(kind) as raised:
            getattr(peers, function)(value)
        assert str(raised.value) == f"argument 'x': {message}"
        expected = f"amso: expected {'an int32' if dtype == np.int32 else 'a float64'} array"
        assert any(note.startswith(expected) for note in raised.value.__notes__), raised.value.__notes__


def test_other_frameworks_arrays_of_the_type_are_read_in_place():
    buffer = bytearray(np.arange(4.0).tobytes())
    view = memoryview(buffer).cast("d")
    assert peers.like_f64(view) == ([4], [0.0, 1.0, 2.0, 3.0], False)
    # Of another type: refused without AllowTypeChange, converted with it.
    ints = memoryview(bytearray(np.arange(4, dtype=np.int64).tobytes())).cast("q")
    with pytest.raises(TypeError, match=r"^argument 'x': expected a float64 array, got an int64 array with 1 dimension \(memoryview"):
        peers.like_f64(ints)
    assert peers.like_f64_coerce(ints) == ([4], [0.0, 1.0, 2.0, 3.0], True)


def test_array_likes_of_python_objects():
    """`ArrayLike<Py<PyAny>, 1>` takes what rust-numpy's `PyArrayLike1<Py<PyAny>>` takes: a list
    or tuple of any objects (the same objects, not copies), a ragged list as a list of lists,
    and an object array in place. Equal-length nested lists follow NumPy's conversion (two
    dimensions, refused for one), where rust-numpy keeps each inner list as an object."""
    marker = object()
    items = [marker, 1, "two", None]
    got, converted = peers.like_objects(items)
    assert converted and got == peers.numpy_like_objects(items) and got[0] is marker
    got, converted = peers.like_objects(np.array(items, dtype=object))
    assert not converted and got[0] is marker
    assert peers.like_objects((1, 2.5)) == ([1, 2.5], True)
    assert peers.like_objects([[1, 2], [3]])[0] == peers.numpy_like_objects([[1, 2], [3]]) == [[1, 2], [3]]
    with pytest.raises(TypeError, match="got list that converts to 2 dimensions"):
        peers.like_objects([[1, 2], [3, 4]])
    assert peers.numpy_like_objects([[1, 2], [3, 4]]) == [[1, 2], [3, 4]]
    for other, named in [(np.zeros(3), "a float64 array"), (np.array([b"a"], dtype="S1"), "an S1 array")]:
        with pytest.raises(TypeError, match=f"expected a NumPy object array with 1 dimension, got {named}"):
            peers.like_objects(other)
        with pytest.raises(TypeError):
            peers.numpy_like_objects(other)


def test_an_array_like_of_another_datetime_unit_is_converted_by_numpy():
    """datetime64[ms] and datetime64[s] share their DLPack fields (int64): an
    `ArrayLike<Datetime<Seconds>, 1, AllowTypeChange>` converts the milliseconds with NumPy's
    cast, and reads seconds in place."""
    millis = np.array([1500, 4000], dtype="datetime64[ms]")
    array, converted = peers.like_seconds(millis)
    assert converted and array.dtype == np.dtype("datetime64[s]")
    np.testing.assert_array_equal(array, millis.astype("datetime64[s]"))
    seconds = np.array([1, 4], dtype="datetime64[s]")
    array, converted = peers.like_seconds(seconds)
    assert not converted and array is seconds


# --- misaligned arrays ---

SIZES = {1: np.uint8, 2: np.uint16, 4: np.float32, 8: np.float64, 16: np.complex128}


def misaligned(dtype, count=7, offset=1):
    """A NumPy array of `count` elements at an odd byte offset (misaligned unless 1 byte)."""
    itemsize = np.dtype(dtype).itemsize
    buffer = bytearray(offset + count * itemsize + 64)
    # An aligned base, then the offset: the data address is base + 1, never aligned for itemsize > 1.
    base = np.frombuffer(buffer, dtype=np.uint8)
    skip = (-base.__array_interface__["data"][0]) % 64 + offset
    array = np.frombuffer(buffer, dtype=dtype, count=count, offset=skip)
    array[...] = (np.arange(count) * 3 + 1).astype(dtype)
    if np.dtype(dtype).kind == "c":
        array.imag = -np.arange(count)
    return array


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("slice_access", [False, True], ids=["as_array", "as_slice"])
def test_misaligned_arrays_are_read(size, slice_access):
    x = misaligned(SIZES[size])
    if size > 1:
        assert x.__array_interface__["data"][0] % x.dtype.alignment != 0
        assert not x.flags.aligned
    copy = peers.copy_any(x, slice_access)
    assert copy.dtype == x.dtype
    np.testing.assert_array_equal(copy, x)


@pytest.mark.parametrize("size", SIZES)
def test_misaligned_strided_and_reversed_views_are_read(size):
    x = misaligned(SIZES[size], count=12).reshape(3, 4)[::-1, ::2]
    np.testing.assert_array_equal(peers.copy_any(x), x)


@pytest.mark.parametrize("size", SIZES)
def test_misaligned_arrays_are_written_back(size):
    x = misaligned(SIZES[size], count=12).reshape(3, 4)
    expected = x.ravel()[::-1].reshape(3, 4).copy()
    peers.reverse_any(x)
    np.testing.assert_array_equal(x, expected)
    # A strided misaligned view: only its own elements change.
    y = misaligned(SIZES[size], count=12)
    untouched = y[1::2].copy()
    view = y[::2]
    expected = view[::-1].copy()
    peers.reverse_any(view)
    np.testing.assert_array_equal(y[::2], expected)
    np.testing.assert_array_equal(y[1::2], untouched)


def test_a_misaligned_array_is_viewed_through_a_c_order_copy():
    x = misaligned(np.float64, count=12).reshape(3, 4).T
    shape, strides, contiguous = peers.layout_f64(x)
    assert (shape, strides, contiguous) == ([4, 3], [3, 1], True)
    aligned = np.arange(12.0).reshape(3, 4).T
    assert peers.layout_f64(aligned) == ([4, 3], [1, 4], False)


@pytest.mark.parametrize("offset", [0, 1, 3], ids=["aligned", "offset 1", "offset 3"])
def test_indexers_read_misaligned_arrays_in_place(offset):
    x = misaligned(np.float64, count=1000, offset=offset)
    x[...] = np.linspace(-3.0, 5.0, 1000)
    assert (x.__array_interface__["data"][0] % 8 == 0) == (offset == 0)
    # The same elements in the same order as a sequential sum in Python (bit for bit).
    assert peers.indexer_sum(x) == functools.reduce(operator.add, x.tolist(), 0.0)
    assert peers.indexer_sum(x) == pytest.approx(float(np.sum(x)), rel=1e-12)
    # Empty, and the sum of a view NumPy made by slicing.
    assert peers.indexer_sum(x[:0]) == 0.0
    assert peers.indexer_sum(x[10:20]) == pytest.approx(float(np.sum(x[10:20])), rel=1e-12)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned"])
def test_an_indexer_reads_the_arrays_own_memory_during_the_call(offset):
    x = misaligned(np.float64, count=5, offset=offset)
    assert peers.python_write_then_indexer(x, 42.5) == 42.5  # no copy was made at extraction


def test_a_misaligned_indexer_reads_the_copy_a_view_wrote():
    x = misaligned(np.float64, count=12).reshape(3, 4)
    assert peers.slice_write_then_indexer(x, -9.5) == -9.5
    assert x[0, 0] == -9.5  # written back when the argument dropped


def test_a_misaligned_copy_that_was_only_read_is_not_written_back():
    x = misaligned(np.float64, count=6)
    expected_total = float(x.sum())
    assert peers.view_then_python_write(x, 99.0) == expected_total
    assert x[0] == 99.0, "the caller's write during the call stays"
    aligned = np.arange(6.0)
    peers.view_then_python_write(aligned, 99.0)
    assert aligned[0] == 99.0


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned"])
def test_a_cast_sees_the_calls_own_writes(offset):
    x = misaligned(np.float64, count=4, offset=offset)
    assert peers.write_then_cast(x, -1.0) == [-1.0] + x[1:].astype(np.float32).tolist()


def test_a_misaligned_write_through_indexer_mut_goes_in_place():
    x = misaligned(np.float64, count=12).reshape(3, 4)
    expected = x.copy()
    expected[2, 1] = -7.5
    # Read back through the caller's array during the call: only an in-place write shows.
    assert peers.indexer_write_seen(x, [2, 1], -7.5) == -7.5
    np.testing.assert_array_equal(x, expected)
    with pytest.raises(IndexError):
        peers.indexer_write_seen(x, [3, 0], 1.0)
    np.testing.assert_array_equal(x, expected)


def test_a_misaligned_indexer_after_a_view_reads_the_same_elements():
    x = misaligned(np.float64, count=12).reshape(3, 4)
    viewed, indexed = peers.indexer_after_view(x)
    assert viewed == indexed == x.ravel().tolist()
    # A strided misaligned view has no in-place C order: its indexer reads the C-order copy.
    viewed, indexed = peers.indexer_after_view(x[:, ::2])
    assert viewed == indexed == x[:, ::2].ravel().tolist()
    # An aligned strided view has neither: the indexer refuses it, as `as_slice()` does.
    with pytest.raises(ValueError, match=r"indexer\(\)"):
        peers.indexer_after_view(np.arange(12.0).reshape(3, 4)[:, ::2])


def test_a_misaligned_read_only_array_is_refused_as_writable():
    x = misaligned(np.float64)
    x.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        peers.reverse_any(x)
    np.testing.assert_array_equal(peers.copy_any(x), x)


# --- owned arrays: nested Vecs, cast, resize ---


def test_from_vec2_and_from_vec3():
    rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    np.testing.assert_array_equal(peers.from_vec2(rows), np.array(rows))
    planes = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    out = peers.from_vec3(planes)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, np.array(planes))
    with pytest.raises(ValueError, match=r"row 1 has 1"):
        peers.from_vec2([[1.0, 2.0], [3.0]])
    with pytest.raises(ValueError, match=r"row \[1\]\[0\] has 1"):
        peers.from_vec3([[[1, 2]], [[3]]])


@pytest.mark.parametrize("rows", [[[1.5, 2.0], [3.0, -4.0], [5.0, 6.0]], [[7.0]], []], ids=["3x2", "1x1", "empty"])
def test_from_vec2_matches_rust_numpys(rows):
    out, theirs = peers.from_vec2(rows), peers.numpy_from_vec2(rows)
    assert out.shape == theirs.shape and out.dtype == theirs.dtype == np.float64
    np.testing.assert_array_equal(out, theirs)
    # NewArray's: NumPy allocated it and owns it, as rust-numpy's; writable.
    assert out.base is None and out.flags.owndata and out.flags.writeable
    # MemArray's: the NumPy array holds amso's buffer (its base).
    owned = peers.memarray_from_vec2(rows)
    np.testing.assert_array_equal(owned, theirs)
    assert owned.base is not None and owned.flags.writeable
    owned[...] = 0.0
    gc.collect()
    assert not owned.any()


def _like(framework):
    if framework == "numpy":
        return np.zeros(1)
    if framework == "amso":
        return amso.asarray(np.zeros(1))
    torch = pytest.importorskip("torch")
    return torch.zeros(1, dtype=torch.float64)


@pytest.mark.parametrize("framework", ["numpy", "amso", "torch"])
def test_new_arrays_from_nested_lists_and_resized_come_in_the_callers_framework(framework):
    like = _like(framework)
    rows = [[1.5, 2.0, 3.0], [3.0, -4.0, 0.25]]
    out = peers.from_vec2_like(like, rows)
    assert type(out).__module__.split(".")[0] == type(like).__module__.split(".")[0], type(out)
    np.testing.assert_array_equal(np.asarray(out), np.array(rows))
    planes = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    np.testing.assert_array_equal(np.asarray(peers.from_vec3_like(like, planes)), np.array(planes))
    for to in ([4, 5], [1, 2], [0, 3]):
        reference = np.array(rows)
        reference.resize(to, refcheck=False)  # NumPy's: C order kept, new elements zero
        resized = peers.resized_like(like, rows, to)
        assert tuple(resized.shape) == tuple(to)
        np.testing.assert_array_equal(np.asarray(resized), reference)
    with pytest.raises(ValueError, match=r"row 1 has 1"):
        peers.from_vec2_like(like, [[1.0, 2.0], [3.0]])
    with pytest.raises(ValueError, match=r"row \[1\]\[0\] has 1"):
        peers.from_vec3_like(like, [[[1, 2]], [[3]]])
    # A dimension beyond i64 is too large, never clamped into one NumPy's size rule passes.
    with pytest.raises(ValueError, match=r"too big: shape \[18446744073709551615, 0\]"):
        peers.resized_like(like, rows, [2**64 - 1, 0])


@pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
def test_a_device_new_array_is_not_resized():
    cupy = pytest.importorskip("cupy")
    like = cupy.zeros(1)
    with pytest.raises(ValueError, match="resize needs a host array"):
        peers.zeros_resized_like(like, [2, 2], [4, 4])


@pytest.mark.parametrize("shapes", [([10, 10], [100, 100]), ([4, 6], [3, 2]), ([2, 2], [0, 5])],
                         ids=["grow", "shrink", "to empty"])
def test_resize_of_zeros_matches_rust_numpys(shapes):
    shape, to = shapes
    out, theirs = peers.amso_zeros_resized(shape, to), peers.numpy_zeros_resized(shape, to)
    owned = peers.memarray_zeros_resized(shape, to)  # MemArray::resize, then handed to NumPy
    assert out.shape == owned.shape == theirs.shape == tuple(to)
    np.testing.assert_array_equal(out, theirs)
    np.testing.assert_array_equal(owned, theirs)
    assert out.base is None and out.flags.owndata, "NumPy resized its own array (PyArray_Resize)"


def test_cast_matches_numpy_astype_in_range():
    x = np.array([[1.9, -2.5], [0.0, 300.75]])
    out = peers.cast_to_i32(x)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, x.astype(np.int32))
    with pytest.raises(OverflowError):
        peers.cast_to_i32(np.array([[1e12]]))


@pytest.mark.parametrize("shape", [(3, 3), (2, 2), (1, 6), (0, 4)])
def test_resize_matches_numpy_resize(shape):
    x = np.arange(1.0, 7.0).reshape(2, 3)
    reference = x.copy()
    reference.resize(shape, refcheck=False)
    out = peers.resized(x, list(shape))
    assert out.shape == shape
    np.testing.assert_array_equal(out, reference)


# --- results over memory a Rust value owns ---


def test_a_result_over_a_rust_values_memory_keeps_it_alive():
    gc.collect()
    dropped = peers.dropped_particles()
    positions = peers.owned_positions(4)
    reference = np.array([[i, i + 0.5, -i] for i in range(4)], dtype=np.float64)
    np.testing.assert_array_equal(positions, reference)
    assert positions.flags.writeable
    positions[0, 0] = 9.0
    column = peers.owned_positions(4, column=1)
    np.testing.assert_array_equal(column, reference[:, 1])
    assert column.strides == (24,)
    assert peers.dropped_particles() == dropped
    del positions, column
    gc.collect()
    assert peers.dropped_particles() == dropped + 2


@pytest.mark.parametrize("holder", [peers.Holder, peers.NumpyHolder], ids=["ClassView", "rust-numpy"])
def test_a_getter_shows_a_frozen_class_array_without_a_copy(holder):
    h = holder(3, 4)
    values = h.values
    np.testing.assert_array_equal(values, np.arange(12.0).reshape(3, 4) / 2)
    assert values.base is h, "the array holds the object itself"
    assert h.values.ctypes.data == values.ctypes.data, "both getters show the same memory"
    if holder is peers.Holder:
        assert not values.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            values[0, 0] = 1.0
        column = h.column(1)
        assert column.strides == (32,) and column.tolist() == [0.5, 2.5, 4.5]
    del h
    gc.collect()
    np.testing.assert_array_equal(values, np.arange(12.0).reshape(3, 4) / 2)  # the object lives on


def test_a_read_only_result_refuses_writes():
    positions = peers.owned_positions(2, readonly=True)
    assert not positions.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        positions[0, 0] = 1.0


UNTYPED = {
    "c-order": lambda: np.arange(24.0).reshape(2, 3, 4),
    "fortran": lambda: np.asfortranarray(np.arange(24, dtype=np.int16).reshape(2, 3, 4)),
    "strided": lambda: np.arange(48.0, dtype=np.float32).reshape(6, 8)[::2, 1::3],
    "reversed": lambda: np.arange(12).reshape(3, 4)[::-1],
    "one-row": lambda: np.arange(5.0)[None, :],
    "empty": lambda: np.zeros((0, 3)),
}


@pytest.mark.parametrize("layout", UNTYPED)
def test_untyped_arguments_give_strides_and_contiguity_as_numpy_and_rust_numpy(layout):
    x = UNTYPED[layout]()
    theirs = peers.numpy_untyped_layout(x)
    ours = peers.untyped_layout(x)
    assert ours == theirs, (ours, theirs)
    assert list(ours[0]) == list(x.strides) and ours[1] == x.flags.c_contiguous and ours[2] == x.flags.f_contiguous


def test_untyped_strides_of_producers_without_numpy():
    import amso

    # An amso array (read through the DLPack exchange API) and a buffer (the buffer protocol):
    # byte strides worked out by hand.
    assert peers.untyped_layout(amso.MemArray((2, 3), "int16")) == ([6, 2], True, False, True)
    assert peers.untyped_layout(memoryview(bytearray(64)).cast("d", (2, 4))) == ([32, 8], True, False, True)


def _particles():
    import amso

    records = np.asarray(amso.MemArray((3,), "particle")).copy()
    records["id"] = [7, 8, 9]
    return records


KINDS = {
    "object": (lambda: np.array([None, "a", 3], dtype=object), "object", "None"),
    "object-strided": (lambda: np.array([1, None, 2.5, "b"], dtype=object)[::2], "object", "1"),
    "bytes": (lambda: np.array([b"ab", b"abc"], dtype="S3"), "S3", "ab"),
    "bytes-of-another-width": (lambda: np.array([b"abcd"], dtype="S4"), "S4", None),
    "unicode": (lambda: np.array(["h\u00e9", "x"], dtype="U2"), "U2", "h\u00e9"),
    "datetime": (lambda: np.array(["1970-01-02", "2000-01-01"], dtype="datetime64[s]"), "datetime64[s]", "86400"),
    "timedelta": (lambda: np.array([5], dtype="timedelta64[ms]"), "timedelta64[ms]", None),
    "record": (_particles, "record", "7"),
    "record-2d": (lambda: _particles().reshape(3, 1), "record", "7"),
    "float64": (lambda: np.array([[1.5, 2.0]]), None, "1.5"),
}


@pytest.mark.parametrize("name", KINDS)
def test_untyped_arguments_take_every_kind_numpy_has_and_dispatch_to_its_typed_view(name):
    """rust-numpy's `PyUntypedArray` takes any NumPy array; amso's `UntypedArray` too, naming the
    kinds DLPack lacks (`kind()`), with the same strides and contiguity as rust-numpy's, and
    `is::<T>()` / `into_typed()` reaching the typed view of each (the first element as text)."""
    make, kind, first = KINDS[name]
    x = make()
    dtype, found_kind, shape, strides, text = peers.untyped_kind(x)
    assert found_kind == kind
    assert dtype == (None if kind else x.dtype.name)
    assert (list(shape), list(strides)) == (list(x.shape), list(x.strides))
    assert text == first
    assert peers.untyped_layout(x) == peers.numpy_untyped_layout(x)


@pytest.mark.parametrize("make", [lambda: np.zeros(2, np.longdouble), lambda: np.zeros(2, "V8")], ids=["longdouble", "void"])
def test_untyped_arguments_refuse_what_typed_arguments_refuse(make):
    with pytest.raises(TypeError, match="has no DLPack type"):
        peers.untyped_kind(make())


def test_an_untyped_vector_is_its_typed_view():
    """A float32 array with a trailing axis of 4 is a float32x4 array to `is` as to `into_typed`."""
    lanes = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert peers.untyped_vectors(lanes) == (True, [3], [0.0, 1.0, 2.0, 3.0])
    assert peers.untyped_vectors(lanes[:, :3].copy())[0] is False


def test_an_untyped_argument_of_another_kind_is_refused_by_into_typed():
    assert peers.untyped_as_objects(np.array([None, 1], dtype=object)) == 2
    for x, got in [(np.zeros(3), "float64"), (np.array([b"a"], dtype="S1"), "S1"),
                   (np.array([1], dtype="datetime64[D]"), r"datetime64\[D\]")]:
        with pytest.raises(TypeError, match=rf"expected a NumPy object array.* got .*{got}"):
            peers.untyped_as_objects(x)


def _misaligned_int64(values):
    """An int64 NumPy array one byte off its alignment (read by amso through an aligned copy)."""
    raw = np.zeros(len(values) * 8 + 1, np.uint8)
    x = np.frombuffer(raw.data, np.int64, count=len(values), offset=1)
    x.flags.writeable = True
    x[:] = values
    assert x.ctypes.data % 8 != 0
    return x


CASTS = {
    "c-order": lambda: np.array([300, -1, 255, 256, 7, -129]),
    "strided-2d": lambda: np.arange(-300, 300, 10).reshape(6, -1)[::2, 1::3],
    "reversed": lambda: np.arange(250, 262)[::-1],
    "fortran": lambda: np.asfortranarray(np.arange(24).reshape(4, 6) * 50),
    "empty": lambda: np.zeros((0, 3), np.int64),
    "misaligned": lambda: _misaligned_int64([300, 511, -2]),
}


@pytest.mark.parametrize("layout", CASTS)
def test_cast_matches_numpy_astype_and_rust_numpys_cast_array(layout):
    """rust-numpy's `cast_array` (NumPy's `PyArray_CastToType`) and amso's `cast` give NumPy's
    `astype` with unsafe casting: 300 becomes 44 in uint8, -1 becomes 255; a new C-order array."""
    x = CASTS[layout]()
    expected = x.astype(np.uint8)
    for found in (peers.amso_cast_u8(x), peers.numpy_cast_u8(x)):
        assert isinstance(found, np.ndarray) and found.dtype == np.uint8 and found.flags.c_contiguous
        np.testing.assert_array_equal(found, expected)
    assert amso._amso._live_borrows() == 0


def test_cast_takes_every_producer_of_host_data():
    x = np.array([[300, -1], [7, 1 << 40]])
    expected = x.astype(np.uint8)
    for producer in (amso.asarray(x), memoryview(x), amso.asarray(x)[:, ::-1]):
        found = peers.amso_cast_u8(producer)
        assert isinstance(found, np.ndarray)
        np.testing.assert_array_equal(found, np.asarray(producer).astype(np.uint8))
    # A misaligned buffer: amso reads it through an aligned copy, which the cast views.
    raw = bytearray(x.size * 8 + 1)
    raw[1:] = x.tobytes()
    misaligned = memoryview(raw)[1:].cast("B").cast("q", list(x.shape))
    np.testing.assert_array_equal(peers.amso_cast_u8(misaligned), expected)
    assert amso._amso._live_borrows() == 0


def test_cast_rules_that_allow_a_cast_let_it_through():
    """Rules that allow: int64 to float64 under same_kind and unsafe, float64 to float64 under
    every rule (amso_cast_f64_by), against NumPy's can_cast."""
    x = np.array([1.5, -2.0])
    for rule in ("no", "equiv", "safe", "same_kind", "unsafe"):
        assert np.can_cast(x.dtype, np.float64, casting=rule)
        assert peers.amso_cast_f64_by(x, rule) == ([2], [1.5, -2.0])
    ints = np.array([3, 1 << 60])
    for rule, allowed in (("no", False), ("equiv", False), ("safe", True), ("same_kind", True), ("unsafe", True)):
        assert np.can_cast(ints.dtype, np.float64, casting=rule) is allowed
        if allowed:
            assert peers.amso_cast_f64_from_i64_by(ints, rule) == ([2], ints.astype(np.float64).tolist())
        else:
            with pytest.raises(TypeError, match=f"according to the rule '{rule}'$"):
                peers.amso_cast_f64_from_i64_by(ints, rule)


def test_a_refused_cast_of_a_0d_argument_says_scalar_as_numpy_does():
    x = np.float64(2.5) * np.ones(())
    with pytest.raises(TypeError) as numpy_error:
        x.astype(np.int32, casting="safe")
    with pytest.raises(TypeError, match=f"^{re.escape(str(numpy_error.value))}$"):
        peers.amso_cast_i32_by(x, "safe")


@pytest.mark.parametrize("rule", ["no", "equiv", "safe", "same_kind"])
def test_cast_by_a_rule_refuses_as_numpys_astype_does(rule):
    x = np.array([1.5, -2.7, 3e9])
    with pytest.raises(TypeError) as numpy_error:
        x.astype(np.int32, casting=rule)
    with pytest.raises(TypeError, match=f"^{re.escape(str(numpy_error.value))}$"):
        peers.amso_cast_i32_by(x, rule)
    # 3e9 has no int32: NumPy's cast warns, through amso as through astype.
    with pytest.warns(RuntimeWarning, match="invalid value encountered in cast"):
        shape, values = peers.amso_cast_i32_by(x, "unsafe")
    with pytest.warns(RuntimeWarning, match="invalid value encountered in cast"):
        expected = x.astype(np.int32).tolist()
    assert (shape, values) == ([3], expected)


def test_a_cast_of_vectors_is_refused_before_numpy_broadcasts_it():
    """NumPy's cast would broadcast float32 lanes into float32x4's trailing axis instead of
    converting them: refused, naming what to cast instead."""
    with pytest.raises(TypeError, match=r"cast\(\) converts scalars, and float32 to float32x4 is a cast of vectors"):
        peers.amso_cast_to_vectors(np.zeros((3, 4), np.float32))


def test_cast_between_kinds_numpy_alone_has():
    x = np.array(["1970-01-01T00:00:00", "1970-01-02T23:59:59", "2000-03-01T12:00:00"], dtype="datetime64[s]")
    assert peers.amso_cast_days(x) == x.astype("datetime64[D]").astype(np.int64).tolist()


@pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
def test_cast_of_device_data_names_its_frameworks_cast():
    d = amso.MemArray(4, "int64", on_device=True)
    with pytest.raises(ValueError, match=r"cast\(\) converts host data, and this argument is on cuda:0"):
        peers.amso_cast_u8(d)


def test_only_immutable_types_are_remembered_as_speaking_no_protocol():
    """Lists are classified once (they can never gain a protocol); a class of one's own that
    gains __dlpack__ after a first call is read through it on the next."""
    assert peers.like_f64([1, 2]) == ([2], [1.0, 2.0], True)
    assert peers.like_f64([3]) == ([1], [3.0], True)

    class Late:
        pass

    late = Late()
    with pytest.raises(TypeError, match="numpy.asarray"):
        peers.like_f64(late)
    source = np.arange(3.0)
    Late.__dlpack__ = lambda self, **kwargs: source.__dlpack__(**kwargs)
    Late.__dlpack_device__ = lambda self: source.__dlpack_device__()
    assert peers.like_f64(late) == ([3], [0.0, 1.0, 2.0], False)
