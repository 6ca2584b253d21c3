"""rust-numpy's examples and its own tests, ported to amso and run in one process with
rust-numpy (module amso_peers: benchmarks/peers/src/ported.rs, port_tests.rs, kinds.rs).

Examples: `examples/simple/tests/test_ext.py` runs unchanged against both builds of each
function (`SIMPLE`); `examples/parallel`'s `rows_dot` likewise. `examples/linalg` is not ported:
ndarray-linalg needs a system LAPACK (OpenBLAS), which this build has not, and amso has no
solver dependency to port `inv` onto.

rust-numpy's tests (numpy 0.30: tests/array.rs, borrow.rs, to_py.rs), each to its port here;
"n/a" where amso has no such API, "Conversions" where the conversions work of the same release
brings it (docs/rust.md, "Conversions"; tests/array_like.rs is ported there too):

array.rs
  new_c_order, zeros, tuple_as_dim ........... test_zeros_are_c_order
  new_fortran_order .......................... test_fortran_order_arrays_keep_their_layout
                                               (NewArray is C order only; an F-order ndarray)
  rank_zero_array_has_invalid_strides_dims ... test_zero_dimensional_arrays
  arange ..................................... test_arange
  as_array, as_raw_array ..................... test_as_array_reports_shape_strides_and_address
                                               (no raw views: data_address() and strides())
  as_slice ................................... test_as_slice_needs_c_order_and_alignment
  is_instance, casting_works,
  casting_respects_element_type,
  casting_respects_dimensionality ............ test_extraction_checks_dtype_and_dimensions
  cast_exact_checks_dtype_and_shape .......... test_extraction_checks_dtype_and_dimensions
                                               (NumPy subclasses are taken; no exact variant)
  handle_negative_strides .................... test_negative_strides
  dtype_via_python_attribute ................. test_untyped_arguments_report_the_dtype
  unbind_works ............................... test_results_outlive_the_call
  copy_to_works .............................. test_copy_to
  get_works .................................. test_get
  permute_and_transpose ...................... test_permute_and_transpose (on ndarray views)
  reshape .................................... test_reshape_in_fortran_order (on ndarray views)
  half_f16_works, half_bf16_works ............ test_half_precision_in_place
  ascii_strings_with_explicit_dtype_works,
  unicode_strings_with_explicit_dtype_works .. test_fixed_width_strings_read_and_write
  ascii_strings_ignore_byteorder,
  unicode_strings_respect_byteorder .......... test_string_byte_orders
  from_vec2, from_vec2_ragged, from_vec3,
  from_vec3_ragged, array_cast,
  borrow_from_array_works .................... Conversions
borrow.rs
  distinct_borrows ........................... test_distinct_arrays_may_both_be_written
  multiple_shared_borrows,
  shared_borrows_can_be_cloned ............... test_shared_borrows_of_one_array
  exclusive_and_shared_borrows,
  shared_and_exclusive_borrows,
  multiple_exclusive_borrows ................. test_a_writer_excludes_every_other_borrow
                                               (a BufferError, where rust-numpy panics)
  exclusive_borrow_requires_writeable ........ test_writing_needs_a_writable_array
  borrows_span_frames ........................ test_borrows_span_frames
  borrows_span_threads ....................... test_borrows_span_threads
  overlapping_views_conflict,
  conflict_due_to_overlapping_views,
  conflict_due_to_reborrow_of_overlapping_v .. test_overlapping_views_conflict
  non_overlapping_views_do_not_conflict,
  interleaved_views_do_not_conflict .......... test_disjoint_and_interleaved_views_do_not_conflict
  extract_readonly, extract_readwrite ........ test_extract_readonly_and_readwrite
  readonly_as_array_slice_get,
  readwrite_as_array_slice ................... test_as_array_slice_get
  resize_using_exclusive_borrow,
  can_make_python_array_nonwriteable,
  matrix_from_numpy (nalgebra) ............... test_linalg.py: test_matrix_from_numpy_ported
to_py.rs
  to_pyarray_vec, to_pyarray_boxed_slice,
  into_pyarray_vec, into_pyarray_boxed_slice . test_vecs_and_boxed_slices (no ToPyArray:
                                               copy with to_vec() first)
  to_pyarray_array, into_pyarray_array ....... test_ndarrays_keep_shape_and_strides
  iter_to_pyarray, long_iter_to_pyarray ...... test_iterators (collect, then hand over)
  from_small_array ........................... test_integer_extremes
  usize_dtype ................................ test_usize_is_uint64
  into_pyarray_cannot_resize ................. test_owned_results_cannot_resize
  into_pyarray_can_write ..................... test_owned_results_are_writable
  collapsed_into_pyarray ..................... test_collapsed_arrays
  sliced_to_pyarray .......................... test_sliced_views (to_owned keeps the view's
                                               memory order: negative strides, not C order)
  forder_to_pyarray, forder_into_pyarray ..... test_fortran_order_results
  to_pyarray_object_vec,
  to_pyarray_object_array .................... test_object_results_hold_the_same_objects
  slice_container_type_confusion ............. test_object_then_number_results
  matrix_to_numpy (nalgebra) ................. test_linalg.py: test_matrix_to_numpy_ported

74 rust-numpy tests: 64 ported here (of which as_raw_array, cast_exact, new_fortran_order,
sliced_to_pyarray and the panicking borrow tests assert amso's documented difference), the
2 nalgebra tests in test_linalg.py, 8 left to the Conversions work (from_vec2/3 x4,
array_cast, borrow_from_array, resize, make_nonwriteable; plus tests/array_like.rs there).
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

peers = pytest.importorskip("amso_peers")

# --- rust-numpy's examples: examples/simple/tests/test_ext.py against both builds ---

SIMPLE = {
    "rust-numpy": dict(
        head=peers.numpy_head,
        axpy=peers.numpy_simple_axpy,
        mult=peers.numpy_simple_mult,
        conj=peers.numpy_conj,
        extract=peers.numpy_extract,
        add_minutes_to_seconds=peers.numpy_add_minutes_to_seconds,
        polymorphic_add=peers.numpy_polymorphic_add,
        rows_dot=peers.numpy_rows_dot,
    ),
    "amso": dict(
        head=peers.amso_head,
        axpy=peers.amso_axpy,
        mult=peers.amso_mult,
        conj=peers.amso_conj,
        extract=peers.amso_extract,
        add_minutes_to_seconds=peers.amso_add_minutes_to_seconds,
        polymorphic_add=peers.amso_polymorphic_add,
        rows_dot=peers.amso_rows_dot,
    ),
}


@pytest.fixture(params=list(SIMPLE))
def ext(request):
    """One build of rust-numpy's example functions, as a namespace."""
    return type("Ext", (), {k: staticmethod(f) for k, f in SIMPLE[request.param].items()})


