"""Zero-copy interop on the GPU with PyTorch, CuPy, JAX and Numba, both directions of writes,
and stream ordering between amso's work and a consumer's stream. Skipped without a driver."""

from __future__ import annotations

import numpy as np
import pytest

import amso
from amso.dlpack import kDLCUDA

pytestmark = pytest.mark.skipif(
    not amso.cuda.is_available(), reason="no CUDA driver here; the GPU suite runs on the GPU machine (scripts/gpu_suite.sh)"
)


def device_array(shape=(4, 5), dtype=np.float32):
    a = amso.MemArray(shape, dtype)
    a.read_numpy_array(np.arange(np.prod(shape)).reshape(shape))
    a.move_memory(kDLCUDA)
    return a


def test_torch_from_dlpack_is_zero_copy_both_ways():
    torch = pytest.importorskip("torch")
    a = device_array()
    t = torch.from_dlpack(a)
    assert t.is_cuda and t.data_ptr() == a.__cuda_array_interface__["data"][0]
    t[1, 2] = -1.0
    torch.cuda.synchronize()
    assert a[1, 2] == -1.0
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0
    del a  # the tensor keeps the memory alive: element [1, 2] held 7, [0, 0] held 0
    assert t.sum().item() == pytest.approx(np.arange(20).sum() - 7 + (-1) - 0 + 42)


def test_torch_as_tensor_through_the_interface_dict():
    torch = pytest.importorskip("torch")
    a = device_array()
    t = torch.as_tensor(a, device="cuda")
    assert t.data_ptr() == a.__cuda_array_interface__["data"][0]
    t += 1
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.to_numpy(), np.arange(20).reshape(4, 5) + 1)


def test_cupy_from_dlpack_and_asarray_are_zero_copy():
    cp = pytest.importorskip("cupy")
    a = device_array((3, 7), np.float64)
    for view in (cp.from_dlpack(a), cp.asarray(a)):
        assert view.data.ptr == a.__cuda_array_interface__["data"][0]
    view = cp.from_dlpack(a)
    view *= 2
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(a.to_numpy(), 2 * np.arange(21.0).reshape(3, 7))
    a[2, 6] = 0.5
    assert float(view[2, 6]) == 0.5


def test_jax_from_dlpack_reads_amso_memory():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    a = device_array((8, 8), np.float32)
    x = jax.dlpack.from_dlpack(a)
    assert list(x.devices())[0].platform == "gpu"
    np.testing.assert_array_equal(np.asarray(x), np.arange(64, dtype=np.float32).reshape(8, 8))


def test_numba_as_cuda_array_is_zero_copy():
    numba_cuda = pytest.importorskip("numba.cuda")
    a = device_array((16,), np.float32)
    view = numba_cuda.as_cuda_array(a)
    assert view.device_ctypes_pointer.value == a.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(view.copy_to_host(), np.arange(16, dtype=np.float32))
    # Written through Numba, read through amso (no @cuda.jit: numba-cuda's JIT needs an older
    # NumPy than some images ship).
    view.copy_to_device(np.full(16, 2.5, np.float32))
    numba_cuda.synchronize()
    np.testing.assert_array_equal(a.to_numpy(), np.full(16, 2.5, np.float32))


def test_consumer_on_another_stream_sees_amso_work_on_a_side_stream():
    torch = pytest.importorskip("torch")
    shape = (256, 512, 512)
    producer = torch.cuda.Stream()
    consumer = torch.cuda.Stream()
    a = amso.MemArray(shape, np.float32)
    a.move_memory(kDLCUDA)
    expected = float(np.indices(shape, dtype=np.float64).sum(axis=0).sum())
    for _ in range(3):
        # Queue a long chain on the producer stream, then import on the consumer stream at
        # once: without the event handshake the consumer would read unfinished data.
        for _ in range(4):
            a.add_index_tuple(stream=producer.cuda_stream)
        with torch.cuda.stream(consumer):
            t = torch.from_dlpack(a)  # torch passes its current (consumer) stream
            total = t.double().sum()
        consumer.synchronize()
        assert total.item() == pytest.approx(4 * expected, rel=1e-6)
        a.read_numpy_array(np.zeros(shape, np.float32))


