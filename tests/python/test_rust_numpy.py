"""amso beside rust-numpy, in one process: rust-numpy's README example ported to amso
(examples/rust/numpy-readme, module amso_rust_ext) against the same functions written with
rust-numpy (benchmarks/peers, module amso_peers) and against NumPy itself; results in the
caller's framework, owned Rust memory handed over without a copy (checked by address), dynamic
rank and dtype dispatch, and borrows checked across extension modules."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import amso

ext = pytest.importorskip("amso_rust_ext")
peers = pytest.importorskip("amso_peers")
ue = pytest.importorskip("amso_user_example")


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


LAYOUTS = {
    "1-d": lambda: np.arange(7.0),
    "3-d": lambda: np.arange(24.0).reshape(2, 3, 4),
    "transposed": lambda: np.arange(12.0).reshape(3, 4).T,
    "reversed": lambda: np.arange(12.0).reshape(3, 4)[::-1, ::-2],
    "strided": lambda: np.arange(40.0).reshape(5, 8)[1:4, 2:7:2],
    "empty": lambda: np.zeros((0, 3)),
    "empty-broadcast": lambda: np.lib.stride_tricks.as_strided(np.zeros(1), shape=(0, 3), strides=(0, 0)),
    "0-d": lambda: np.array(2.5),
    "ndim-10": lambda: np.arange(1024.0).reshape((2,) * 10),
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_axpy_matches_rust_numpy_and_numpy(layout):
    x, y = LAYOUTS[layout](), np.asarray(LAYOUTS[layout]() + 1.0)
    ours, theirs, reference = ext.axpy(3.0, x, y), peers.numpy_axpy(3.0, x, y), 3.0 * x + y
    assert type(ours) is np.ndarray and ours.shape == reference.shape
    np.testing.assert_array_equal(ours, reference)
    np.testing.assert_array_equal(theirs, reference)


@pytest.mark.parametrize("layout", [k for k in LAYOUTS if k != "empty-broadcast"], ids=lambda k: k)
def test_mult_writes_in_place_as_rust_numpy_does(layout):
    ours, theirs = LAYOUTS[layout](), LAYOUTS[layout]()
    reference = LAYOUTS[layout]() * -1.5
    assert ext.mult(-1.5, ours) is None and peers.numpy_mult(-1.5, theirs) is None
    np.testing.assert_array_equal(ours, reference)
    np.testing.assert_array_equal(theirs, reference)


def test_mult_writes_through_a_view_and_nowhere_else():
    base = np.arange(40.0).reshape(5, 8)
    ext.mult(10.0, base[1:4, 2:7:2][::-1])
    expected = np.arange(40.0).reshape(5, 8)
    expected[1:4, 2:7:2] *= 10.0
    np.testing.assert_array_equal(base, expected)


def test_mult_refuses_what_rust_numpy_s_unsafe_view_would_corrupt():
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only") as raised:
        ext.mult(2.0, frozen)
    assert "while processing 'x'" in raised.value.__notes__
    overlapping = np.lib.stride_tricks.as_strided(np.zeros(4), shape=(3, 3), strides=(8, 8), writeable=True)
    with pytest.raises(ValueError, match="reach some elements twice"):
        ext.mult(2.0, overlapping)
    with pytest.raises(TypeError, match="expected a writable float64 array, got a float32 array with 1 dimension"):
        ext.mult(2.0, np.zeros(3, np.float32))
    np.testing.assert_array_equal(frozen, np.arange(4.0))


@pytest.mark.parametrize("name", ["noop1", "noop3", "sum", "scale", "arange"])
def test_benchmark_functions_agree_with_their_rust_numpy_twins(name):
    x = np.arange(3072, dtype=np.float32).reshape(1024, 3)
    ours, theirs = getattr(peers, f"amso_{name}"), getattr(peers, f"numpy_{name}")
    if name == "noop1":
        assert ours(x) is None and theirs(x) is None
    elif name == "noop3":
        assert ours(x, x, x) is None and theirs(x, x, x) is None
    elif name == "sum":
        assert ours(x) == theirs(x) == float(x.astype(np.float64).sum())
    elif name == "scale":
        a, b = x.copy(), x.copy()
        ours(a, 0.5), theirs(b, 0.5)
        np.testing.assert_array_equal(a, x * 0.5)
        np.testing.assert_array_equal(b, x * 0.5)
    else:
        np.testing.assert_array_equal(ours(1000), theirs(1000))
        np.testing.assert_array_equal(ours(1000), np.arange(1000.0))


# --- results: the caller's framework, and owned memory without a copy ---

def test_numpy_in_numpy_out_from_a_crate_without_classes():
    """amso_rust_ext registers no amso class: its results are NumPy arrays all the same."""
    assert not getattr(ext, "__amso_dispatch__", {})
    out = ext.axpy(1.0, np.ones(3), np.ones(3))
    assert type(out) is np.ndarray and out.tolist() == [2.0, 2.0, 2.0] and out.flags.writeable


def test_amso_in_amso_out():
    x = amso.asarray(np.arange(4.0))
    out = ext.axpy(2.0, x, x)
    assert isinstance(out, amso.MemArray) and out.to_numpy().tolist() == [0.0, 3.0, 6.0, 9.0]


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_a_vec_becomes_a_numpy_array_over_the_same_memory(n):
    array, vec_address = ue.owned_vec(n, "numpy")
    assert type(array) is np.ndarray and array.dtype == np.float64 and array.shape == (n,)
    if n:
        assert address(array) == vec_address
    np.testing.assert_array_equal(array, np.arange(n, dtype=np.float64))
    array[:] = -1.0  # writable, and Rust's memory
    view = array[::2]
    del array
    gc.collect()
    assert (view == -1.0).all(), "a view keeps the vector alive"


@pytest.mark.parametrize("fortran", [False, True], ids=["c-order", "fortran-order"])
def test_an_ndarray_keeps_its_layout(fortran):
    array, first = ue.owned_ndarray(3, 4, fortran, "numpy")
    assert address(array) == first
    np.testing.assert_array_equal(array, 10 * np.arange(3)[:, None] + np.arange(4))
    assert array.flags.f_contiguous == fortran and array.flags.c_contiguous != fortran


def test_a_reversed_ndarray_is_handed_over_with_its_negative_stride():
    array = ue.owned_reversed(3, 2, "numpy")
    assert array.strides[0] < 0
    np.testing.assert_array_equal(array, (10 * np.arange(3)[:, None] + np.arange(2))[::-1])


def test_a_memarray_becomes_numpy_or_amso_without_a_copy():
    array, data = ue.owned_memarray(5, False, "numpy")
    assert address(array) == data and array.dtype == np.float32 and array.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    mine, data = ue.owned_memarray(5, False, "amso")
    assert isinstance(mine, amso.MemArray) and address(np.asarray(mine)) == data


def test_a_vec_reaches_amso_and_tvm_ffi_without_a_copy():
    mine, vec_address = ue.owned_vec(4, "amso")
    assert isinstance(mine, amso.MemArray) and address(np.asarray(mine)) == vec_address
    tvm_ffi = pytest.importorskip("tvm_ffi")
    tensor, vec_address = ue.owned_vec(4, "tvm_ffi")
    assert isinstance(tensor, tvm_ffi.Tensor) and address(np.from_dlpack(tensor)) == vec_address
    assert np.from_dlpack(tensor).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_vec_reaches_torch_without_a_copy():
    torch = pytest.importorskip("torch")
    tensor, vec_address = ue.owned_vec(6, "torch")
    assert isinstance(tensor, torch.Tensor) and tensor.data_ptr() == vec_address
    assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    out = ext.axpy(2.0, torch.ones(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64))
    assert isinstance(out, torch.Tensor) and out.tolist() == [[2.0] * 3] * 2


GPU = amso.cuda.is_available()


def device_pointer(array) -> int:
    """The device address of a framework's CUDA array."""
    if hasattr(array, "data_ptr"):
        return array.data_ptr()  # torch
    if hasattr(array, "unsafe_buffer_pointer"):
        return array.unsafe_buffer_pointer()  # jax
    return array.__cuda_array_interface__["data"][0]  # cupy, amso


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
@pytest.mark.parametrize("framework", ["torch", "cupy", "jax", "amso"])
def test_device_memory_reaches_every_framework_without_a_copy(framework):
    module = pytest.importorskip(framework)
    array, address = ue.owned_memarray(1000, True, framework)
    assert device_pointer(array) == address, "the framework's array is amso's device memory"
    to_host = {"torch": lambda a: a.cpu().numpy(), "cupy": module.asnumpy if framework == "cupy" else None,
               "jax": np.asarray, "amso": lambda a: a.to_numpy()}[framework]
    values = to_host(array)
    np.testing.assert_array_equal(values, np.arange(1000, dtype=np.float32))


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
def test_device_results_refuse_numpy():
    with pytest.raises(ValueError, match="NumPy arrays hold host memory, and this result is on cuda:0"):
        ue.owned_memarray(10, True, "numpy")


