"""GPU behaviour of amso on its own: the MemArray design's test for every compiled pair, moves,
streams, pinned memory, device DLPack and the CUDA array interface. Skipped without a driver."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from conftest import COMPILED, LOW_PRECISION, NOT_NUMPY_DLPACK, np_dtype, sample, shapes_for

import amso
from amso.dlpack import kDLCPU, kDLCUDA

pytestmark = pytest.mark.skipif(
    not amso.cuda.is_available(), reason="no CUDA driver here; the GPU suite runs on the GPU machine (scripts/gpu_suite.sh)"
)


def add_index_reference(start: np.ndarray) -> np.ndarray:
    """NumPy's version of the kernel: x + sum(indices), computed as the kernel does per dtype."""
    sums = np.indices(start.shape).sum(axis=0) if start.size else np.zeros(start.shape, np.int64)
    kind = start.dtype.kind
    if start.dtype == np.bool_:
        return (start | (sums != 0)).astype(bool)
    if kind in "iu":
        return (start.astype(np.uint64) + sums.astype(np.uint64)).astype(start.dtype)  # wraps
    if kind == "c":
        real_type = np.float32 if start.dtype == np.complex64 else np.float64
        return start + sums.astype(real_type)
    if start.dtype.itemsize == 2:  # float16 and bfloat16: widen, add in float32, round back
        return (start.astype(np.float32) + sums.astype(np.float32)).astype(start.dtype)
    return start + sums.astype(start.dtype)


@pytest.mark.parametrize(
    "name, shape",
    [(n, s) for n, ndim in COMPILED for s in shapes_for(ndim)],
    ids=lambda v: str(v) if isinstance(v, str) else "x".join(map(str, v)),
)
def test_memarray_design_sequence(name, shape):
    a = amso.MemArray(shape, name)
    if name not in NOT_NUMPY_DLPACK:
        with a.get_dlpack(kDLCPU) as exported:
            assert np.from_dlpack(exported).shape == shape
    a.move_memory(kDLCUDA)
    assert a.on_device and a.__dlpack_device__() == (kDLCUDA, 0)
    a.move_memory(kDLCPU)
    assert not a.on_device
    start = sample(name, shape, seed=5)
    if start.dtype.kind in "iu" and start.dtype.itemsize >= 4:
        start //= 4  # keep sums of indices from overflowing into NumPy's own wrap warnings
    a.read_numpy_array(start)
    a.move_memory(kDLCUDA)
    if name in LOW_PRECISION and a.size:  # too few bits for index sums: refused, nothing changed
        with pytest.raises(RuntimeError, match="add_index_tuple does not run on|no CUDA kernel"):
            a.add_index_tuple()
        np.testing.assert_array_equal(a.to_numpy().view(np.uint8), start.view(np.uint8))
        return
    a.add_index_tuple()
    assert a.on_device
    a.move_memory(kDLCPU)
    with np.errstate(over="ignore"):
        expected = add_index_reference(start)
    np.testing.assert_array_equal(a.to_numpy(), expected)


def test_add_index_moves_data_and_runs_on_large_arrays():
    a = amso.MemArray((64, 256, 257), np.float32)
    a.add_index_tuple()  # moves to the device by itself
    assert a.on_device
    expected = np.indices((64, 256, 257)).sum(axis=0).astype(np.float32)
    np.testing.assert_array_equal(a.to_numpy(), expected)


def test_pageable_moves_through_the_staging_pipeline_keep_every_element_in_place():
    # 80 MiB and a bit: six 16 MiB staging chunks, so every one of the 4 slots is reused, and a
    # short last chunk. float64 keeps value + position exact.
    n = (80 << 20) // 8 + 1237
    x = np.random.default_rng(3).integers(0, 1 << 20, n).astype(np.float64)
    a = amso.asarray(x.copy())
    a.move_memory(kDLCUDA)
    a.add_index_tuple()  # adds each element's position: a chunk staged to the wrong place shows
    a.move_memory(kDLCPU)
    np.testing.assert_array_equal(a.to_numpy(), x + np.arange(n, dtype=np.float64))


