"""amso arrays behave as NumPy, CuPy and PyTorch users expect: np.asarray, the buffer protocol,
len and iteration, pickle, copy, dtype names, isinstance across crates, stream objects.
References are NumPy's own arrays and memoryviews, and values written on one side."""

from __future__ import annotations

import copy
import ctypes
import gc
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import COMPILED, DTYPES, NOT_NUMPY_DLPACK, VECTOR_PAIRS, VECTORS, dtype_name, np_dtype, sample

import amso

GPU = amso.cuda.is_available()


def filled(name, shape, seed=0):
    a = amso.MemArray(shape, name)
    a.read_numpy_array(sample(name, shape, seed))
    return a


def address(a) -> int:
    """The host address of `a`'s data, through DLPack (an independent path)."""
    return a.__array__().ctypes.data if dtype_name(a) in NOT_NUMPY_DLPACK else np.from_dlpack(a).ctypes.data


# --- np.asarray / __array__ ---


def test_asarray_is_a_zero_copy_view_for_every_compiled_pair(case):
    name, shape = case
    a = filled(name, shape)
    view = np.asarray(a)
    assert (view.shape, view.dtype) == (shape, np_dtype(name))
    np.testing.assert_array_equal(view, sample(name, shape))
    if a.size:
        assert view.ctypes.data == address(a)
        view.reshape(-1)[-1] = sample(name, shape, seed=1).reshape(-1)[-1]
        assert a[tuple(d - 1 for d in shape)] == sample(name, shape, seed=1).reshape(-1)[-1]


def test_asarray_of_a_readonly_array_is_readonly():
    a = amso.MemArray((2, 3), np.float32, readonly=True)
    assert not np.asarray(a).flags.writeable
    assert not a.__array__().flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(a)[0, 0] = 1


def test_array_dtype_and_copy_follow_numpy_2():
    a = filled("int32", (2, 3))
    same = a.__array__(copy=False)
    assert same.ctypes.data == address(a)
    converted = a.__array__(np.float64)
    assert converted.dtype == np.float64 and converted.ctypes.data != address(a)
    np.testing.assert_array_equal(converted, sample("int32", (2, 3)).astype(np.float64))
    with pytest.raises(ValueError, match="needs a copy, but copy=False"):
        a.__array__(np.float64, copy=False)
    private = a.__array__(copy=True)
    private[0, 0] += 1
    assert a[0, 0] == sample("int32", (2, 3))[0, 0]
    assert np.array(a, copy=True).ctypes.data != address(a)