def test_frameworks_that_cannot_hold_the_memory_say_so():
    with pytest.raises(ValueError, match="CuPy arrays hold CUDA memory, and this result is on the host"):
        ue.owned_vec(3, "cupy")
    with pytest.raises(ValueError, match="unknown framework \"tensorflow\"; expected one of"):
        ue.owned_vec(3, "tensorflow")
    with pytest.raises(TypeError, match="a framework is named by a str"):
        ue.owned_vec(3, 5)


# --- dynamic rank and dtype dispatch ---

@pytest.mark.parametrize("array", [
    np.arange(10, dtype=np.int32), np.ones((2, 3), np.float32), np.arange(24.0).reshape(2, 3, 4)[:, ::-1],
    np.array([True, False, True]), np.arange(6, dtype=np.uint8).reshape(3, 2).T, np.zeros((0, 5), np.float64),
], ids=["int32", "float32", "float64-reversed", "bool", "uint8-transposed", "empty"])
def test_untyped_arguments_dispatch_on_the_dtype(array):
    assert ue.sum_any(array) == float(array.sum())


def test_typed_errors_are_matched_in_rust_and_raised_as_before():
    """`ArgumentError` is a value Rust code matches on (`sum_or_why` in the user crate), as
    rust-numpy's `TypeError` and `NotContiguousError` are; unmatched, it is the Python exception
    extraction raises."""
    assert ue.sum_or_why(np.arange(4.0)) == (6.0, "contiguous")
    assert ue.sum_or_why(amso.asarray(np.arange(4.0))) == (6.0, "contiguous")
    assert ue.sum_or_why(np.zeros((2, 3), np.int32)) == (None, "int32 in 2-D")
    assert ue.sum_or_why(np.ones(3, np.float32)) == (None, "float32 in 1-D")
    assert ue.sum_or_why(np.arange(8.0)[::2]) == (None, "strides [2]")
    assert ue.sum_or_why(np.arange(6.0).reshape(2, 3).T) == (None, "strides [1, 3]")
    with pytest.raises(TypeError, match="^argument '_a': expected a float32 array with 1 dimension, got an int32"):
        ue.extract_one(np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"as_slice\(\) needs a C-contiguous array; this one has strides \[2\]"):
        ue.min_max(np.arange(8.0)[::2])
    bools = np.array([True, False, True])
    bools.view(np.uint8)[1] = 2  # a bool byte other than 0 and 1: refused by into_typed (sum_any)
    with pytest.raises(ValueError, match="the bool array holds bytes other than 0 and 1"):
        ue.sum_any(bools)