def test_head(ext):
    x = np.array(["first", None, 42])
    first = ext.head(x)
    assert first == "first"


def test_axpy(ext):
    x = np.array([1.0, 2.0, 3.0])
    y = np.array([3.0, 3.0, 3.0])
    z = ext.axpy(3.0, x, y)
    np.testing.assert_array_almost_equal(z, np.array([6.0, 9.0, 12.0]))


def test_mult(ext):
    x = np.array([1.0, 2.0, 3.0])
    ext.mult(3.0, x)
    np.testing.assert_array_almost_equal(x, np.array([3.0, 6.0, 9.0]))


def test_conj(ext):
    x = np.array([1.0 + 2j, 2.0 + 3j, 3.0 + 4j])
    np.testing.assert_array_almost_equal(ext.conj(x), np.conj(x))


def test_extract(ext):
    x = np.arange(5.0)
    d = {"x": x}
    np.testing.assert_almost_equal(ext.extract(d), 10.0)


def test_add_minutes_to_seconds(ext):
    x = np.array([10, 20, 30], dtype="timedelta64[s]")
    y = np.array([1, 2, 3], dtype="timedelta64[m]")

    ext.add_minutes_to_seconds(x, y)

    assert np.all(x == np.array([70, 140, 210], dtype="timedelta64[s]"))


def test_polymorphic_add(ext):
    x = np.array([1.0, 2.0, 3.0], dtype=np.double)
    y = np.array([3.0, 3.0, 3.0], dtype=np.double)
    z = ext.polymorphic_add(x, y)
    np.testing.assert_array_almost_equal(z, np.array([4.0, 5.0, 6.0], dtype=np.double))

    x = np.array([1, 2, 3], dtype=np.int64)
    y = np.array([3, 3, 3], dtype=np.int64)
    z = ext.polymorphic_add(x, y)
    assert np.all(z == np.array([4, 5, 6], dtype=np.int64))

    x = np.array([1.0, 2.0, 3.0], dtype=np.double)
    y = np.array([3, 3, 3], dtype=np.int64)
    z = ext.polymorphic_add(x, y)
    np.testing.assert_array_almost_equal(z, np.array([4.0, 5.0, 6.0], dtype=np.double))


