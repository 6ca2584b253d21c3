"""Importing foreign memory without copying (amso.from_dlpack, amso.asarray), and the Nektar++
document's three lifetime tests in the direction NumPy -> amso."""

from __future__ import annotations

import array
import gc
import weakref

import numpy as np
import pytest
from test_dlpack import Producer

import amso


def test_from_dlpack_references_numpy_memory_both_ways():
    x = np.arange(6.0).reshape(2, 3)
    a = amso.from_dlpack(x)
    assert type(a).__name__ == "MemArray2DFloat64" and a.shape == (2, 3)
    a[0, 1] = 42.0
    assert x[0, 1] == 42.0
    x[1, 2] = -7.0
    assert a[1, 2] == -7.0


def test_amso_array_stays_valid_after_numpy_deletes_its_object():
    x = np.arange(1000, dtype=np.int64)
    base = weakref.ref(x)
    a = amso.from_dlpack(x)
    del x
    gc.collect()
    assert base() is not None, "the producer is kept alive while amso uses its memory"
    np.testing.assert_array_equal(a.to_numpy(), np.arange(1000))
    del a
    gc.collect()
    assert base() is None, "and released once amso no longer needs it"


def test_numpy_stays_valid_after_amso_deletes_its_object():
    x = np.zeros(5, np.float32)
    a = amso.from_dlpack(x)
    a[2] = 1.5
    del a
    gc.collect()
    assert x.tolist() == [0.0, 0.0, 1.5, 0.0, 0.0]
    x[0] = 3.0  # still writable, still NumPy's


def test_views_of_an_imported_array_keep_the_producer_alive():
    x = np.ones(8, np.float64)
    base = weakref.ref(x)
    view = np.from_dlpack(amso.from_dlpack(x))
    del x
    gc.collect()
    assert base() is not None and view.sum() == 8.0
    del view
    gc.collect()
    assert base() is None


def test_read_only_numpy_imports_read_only():
    x = np.arange(4.0)
    x.flags.writeable = False
    a = amso.from_dlpack(x)
    assert a.readonly
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1.0


def test_non_contiguous_input_is_refused_or_copied_on_request():
    x = np.arange(12.0).reshape(3, 4)
    with pytest.raises(BufferError, match="C-contiguous"):
        amso.from_dlpack(x.T)
    with pytest.raises(BufferError, match="C-contiguous"):
        amso.asarray(x[:, ::2], copy=False)
    copied = amso.asarray(x.T)
    np.testing.assert_array_equal(copied.to_numpy(), x.T)
    copied[0, 0] = 100.0
    assert x[0, 0] == 0.0, "a copy, as asked"


def test_asarray_paths():
    a = amso.MemArray(3, np.float32)
    assert amso.asarray(a) is a
    a[1] = 2.0
    private = amso.asarray(a, copy=True)
    private[1] = 9.0
    assert private is not a and a[1] == 2.0
    listed = amso.asarray([[1, 2], [3, 4]], "int64")
    assert type(listed).__name__ == "MemArray2DInt64" and listed.to_numpy().tolist() == [[1, 2], [3, 4]]
    cast = amso.asarray([1, 2, 3], np.float32)
    assert cast.dtype == np.float32 and cast.to_numpy().tolist() == [1.0, 2.0, 3.0]
    buffer = array.array("d", [1.0, 2.0, 3.0])  # the buffer protocol, without a copy
    shared = amso.asarray(buffer)
    shared[1] = 20.0
    assert buffer[1] == 20.0
    with pytest.raises(TypeError, match=r"float64 with ndim 0: .*np.atleast_1d\(x\)"):
        amso.asarray(5.0)  # amso arrays have at least one dimension; no silent reshape
    scalar = amso.asarray(np.atleast_1d(5.0))
    assert scalar.shape == (1,) and scalar[0] == 5.0
    with pytest.raises(ValueError):
        amso.asarray(np.arange(3, dtype=np.int64), np.float32, copy=False)


def test_uncompiled_and_unsupported_inputs_are_clear_errors():
    with pytest.raises(TypeError, match="has no __dlpack__"):
        amso.from_dlpack([1, 2, 3])
    with pytest.raises(TypeError, match="no compiled array for dtype float32 with ndim 9: amso arrays have 1 to 8"):
        amso.from_dlpack(np.zeros((1,) * 9, np.float32))
    with pytest.raises(TypeError, match=r"dtype float32 with ndim 0: .*np.atleast_1d"):
        amso.from_dlpack(np.zeros((), np.float32))


class LegacyProducer:
    """A producer from before the array API's keywords: __dlpack__ takes none."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)


def test_legacy_producers_and_capsules():
    x = np.arange(3.0)
    a = amso.from_dlpack(LegacyProducer(x))
    a[0] = 5.0
    assert x[0] == 5.0
    capsule = x.__dlpack__()
    amso.from_dlpack(Producer(capsule))
    with pytest.raises(TypeError, match="not an unconsumed DLPack capsule"):
        amso.from_dlpack(Producer(capsule))  # consumed once already


def test_from_dlpack_of_an_amso_array_shares_memory():
    a = amso.MemArray(4, np.int32)
    b = amso.from_dlpack(a)
    b[3] = 7
    assert a[3] == 7 and a.export_count == 1
    del b
    gc.collect()
    assert a.export_count == 0