def test_views_outlive_the_array():
    a = filled("float64", (4, 4))
    view, buffer_view = np.asarray(a), memoryview(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(view, sample("float64", (4, 4)))
    assert buffer_view.tolist() == sample("float64", (4, 4)).tolist()


# --- the buffer protocol ---


@pytest.mark.parametrize("name", sorted({n for n, _ in COMPILED} - NOT_NUMPY_DLPACK))
def test_memoryview_matches_numpys_own(name):
    ndim = max(d for n, d in COMPILED if n == name)
    shape = (3, 2, 4)[:ndim]
    a = filled(name, shape)
    reference = memoryview(sample(name, shape))
    mine = memoryview(a)
    assert (mine.shape, mine.strides, mine.itemsize, mine.nbytes) == (
        reference.shape, reference.strides, reference.itemsize, reference.nbytes)
    assert np.asarray(mine).dtype == np_dtype(name)  # NumPy's own reading of the PEP 3118 format
    assert bytes(a) == sample(name, shape).tobytes()
    assert not mine.readonly and mine.c_contiguous


@pytest.mark.parametrize("name", sorted({n for n, d in COMPILED if d == 1} & NOT_NUMPY_DLPACK))
def test_dtypes_without_a_buffer_format_have_a_numpy_view(name):
    """bfloat16 and the low-precision floats have no PEP 3118 format: memoryview refuses them,
    NumPy views them (through __array__) as ml_dtypes' dtype, a packed pair as its byte."""
    a = filled(name, (5,))
    with pytest.raises(BufferError, match="no buffer-protocol .* format"):
        memoryview(a)
    view = np.asarray(a)
    assert view.dtype == np_dtype(name) and view.ctypes.data == a.__array__().ctypes.data
    np.testing.assert_array_equal(view.view(np.uint8), sample(name, (5,)).view(np.uint8))


def test_struct_frombuffer_and_ctypes_read_and_write_through_the_buffer():
    a = filled("float32", (2, 3))
    assert struct.unpack_from("3f", a, 12) == tuple(sample("float32", (2, 3))[1])
    np.testing.assert_array_equal(np.frombuffer(a, np.float32), sample("float32", (2, 3)).reshape(-1))
    cell = (ctypes.c_float * 6).from_buffer(a)  # a writable buffer request
    cell[5] = 99.5
    assert a[1, 2] == 99.5


def test_readonly_arrays_refuse_writable_buffers():
    a = amso.MemArray(4, np.float64, readonly=True)
    assert memoryview(a).readonly
    get_buffer = ctypes.pythonapi.PyObject_GetBuffer
    get_buffer.argtypes, get_buffer.restype = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int], ctypes.c_int
    view = ctypes.create_string_buffer(256)  # room for a Py_buffer
    with pytest.raises(BufferError, match="read-only; a writable buffer"):
        get_buffer(a, view, 1)  # PyBUF_WRITABLE
    with pytest.raises(TypeError, match="not writable"):
        (ctypes.c_double * 4).from_buffer(a)


def test_a_live_buffer_pins_the_data_on_the_host():
    a = filled("float64", (8,))
    view = memoryview(a)
    with pytest.raises(BufferError, match="1 live buffer export"):
        a.move_memory(amso.dlpack.kDLCUDA)
    with pytest.raises(BufferError, match="live buffer export"):
        a.add_index_tuple()
    a.move_memory(amso.dlpack.kDLCPU)  # staying on the host is fine
    assert not a.on_device and view.tolist() == sample("float64", (8,)).tolist()
    assert a.export_count == 1  # the buffer owns the memory it describes, as a DLPack export does
    view.release()
    assert a.export_count == 0
    if GPU:
        a.move_memory(amso.dlpack.kDLCUDA)
        assert a.on_device
    else:
        with pytest.raises(RuntimeError, match="no CUDA driver"):
            a.move_memory(amso.dlpack.kDLCUDA)


def test_an_empty_array_with_huge_dimensions_has_a_buffer():
    # Zero bytes; the other dimensions' bytes (2**62) fit, as NumPy's rule asks, and so do the strides.
    a = amso.MemArray((0, 1 << 30, 1 << 29), np.float64)
    view = memoryview(a)
    assert (view.nbytes, view.shape, view.strides) == (0, (0, 1 << 30, 1 << 29), (1 << 62, 8 << 29, 8))
    assert a.export_count == 1
    view.release()
    assert a.export_count == 0


def test_an_empty_array_with_huge_dimensions_pickles_through_its_raw_bytes():
    a = amso.MemArray((0, 1 << 30, 1 << 29), np.float64)  # a pickle's data is a RawBytes buffer
    b = pickle.loads(pickle.dumps(a, protocol=5))
    assert (type(b), b.shape, b.nbytes) == (type(a), a.shape, 0)
    assert a.export_count == 0


def test_locked_arrays_refuse_buffers():
    a = amso.MemArray(3, np.float64)
    with a.get_dlpack():
        with pytest.raises(BufferError, match="locked"):
            memoryview(a)
    assert memoryview(a).nbytes == 24


# --- len and iteration ---


