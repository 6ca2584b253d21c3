"""The generated classes' own `__dlpack__` entry (hot_methods.rs): the forms it takes itself
(interned keyword names, None, ints, bools, an exact `max_version` tuple; the `kwnames` and
`max_version` tuples cached by address) and every other call handed to PyO3's entry, so each
outcome is the one the base class's PyO3 method gives; and the exports' per-thread spare block
(dlpack.rs)."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading

import numpy as np
import pytest
from test_dlpack import capsule_name, versioned

import amso

PYO3_DLPACK = amso._amso.MemArrayBase.__dlpack__  # PyO3's own entry: the reference


class TupleSubclass(tuple):
    pass


def outcome(call):
    try:
        result = call()
    except Exception as error:  # noqa: BLE001 - the outcome is what is compared
        return type(error), str(error)
    return "capsule", capsule_name(result)


FORMS = [
    {},
    {"stream": None},
    {"stream": -1},
    {"stream": 5},
    {"stream": 2**70},
    {"stream": True},
    {"stream": "default"},
    {"max_version": None},
    {"max_version": (1, 0)},
    {"max_version": (1, 5)},
    {"max_version": (0, 8)},
    {"max_version": [1, 0]},
    {"max_version": (1,)},
    {"max_version": (1, 0, 0)},
    {"max_version": (-1, 0)},
    {"max_version": (2**40, 0)},
    {"max_version": (2**70, 0)},
    {"max_version": (True, 0)},
    {"max_version": (np.int64(1), 0)},
    {"max_version": (1.0, 0)},
    {"max_version": TupleSubclass((1, 0))},
    {"max_version": 1},
    {"dl_device": None},
    {"dl_device": (1, 0)},
    {"dl_device": (2, 0)},
    {"dl_device": "cpu"},
    {"copy": None},
    {"copy": True},
    {"copy": False},
    {"copy": 1},
    {"copy": np.True_},
    {"copy": "yes"},
    {"stream": None, "max_version": (1, 0), "dl_device": None, "copy": None},
    {"copy": False, "dl_device": None, "max_version": (1, 0)},
    {"unknown": 1},
    {"max_version": (1, 0), "unknown": 1},
    {"stream": None, "max_version": (1, 0), "dl_device": None, "copy": None, "unknown": 1},
]


@pytest.mark.parametrize("kwargs", FORMS, ids=repr)
def test_every_keyword_form_ends_as_pyo3s_entry_ends(kwargs):
    a = amso.MemArray(4, np.float32)
    assert type(a).__dlpack__ is not PYO3_DLPACK
    assert outcome(lambda: a.__dlpack__(**kwargs)) == outcome(lambda: PYO3_DLPACK(a, **kwargs))


@pytest.mark.parametrize("args", [(None,), (1,), ((1, 0),), (None, None)], ids=repr)
def test_positional_arguments_get_pyo3s_type_error(args):
    a = amso.MemArray(4, np.float32)
    fast, reference = outcome(lambda: a.__dlpack__(*args)), outcome(lambda: PYO3_DLPACK(a, *args))
    assert fast[0] is TypeError and fast == reference


def test_keyword_names_not_interned_are_read_by_pyo3():
    a = amso.MemArray(4, np.float32)
    name = "".join(["max_", "version"])  # built at run time: not the interned constant
    assert capsule_name(a.__dlpack__(**{name: (1, 0)})) == "dltensor_versioned"
    assert capsule_name(a.__dlpack__(**{name: None})) == "dltensor"


def test_the_docstring_and_signature_are_pyo3s():
    fast = amso.MemArray(4, np.float32).__dlpack__
    assert fast.__doc__ == PYO3_DLPACK.__doc__
    assert fast.__text_signature__ == PYO3_DLPACK.__text_signature__


def test_the_descriptor_refuses_other_objects():
    with pytest.raises(TypeError):
        type(amso.MemArray(4, np.float32)).__dlpack__(np.zeros(4, np.float32))


def test_the_max_version_cache_holds_one_reference_and_reads_each_tuple():
    a = amso.MemArray(4, np.float32)
    first, second = tuple([1, 0]), tuple([0, 9])  # fresh tuples, not constants
    before = sys.getrefcount(first), sys.getrefcount(second)
    assert versioned(a.__dlpack__(max_version=first)).minor == 0
    assert sys.getrefcount(first) == before[0] + 1  # the cache's reference
    assert capsule_name(a.__dlpack__(max_version=second)) == "dltensor"  # read, not the cached (1, 0)
    assert sys.getrefcount(first) == before[0]  # given back
    assert sys.getrefcount(second) == before[1] + 1
    assert capsule_name(a.__dlpack__(max_version=first)) == "dltensor_versioned"


VALUES = [None, (1, 0), (0, 9), [1, 0], True, False, 1, "yes", 5, -1]


def test_one_call_site_reads_each_calls_values():
    """One call site passes one `kwnames` tuple (a constant of its code), which the entry reads
    once and caches: every value passed through it is still read afresh."""
    a = amso.MemArray(4, np.float32)
    for version in VALUES:
        for copy in VALUES:
            fast = outcome(lambda: a.__dlpack__(max_version=version, copy=copy))
            assert fast == outcome(lambda: PYO3_DLPACK(a, max_version=version, copy=copy)), (version, copy)
            fast = outcome(lambda: a.__dlpack__(copy=copy, stream=version))
            assert fast == outcome(lambda: PYO3_DLPACK(a, copy=copy, stream=version)), (version, copy)


def test_keyword_orders_are_told_apart():
    """Two call sites with the same names in another order, alternating: each value is read as
    the keyword it was passed for (a cache keyed by the names alone would swap them)."""
    a = amso.MemArray(4, np.float32)
    for _ in range(3):
        assert capsule_name(a.__dlpack__(max_version=(1, 0), stream=None)) == "dltensor_versioned"
        with pytest.raises(TypeError):
            a.__dlpack__(stream=(1, 0), max_version=None)
        assert capsule_name(a.__dlpack__(stream=None, max_version=(1, 0))) == "dltensor_versioned"
        assert capsule_name(a.__dlpack__(max_version=None, stream=None)) == "dltensor"


def test_a_kwnames_tuple_subclass_from_c_is_read_by_pyo3_and_not_kept():
    """CPython passes exact tuples; a C caller might pass a subclass, whose release could run
    Python code (a `__del__` calling `__dlpack__` while the cache is being replaced): the fast
    entry leaves it to PyO3's and keeps no reference to it."""
    vectorcall = ctypes.pythonapi.PyObject_Vectorcall
    vectorcall.restype = ctypes.py_object
    vectorcall.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_size_t, ctypes.py_object]
    a = amso.MemArray(4, np.float32)
    values = (ctypes.py_object * 1)((1, 0))
    kwnames = TupleSubclass(("max_version",))
    before = sys.getrefcount(kwnames)
    capsule = vectorcall(a.__dlpack__, ctypes.cast(values, ctypes.c_void_p), 0, kwnames)
    assert capsule_name(capsule) == "dltensor_versioned"
    assert sys.getrefcount(kwnames) == before


