"""Typed arguments read an amso array's host data in place, from its header, and `__dlpack__`
reads an array without its lock, while no change of the array is under way (issue 39). A
change that runs with the GIL released (a copy in, a move) sets the header's changing flag
first and borrows the memory for writing: readers that arrive meanwhile fall back to the
locked path, and the change is refused (BufferError) while a typed argument holds the memory.
A runtime copy with a version 1 header (an older amso) is held through its table, as before."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import amso

ue = pytest.importorskip("amso_user_example")


def test_a_typed_argument_reads_host_data_in_place():
    # The bundled module's array is another runtime copy for the example crate: read from its
    # header, no reference taken (an export would count one).
    a = amso.asarray(np.arange(8.0))
    seen = []
    ue.while_writing(a, lambda: seen.append(a.export_count))
    assert seen == [0]
    assert ue.min_max(a) == (0.0, 7.0)


def test_changes_are_refused_while_a_typed_argument_holds_the_array():
    a = amso.asarray(np.zeros(4))
    errors = []

    def change():
        with pytest.raises(BufferError, match="typed argument"):
            a.read_numpy_array(np.ones(4))
        a.move_memory("cpu")  # already there: nothing to refuse
        errors.append(None)

    ue.while_writing(a, change)
    assert errors == [None]
    a.read_numpy_array(np.ones(4))  # and allowed again once the call returned
    assert a.to_numpy().tolist() == [1.0] * 4


def test_copies_in_racing_typed_readers_and_exports_never_tear():
    n = 4 << 20  # 32 MiB of float64: each copy in runs a while with the GIL released
    a = amso.MemArray((n,), np.float64)
    host = np.from_dlpack(a).ctypes.data
    values = [np.full(n, float(k)) for k in range(1, 4)]
    done = threading.Event()
    failures: list[BaseException] = []
    refused = [0]
    read = [0]

    def writer():
        try:
            for round in range(12):
                try:
                    a.read_numpy_array(values[round % 3])
                except BufferError:
                    refused[0] += 1  # a reader held it
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)
        finally:
            done.set()

    def typed_reader():
        try:
            while not done.is_set():
                low, high = ue.min_max(a)  # the GIL released while it reads
                assert low == high, f"torn: {low} and {high}"
                read[0] += 1
        except BaseException as error:  # noqa: BLE001
            failures.append(error)

    def exporter():
        try:
            while not done.is_set():
                assert np.from_dlpack(a).ctypes.data == host
                a.__dlpack__()
        except BaseException as error:  # noqa: BLE001
            failures.append(error)

    threads = [threading.Thread(target=f) for f in (writer, typed_reader, exporter)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert not failures, failures
    assert read[0] > 0
    low, high = ue.min_max(a)
    assert low == high and low in (1.0, 2.0, 3.0)


def forged_table(cls: type, version: int) -> object:
    """A copy of `cls`'s runtime table (`__amso_type__`) that says its header is of `version`:
    what an older amso's classes carry (the layout of version 1 is the same)."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    name = b"amso.array_type.v2"
    table = api.PyCapsule_GetPointer(cls.__amso_type__, name)
    copy = (ctypes.c_uint8 * 48)()
    ctypes.memmove(copy, table, 48)
    ctypes.c_uint32.from_buffer(copy, 0).value = version
    forged_table.keep.append((copy, name))  # alive for the process, as a real table is
    return api.PyCapsule_New(ctypes.addressof(copy), name, None)


forged_table.keep = []


def test_a_runtime_with_an_old_header_version_is_held_through_its_table():
    base = type(amso.asarray(np.zeros(1)))
    old = type("OldPeer", (base,), {"__amso_type__": forged_table(base, 1)})
    new = type("NewPeer", (base,), {"__amso_type__": forged_table(base, 2)})
    for cls, held in ((old, 1), (new, 0)):
        a = cls((4,))
        a.read_numpy_array(np.arange(4.0))
        seen = []
        ue.while_writing(a, lambda: seen.append(a.export_count))
        assert seen == [held], cls.__name__
        assert ue.min_max(a) == (0.0, 3.0)
        assert a.export_count == 0


def test_each_class_of_another_runtime_is_read_at_its_header_after_the_first_call():
    """The first typed read of an instance of another runtime's class asks that runtime where
    the header is; later reads of the type go straight to that offset. Subclasses (with and
    without a `__dict__`) have the base's layout first: each reads its own data, call after
    call, in any order."""
    base = type(amso.asarray(np.zeros(1)))
    classes = [base, type("WithDict", (base,), {}), type("Slotted", (base,), {"__slots__": ("tag",)})]
    arrays = []
    for i, cls in enumerate(classes * 2):
        a = cls((5,))
        a.read_numpy_array(np.arange(5.0) + 10 * i)
        arrays.append(a)
    for _ in range(3):
        for i, a in enumerate(reversed(arrays)):
            i = len(arrays) - 1 - i
            assert ue.min_max(a) == (10.0 * i, 10.0 * i + 4), type(a).__name__
            a[0] = 10.0 * i  # the header stays current after a change