def test_rows_dot(ext):
    """examples/parallel/tests/test_parallel.py."""
    x = np.ones((128, 1024), dtype=np.float64)
    y = np.ones((1024,), dtype=np.float64)
    z = ext.rows_dot(x, y)
    np.testing.assert_array_almost_equal(z, 1024 * np.ones((128,), dtype=np.float64))


def test_the_examples_agree_on_dtypes_and_refusals():
    """Beyond test_ext.py: both builds give the same dtypes, and both refuse the same input."""
    x, y = np.array([1, 2, 3]), np.array([0.5, 0.5, 0.5])
    ours, theirs = peers.amso_polymorphic_add(x, y), peers.numpy_polymorphic_add(x, y)
    assert ours.dtype == theirs.dtype == np.float64
    np.testing.assert_array_equal(ours, theirs)
    for build in SIMPLE.values():
        with pytest.raises(TypeError):
            build["polymorphic_add"](np.zeros(3, np.float32), np.zeros(3, np.float32))
        with pytest.raises(TypeError):
            build["conj"](np.zeros(3))
    with pytest.raises(ValueError, match="read-only"):
        frozen = np.zeros(3)
        frozen.flags.writeable = False
        peers.amso_mult(2.0, frozen)


def test_amso_ports_take_other_producers():
    """What the ports add: a buffer-protocol producer in, its framework's result out."""
    import array

    x = array.array("d", [1.0, 2.0, 3.0])
    assert peers.amso_extract({"x": x}) == 6.0
    peers.amso_mult(2.0, x)
    assert list(x) == [2.0, 4.0, 6.0]


# --- tests/array.rs ---


def test_zeros_are_c_order():
    arr = peers.port_zeros(3, 5)
    assert arr.ndim == 2 and arr.shape == (3, 5) and arr.size == 15
    assert arr.strides == (5 * 8, 8)
    assert arr.flags.c_contiguous and not arr.flags.f_contiguous and arr.flags.aligned
    assert arr.dtype == np.float64 and not arr.any()


def test_fortran_order_arrays_keep_their_layout():
    arr = peers.port_zeros_fortran(3, 5)
    assert arr.shape == (3, 5) and arr.strides == (8, 3 * 8)
    assert arr.flags.f_contiguous and not arr.flags.c_contiguous and arr.flags.aligned


def test_results_keep_their_strides_on_axes_of_one_and_zero_elements():
    """Strides NumPy would make differently (an axis of length 1 or 0) come through as the Rust
    array has them, as rust-numpy passes them: only NumPy's own C-order strides are left for
    NumPy to fill in."""
    assert peers.port_zeros_fortran(3, 1).strides == np.zeros((3, 1), order="F").strides == (8, 24)
    assert peers.port_zeros_fortran(1, 4).strides == (8, 8)
    assert peers.port_zeros_fortran(0, 3).strides == (0, 0)  # ndarray's, for an empty array
    assert peers.port_permute(np.zeros((1, 6), np.int64)).strides == (8, 48)
    column = peers.owned_positions(1, False, 0)
    assert column.strides == (24,) and column.tolist() == [0.0]
    assert peers.port_zeros(3, 1).strides == np.zeros((3, 1)).strides == (8, 8)


def test_zero_dimensional_arrays():
    arr = peers.port_zeros_0d()
    assert arr.ndim == 0 and arr.strides == () and arr.shape == ()
    assert peers.port_item(arr) == (1, False, 0.0)


def test_arange():
    arr = peers.port_arange(0.0, 1.0, 0.1)
    assert arr.ndim == 1 and arr.shape == (10,)