def test_device_id_out_of_range_names_the_device_count():
    count = amso.cuda.device_count()
    with pytest.raises(ValueError, match=f"this machine has {count} CUDA device"):
        amso.MemArray(4, np.float32, device_id=count)
    a = amso.MemArray(4, np.float32)
    with pytest.raises(ValueError, match="out of range"):
        a.move_memory(kDLCUDA, count + 3)
    assert not a.on_device


def test_items_and_numpy_io_while_on_the_device():
    a = amso.MemArray((3, 4), np.float64)
    a.move_memory(kDLCUDA)
    a[1, 2] = 7.5
    assert a[1, 2] == 7.5 and a.on_device
    a.read_numpy_array(np.arange(12.0).reshape(3, 4))
    assert a.on_device
    np.testing.assert_array_equal(a.to_numpy(), np.arange(12.0).reshape(3, 4))
    assert a[-1, -1] == 11.0


def test_pinned_arrays_move_asynchronously_and_export_as_cuda_host():
    a = amso.MemArray((1024, 1024), np.float32, pinned=True)
    assert a.pinned and "pinned=True" in repr(a)
    a.read_numpy_array(np.ones((1024, 1024), np.float32))
    a.move_memory(kDLCUDA, async_copy=True)
    a.add_index_tuple()
    a.move_memory(kDLCPU, async_copy=False)
    np.testing.assert_array_equal(a.to_numpy(), 1 + np.indices((1024, 1024)).sum(axis=0))
    capsule = a.__dlpack__(max_version=(1, 0), dl_device=(3, 0), copy=False)
    assert capsule is not None
    with pytest.raises(BufferError, match="pinned=True"):
        amso.MemArray(4, np.float32).__dlpack__(dl_device=(3, 0))


def test_cuda_array_interface_v3():
    a = amso.MemArray((5, 6), np.int32)
    with pytest.raises(AttributeError, match="host memory"):
        a.__cuda_array_interface__
    a.move_memory(kDLCUDA)
    interface = a.__cuda_array_interface__
    assert interface["shape"] == (5, 6) and interface["typestr"] == "<i4" and interface["version"] == 3
    assert interface["strides"] is None
    pointer, readonly = interface["data"]
    assert pointer != 0 and readonly is False
    assert interface["stream"] in (1, 2) or interface["stream"] > 2
    ro = amso.MemArray(3, np.float64, readonly=True)
    ro.move_memory(kDLCUDA)
    assert ro.__cuda_array_interface__["data"][1] is True


def test_device_dlpack_stream_values():
    a = amso.MemArray(16, np.float32)
    a.move_memory(kDLCUDA)
    for stream in (None, 1, 2, -1):
        assert a.__dlpack__(stream=stream, max_version=(1, 0)) is not None
    with pytest.warns(UserWarning, match=r"stream=0\) is ambiguous"):
        a.__dlpack__(stream=0)
    with pytest.raises(ValueError):
        a.__dlpack__(stream=-5)


def test_dl_device_copies_to_the_host_when_allowed():
    a = amso.MemArray(8, np.float64)
    a.read_numpy_array(np.arange(8.0))
    a.move_memory(kDLCUDA)
    host = np.from_dlpack(a, device="cpu")  # dl_device=(kDLCPU, 0): a copy
    np.testing.assert_array_equal(host, np.arange(8.0))
    host[0] = 100.0
    assert a[0] == 0.0, "the export to the host is a private copy"
    with pytest.raises(BufferError, match="copy=False"):
        a.__dlpack__(dl_device=(1, 0), copy=False, max_version=(1, 0))


def test_exports_keep_device_memory_alive_across_moves_and_deletion():
    a = amso.MemArray(1 << 20, np.float32)
    a.move_memory(kDLCUDA)
    capsule = a.__dlpack__(max_version=(1, 0))
    assert a.export_count == 1
    a.move_memory(kDLCPU)
    a.move_memory(kDLCUDA)
    del a  # the capsule still owns its tensor and the device memory behind it
    del capsule


