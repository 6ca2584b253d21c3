"""The MemArray design's locking context: get_dlpack() locks the array for its `with` block."""

from __future__ import annotations

import numpy as np
import pytest

import amso
from amso.dlpack import kDLCPU


def test_context_locks_and_exports():
    a = amso.MemArray((2, 2), np.float64)
    ctx = a.get_dlpack(kDLCPU)
    assert not a.locked
    with ctx as exported:
        assert exported is ctx and a.locked
        assert exported.__dlpack_device__() == (1, 0)
        view = np.from_dlpack(exported)
        view[0, 1] = 3.0
    assert not a.locked
    assert a[0, 1] == 3.0


def test_access_without_the_lock_fails_inside_the_block_and_loses_nothing():
    a = amso.MemArray(3, np.int32)
    a.read_numpy_array([1, 2, 3])
    with a.get_dlpack():
        for touch in [
            lambda: a[0],
            lambda: a.__setitem__(0, 5),
            lambda: a.__dlpack__(),
            lambda: a.read_numpy_array([7, 8, 9]),
            lambda: a.to_numpy(),
            lambda: a.move_memory(kDLCPU),
        ]:
            with pytest.raises(BufferError, match="locked by context"):
                touch()
        with pytest.raises(BufferError, match="locked"):
            with a.get_dlpack():
                pass
    assert a.to_numpy().tolist() == [1, 2, 3]


def test_unlocks_when_the_body_raises():
    a = amso.MemArray(2, np.float32)
    with pytest.raises(ZeroDivisionError):
        with a.get_dlpack():
            1 / 0
    assert not a.locked
    a[0] = 1.0


def test_context_outside_its_block_refuses_to_export():
    a = amso.MemArray(2, np.float32)
    ctx = a.get_dlpack()
    with pytest.raises(BufferError, match="not entered"):
        ctx.__dlpack__()
    with ctx:
        pass
    with pytest.raises(BufferError, match="not entered"):
        np.from_dlpack(ctx)


def test_lock_ids_are_unique():
    a = amso.MemArray(1, np.float32)
    ids = {a.get_dlpack().lock_id for _ in range(100)}
    assert len(ids) == 100 and 0 not in ids


def test_a_context_dropped_while_entered_releases_its_lock():
    import gc

    a = amso.MemArray(3, np.float64)
    context = a.get_dlpack()
    context.__enter__()
    assert a.locked
    del context  # never exited: its lock id exists nowhere else
    gc.collect()
    assert not a.locked
    a[0] = 1.0