def test_as_array_reports_shape_strides_and_address():
    x = np.zeros((3, 2, 4))
    shape, strides, view_strides, length, empty, c_order, address = peers.port_describe(x)
    assert shape == list(x.shape) and length == 24 and not empty and c_order
    assert strides == view_strides == [s // 8 for s in x.strides]
    assert address == x.__array_interface__["data"][0]
    not_contiguous = np.array([1, 2, 3, 4], dtype="int32")[::2]
    assert peers.port_i32_values(not_contiguous) == [1, 3]


def test_as_slice_needs_c_order_and_alignment():
    assert len(peers.port_i32_slice(np.zeros((3, 2, 4), np.int32))) == 24
    not_contiguous = np.array([1, 2, 3, 4], dtype="int32")[::2]
    for take in (peers.port_i32_slice, peers.port_i32_slice_mut):
        with pytest.raises(ValueError, match="C-contiguous"):
            take(not_contiguous)
    not_aligned = np.zeros(8, dtype="u2").view("u1")[1:-1].view("u2")
    assert not not_aligned.flags.aligned
    # rust-numpy refuses the slice; amso never hands out a misaligned slice either: it
    # refuses the argument, or (see docs/rust.md, "Conversions") reads a copy.
    for take in (peers.port_u16_slice, peers.port_u16_slice_mut):
        try:
            result = take(not_aligned)
        except ValueError as error:
            assert "aligned" in str(error)
        else:
            assert result in (not_aligned.tolist(), not_aligned.size)
    misaligned_empty = not_aligned[0:0]
    assert peers.port_u16_slice(misaligned_empty) == []
    assert peers.port_u16_slice_mut(misaligned_empty) == 0


def test_extraction_checks_dtype_and_dimensions():
    peers.port_take_f64_2d(np.zeros((3, 5)))
    peers.port_take_f32_2d(np.zeros((3, 5), np.float32))
    peers.port_take_i32_1d(np.array([1, 2, 3], np.int32))
    with pytest.raises(TypeError, match="float64 array with 2 dimensions"):
        peers.port_take_f64_2d([[1.0]])  # not an array (rust-numpy: not a PyArray2)
    with pytest.raises(TypeError, match="got a float64 array"):
        peers.port_take_f32_2d(np.zeros((3, 5)))
    with pytest.raises(TypeError, match="got a float32 array"):
        peers.port_take_f64_2d(np.zeros((3, 5), np.float32))
    with pytest.raises(TypeError, match="3 dimensions"):
        peers.port_take_f64_2d(np.zeros((3, 5, 7)))
    with pytest.raises(TypeError, match="int32 array"):
        peers.port_take_f64_1d(np.array([1, 2, 3], np.int32))
    with pytest.raises(TypeError, match="1 dimension"):
        peers.port_take_i32_2d(np.array([1, 2, 3], np.int32))
    # Subclasses are NumPy arrays to amso (rust-numpy's `cast`; it has no `cast_exact`).
    peers.port_take_f64_2d(np.ma.MaskedArray([[1.0, 2.0], [3.0, 4.0]], dtype="float64"))


def test_negative_strides():
    a = np.array([[2, 3], [4, 5]], np.uint32)
    assert peers.port_u32_rows(a[::-1]) == [[4, 5], [2, 3]]


def test_untyped_arguments_report_the_dtype():
    a = np.array([[2, 3], [4, 5]], np.uint32)
    assert peers.port_dtype_name(a) == str(a.dtype) == "uint32"


def test_results_outlive_the_call():
    arr = peers.port_vec_i32()
    assert peers.port_i32_slice(arr) == [1, 2, 3]


def test_copy_to():
    destination = np.empty(3, np.int64)
    peers.port_copy_to(np.arange(2.0, 5.0, 1.0), destination)
    assert destination.tolist() == [2, 3, 4]


def test_get():
    array = np.arange(1, 13, dtype=np.int64).reshape(3, 2, 2)
    assert peers.port_get(array, [0, 0, 0]) == 1
    assert peers.port_get(array, [2, 1, 1]) == 12
    assert peers.port_get(array, [1, 0, 0]) == 5
    for outside in ([0, 0, 2], [0, 2, 0], [3, 0, 0]):
        assert peers.port_get(array, outside) is None


def test_permute_and_transpose():
    array = np.array([[0, 1, 2], [3, 4, 5]], np.int64)
    expected = [[0, 3], [1, 4], [2, 5]]
    assert peers.port_permute(array, [1, 0]).tolist() == expected
    assert peers.port_permute(array).tolist() == expected
    array = np.arange(1, 13, dtype=np.int64).reshape(3, 2, 2)
    assert peers.port_permute(array, [0, 2, 1]).tolist() == array.transpose(0, 2, 1).tolist()


def test_reshape_in_fortran_order():
    array = peers.port_reshape_fortran(np.arange(9, dtype=np.int64), [3, 3])
    assert array.tolist() == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert array.flags.f_contiguous
    with pytest.raises(ValueError, match="reshape"):
        peers.port_reshape_fortran(np.arange(9, dtype=np.int64), [5])


def test_half_precision_in_place():
    array = np.array([[1, 2], [3, 4]], dtype="float16")
    assert peers.port_f16_double(array) == [1.0, 2.0, 3.0, 4.0]
    assert np.all(array == np.array([[2, 4], [6, 8]], dtype="float16"))
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.array([[1, 2], [3, 4]], dtype=ml_dtypes.bfloat16)
    assert peers.port_bf16_double(array) == [1.0, 2.0, 3.0, 4.0]
    assert np.all(array == np.array([[2, 4], [6, 8]], dtype=ml_dtypes.bfloat16))


def test_fixed_width_strings_read_and_write():
    array = np.array([b"foo", b"bar", b"foobar"], dtype="S6")
    assert peers.port_bytes6(array) == [b"foo\0\0\0", b"bar\0\0\0", b"foobar"]
    assert array[2] == b"foobaz"
    array = np.array(["foo", "bar", "foobar"], dtype="U6")
    assert peers.port_unicode6(array) == [[ord(c) for c in s.ljust(6, "\0")] for s in ("foo", "bar", "foobar")]
    assert array[2] == "foobaz"


def test_string_byte_orders():
    for order in "=<>":
        peers.port_take_bytes3(np.array([b"foo", b"bar"], dtype=f"{order}S3"))
    native = "<" if sys.byteorder == "little" else ">"
    foreign = ">" if native == "<" else "<"
    for order in ("=", native):
        peers.port_take_unicode3(np.array(["foo", "bar"], dtype=f"{order}U3"))
    with pytest.raises(ValueError, match="endian"):
        peers.port_take_unicode3(np.array(["foo", "bar"], dtype=f"{foreign}U3"))


# --- tests/borrow.rs ---


def test_distinct_arrays_may_both_be_written():
    a, b = np.zeros((1, 2, 3)), np.zeros((1, 2, 3))
    assert peers.port_rw_rw(a, b) == ([1, 2, 3], [1, 2, 3])


def test_shared_borrows_of_one_array():
    a = np.zeros((1, 2, 3))
    assert peers.port_ro_ro(a, a) == ([1, 2, 3], [1, 2, 3])
    assert peers.port_ro3(a, a, a) == [6, 6, 6]


@pytest.mark.parametrize("pair", ["rw_ro", "ro_rw", "rw_rw"])
def test_a_writer_excludes_every_other_borrow(pair):
    a = np.zeros((1, 2, 3))
    with pytest.raises(BufferError, match="overlaps another array argument"):
        getattr(peers, f"port_{pair}")(a, a)
    # The borrows end with the call.
    assert peers.port_rw_rw(a, np.zeros(1)) == ([1, 2, 3], [1])


def test_writing_needs_a_writable_array():
    a = np.zeros((1, 2, 3))
    a.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        peers.port_take_mut_f64_3d(a)


def test_borrows_span_frames():
    a = np.zeros((1, 2, 3))
    with pytest.raises(BufferError):
        peers.port_while_writing(a, lambda: peers.port_take_mut_f64_3d(a))
    with pytest.raises(BufferError):
        peers.port_while_writing(a, lambda: peers.port_take_f64_3d(a))


def test_borrows_span_threads():
    a = np.zeros((1, 2, 3))
    raised = []

    def other_thread():
        try:
            peers.port_take_mut_f64_3d(a)
        except BufferError as error:
            raised.append(error)

    def in_the_call():
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()

    peers.port_while_writing(a, in_the_call)
    assert len(raised) == 1


def test_overlapping_views_conflict():
    array = np.zeros((1, 2, 3))
    view1, view2 = array[0, 0, 0:2], array[0, 0, 1:3]
    for pair in (peers.port_rw_rw, peers.port_rw_ro, peers.port_ro_rw):
        with pytest.raises(BufferError):
            pair(view1, view2)
    assert peers.port_ro_ro(view1, view2) == ([2], [2])


def test_disjoint_and_interleaved_views_do_not_conflict():
    array = np.zeros((1, 2, 3))
    assert peers.port_rw_rw(array[0, 0, 0:1], array[0, 0, 2:3]) == ([1], [1])
    array = np.zeros((23, 42, 3))
    assert peers.port_rw3(array[:, :, 0], array[:, :, 1], array[:, :, 2]) == [23 * 42] * 3


def test_extract_readonly_and_readwrite():
    peers.port_take_f64_3d(np.zeros((1, 2, 3)))
    peers.port_take_mut_f64_3d(np.zeros((1, 2, 3)))


def test_as_array_slice_get():
    assert peers.port_readonly_access(np.zeros((1, 2, 3))) == ([1, 2, 3], 6, 0.0)
    assert peers.port_readwrite_access(np.zeros((1, 2, 3))) == ([1, 2, 3], [1, 2, 3], 6, 6, 0.0)


# --- tests/to_py.rs ---


def test_vecs_and_boxed_slices():
    for arr in (peers.port_slice_to_numpy(), peers.port_boxed_slice(), peers.port_vec_i32()):
        assert arr.shape == (3,) and arr.dtype == np.int32
        assert peers.port_i32_slice(arr) == [1, 2, 3]


@pytest.mark.parametrize("copy", [True, False], ids=["to_pyarray", "into_pyarray"])
def test_ndarrays_keep_shape_and_strides(copy):
    arr = peers.port_array3(copy)
    assert arr.shape == (3, 4, 2) and arr.strides == (4 * 2 * 8, 2 * 8, 8)


def test_iterators():
    assert peers.port_i32_slice(peers.port_from_iter(10)) == [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
    arr = peers.port_from_range_u32(512)
    assert arr.dtype == np.uint32 and arr.tolist() == list(range(512))


def test_integer_extremes():
    names = {"isize": "int64", "usize": "uint64"}
    for rust, arr, low, high in peers.port_small_arrays():
        expected = names.get(rust, rust.replace("i", "int").replace("uint", "uint").replace("u", "uint"))
        assert str(arr.dtype) == expected, rust
        assert arr.tolist() == [low, high]
        assert (low, high) == (np.iinfo(arr.dtype).min, np.iinfo(arr.dtype).max)


def test_usize_is_uint64():
    assert str(peers.amso_usize_range(3).dtype) == "uint64"


def test_owned_results_cannot_resize():
    arr = peers.port_vec_i32()
    with pytest.raises(ValueError, match="does not own its data"):
        arr.resize(100)


def test_owned_results_are_writable():
    arr = peers.port_vec_i32()
    assert arr.flags["WRITEABLE"]
    arr[1] = 4
    assert arr.tolist() == [1, 4, 3]


def test_collapsed_arrays():
    assert peers.port_collapsed().tolist() == [[10, 11, 12, 13], [20, 21, 22, 23]]


def test_sliced_views():
    expected = [[6, 7], [4, 5], [2, 3]]
    standard = peers.port_sliced(True)
    assert standard.tolist() == expected and standard.flags["C_CONTIGUOUS"]
    # rust-numpy's to_pyarray always copies into C order; ndarray's to_owned() keeps the view's
    # memory order, and amso hands that over as it is (a negative row stride).
    kept = peers.port_sliced(False)
    assert kept.tolist() == expected and kept.strides == (-16, 8)


@pytest.mark.parametrize("copy", [True, False], ids=["to_pyarray", "into_pyarray"])
def test_fortran_order_results(copy):
    arr = peers.port_fortran_order(copy)
    assert arr.tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert arr.flags["F_CONTIGUOUS"]


@pytest.mark.parametrize("make", ["port_objects_vec", "port_objects_2d"])
def test_object_results_hold_the_same_objects(make):
    arr, originals = getattr(peers, make)()
    assert arr.dtype == object
    assert all(a is b for a, b in zip(arr.ravel().tolist(), originals))


def test_object_then_number_results():
    for _ in range(100):
        peers.port_objects_then_ints()


# --- amso's messages name the argument ---


def test_every_refusal_starts_with_the_argument_s_name():
    a = np.zeros(3)
    frozen = np.zeros((1, 2, 3))
    frozen.flags.writeable = False
    for call, error, name in [
        (lambda: peers.port_take_f64_2d(np.zeros(3, np.int64)), TypeError, "_x"),
        (lambda: peers.port_take_f64_2d([[1.0]]), TypeError, "_x"),
        (lambda: peers.port_take_mut_f64_3d(frozen), ValueError, "_x"),
        (lambda: peers.port_dtype_name(3), TypeError, "x"),
    ]:
        with pytest.raises(error) as raised:
            call()
        assert str(raised.value).startswith(f"argument '{name}': "), raised.value
        assert f"while processing '{name}'" in raised.value.__notes__
        assert type(raised.value) is error
    with pytest.raises(BufferError, match=r"^argument 'b': the array overlaps"):
        peers.port_rw_rw(a, a)
    # Extracted by hand inside a function: no argument, no name.
    with pytest.raises(TypeError, match=r"^expected a float64 array with 1 dimension, got an int64"):
        peers.amso_extract({"x": np.zeros(3, np.int64)})
