"""Device memory management on the GPU: allocator plug-ins, deferred frees, defer_cleanup,
statistics, and OOM. Skipped without a CUDA driver."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import amso
from amso.dlpack import kDLCUDA

pytestmark = pytest.mark.skipif(
    not amso.cuda.is_available(), reason="no CUDA driver here; the GPU suite runs on the GPU machine (scripts/gpu_suite.sh)"
)


class Counting:
    """A Python allocator over cudaMalloc/cudaFree that records every call."""

    def __init__(self, fail_next: int = 0):
        self.runtime = pytest.importorskip("cupy").cuda.runtime
        self.mallocs: list[tuple[int, int, int]] = []
        self.frees: list[tuple[int, int]] = []
        self.fail_next = fail_next

    def malloc(self, size, device_id, stream):
        if self.fail_next:
            self.fail_next -= 1
            raise MemoryError("simulated: out of memory")
        self.runtime.setDevice(device_id)
        pointer = self.runtime.malloc(size)
        self.mallocs.append((pointer, size, device_id))
        return pointer

    def free(self, pointer, size, device_id, stream):
        self.runtime.free(pointer)
        self.frees.append((pointer, size))


@pytest.fixture
def counting():
    allocator = Counting()
    previous = amso.deferred_limits()
    amso.set_allocator(allocator.malloc, allocator.free, name="counting")
    yield allocator
    amso.set_allocator()
    amso.flush_frees()
    amso.deferred_limits(*previous)


def test_counting_allocator_round_trip(counting):
    amso.deferred_limits(count=1)
    a = amso.MemArray((100, 10), np.float64)
    a.read_numpy_array(np.arange(1000.0).reshape(100, 10))
    a.move_memory(kDLCUDA)
    assert [(size, device) for _, size, device in counting.mallocs] == [(8000, 0)]
    assert amso.memory_info()["allocator"] == "counting"
    a.add_index_tuple()
    np.testing.assert_array_equal(a.to_numpy(), np.arange(1000.0).reshape(100, 10) + np.indices((100, 10)).sum(0))
    pointer = counting.mallocs[0][0]
    del a
    gc.collect()
    assert counting.frees == [(pointer, 8000)]


def test_arrays_free_through_the_allocator_that_made_them(counting):
    amso.deferred_limits(count=1)
    a = amso.MemArray(16, np.float32, on_device=True)
    amso.set_allocator()  # back to amso's pool for new arrays
    b = amso.MemArray(16, np.float32, on_device=True)
    del a, b
    gc.collect()
    assert len(counting.mallocs) == 1 and [p for p, _ in counting.frees] == [counting.mallocs[0][0]]


def test_deferred_frees_flush_by_count(counting):
    amso.deferred_limits(count=3, fraction=1.0)
    arrays = [amso.MemArray(64, np.float32, on_device=True) for _ in range(3)]
    del arrays[0]
    del arrays[0]
    gc.collect()
    assert counting.frees == [] and amso.memory_info()["pending_frees"] == 2
    del arrays[0]
    gc.collect()
    assert len(counting.frees) == 3 and amso.memory_info()["pending_frees"] == 0


def test_deferred_frees_flush_by_share_of_memory(counting):
    total = amso.memory_info()["total"]
    amso.deferred_limits(count=1000, fraction=((3 << 20) - 4096) / total)  # just under 3 MiB
    small = amso.MemArray(1 << 18, np.float32, on_device=True)  # 1 MiB
    big = amso.MemArray(1 << 19, np.float32, on_device=True)  # 2 MiB
    del small
    gc.collect()
    assert counting.frees == [] and amso.memory_info()["pending_bytes"] == 1 << 20
    del big
    gc.collect()
    assert len(counting.frees) == 2


def test_memory_pressure_flushes_and_retries(counting):
    amso.deferred_limits(count=1000, fraction=1.0)
    a = amso.MemArray(256, np.float32, on_device=True)
    del a
    gc.collect()
    assert counting.frees == []
    counting.fail_next = 1  # the next malloc fails once: amso flushes the queue and retries
    b = amso.MemArray(256, np.float32, on_device=True)
    assert len(counting.frees) == 1 and b.on_device and b[3] == 0.0


def test_defer_cleanup_nesting_and_exceptions(counting):
    amso.deferred_limits(count=1)
    with amso.defer_cleanup():
        with pytest.raises(ZeroDivisionError):
            with amso.defer_cleanup():
                a = amso.MemArray(8, np.float32, on_device=True)
                del a
                gc.collect()
                1 / 0
        assert counting.frees == [], "the outer block still holds the frees"
        b = amso.MemArray(8, np.float32, on_device=True)
        del b
        gc.collect()
        assert counting.frees == [] and amso.memory_info()["pending_frees"] == 2
    assert len(counting.frees) == 2


def test_default_pool_reuses_small_blocks():
    previous = amso.deferred_limits(count=1)  # each free reaches the cache at once
    before = amso.memory_info()
    for _ in range(50):
        a = amso.MemArray(256, np.float32, on_device=True)
        del a
    amso.flush_frees()
    after = amso.memory_info()
    amso.deferred_limits(*previous)
    assert after["hits"] - before["hits"] >= 45, (before, after)
    assert "amso pool" in after["allocator"] and after["cached"] > 0


def test_torch_adapter_uses_torchs_pool():
    torch = pytest.importorskip("torch")
    amso.set_allocator(*amso.allocators.torch(), name="torch")
    previous = amso.deferred_limits(count=1)
    try:
        start = torch.cuda.memory_allocated()
        a = amso.MemArray(1 << 20, np.float32, on_device=True)
        assert torch.cuda.memory_allocated() - start >= 4 << 20
        a.add_index_tuple()
        assert a[5] == 5.0
        del a
        gc.collect()
        assert torch.cuda.memory_allocated() == start
    finally:
        amso.set_allocator()
        amso.deferred_limits(*previous)


def test_cupy_adapter_uses_cupys_pool():
    cp = pytest.importorskip("cupy")
    pool = cp.get_default_memory_pool()
    amso.set_allocator(*amso.allocators.cupy(pool), name="cupy")
    previous = amso.deferred_limits(count=1)
    try:
        start = pool.used_bytes()
        a = amso.MemArray(1 << 20, np.float32, on_device=True)
        assert pool.used_bytes() - start >= 4 << 20
        del a
        gc.collect()
        assert pool.used_bytes() == start
    finally:
        amso.set_allocator()
        amso.deferred_limits(*previous)


def test_oom_is_a_memory_error_and_earlier_arrays_are_intact():
    keep = amso.MemArray(1000, np.float64, on_device=True)
    keep.add_index_tuple()
    free, _ = amso.cuda.memory_info()
    with pytest.raises(MemoryError, match="device"):
        amso.MemArray(free // 2 + (1 << 30), np.int32, on_device=True)
    np.testing.assert_array_equal(keep.to_numpy(), np.arange(1000.0))


def test_on_device_arrays_start_zeroed():
    a = amso.MemArray((3, 5), np.int64, on_device=True)
    assert a.on_device and a.to_numpy().tolist() == [[0] * 5] * 3


def test_empty_leaves_device_memory_uninitialised_but_usable():
    a = amso.empty((4, 4), np.float32, on_device=True)
    assert a.on_device and a.shape == (4, 4)
    a.read_numpy_array(np.ones((4, 4), np.float32))
    assert a.to_numpy().sum() == 16.0