def test_len_and_iteration_for_every_compiled_pair(case):
    name, shape = case
    a = filled(name, shape)
    assert len(a) == shape[0]
    items = list(a)
    reference = sample(name, shape)
    assert len(items) == shape[0]
    if len(shape) == 1:
        assert [a[i] for i in range(shape[0])] == items
        np.testing.assert_array_equal(np.array(items, dtype=reference.dtype), reference)
    else:
        for row, expected in zip(items, reference):
            assert isinstance(row, np.ndarray)
            np.testing.assert_array_equal(row, expected)


def test_rows_are_views_writable_unless_readonly():
    a = filled("int64", (3, 2))
    first = next(iter(a))
    first[1] = -7
    assert a[0, 1] == -7
    readonly = amso.MemArray((2, 2), np.int64, readonly=True)
    assert not any(row.flags.writeable for row in readonly)


# --- pickle and copy ---


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_round_trip_for_every_compiled_pair(case, protocol):
    name, shape = case
    a = filled(name, shape)
    b = pickle.loads(pickle.dumps(a, protocol=protocol))
    assert type(b) is type(a) and (b.shape, b.dtype, b.readonly, b.pinned) == (a.shape, a.dtype, False, False)
    np.testing.assert_array_equal(b.to_numpy(), sample(name, shape))
    if a.size:
        assert address(b) != address(a)


def test_protocol_5_hands_the_data_out_of_band():
    a = filled("float64", (256, 256))
    buffers = []
    payload = pickle.dumps(a, protocol=5, buffer_callback=buffers.append)
    assert len(payload) < 4096 and [buffer.raw().nbytes for buffer in buffers] == [512 * 1024]
    assert np.frombuffer(buffers[0], np.float64).ctypes.data == address(a), "no copy on the way out"
    b = pickle.loads(payload, buffers=buffers)
    np.testing.assert_array_equal(b.to_numpy(), sample("float64", (256, 256)))
    inline = pickle.dumps(a, protocol=4)
    assert len(inline) > 512 * 1024


def test_protocol_5_loads_adopts_the_out_of_band_buffer_as_numpy_does():
    """NumPy's own round trip with buffer_callback gives back an array over the same memory;
    amso's does too: loads adopts the buffer (the array keeps it, and so the original, alive)."""
    reference = np.arange(4.0)
    numpy_buffers = []
    numpy_back = pickle.loads(pickle.dumps(reference, protocol=5, buffer_callback=numpy_buffers.append),
                              buffers=numpy_buffers)
    assert numpy_back.ctypes.data == reference.ctypes.data
    a = filled("float64", (64, 8))
    buffers = []
    b = pickle.loads(pickle.dumps(a, protocol=5, buffer_callback=buffers.append), buffers=buffers)
    assert type(b) is type(a) and address(b) == address(a) and not b.readonly
    b[0, 0] = -1.0
    assert a[0, 0] == -1.0
    del a, buffers
    gc.collect()
    assert b[0, 0] == -1.0 and b[1, 0] == sample("float64", (64, 8))[1, 0]


def test_in_band_pickles_keep_read_only_arrays_read_only_and_copy_into_writable_ones():
    frozen = amso.MemArray(5, np.int32, readonly=True)
    for protocol in (2, 4, 5):
        b = pickle.loads(pickle.dumps(frozen, protocol=protocol))
        assert b.readonly and b.to_numpy().tolist() == [0] * 5
    writable = pickle.loads(pickle.dumps(filled("int32", (5,)), protocol=4))
    writable[0] = 7  # a writable array never writes into the pickle's read-only bytes
    assert writable[0] == 7


def test_a_misaligned_buffer_is_copied_not_misread():
    raw = bytearray(4 * 8 + 1)
    view = memoryview(raw)[1:]
    view[:] = np.arange(4.0).tobytes()
    b = amso._amso._amso_rebuild("float64", (4,), False, False, None, view)
    assert b.to_numpy().tolist() == [0.0, 1.0, 2.0, 3.0] and address(b) % 8 == 0