def test_out_of_device_memory_is_a_memory_error_and_the_array_stays_usable():
    # On out-of-memory amso's pool gives its cache back and asks once more: "free" counts only
    # after the cache (blocks earlier tests of this process freed) is given back.
    gc.collect()
    amso.flush_frees()
    amso.empty_cache()
    free, _ = amso.cuda.memory_info()
    elements = (free + (1 << 30)) // 4  # 1 GiB more than the card has free
    try:
        a = amso.MemArray(elements, np.float32)  # host pages are zeroed lazily; one is touched
    except MemoryError:
        pytest.skip("this host cannot reserve an array larger than the GPU's free memory")
    a[0] = 3.0
    with pytest.raises(MemoryError, match="device"):
        a.move_memory(kDLCUDA)
    assert not a.on_device and a[0] == 3.0


def test_invalid_stream_values_are_clear_errors_and_move_nothing():
    # A handle of a destroyed stream is a dangling pointer that crashes inside libcuda itself
    # (seen on the H100, driver 580); what can be checked is checked before any copy.
    a = amso.MemArray(4, np.float32)
    with pytest.raises(ValueError, match="is not a CUDA stream"):
        a.move_memory(kDLCUDA, stream=-3)
    with pytest.raises(TypeError):
        a.move_memory(kDLCUDA, stream="default")
    assert not a.on_device


def test_unsupported_device_type_is_a_value_error():
    a = amso.MemArray(2, np.float32)
    with pytest.raises(ValueError, match="unsupported device type 10"):
        a.move_memory(10)
    with pytest.raises(ValueError, match="pinned=True"):
        a.move_memory(3)


@pytest.mark.skipif(not amso.cuda.is_available() or amso.cuda.device_count() < 2, reason="needs two GPUs")
def test_move_between_devices():
    a = amso.MemArray(1000, np.float64)
    a.read_numpy_array(np.arange(1000.0))
    a.move_memory(kDLCUDA, 0)
    a.add_index_tuple()  # on device 0
    a.move_memory(kDLCUDA, 1)
    assert a.__dlpack_device__() == (kDLCUDA, 1) and a.device_id == 1
    np.testing.assert_array_equal(a.to_numpy(), 2 * np.arange(1000.0))
    a.add_index_tuple()  # now on device 1
    np.testing.assert_array_equal(a.to_numpy(), 3 * np.arange(1000.0))


@pytest.mark.skipif(not amso.cuda.is_available() or amso.cuda.device_count() < 2, reason="needs two GPUs")
def test_dl_device_copies_between_gpus():
    torch = pytest.importorskip("torch")
    a = amso.MemArray(64, np.float32, device_id=0)
    a.read_numpy_array(np.arange(64, dtype=np.float32))
    a.move_memory(kDLCUDA)
    with pytest.raises(BufferError, match="copy=False"):
        a.__dlpack__(dl_device=(kDLCUDA, 1), copy=False, max_version=(1, 0))
    capsule = a.__dlpack__(dl_device=(kDLCUDA, 1), max_version=(1, 0))
    t = torch.from_dlpack(capsule)
    assert t.device == torch.device("cuda", 1)
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(64, dtype=np.float32))
    t += 1  # a private copy: the array on device 0 is unchanged
    assert a[5] == 5.0


def test_no_warning_for_standard_stream_values():
    a = amso.MemArray(4, np.float32)
    a.move_memory(kDLCUDA)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a.__dlpack__(stream=1)


def test_interface_dicts_are_fresh_and_follow_the_array():
    a = amso.MemArray((4, 4), np.float32, on_device=True)
    first = a.__cuda_array_interface__
    first["shape"] = (0,)
    first["data"] = (0, True)
    second = a.__cuda_array_interface__
    assert second is not first and second["shape"] == (4, 4) and second["data"][0] != 0
    torch = pytest.importorskip("torch")
    a.add_index_tuple(stream=torch.cuda.Stream().cuda_stream)  # handed over to amso's stream
    third = a.__cuda_array_interface__
    assert third["stream"] not in (1, 2) and third["stream"] != second["stream"]
    assert third["data"] == second["data"]
