"""The element kinds beyond plain numbers (issue 39): object arrays, datetime64/timedelta64 with
units, fixed-width byte and unicode strings, isize/usize, and a derived element type naming its
NumPy dtype. Each amso function (benchmarks/peers, module amso_peers, src/kinds.rs) is checked
against rust-numpy's version of it in the same process and against NumPy itself."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import weakref

import numpy as np
import pytest

peers = pytest.importorskip("amso_peers")


class Thing:
    """An object with a weak reference, to see who holds it."""


def test_head_matches_rust_numpy():
    for x in [np.array([1, "two", None], dtype=object), np.array([Thing()], dtype=object)]:
        assert peers.amso_head(x) is peers.numpy_head(x) is x[0]
    x = np.array([[1, 2], [3, 4]], dtype=object)[:, ::-1].ravel()  # a strided copy's view
    assert peers.amso_head(x) == peers.numpy_head(x) == 2
    for empty in [np.array([], dtype=object)]:
        with pytest.raises(IndexError):
            peers.amso_head(empty)
        with pytest.raises(IndexError):
            peers.numpy_head(empty)


def test_object_references_are_counted():
    thing = Thing()
    alive = weakref.ref(thing)
    x = np.array([thing, thing, 1], dtype=object)
    before = sys.getrefcount(thing)
    for _ in range(200):
        assert peers.amso_head(x) is thing
        peers.amso_swap_objects(x)
    assert sys.getrefcount(thing) == before
    echoed = peers.amso_echo(x)  # a Rust Vec<Py<PyAny>> owned by NumPy's array
    assert type(echoed) is np.ndarray and echoed.dtype == object and list(echoed) == list(x)
    assert sys.getrefcount(thing) == before + 2
    echoed[0] = None  # NumPy writes into Rust's vector: the vector's drop releases what it holds
    del echoed
    gc.collect()
    assert sys.getrefcount(thing) == before
    del x, thing
    gc.collect()
    assert alive() is None


def test_object_results_match_rust_numpy():
    ours, theirs = peers.amso_objects(), peers.numpy_objects()
    assert type(ours) is np.ndarray and ours.dtype == theirs.dtype == object
    assert list(ours) == list(theirs) == [None, 1, "two"]
    reprs = peers.amso_reprs(np.array([[1, "a"], [None, 2.5]], dtype=object))
    assert reprs.shape == (2, 2) and reprs.tolist() == [["1", "'a'"], ["None", "2.5"]]


def test_object_arrays_are_refused_elsewhere():
    with pytest.raises(TypeError, match=r"expected a float64 array with 1 dimension, got an object array"):
        peers.amso_floats(np.array([1.0, 2.0], dtype=object))
    with pytest.raises(TypeError, match=r"expected a NumPy object array, got a float64 array"):
        peers.amso_head(np.array([1.0]))
    with pytest.raises(TypeError, match=r"expected a NumPy object array, got an int64 array"):
        peers.amso_head(memoryview(np.arange(3)))
    with pytest.raises(ValueError, match=r"object arrays go to NumPy only"):
        peers.amso_objects_to("amso")
    with pytest.raises(ValueError, match=r"read-only"):
        x = np.array([1, 2], dtype=object)
        x.flags.writeable = False
        peers.amso_swap_objects(x)


def test_object_array_with_null_entries_is_refused():
    x = np.array([None, None], dtype=object)
    ctypes.memset(x.ctypes.data, 0, x.nbytes)  # what C code leaves in an unfilled object array
    with pytest.raises(ValueError, match=r"NULL entries"):
        peers.amso_head(x)


def test_rust_numpy_reads_null_entries_unchecked_where_amso_refuses():
    """What amso's NULL check buys: rust-numpy's `head` reads the NULL entry as a reference and
    the interpreter dies (run in a child process); amso's raises."""
    script = (
        "import ctypes, numpy as np, amso_peers as p\n"
        "x = np.array([None, None], dtype=object)\n"
        "ctypes.memset(x.ctypes.data, 0, x.nbytes)\n"
        "p.numpy_head(x)\n"
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode < 0, f"rust-numpy's head returned ({child.returncode}): {child.stderr[-500:]!r}"
    x = np.array([None, None], dtype=object)
    ctypes.memset(x.ctypes.data, 0, x.nbytes)
    with pytest.raises(ValueError, match=r"NULL entries"):
        peers.amso_head(x)


def _null_at(x, index):
    """Set entry `index` of object array `x` to NULL in place (no reference is dropped: the
    entry held None, which is immortal)."""
    x[index] = None
    offset = sum(i * s for i, s in zip(index, x.strides))
    ctypes.c_void_p.from_address(x.ctypes.data + offset).value = None


@pytest.mark.parametrize("layout", ["c", "fortran", "strided", "reversed"])
def test_object_array_null_entry_anywhere_is_refused(layout):
    """Each entry is checked at its own address, in every layout, not only the first."""
    base = np.array([[1, "a", 2.5, None]] * 4, dtype=object)
    x = {"c": base, "fortran": np.asfortranarray(base), "strided": base[:, ::2], "reversed": base[::-1, ::-1]}[layout]
    x = x.copy(order="K") if layout in ("c", "fortran") else x
    peers.amso_reprs(x)  # filled: read
    _null_at(x, (x.shape[0] - 1, x.shape[1] - 1))
    with pytest.raises(ValueError, match=r"NULL entries"):
        peers.amso_reprs(x)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 24, 33])