def test_pickle_keeps_readonly_and_drops_exports_and_locks():
    a = amso.MemArray((2, 2), np.float32, readonly=True)
    view = np.from_dlpack(a)
    b = pickle.loads(pickle.dumps(a))
    assert b.readonly and b.export_count == 0 and a.export_count == 1
    del view
    with a.get_dlpack():
        with pytest.raises(BufferError, match="locked"):
            pickle.dumps(a)  # reading a locked array is refused, as every other read
    assert not pickle.loads(pickle.dumps(a)).locked


def test_copies_are_independent():
    a = filled("complex64", (2, 3))
    for duplicate in (copy.copy(a), copy.deepcopy(a), a.copy()):
        assert type(duplicate) is type(a) and duplicate.shape == a.shape
        np.testing.assert_array_equal(duplicate.to_numpy(), a.to_numpy())
        duplicate[0, 0] = 5 + 5j
        assert a[0, 0] == sample("complex64", (2, 3))[0, 0]
    assert amso.MemArray(2, np.float32, readonly=True).copy().readonly


# --- dtypes, classes, streams ---


def test_every_supported_name_is_a_numpy_dtype():
    """Every compiled dtype's name is a NumPy dtype (ml_dtypes' once amso is imported), except a
    packed vector's, which NumPy lacks: its arrays read as their raw bytes. (A record's name is
    its own: test_record_arrays.py.)"""
    for name, _ in COMPILED:
        if DTYPES[name][2] > 1:  # lanes
            assert np_dtype(name) == np.uint8
            with pytest.raises(TypeError):
                np.dtype(name)
        else:
            assert np.dtype(name) == np_dtype(name)


def test_isinstance_spans_crates_and_subclasses():
    a = amso.MemArray(2, np.float32)
    subclass = type("Mine", (type(amso.MemArray((2, 2), np.float32)),), {})
    assert isinstance(a, amso.MemArray) and isinstance(subclass((2, 2)), amso.MemArray)
    assert issubclass(subclass, amso.MemArray) and issubclass(type(a), amso.MemArray)
    fake = type("Fake", (), {"__amso_type__": type(a).__amso_type__})
    for other in (np.zeros(2), 3, None, fake(), a.__dlpack__()):
        assert not isinstance(other, amso.MemArray)
    assert not issubclass(fake, amso.MemArray) and not issubclass(np.ndarray, amso.MemArray)
    ue = pytest.importorskip("amso_user_example")
    density = ue.Density((2, 2, 2))
    assert isinstance(density, amso.MemArray) and issubclass(ue.Density, amso.MemArray)
    density[1, 1, 1] = 3.0
    restored = pickle.loads(pickle.dumps(density, protocol=5))
    assert type(restored) is ue.Density and restored[1, 1, 1] == 3.0


class LegacyStream:
    """The smallest `__cuda_stream__` object: the legacy default stream."""

    def __cuda_stream__(self):
        return (0, 1)


def test_stream_objects_are_accepted_wherever_a_stream_is():
    a = amso.MemArray(4, np.float64)
    a.move_memory(amso.dlpack.kDLCPU, stream=LegacyStream())
    with a.get_dlpack(stream=LegacyStream()):
        pass
    with amso.cuda.stream(LegacyStream()):
        assert amso._amso.set_current_stream(None) == 1
    bad = type("Bad", (), {"__cuda_stream__": lambda self: "nope"})()
    with pytest.raises(TypeError, match="must return a \\(version, handle\\) tuple"):
        a.move_memory(amso.dlpack.kDLCPU, stream=bad)
    with pytest.raises(TypeError, match="expected a stream"):
        a.move_memory(amso.dlpack.kDLCPU, stream=1.5)


# --- on the GPU ---

gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device")


@gpu
def test_device_arrays_refuse_numpy_and_say_what_to_do():
    a = amso.MemArray((2, 3), np.float32, on_device=True)
    with pytest.raises(TypeError, match="to_numpy"):
        np.asarray(a)
    with pytest.raises(TypeError, match="to_numpy"):
        list(a)
    with pytest.raises(BufferError, match="device memory"):
        memoryview(a)
    assert list(amso.MemArray(3, np.int32, on_device=True)) == [0, 0, 0]