def test_the_keyword_cache_gives_back_each_tuple_it_replaces():
    """`f(**d)` builds a new `kwnames` tuple per call: the cache takes each and gives the one
    before back, so no tuple is kept beyond the last."""
    a = amso.MemArray(4, np.float32)
    orders = [{"max_version": (1, 0), "copy": False}, {"copy": False, "max_version": (1, 0)}]
    for kwargs in orders * 100:
        a.__dlpack__(**kwargs)
    gc.collect()
    before = sys.getallocatedblocks()
    for kwargs in orders * 5000:
        assert capsule_name(a.__dlpack__(**kwargs)) == "dltensor_versioned"
    gc.collect()
    assert sys.getallocatedblocks() - before < 100


def test_threads_taking_turns_each_read_their_own_max_version():
    """Threads switching often, each with its own call site (keyword order) and `max_version`
    tuple: the one cache, replaced at each switch, never answers for another thread's call."""
    a = amso.MemArray(4, np.float32)
    names = {}

    def export(version, key):
        for _ in range(2000):
            if key % 2:
                capsule = a.__dlpack__(max_version=version, copy=None)
            else:
                capsule = a.__dlpack__(copy=None, stream=None, max_version=version)
            names.setdefault(key, set()).add(capsule_name(capsule))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=export, args=(tuple([v % 2, 0]), v)) for v in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert names == {0: {"dltensor"}, 1: {"dltensor_versioned"}, 2: {"dltensor"}, 3: {"dltensor_versioned"}}


@pytest.mark.skipif(sys.version_info < (3, 12), reason="no interpreter has a GIL of its own before 3.12")
def test_an_interpreter_with_a_gil_of_its_own_refuses_the_extension():
    """The keyword cache is one per process, behind the GIL: sound because every interpreter
    that loads the extension shares one GIL. An isolated one (a GIL of its own, 3.12 on)
    refuses it: CPython's check for a module that does not declare support. Loaded there from
    its file (the package would stop earlier, at NumPy's own refusal)."""
    try:
        import _xxsubinterpreters as interpreters  # Python 3.12
    except ImportError:
        interpreters = pytest.importorskip("_interpreters")
    interpreter = interpreters.create()  # isolated: a GIL of its own
    read, write = os.pipe()
    code = (
        "import importlib.util, os\n"
        f"spec = importlib.util.spec_from_file_location('amso._amso', {amso._amso.__file__!r})\n"
        "try:\n"
        "    importlib.util.module_from_spec(spec)\n"
        f"    os.write({write}, b'loaded')\n"
        "except ImportError as error:\n"
        f"    os.write({write}, f'ImportError: {{error}}'.encode())\n"
    )
    with os.fdopen(read, "rb") as pipe:
        try:
            interpreters.run_string(interpreter, code)
        finally:
            interpreters.destroy(interpreter)
            os.close(write)
        outcome = pipe.read().decode()
    assert outcome == "ImportError: module amso._amso does not support loading in subinterpreters"


def test_spare_blocks_describe_each_export_afresh():
    """A block freed by one export and reused by the next must describe the next (its ndim,
    shape, strides, kind), whatever the previous one was."""
    for shape in [(7,), (2, 3, 4), (1,) * 8, (5, 6), (3,)]:
        a = amso.MemArray(shape, np.float64)
        a.read_numpy_array(np.arange(np.prod(shape), dtype=np.float64).reshape(shape))
        for max_version in (None, (1, 0)):
            view = np.from_dlpack(amso_producer(a, max_version))
            np.testing.assert_array_equal(view, a.to_numpy())
            del view
    assert a.export_count == 0


def amso_producer(a, max_version):
    capsule = a.__dlpack__(max_version=max_version)

    class Producer:
        def __dlpack__(self, **_):
            return capsule

        def __dlpack_device__(self):
            return (1, 0)

    return Producer()


def test_capsules_made_on_one_thread_free_on_another():
    a = amso.MemArray(16, np.float32)
    capsules = [a.__dlpack__(max_version=(1, 0) if i % 2 else None) for i in range(200)]
    assert a.export_count == 200

    def drop_them():
        capsules.clear()
        gc.collect()

    thread = threading.Thread(target=drop_them)
    thread.start()
    thread.join()
    assert a.export_count == 0
    assert capsule_name(a.__dlpack__()) == "dltensor"  # a fresh block on this thread still works