def test_untyped_arguments_report_what_they_cannot_take():
    with pytest.raises(TypeError, match="sum_any\\(\\): unsupported dtype complex64"):
        ue.sum_any(np.zeros(3, np.complex64))
    with pytest.raises(TypeError, match="expected an array .* got list"):
        ue.sum_any([1, 2, 3])


# --- borrows across extension modules ---

def test_two_extension_modules_cannot_alias_one_array_mutably():
    """amso_user_example holds x for writing while amso_rust_ext (another crate, with its own
    copy of amso's runtime) is asked to read or write it: both refused, nothing written."""
    x = np.arange(8.0)
    with pytest.raises(BufferError, match="overlaps another array argument that is borrowed for writing"):
        ue.while_writing(x, lambda: ext.mult(2.0, x))
    with pytest.raises(BufferError, match="borrowed for writing"):
        ue.while_writing(x, lambda: ext.axpy(1.0, x[2:5], np.ones(3)))
    with pytest.raises(BufferError, match="borrowed for writing"):  # a third crate, through a float32 view
        ue.while_writing(x[::-1], lambda: peers.amso_noop1(x.view(np.float32).reshape(4, 4)))
    np.testing.assert_array_equal(x, np.arange(8.0))
    assert amso._amso._live_borrows() == 0