@gpu
def test_device_pickle_and_copy_stay_on_the_device():
    a = filled("float32", (64, 3))
    a.move_memory(amso.dlpack.kDLCUDA)
    for protocol in (2, 5):
        b = pickle.loads(pickle.dumps(a, protocol=protocol))
        assert b.on_device and b.device_id == a.device_id
        np.testing.assert_array_equal(b.to_numpy(), sample("float32", (64, 3)))
    c = a.copy()
    assert c.on_device and c.__cuda_array_interface__["data"][0] != a.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(c.to_numpy(), a.to_numpy())
    pinned = amso.MemArray(4, np.float64, pinned=True)
    assert pickle.loads(pickle.dumps(pinned)).pinned
    # Protocol 5: the device data's host copy goes out of band, and comes back uploaded.
    buffers = []
    payload = pickle.dumps(a, protocol=5, buffer_callback=buffers.append)
    assert len(payload) < 4096 and [buffer.raw().nbytes for buffer in buffers] == [a.nbytes]
    back = pickle.loads(payload, buffers=buffers)
    assert back.on_device and np.array_equal(back.to_numpy(), sample("float32", (64, 3)))
    # A pinned array's out-of-band buffer is not pinned memory: it comes back in fresh pinned memory.
    pinned[1] = 3.0
    buffers = []
    again = pickle.loads(pickle.dumps(pinned, protocol=5, buffer_callback=buffers.append), buffers=buffers)
    assert again.pinned and again[1] == 3.0 and address(again) != address(pinned)


@gpu
def test_torch_streams_as_objects():
    torch = pytest.importorskip("torch")
    stream = torch.cuda.Stream()
    a = filled("float64", (1000,))
    a.move_memory(amso.dlpack.kDLCUDA, stream=stream)
    a.add_index_tuple(stream=stream)
    with amso.cuda.stream(stream):
        a.move_memory(amso.dlpack.kDLCPU)
    np.testing.assert_array_equal(a.to_numpy(), sample("float64", (1000,)) + np.arange(1000))


def test_an_uncompiled_pair_gets_advice_that_fits_the_installation():
    # Run from a source checkout (the editable install) and from the wheel (scripts/amso.py's
    # wheel check): each gets the advice it can follow.
    checkout = (Path(amso.__file__).resolve().parents[3] / "specs" / "types.yaml").is_file()
    with pytest.raises(TypeError) as info:
        amso.MemArray(3, object)
    unknown = str(info.value)
    assert unknown.startswith("amso has no compiled array for dtype object with ndim 1: amso's dtypes are bool, ")
    assert "#[amso_array(YourType, NDIM)]" in unknown
    # (Every branch of the message, a spec pair missing from a checkout's or a wheel's build
    # and a crate's own type included, is a unit test of python/base/registry.rs.)
    if checkout:
        assert unknown.endswith("or add it to the dtype table of specs/types.yaml")
    else:
        assert "specs/types.yaml" not in unknown


def test_the_package_compiles_every_dtype_of_the_spec_at_every_ndim():
    names = [row[0] for row in amso._amso._dtypes() if row[0] not in VECTORS]
    assert len(names) >= 27
    assert COMPILED == sorted((name, ndim) for name in names for ndim in range(1, amso.MAX_NDIM + 1))
    # The vector, the spec's worked example, is compiled at ndim 1 (its NumPy view has one more).
    assert VECTOR_PAIRS == [("float32x4", 1)]
    for name in ("int16", "uint16", "uint32", "uint64", "float8_e5m2fnuz", "float4_e2m1fn_x2"):
        a = amso.MemArray((1,) * amso.MAX_NDIM, name)
        assert a.ndim == 8 and a.dtype == amso.class_for((1,) * 8, name)((1,) * 8).dtype