def test_async_moves_followed_by_explicit_synchronisation():
    torch = pytest.importorskip("torch")
    stream = torch.cuda.Stream()
    a = amso.MemArray((2048, 2048), np.float32, pinned=True)
    a.read_numpy_array(np.full((2048, 2048), 3.0, np.float32))
    a.move_memory(kDLCUDA, stream=stream.cuda_stream, async_copy=True)
    a.add_index_tuple(stream=stream.cuda_stream)
    a.move_memory(amso.dlpack.kDLCPU, stream=stream.cuda_stream, async_copy=True)
    stream.synchronize()
    np.testing.assert_array_equal(a.to_numpy(), 3 + np.indices((2048, 2048)).sum(axis=0))


def test_get_dlpack_cuda_moves_then_locks_for_a_torch_consumer():
    torch = pytest.importorskip("torch")
    a = amso.MemArray((3, 3), np.float32)
    a.read_numpy_array(np.eye(3, dtype=np.float32))
    with a.get_dlpack(kDLCUDA) as exported:
        assert a.on_device and a.locked and exported.__dlpack_device__() == (kDLCUDA, 0)
        t = torch.from_dlpack(exported)
        t *= 5
        with pytest.raises(BufferError, match="locked"):
            a.__cuda_array_interface__
        with pytest.raises(BufferError, match="locked"):
            torch.from_dlpack(a)
    torch.cuda.synchronize()
    assert not a.locked
    np.testing.assert_array_equal(a.to_numpy(), 5 * np.eye(3, dtype=np.float32))


@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_device_memory_made_by_a_peer_is_wrapped_not_copied(library):
    """The Nektar++ tests, peer -> amso: referenced, usable after either side deletes."""
    import gc
    import weakref

    if library == "torch":
        torch = pytest.importorskip("torch")
        x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
        pointer = x.data_ptr()
    else:
        cp = pytest.importorskip("cupy")
        x = cp.arange(12, dtype=cp.float32).reshape(3, 4)
        pointer = x.data.ptr
    a = amso.from_dlpack(x)
    assert a.on_device and a.__cuda_array_interface__["data"][0] == pointer
    a[1, 1] = -5.0
    assert float(x[1, 1]) == -5.0
    x[2, 3] = 100.0
    assert a[2, 3] == 100.0
    a.add_index_tuple()  # amso's kernel on the peer's memory
    expected = np.arange(12, dtype=np.float32).reshape(3, 4) + np.indices((3, 4)).sum(axis=0)
    expected[1, 1], expected[2, 3] = -5.0 + 2, 100.0 + 5
    np.testing.assert_array_equal(a.to_numpy(), expected)
    owner = weakref.ref(x) if library == "cupy" else None
    del x
    gc.collect()
    np.testing.assert_array_equal(a.to_numpy(), expected)  # usable after the peer deleted its object
    if owner is not None:
        assert owner() is not None
    view = np.from_dlpack(a, device="cpu")
    del a
    gc.collect()
    np.testing.assert_array_equal(view, expected)


def test_cupy_keeps_amso_memory_after_amso_deletes_its_object():
    cp = pytest.importorskip("cupy")
    a = device_array((2, 2), np.float64)
    view = cp.from_dlpack(a)
    del a
    import gc

    gc.collect()
    view += 1
    np.testing.assert_array_equal(cp.asnumpy(view), np.arange(4.0).reshape(2, 2) + 1)


class InterfaceOnly:
    """A producer with only __cuda_array_interface__ (as older libraries have)."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        return self.array.__cuda_array_interface__


def test_asarray_through_the_cuda_array_interface_keeps_the_producer_alive():
    cp = pytest.importorskip("cupy")
    import gc
    import weakref

    x = cp.arange(10, dtype=cp.int64)
    producer = InterfaceOnly(x)
    alive = weakref.ref(producer)
    a = amso.asarray(producer)
    assert type(a).__name__ == "MemArray1DInt64" and a.on_device
    assert a.__cuda_array_interface__["data"][0] == x.data.ptr
    a[4] = 40
    assert int(x[4]) == 40
    del producer, x
    gc.collect()
    assert alive() is not None and a[4] == 40
    del a
    gc.collect()
    assert alive() is None


def test_non_contiguous_device_input_is_a_clear_error():
    torch = pytest.importorskip("torch")
    x = torch.zeros((4, 6), device="cuda")[:, ::2]
    with pytest.raises(BufferError, match="C-contiguous"):
        amso.from_dlpack(x)
    with pytest.raises(BufferError, match="contiguous"):
        amso.asarray(x)