def _held_layouts():
    base = np.arange(720.0)
    misaligned = np.frombuffer(bytearray(8 * 720 + 1), dtype=np.float64, offset=1)
    misaligned[:] = base
    return {
        "c-order": base.reshape(20, 36),
        "reversed": base[::-1],
        "strided": base.reshape(20, 36)[::3, 1::5],
        "six-dims": base.reshape(2, 3, 4, 5, 3, 2),  # more than 4 dimensions: kept on the heap
        "six-dims-transposed": base.reshape(2, 3, 4, 5, 3, 2).transpose(4, 2, 0, 5, 1, 3),
        "zero-d": base[3:4].reshape(()),
        "empty": base[:0],
        "misaligned": misaligned.reshape(20, 36),  # an aligned copy, written back
        "amso-array": amso.asarray(base.reshape(20, 36).copy()),  # read in place from its header
    }


@pytest.mark.parametrize("layout", list(_held_layouts()))
def test_each_layout_holds_its_borrow_for_the_call_and_releases_it(layout):
    """An argument read in place keeps no copy of its registry entry: it makes the key again
    from its data, shape and strides when it drops. For each layout, a writable argument holds
    the memory for its call (another argument over it is refused meanwhile), writes through,
    and leaves the registry empty when the call returns; a reader after it is free."""
    x = _held_layouts()[layout]
    expected = np.asarray(x).copy()
    seen = []

    def reader():
        try:
            seen.append(ue.sum_any(x))
        except BufferError as error:
            seen.append(str(error))

    ue.while_writing(x, reader)
    if np.asarray(x).size:
        assert "borrowed for writing" in seen[0]
    else:  # nothing to borrow
        assert seen == [0.0]
    assert amso._amso._live_borrows() == 0
    ext.mult(2.0, x)  # a writer, free again
    np.testing.assert_array_equal(np.asarray(x), 2 * expected)
    assert ue.sum_any(x) == 2 * expected.sum()
    assert amso._amso._live_borrows() == 0