def test_a_null_at_any_index_of_a_contiguous_object_array_is_refused(n):
    """The contiguous scan reads several entries per instruction: a NULL in the first, the
    last, or any lane in between is found, at every length (vector tails included)."""
    for index in range(n):
        x = np.array([object()] * n, dtype=object)
        assert peers.amso_head(x) is x[0]
        _null_at(x, (index,))
        with pytest.raises(ValueError, match=r"NULL entries"):
            peers.amso_head(x)


def test_object_array_null_outside_the_view_is_not_read():
    base = np.array([1, None, 2, None], dtype=object)
    view = base[::2]
    _null_at(base, (1,))
    _null_at(base, (3,))
    assert peers.amso_reprs(view).tolist() == ["1", "2"]


def test_add_minutes_to_seconds_matches_rust_numpy():
    seconds = np.array([0, 1, -5, 10**9], dtype="timedelta64[s]")
    minutes = np.array([1, 2, 3, -4], dtype="timedelta64[m]")
    ours, theirs = seconds.copy(), seconds.copy()
    peers.amso_add_minutes_to_seconds(ours, minutes)
    peers.numpy_add_minutes_to_seconds(theirs, minutes)
    expected = seconds + minutes  # NumPy's own unit arithmetic
    assert ours.dtype == np.dtype("timedelta64[s]")
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize(
    "seconds, minutes, got",
    [
        (np.zeros(2, "timedelta64[m]"), np.zeros(2, "timedelta64[m]"), "timedelta64[m]"),
        (np.zeros(2, "datetime64[s]"), np.zeros(2, "timedelta64[m]"), "datetime64[s]"),
        (np.zeros(2, "int64"), np.zeros(2, "timedelta64[m]"), "int64"),
        (np.zeros(2, "timedelta64"), np.zeros(2, "timedelta64[m]"), "timedelta64"),
    ],
)
def test_wrong_unit_is_a_type_error(seconds, minutes, got):
    with pytest.raises(TypeError) as error:
        peers.amso_add_minutes_to_seconds(seconds, minutes)
    message = str(error.value)
    assert "expected a writable NumPy timedelta64[s] array with 1 dimension" in message
    assert f"got {'an' if got[0] in 'aeio' else 'a'} {got} array" in message


UNITS = ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as", "", "5s", "25us"]


