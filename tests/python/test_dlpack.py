"""DLPack export on the host: both capsule kinds, the array API's arguments, capsule
ownership, and the three lifetime tests of the Nektar++ document."""

from __future__ import annotations

import ctypes
import gc
import pickle

import numpy as np
import pytest
from conftest import np_dtype, sample

import amso

pythonapi = ctypes.pythonapi
pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


READ_ONLY, IS_COPIED = 1, 2


def capsule_name(capsule) -> str:
    return pythonapi.PyCapsule_GetName(capsule).decode()


def versioned(capsule) -> DLManagedTensorVersioned:
    pointer = pythonapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return DLManagedTensorVersioned.from_address(pointer)


class Producer:
    """Hands NumPy a fixed capsule, whatever it asks for (to test legacy import and consumption)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def numpy_dlpack_dtypes():
    conftest = __import__("conftest")
    return [(n, s) for n, s in conftest.cases() if n not in conftest.NOT_NUMPY_DLPACK]


@pytest.mark.parametrize("case", numpy_dlpack_dtypes(), ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}")
@pytest.mark.parametrize("kind", ["versioned", "legacy"])
def test_numpy_reads_both_capsule_kinds(case, kind):
    name, shape = case
    a = amso.MemArray(shape, np_dtype(name))
    reference = sample(name, shape, seed=2)
    a.read_numpy_array(reference)
    if kind == "versioned":
        view = np.from_dlpack(a)
        assert view.flags.writeable, "versioned import must be writable"
    else:
        capsule = a.__dlpack__()
        assert capsule_name(capsule) == "dltensor"
        view = np.from_dlpack(Producer(capsule))
        assert not view.flags.writeable  # NumPy marks every legacy import read-only
    assert view.dtype == reference.dtype and view.shape == shape
    np.testing.assert_array_equal(view, reference)


def test_versioned_capsule_describes_the_array():
    a = amso.MemArray((2, 3), np.int32)
    capsule = a.__dlpack__(max_version=(1, 5))
    assert capsule_name(capsule) == "dltensor_versioned"
    managed = versioned(capsule)
    assert (managed.major, managed.minor) == (1, 3)
    t = managed.dl_tensor
    assert (t.device_type, t.device_id, t.ndim) == (1, 0, 2)
    assert (t.code, t.bits, t.lanes) == (0, 32, 1)
    assert [t.shape[i] for i in range(2)] == [2, 3]
    assert [t.strides[i] for i in range(2)] == [3, 1]
    assert managed.flags == 0
    assert (versioned(a.__dlpack__(max_version=(1, 0))).minor) == 0


def test_a_read_only_array_refuses_the_legacy_capsule_as_numpy_does():
    """A legacy capsule cannot say read-only: its consumer could write the memory (an unpickled
    read-only array adopts the pickle's immutable bytes). NumPy refuses the same request."""
    reference = np.zeros(3, np.float32)
    reference.flags.writeable = False
    with pytest.raises(BufferError):
        reference.__dlpack__()
    ro = amso.MemArray(3, np.float32, readonly=True)
    adopted = pickle.loads(pickle.dumps(ro, protocol=4))
    for array in (ro, adopted):
        with pytest.raises(BufferError, match=r"read-only, which a legacy \(unversioned\) DLPack capsule cannot say"):
            array.__dlpack__()
        with pytest.raises(BufferError, match=r"max_version=\(1, 0\)"):
            array.__dlpack__(max_version=(0, 8))
        with array.get_dlpack(amso.dlpack.kDLCPU) as exported, pytest.raises(BufferError, match="read-only"):
            exported.__dlpack__()
        assert versioned(array.__dlpack__(max_version=(1, 0))).flags & READ_ONLY
        assert not np.from_dlpack(array).flags.writeable


def test_the_borrowed_dltensor_of_the_exchange_api_refuses_read_only_arrays():
    from hostile import amso_c_functions  # it imports this module's structs

    _, dltensor, _ = amso_c_functions()
    out = DLTensor()
    with pytest.raises(BufferError, match="read-only, which a DLTensor cannot say"):
        dltensor(amso.MemArray(3, np.float32, readonly=True), ctypes.byref(out))
    assert dltensor(amso.MemArray(3, np.float32), ctypes.byref(out)) == 0 and out.ndim == 1


def test_readonly_and_copy_flags():
    ro = amso.MemArray(3, np.float32, readonly=True)
    assert versioned(ro.__dlpack__(max_version=(1, 0))).flags == READ_ONLY
    view = np.from_dlpack(ro)
    assert not view.flags.writeable
    a = amso.MemArray(3, np.float32)
    a[0] = 1.0
    copied = a.__dlpack__(max_version=(1, 0), copy=True)
    assert versioned(copied).flags == IS_COPIED
    private = np.from_dlpack(a, copy=True)
    private[0] = 5.0
    assert a[0] == 1.0, "copy=True must not alias"
    shared = np.from_dlpack(a, copy=False)
    shared[0] = 7.0
    assert a[0] == 7.0


def test_dl_device_and_stream_arguments():
    a = amso.MemArray(4, np.float64)
    assert np.from_dlpack(a, device="cpu").shape == (4,)
    assert a.__dlpack__(dl_device=(1, 0), max_version=(1, 0)) is not None
    with pytest.raises(BufferError, match="copy=False"):
        a.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(BufferError, match="kDLCPU"):
        a.__dlpack__(dl_device=(8, 0))
    assert a.__dlpack__(stream=None) is not None
    assert a.__dlpack__(stream=-1) is not None
    with pytest.raises(ValueError, match="stream must be None"):
        a.__dlpack__(stream=5)
    with pytest.raises(TypeError):
        a.__dlpack__(stream="default")
    with pytest.raises(TypeError):
        a.__dlpack__(max_version=1)
    with pytest.raises(TypeError):
        a.__dlpack__(copy="yes")
    with pytest.raises(TypeError):
        a.__dlpack__(None)  # keyword-only, as the standard says


def test_unconsumed_capsules_free_what_they_hold():
    a = amso.MemArray(16, np.float64)
    capsules = [a.__dlpack__(), a.__dlpack__(max_version=(1, 0)), a.__dlpack__(max_version=(1, 0), copy=True)]
    assert a.export_count == 2  # the copy holds its own memory
    del capsules
    gc.collect()
    assert a.export_count == 0


@pytest.mark.parametrize("max_version, name", [(None, "dltensor"), ((1, 0), "dltensor_versioned")])
def test_consumed_capsule_is_renamed_and_freed_once(max_version, name):
    a = amso.MemArray(8, np.int32)
    capsule = a.__dlpack__(max_version=max_version)
    view = np.from_dlpack(Producer(capsule))
    assert capsule_name(capsule) == "used_" + name
    assert a.export_count == 1
    del capsule
    gc.collect()
    assert a.export_count == 1, "the consumer owns the tensor now; the capsule must not free it"
    del view
    gc.collect()
    assert a.export_count == 0


def test_memory_is_referenced_not_copied():
    a = amso.MemArray((3, 4), np.float32)
    view = np.from_dlpack(a)
    view[1, 2] = 42.0
    assert a[1, 2] == 42.0
    a[2, 3] = -1.0
    assert view[2, 3] == -1.0


def test_view_outlives_the_memarray():
    a = amso.MemArray((64, 64), np.float64)
    reference = sample("float64", (64, 64), seed=3)
    a.read_numpy_array(reference)
    view = np.from_dlpack(a)
    del a
    gc.collect()
    churn = [amso.MemArray((64, 64), np.float64) for _ in range(50)]  # reuse freed memory, if any
    for other in churn:
        other.read_numpy_array(np.full((64, 64), 9.0))
    np.testing.assert_array_equal(view, reference)
    view += 1.0
    np.testing.assert_array_equal(view, reference + 1.0)


def test_memarray_outlives_the_view():
    a = amso.MemArray(5, np.int64)
    view = np.from_dlpack(a)
    view[:] = np.arange(5)
    del view
    gc.collect()
    assert a.export_count == 0
    assert a.to_numpy().tolist() == [0, 1, 2, 3, 4]
    a[0] = 10
    assert a[0] == 10


USED_VERSIONED = b"used_dltensor_versioned"  # kept alive: a renamed capsule points at it


def consume_in_c(capsule):
    """Take the tensor as a C consumer does (rename the capsule, keep the pointer) and return a
    call of its deleter through ctypes, which releases the GIL for the call: the release an
    export gets from a consumer's own thread."""
    pointer = pythonapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    pythonapi.PyCapsule_SetName(capsule, USED_VERSIONED)
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(DLManagedTensorVersioned.from_address(pointer).deleter)
    return lambda: deleter(pointer)


def test_host_exports_are_counted_exactly_across_changes_consumers_and_releases():
    """In-place host exports share one count per array (dlpack/export_hub.rs): released as
    capsules (with the GIL), by consumers (NumPy) and by C code without the GIL, before and
    after a change of the array, each is counted once and the memory lives while any does."""
    a = amso.MemArray(32, np.float64)
    capsules = [a.__dlpack__(max_version=(1, 0)) for _ in range(3)]
    views = [np.from_dlpack(a) for _ in range(2)]
    in_c = [consume_in_c(a.__dlpack__(max_version=(1, 0))) for _ in range(2)]
    assert a.export_count == 7
    in_c.pop()()  # released without the GIL, before any change
    assert a.export_count == 6
    a[0] = 5.0  # a change: the count moves to the buffer's own, export by export
    assert a.export_count == 6
    assert views[0][0] == 5.0
    capsules.append(a.__dlpack__(max_version=(1, 0)))  # a new count after the change
    assert a.export_count == 7
    del capsules[:2]  # two from before the change, one from after it...
    capsules.pop()
    gc.collect()
    assert a.export_count == 4
    in_c.pop()()  # ...and one in C after the change
    assert a.export_count == 3
    del a
    gc.collect()
    views[1][1] = 7.0  # the memory outlives the array
    assert views[0][:2].tolist() == [5.0, 7.0]
    del capsules, views
    gc.collect()


def test_exports_released_on_other_threads_race_changes_without_losing_a_count():
    import threading

    a = amso.MemArray(256, np.int64)
    barrier = threading.Barrier(5)

    def release(deleters):
        barrier.wait()
        for deleter in deleters:
            deleter()  # the GIL is released for each call

    for _ in range(20):
        batches = [[consume_in_c(a.__dlpack__(max_version=(1, 0))) for _ in range(50)] for _ in range(4)]
        kept = [np.from_dlpack(a) for _ in range(3)]
        threads = [threading.Thread(target=release, args=(batch,)) for batch in batches]
        for thread in threads:
            thread.start()
        barrier.wait()
        for i in range(20):  # changes and exports on this thread meanwhile
            a[i] = i
            np.from_dlpack(a)
        for thread in threads:
            thread.join()
        assert a.export_count == 3
        del kept
        gc.collect()
        assert a.export_count == 0
    assert a.to_numpy()[:20].tolist() == list(range(20))