def _flagged(n):
    x = np.zeros(n, np.dtype({"names": ["alive", "weight"], "formats": ["?", "<f8"], "offsets": [0, 8], "itemsize": 16}))
    x["alive"], x["weight"] = [True, False] * (n // 2), np.arange(n)
    return x


def _particles(n):
    return np.zeros(n, [("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])


KIND_CALLS = {  # a typed argument of each kind of element, read in place and then released
    "vector-lanes": lambda: peers.vector_norms(np.ones((6, 4), np.float32)),  # (n, 4) float32 read as [f32; 4]
    "vector-lanes-writable": lambda: peers.vector_bump_w(np.ones((6, 4), np.float32)[::-1]),
    "record-bool-fields": lambda: peers.flagged_live_weight(_flagged(6)[::-2]),
    "record": lambda: peers.record_scale_mass(_particles(6), 2.0),
    "objects": lambda: peers.amso_swap_objects(np.array([1, "two", None, 4.0], dtype=object)),
    "objects-dyn": lambda: peers.amso_head(np.array([1, "two", None, 4.0], dtype=object)[::-1]),
    "amso-array-shared": lambda: peers.amso_noop3(*[amso.asarray(np.ones((4, 3), np.float32))] * 3),
    "numpy-shared": lambda: peers.amso_noop3(*[np.ones((4, 3), np.float32)[::-1]] * 3),
}


@pytest.mark.parametrize("kind", list(KIND_CALLS))
def test_each_element_kind_releases_what_it_read_in_place(kind):
    KIND_CALLS[kind]()
    assert amso._amso._live_borrows() == 0


def test_a_misaligned_array_is_written_back_before_its_last_reference_goes():
    """The function holds the only reference to a misaligned view (its base array dies with
    it): the doubled values reach the memory before the base goes, as its finalizer sees."""
    buf = bytearray(8 * 4 + 1)
    seen = []

    def make():
        base = np.frombuffer(buf, np.uint8)
        view = base[1:].view(np.float64)
        view[:] = [1.0, 2.0, 3.0, 4.0]
        weakref.finalize(base, lambda: seen.append(np.frombuffer(buf, np.float64, offset=1).tolist()))
        return view

    ue.double_sole_reference(make)
    gc.collect()
    assert seen == [[2.0, 4.0, 6.0, 8.0]]
    assert amso._amso._live_borrows() == 0


def test_disjoint_and_interleaved_views_may_be_held_at_once():
    x = np.arange(8.0)
    ue.while_writing(x[:4], lambda: ext.mult(2.0, x[4:]))
    ue.while_writing(x[::2], lambda: ext.mult(-1.0, x[1::2]))
    np.testing.assert_array_equal(x, [0, -1, 2, -3, 8, -10, 12, -14])
    assert amso._amso._live_borrows() == 0


def test_a_borrow_held_in_one_thread_refuses_a_writer_in_another():
    x = np.zeros(16)
    holding, release, seen = threading.Event(), threading.Event(), []

    def hold():
        ue.while_writing(x, lambda: (holding.set(), release.wait(30)))

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(30)
    try:
        ext.mult(2.0, x)
    except BufferError as error:
        seen.append(str(error))
    release.set()
    holder.join(30)
    assert seen and "borrowed for writing" in seen[0]
    ext.mult(2.0, x)  # free again once the holder returned
    assert amso._amso._live_borrows() == 0


def test_many_threads_writing_their_own_rows_while_readers_share_one_array():
    grid = np.zeros((8, 256))
    shared = np.arange(256.0)
    errors = []

    def writer(row):
        try:
            for _ in range(200):
                ext.mult(1.0, grid[row])
                grid_row = ext.axpy(1.0, shared, grid[row])  # reads shared while others read it
                grid[row] = grid_row
        except Exception as error:  # noqa: BLE001 - the assertion below reports it
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(row,)) for row in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    np.testing.assert_array_equal(grid, np.tile(200 * shared, (8, 1)))
    assert amso._amso._live_borrows() == 0


def test_a_shape_beyond_the_address_space_is_refused():
    """A producer's shape whose element count overflows, or whose non-zero dimensions exceed
    what an address space holds even with zero strides or an empty axis, is refused before any
    view is made (a view of 2**64 elements over 8 bytes would read anything)."""
    from hostile import Tensor
    for shape in [(2**32, 2**32), (2**62, 4), (0, 2**40, 2**40)]:
        tensor = Tensor(shape=shape, strides=(0,) * len(shape), nbytes=8)
        with pytest.raises(ValueError, match="more elements than an address space holds"):
            ue.sum_any(tensor.producer())
        gc.collect()
        assert tensor.deleted == 1, shape
    assert amso._amso._live_borrows() == 0


def test_amso_does_not_change_an_array_a_typed_argument_holds():
    """Item assignment on an amso array waits for no one: while a Rust function holds the
    array through a typed argument, it is refused (BufferError), and the array is unchanged."""
    a = amso.asarray(np.arange(4.0))
    with pytest.raises(BufferError, match="cannot change the array: a typed argument"):
        ue.while_writing(a, lambda: a.__setitem__(0, 5.0))
    assert np.asarray(a).tolist() == [0.0, 1.0, 2.0, 3.0]
    a[0] = 5.0  # after the call, freely
    assert a[0] == 5.0 and amso._amso._live_borrows() == 0


def test_crates_share_borrows_without_the_amso_package():
    """Two user crates in a process where `import amso` fails still share one borrow registry:
    the first copy of the runtime to load publishes it, whichever crate that is."""
    script = textwrap.dedent("""
        import sys, importlib.abc
        class NoAmso(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "amso" or name.startswith("amso."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, NoAmso())
        import numpy as np
        import amso_user_example as ue, amso_rust_ext as ext
        assert "amso" not in sys.modules
        x = np.arange(4.0)
        try:
            ue.while_writing(x, lambda: ext.mult(2.0, x))
        except BufferError as e:
            assert "borrowed for writing" in str(e), e
        else:
            raise SystemExit("two crates held x for writing at once")
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
        print("shared")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "shared", done.stderr