@pytest.mark.parametrize("kind", ["datetime64", "timedelta64"])
@pytest.mark.parametrize("unit", UNITS)
def test_each_date_unit_is_named_as_numpy_names_it(kind, unit):
    """The unit read from the descriptor's metadata names the kind exactly as `dtype.name` does
    (every unit, the generic one, multipliers), and only timedelta64[s] is taken."""
    dtype = np.dtype(f"{kind}[{unit}]" if unit else kind)
    x = np.zeros(2, dtype)
    if dtype == np.dtype("timedelta64[s]"):
        peers.amso_add_minutes_to_seconds(x, np.ones(2, "timedelta64[m]"))
        assert x.tolist() == [np.timedelta64(60, "s")] * 2
        return
    with pytest.raises(TypeError) as error:
        peers.amso_add_minutes_to_seconds(x, np.ones(2, "timedelta64[m]"))
    assert f" {dtype.name} array with 1 dimension" in str(error.value)


def test_datetime_results_keep_their_unit():
    x = np.array(["2024-02-28T12:00:00", "NaT"], dtype="datetime64[s]")
    later = peers.amso_next_day(x)
    assert later.dtype == np.dtype("datetime64[s]")
    assert later[0] == x[0] + np.timedelta64(1, "D")
    with pytest.raises(TypeError, match=r"got a datetime64\[ms\] array"):
        peers.amso_next_day(x.astype("datetime64[ms]"))


def test_byte_strings_match_rust_numpy():
    x = np.array([b"ab", b"abcd", b"", b"\x00x"], dtype="S4")
    assert peers.amso_bytes(x) == peers.numpy_bytes(x)
    assert [bytes(b) for b in peers.amso_bytes(x)] == [b"ab", b"abcd", b"", b"\x00x"]
    assert [bytes(b) for b in peers.amso_bytes(x)] == x.tolist()
    with pytest.raises(TypeError, match=r"expected a NumPy S4 array with 1 dimension, got an S3 array"):
        peers.amso_bytes(np.array([b"ab"], dtype="S3"))
    with pytest.raises(TypeError, match=r"got a U4 array"):
        peers.amso_bytes(np.array(["ab"], dtype="U4"))


def test_unicode_strings_in_and_out():
    x = np.array(["abc", "x!", "é"], dtype="U3")
    upper = peers.amso_upper(x)
    assert upper.dtype == np.dtype("U3")
    assert upper.tolist() == ["ABC", "X!", "é"]
    assert peers.amso_upper(x[::-1]).tolist() == ["é", "X!", "ABC"]
    with pytest.raises(TypeError, match=r"expected a NumPy U3 array with 1 dimension, got a U4 array"):
        peers.amso_upper(np.array(["abcd"]))
    with pytest.raises(ValueError, match=r"big-endian"):
        peers.amso_upper(np.array(["abc"], dtype=">U3"))


def test_isize_and_usize():
    x = np.arange(-3, 10)
    # NumPy's intp is int64 here: rust-numpy and amso both take int64 arrays as isize.
    assert peers.amso_isize_sum(x) == peers.numpy_isize_sum(x) == int(x.sum())
    assert peers.amso_isize_sum(x.astype(np.intp)) == int(x.sum())
    with pytest.raises(TypeError, match=r"expected an int64 array with 1 dimension, got an int32 array"):
        peers.amso_isize_sum(x.astype(np.int32))
    r = peers.amso_usize_range(4)
    assert r.dtype == np.uintp == np.uint64 and r.tolist() == [0, 1, 2, 3]


def test_owned_datetime_and_string_results_match_rust_numpys():
    """The benchmark's owned results (bench_rust.py): the same NumPy arrays from both crates."""
    for ours, theirs, dtype in ((peers.amso_days(), peers.numpy_days(), "datetime64[s]"),
                                (peers.amso_words(), peers.numpy_words(), "S4")):
        assert ours.dtype == theirs.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(ours, theirs)
    assert peers.amso_days()[1] == np.datetime64("1970-01-02T00:00:00")
    assert peers.amso_words()[12] == b"w012"


def test_derived_element_matches_its_numpy_dtype():
    x = np.array([1, -5, 7], dtype="timedelta64[ms]")
    doubled = peers.amso_double_millis(x)
    assert doubled.dtype == np.dtype("timedelta64[ms]")
    np.testing.assert_array_equal(doubled, 2 * x)
    for other in ["timedelta64[s]", "int64"]:
        with pytest.raises(TypeError, match=r"expected a NumPy millis \(timedelta64\[ms\]\) array"):
            peers.amso_double_millis(x.astype(other))
