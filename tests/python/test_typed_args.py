"""Typed array arguments of a Rust extension (the user-crate example's `deposit` and
`cic_density`): arrays from NumPy, amso (bundled and user-crate classes), TVM-FFI and, where
installed, PyTorch, checked against a NumPy cloud-in-cell reference written from the formula."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from hostile import DLPackExchangeAPI, Tensor

import amso

ue = pytest.importorskip("amso_user_example")
SHAPE, BOX = (8, 6, 4), 10.0


def reference(positions, shape=SHAPE, box=BOX):
    """Cloud-in-cell by the formula: for each axis u = p / h - 0.5, i0 = floor(u), f = u - i0;
    weight 1 - f to cell i0 mod n and f to (i0 + 1) mod n; the 8 corners take the products."""
    density = np.zeros(shape)
    u = positions.astype(np.float64) / (box / np.array(shape)) - 0.5
    lower = np.floor(u)
    fraction, lower = u - lower, lower.astype(np.int64)
    for corner in np.ndindex(2, 2, 2):
        weight = np.prod([fraction[:, d] if up else 1 - fraction[:, d] for d, up in enumerate(corner)], axis=0)
        cells = tuple((lower[:, d] + up) % shape[d] for d, up in enumerate(corner))
        np.add.at(density, cells, weight)
    return density


def particles(n=500, seed=0):
    rng = np.random.default_rng(seed)
    inside = rng.uniform(0, BOX, size=(n, 3))
    h = BOX / np.array(SHAPE)
    special = np.array([
        [0.0, 0.0, 0.0], [BOX, BOX, BOX], h * 0.5, h * 1.5, h * 3,  # exactly 0, the far edge, cell centres and edges
        [-0.25, 12.5, 5.0], [-BOX - 1, 2 * BOX + 3, -7.5],  # outside the box: wrapped
    ])
    return np.concatenate([inside, special]).astype(np.float32)


def torch_cpu():
    torch = pytest.importorskip("torch")
    return torch


# --- inputs from every framework, against the reference ---

def numpy_pair(p):
    return p, np.zeros(SHAPE)


def amso_pair(p):
    density = amso.MemArray(SHAPE, np.float64)
    return amso.asarray(p), density


def user_crate_pair(p):
    positions = ue.Positions(p.shape)
    positions.read_numpy_array(p)
    return positions, ue.Density(SHAPE)


def tvm_pair(p):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    return tvm_ffi.from_dlpack(p), tvm_ffi.from_dlpack(np.zeros(SHAPE))


def torch_pair(p):
    torch = torch_cpu()
    return torch.from_numpy(p.copy()), torch.zeros(SHAPE, dtype=torch.float64)


@pytest.mark.parametrize("pair", [numpy_pair, amso_pair, user_crate_pair, tvm_pair, torch_pair],
                         ids=["numpy", "amso", "user-crate", "tvm-ffi", "torch"])
def test_deposit_matches_the_reference_and_accumulates_in_place(pair):
    p = particles()
    positions, density = pair(p)
    ue.deposit(positions, density, BOX)
    ue.deposit(positions, density, BOX)  # accumulates
    got = np.from_dlpack(density) if not isinstance(density, np.ndarray) else density
    np.testing.assert_allclose(got, 2 * reference(p), rtol=1e-12, atol=1e-12)
    assert np.isclose(got.sum(), 2 * len(p))


def test_mixed_frameworks_in_one_call():
    p = particles()
    tvm_ffi = pytest.importorskip("tvm_ffi")
    density = amso.MemArray(SHAPE, np.float64)
    ue.deposit(tvm_ffi.from_dlpack(p), density, BOX)
    ue.deposit(p, ue.Density(SHAPE), BOX)
    np.testing.assert_allclose(density.to_numpy(), reference(p), rtol=1e-12)


@pytest.mark.parametrize("given, expected", [
    (lambda p: p, np.ndarray),  # NumPy in, NumPy out: no amso class needed
    (lambda p: amso.asarray(p), ue.Density),  # amso in, amso out: the function's own crate compiles (float64, 3)
    (lambda p: user_crate_pair(p)[0], ue.Density),
    (lambda p: memoryview(p), np.ndarray),  # any other host producer: NumPy
], ids=["numpy", "amso", "user-crate", "memoryview"])
def test_cic_density_returns_the_callers_framework(given, expected):
    p = particles()
    out = ue.cic_density(given(p), list(SHAPE), BOX)
    assert type(out) is expected
    assert isinstance(out, amso.MemArray) == (expected is ue.Density)
    np.testing.assert_allclose(np.asarray(out), reference(p), rtol=1e-12)


def test_cic_density_with_tvm_ffi_and_torch_inputs():
    p = particles()
    tvm_ffi = pytest.importorskip("tvm_ffi")
    tensor = tvm_ffi.from_dlpack(p)
    out = ue.cic_density(tensor, SHAPE, BOX)
    # TVM-FFI in, TVM-FFI out: through its exchange API's allocator where it has one, else
    # through tvm_ffi.from_dlpack over memory amso allocated.
    assert isinstance(out, type(tensor))
    np.testing.assert_allclose(np.from_dlpack(out), reference(p), rtol=1e-12)
    torch = torch_cpu()
    out = ue.cic_density(torch.from_numpy(p), SHAPE, BOX)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), reference(p), rtol=1e-12)


# --- layouts ---

def test_strided_inputs_are_read_correctly():
    p = particles()
    transposed = np.ascontiguousarray(p.T).T  # Fortran order: strides (1, n)
    wide = np.zeros((len(p), 5), np.float32)
    wide[:, 1:4] = p  # every row 5 apart, starting at column 1
    for positions in (transposed, wide[:, 1:4]):
        density = np.zeros(SHAPE)
        ue.deposit(positions, density, BOX)
        np.testing.assert_allclose(density, reference(p), rtol=1e-12)
    big = np.zeros((8, 12, 4))
    ue.deposit(p, big[:, ::2, :], BOX)  # a writable strided view of the density
    np.testing.assert_allclose(big[:, ::2, :], reference(p), rtol=1e-12)
    assert not big[:, 1::2, :].any()


def test_reversed_views_are_read_and_written_in_place():
    p = particles()
    density = np.zeros(SHAPE)
    ue.deposit(p[::-1], density, BOX)  # a negative stride, read through an ndarray view
    np.testing.assert_allclose(density, reference(p), rtol=1e-12)
    grid = np.zeros(SHAPE)
    reversed_view = grid[::-1, :, ::-1]  # writable, two reversed axes
    ue.deposit(p, reversed_view, BOX)
    np.testing.assert_allclose(reversed_view, reference(p), rtol=1e-12)
    np.testing.assert_allclose(grid, reference(p)[::-1, :, ::-1], rtol=1e-12)


def test_broadcast_and_overlapping_writable_layouts_are_refused():
    p = particles()
    broadcast = np.broadcast_to(np.zeros((1, 6, 4)), SHAPE)
    broadcast.flags.writeable  # noqa: B018 - NumPy marks broadcasts read-only
    with pytest.raises(ValueError, match="read-only"):
        ue.deposit(p, broadcast, BOX)
    memory = np.zeros(64)
    overlapping = np.lib.stride_tricks.as_strided(memory, shape=SHAPE, strides=(8, 8, 8), writeable=True)
    with pytest.raises(ValueError, match="reach some elements twice .*contiguous copy"):
        ue.deposit(p, overlapping, BOX)
    assert not memory.any()


def test_empty_arrays_of_any_strides_are_accepted():
    empty = np.zeros((0, 3), np.float32)  # strides (12, 4), or (0, 0) from some producers
    density = np.zeros(SHAPE)
    ue.deposit(empty, density, BOX)
    ue.deposit(np.lib.stride_tricks.as_strided(empty, strides=(0, 0)), density, BOX)
    assert not density.any()
    out = ue.cic_density(empty, SHAPE, BOX)
    assert type(out) is np.ndarray and not out.any()
    ue.deposit(particles(), np.zeros((0, 6, 4))[:, ::-1], BOX)  # nothing to deposit into, nothing to fail


def test_overlapping_arguments_are_refused():
    memory = np.zeros(96, np.uint8)
    with pytest.raises(BufferError, match="overlaps another array argument"):
        ue.deposit(memory.view(np.float32).reshape(8, 3), memory.view(np.float64).reshape(2, 2, 3), 1.0)
    assert not memory.any()


# --- read-only, locks, wrong arguments ---

def test_readonly_positions_are_accepted():
    p = particles()
    frozen = p.copy()
    frozen.flags.writeable = False
    density = np.zeros(SHAPE)
    ue.deposit(frozen, density, BOX)
    readonly_amso = amso.MemArray(p.shape, np.float32, readonly=True)
    ue.deposit(readonly_amso, density, BOX)  # all zeros: every particle at the origin
    expected = reference(p) + reference(np.zeros_like(p))
    np.testing.assert_allclose(density, expected, rtol=1e-12)


def test_readonly_or_locked_density_is_refused_and_left_untouched():
    p = particles()
    frozen = np.ones(SHAPE)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="expected a writable float64 array with 3 dimensions, got a read-only one") as error:
        ue.deposit(p, frozen, BOX)
    assert "while processing 'density'" in error.value.__notes__
    assert (frozen == 1).all()
    locked = amso.MemArray(SHAPE, np.float64)
    with locked.get_dlpack():
        with pytest.raises(BufferError, match="locked"):
            ue.deposit(p, locked, BOX)
    assert not locked.to_numpy().any() and not locked.locked
    readonly = amso.MemArray(SHAPE, np.float64, readonly=True)
    with pytest.raises(ValueError, match="read-only"):
        ue.deposit(p, readonly, BOX)


@pytest.mark.parametrize("positions, error, message, argument", [
    (np.zeros((4, 3), np.float64), TypeError, "expected a float32 array with 2 dimensions, got a float64 array with 2 "
     "dimensions \\(numpy.ndarray on cpu\\)", "positions"),
    (np.zeros(12, np.float32), TypeError, "expected a float32 array with 2 dimensions, got a float32 array with 1 "
     "dimension \\(numpy.ndarray on cpu\\)", "positions"),
    ([[0.0, 0.0, 0.0]], TypeError, "expected a float32 array with 2 dimensions \\(an object with __dlpack__.*got list",
     "positions"),
    (np.zeros((4, 4), np.float32), ValueError, "deposit\\(\\): argument 'positions' must have shape \\(n, 3\\)", None),
])
def test_wrong_arguments_name_what_was_expected_and_what_arrived(positions, error, message, argument):
    density = np.full(SHAPE, 2.0)
    with pytest.raises(error, match=message) as raised:
        ue.deposit(positions, density, BOX)
    if argument:
        assert f"while processing '{argument}'" in raised.value.__notes__
    assert (density == 2.0).all()
    with pytest.raises(TypeError, match="expected a writable float64 array with 3 dimensions, got a float64 array with 2"):
        ue.deposit(particles(), np.zeros((2, 2)), BOX)


def test_bool_bytes_other_than_0_and_1_are_refused():
    raw = np.frombuffer(bytearray(b"\x00\x02\x01"), dtype=bool)
    with pytest.raises(ValueError, match="bytes other than 0 and 1"):
        ue.count_true(raw)
    assert ue.count_true(np.array([True, False, True])) == 2


def test_bool_bytes_are_checked_at_each_element_of_a_strided_view():
    raw = np.frombuffer(bytearray(b"\x01\x00\x01\x00\x01\x02"), dtype=bool)
    assert ue.count_true(raw[::2]) == 3  # the 2 lies outside this view
    for view in (raw[1::2], raw[::-1], raw[3:]):
        with pytest.raises(ValueError, match="bytes other than 0 and 1"):
            ue.count_true(view)


# --- producers' deleters ---

@pytest.mark.parametrize("fields, error", [
    (dict(shape=(4, 3), dtype=(2, 32, 1)), None),  # accepted: deleted when the call returns
    (dict(shape=(4, 3), dtype=(2, 64, 1)), TypeError),  # wrong dtype, refused after the capsule was taken
    (dict(shape=(12,), dtype=(2, 32, 1)), TypeError),  # wrong ndim
    # accepted: misaligned host data, read through an aligned copy (the buffer covers the offset)
    (dict(shape=(4, 3), dtype=(2, 32, 1), byte_offset=2, nbytes=4 * 3 * 4 + 2), None),
])
def test_producer_deleters_run_exactly_once(fields, error):
    tensor = Tensor(**fields)
    density = np.zeros(SHAPE)
    if error is None:
        ue.deposit(tensor.producer(), density, BOX)
    else:
        with pytest.raises(error):
            ue.deposit(tensor.producer(), density, BOX)
    gc.collect()
    assert tensor.deleted == 1


def test_deleters_run_when_a_later_argument_fails():
    first = Tensor(shape=(4, 3), dtype=(2, 32, 1))
    second = Tensor(shape=(2, 2), dtype=(2, 64, 1))  # the density argument, wrong ndim
    with pytest.raises(TypeError):
        ue.deposit(first.producer(), second.producer(), BOX)
    gc.collect()
    assert (first.deleted, second.deleted) == (1, 1)


def test_user_crate_classes_carry_their_own_dlpack_descriptors():
    for cls in (ue.Positions, ue.Density, ue.Weights):
        assert cls.__dict__["__dlpack__"].__objclass__ is cls
    density = ue.Density((2, 2, 2))
    np.testing.assert_array_equal(np.from_dlpack(density), np.zeros((2, 2, 2)))


# --- one stream context for every copy of the runtime ---

def test_the_user_crate_reports_the_stream_context_amso_sets():
    """The user crate links its own copy of amso's runtime; `amso.cuda.stream(...)` must reach it,
    or its kernels and exports work on a stream the caller never named. Read through the crate's
    exchange table, as torch and TVM-FFI read it (no GPU needed)."""
    current = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))(
        DLPackExchangeAPI.from_address(ue.Density.__c_dlpack_exchange_api__).current_work_stream)
    bundled = DLPackExchangeAPI.from_address(type(amso.MemArray(1, "float32")).__c_dlpack_exchange_api__)
    assert bundled.current_work_stream != ctypes.cast(current, ctypes.c_void_p).value  # two copies indeed
    stream, kDLCUDA = ctypes.c_void_p(), 2
    assert current(kDLCUDA, 0, ctypes.byref(stream)) == 0 and stream.value is None
    with amso.cuda.stream(0x5A5A00):
        assert current(kDLCUDA, 0, ctypes.byref(stream)) == 0 and stream.value == 0x5A5A00
        with amso.cuda.stream(2):
            assert current(kDLCUDA, 0, ctypes.byref(stream)) == 0 and stream.value == 2
        assert current(kDLCUDA, 0, ctypes.byref(stream)) == 0 and stream.value == 0x5A5A00
    assert current(kDLCUDA, 0, ctypes.byref(stream)) == 0 and stream.value is None


def test_each_thread_has_its_own_stream_context_in_the_user_crate_too():
    current = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))(
        DLPackExchangeAPI.from_address(ue.Density.__c_dlpack_exchange_api__).current_work_stream)
    seen, barrier = {}, threading.Barrier(4)

    def work(handle):
        with amso.cuda.stream(handle):
            barrier.wait(timeout=30)  # every thread inside its own context at once
            stream = ctypes.c_void_p()
            assert current(2, 0, ctypes.byref(stream)) == 0
            seen[handle] = stream.value
            barrier.wait(timeout=30)

    threads = [threading.Thread(target=work, args=(0x1000 * (i + 1),)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {0x1000 * (i + 1): 0x1000 * (i + 1) for i in range(4)}


def run_python(script):
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_the_user_crate_works_in_a_process_without_the_amso_package():
    """Without `amso` installed, nothing can set a stream context: the crate imports and works."""
    done = run_python(
        "import sys; sys.modules['amso'] = None\n"  # `import amso` now raises ModuleNotFoundError
        "import numpy as np, amso_user_example as ue\n"
        "density = ue.Density((2, 2, 2))\n"
        "ue.deposit(np.full((1, 3), 0.5, np.float32), density, 4.0)\n"
        "print(density.to_numpy().sum())\n"
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(1.0)


def test_the_user_crate_needs_nothing_of_the_amso_package(tmp_path):
    """A user crate never imports `amso`: an `amso` package that is there but broken does not
    stop it either."""
    (tmp_path / "amso").mkdir()
    (tmp_path / "amso" / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    done = run_python(
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import numpy as np, amso_user_example as ue\n"
        "density = ue.Density((2, 2, 2))\n"
        "ue.deposit(np.full((1, 3), 0.5, np.float32), density, 4.0)\n"
        "print(density.to_numpy().sum())\n"
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(1.0)


def test_a_user_crate_loaded_before_amso_publishes_what_amso_then_shares():
    """The first copy of the runtime to load publishes the process table, here the user
    crate's, in the interpreter's dict (mirrored in sys.modules for earlier runtimes); amso,
    imported after the mirror was deleted, joins that table, puts the mirror back, and sets
    its stream context through the table."""
    done = run_python(textwrap.dedent(f"""
        import ctypes, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        ctypes.pythonapi.PyInterpreterState_Get.restype = ctypes.c_void_p
        ctypes.pythonapi.PyInterpreterState_GetDict.restype = ctypes.py_object
        ctypes.pythonapi.PyInterpreterState_GetDict.argtypes = [ctypes.c_void_p]
        anchor = ctypes.pythonapi.PyInterpreterState_GetDict(ctypes.pythonapi.PyInterpreterState_Get())
        import amso_user_example as ue
        table = anchor["_amso_process_v4"]
        assert sys.modules["_amso_process_v4"].table is table
        del sys.modules["_amso_process_v4"]
        import amso
        from hostile import DLPackExchangeAPI
        assert anchor["_amso_process_v4"] is table and sys.modules["_amso_process_v4"].table is table
        current = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))(
            DLPackExchangeAPI.from_address(ue.Density.__c_dlpack_exchange_api__).current_work_stream)
        stream = ctypes.c_void_p()
        with amso.cuda.stream(0x5A5A00):
            assert current(2, 0, ctypes.byref(stream)) == 0 and stream.value == 0x5A5A00, stream.value
        print("shared")
    """))
    assert done.returncode == 0 and done.stdout.strip() == "shared", done.stderr


# --- on the GPU ---

@pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
def test_host_and_device_arguments_mixed_are_refused():
    density = amso.MemArray(SHAPE, np.float64, on_device=True)
    with pytest.raises(ValueError, match="'positions' and 'density' must be on the same device"):
        ue.deposit(particles(), density, BOX)
