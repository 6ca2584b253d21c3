"""The trust boundary between amso's runtime and `sys.modules`, which any Python code may edit,
restore or patch (`unittest.mock.patch.dict(sys.modules)`, stand-in modules in tests):

- the borrow registry every extension module's copy of the runtime shares (`process.rs`) stays
  one table however `sys.modules` is edited between imports, so two extensions still cannot
  both hold one array mutably, and a second table is refused by name;
- `numpy.ndarray` is known by NumPy's own C API (`_ARRAY_API`), never by whatever
  `sys.modules["numpy"].ndarray` is: a stand-in is never read as NumPy's array struct, a fake
  C API is refused, and nothing a later `sys.modules` change can turn into a misread is cached.

Each test runs in a fresh interpreter: the registry is joined, and NumPy's type found, once
per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("amso_rust_ext")
pytest.importorskip("amso_peers")
pytest.importorskip("amso_user_example")


def run_python(*parts: str) -> subprocess.CompletedProcess[str]:
    """Run the script the parts make, each dedented on its own, in a fresh interpreter."""
    script = "\n".join(textwrap.dedent(part) for part in parts)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def assert_printed(done: subprocess.CompletedProcess[str], *lines: str) -> None:
    """The script exited normally (not by a signal: a crash is a failure too) and printed `lines`."""
    assert done.returncode == 0, f"exit status {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.stdout.splitlines() == list(lines), done.stderr


# --- one borrow registry per process ---

# `ue` holds x for writing while `ext` and `peers` (two more crates, each with its own copy of
# the runtime) are asked for it: every request refused, nothing written.
ALIASING_REFUSED = """
    def refused(call):
        try:
            call()
        except BufferError as error:
            assert "borrowed for writing" in str(error), error
            return
        raise SystemExit("aliased: two extension modules held x at once, one of them mutably")

    x = np.arange(8.0)
    refused(lambda: ue.while_writing(x, lambda: ext.mult(2.0, x)))
    refused(lambda: ue.while_writing(x[2:5], lambda: ext.axpy(1.0, x, np.ones(8))))
    refused(lambda: ue.while_writing(x[::-1], lambda: peers.amso_noop1(x.view(np.float32).reshape(4, 4))))
    assert (x == np.arange(8.0)).all(), x
    print("refused")
"""

# The first extension to join the registry does so inside the patch: amso_user_example joins
# when it registers its classes at import, amso_rust_ext at its first typed argument.
JOINED_INSIDE = {
    "user crate": "import amso_user_example as ue",
    "numpy-readme crate": "import amso_rust_ext as ext; ext.mult(1.0, np.ones(2))",
}


@pytest.mark.parametrize("inside", JOINED_INSIDE)
def test_an_extension_joined_inside_patched_sys_modules_shares_borrows_with_later_ones(inside):
    """`mock.patch.dict(sys.modules)` removes, on exit, the entries made inside it: the
    registry the first extension published there must outlive it."""
    done = run_python(f"""
        import sys, unittest.mock
        import numpy as np
        with unittest.mock.patch.dict(sys.modules):
            {JOINED_INSIDE[inside]}
        import amso_user_example as ue, amso_rust_ext as ext, amso_peers as peers
    """, ALIASING_REFUSED)
    assert_printed(done, "refused")


def test_deleting_the_amso_entries_of_sys_modules_between_imports_keeps_one_registry():
    done = run_python("""
        import sys
        import numpy as np
        import amso_user_example as ue
        removed = [name for name in sys.modules if name.startswith("_amso")]
        assert removed, sorted(sys.modules)
        for name in removed:
            del sys.modules[name]
        import amso_rust_ext as ext, amso_peers as peers
    """, ALIASING_REFUSED)
    assert_printed(done, "refused")


def test_a_second_table_in_sys_modules_is_refused_by_name():
    """What an older amso, which looks only in `sys.modules`, publishes when it loads after the
    entry was deleted: a second table. A copy that then joins refuses to pick one (it would be
    split from the other's users), naming both; the first table's users go on working."""
    done = run_python("""
        import ctypes, sys, types
        import numpy as np
        import amso_user_example as ue
        del sys.modules["_amso_process_v4"]
        # Never called: a table of NULL functions (an old runtime that joined it would crash).
        functions = (ctypes.c_void_p * 8)()
        header = ctypes.cast(functions, ctypes.POINTER(ctypes.c_uint32))
        header[0], header[1] = 4, ctypes.sizeof(functions)  # this layout's version and a size
        name = ctypes.create_string_buffer(b"_amso_process_v4.table")
        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        home = types.ModuleType("_amso_process_v4")
        home.table = capsule_new(ctypes.addressof(functions), name, None)
        sys.modules["_amso_process_v4"] = home
        import amso_rust_ext as ext
        x = np.arange(4.0)
        try:
            ext.mult(2.0, x)
        except ImportError as error:
            text = str(error)
            assert "two tables" in text and "sys.modules['_amso_process_v4']" in text, text
            assert "interpreter" in text, text
        else:
            raise SystemExit("joined one of two tables")
        assert (x == np.arange(4.0)).all(), x
        ue.while_writing(x, lambda: None)  # the first table's users are unaffected
        print("refused")
    """)
    assert_printed(done, "refused")


# --- NumPy known by its C API ---

# Typed arguments of every kind while `sys.modules` says whatever it says: bytearray is uint8
# memory (a float64 parameter refuses it by dtype, read through the buffer protocol), a
# float64 memoryview over it is written in place, a NumPy array is written and a result made.
# `Spy` is an ndarray subclass that has no exchange table and whose `__dlpack__` fails: only
# the NumPy fast path (NumPy's struct read in place) reads it.
TYPED_ARGUMENTS = """
    def typed_arguments(np):
        raw = bytearray(16)
        try:
            ext.mult(2.0, raw)
        except TypeError as error:
            assert "got a uint8 array" in str(error), error
        else:
            raise SystemExit("a bytearray was taken for float64 memory")
        view = memoryview(raw).cast("d")
        view[0], view[1] = 1.5, -2.0
        ext.mult(2.0, view)
        assert view.tolist() == [3.0, -4.0], view.tolist()
        x = np.arange(4.0)
        ext.mult(2.0, x)
        assert x.tolist() == [0.0, 2.0, 4.0, 6.0], x
        z = ext.axpy(2.0, x, x)
        assert type(z) is np.ndarray and z.tolist() == [0.0, 6.0, 12.0, 18.0], z

    def fast_path(np):
        class Spy(np.ndarray):
            __dlpack_c_exchange_api__ = None
            def __dlpack__(self, *args, **kwargs):
                raise AssertionError("read through __dlpack__, not as a NumPy array")
        spy = np.arange(3.0).view(Spy)
        ext.mult(-1.0, spy)
        assert spy.tolist() == [0.0, -1.0, -2.0], spy
"""


def test_a_numpy_stand_in_in_sys_modules_is_never_read_as_numpy():
    """`sys.modules["numpy"]` replaced before any extension sees NumPy, then the real module
    restored, then replaced again: no crash, the same results throughout, NumPy's arrays on
    the fast path."""
    done = run_python("""
        import sys, types
        import numpy
        real = sys.modules["numpy"]
        sys.modules["numpy"] = types.SimpleNamespace(ndarray=bytearray)
        import amso_rust_ext as ext
    """, TYPED_ARGUMENTS, """
        typed_arguments(real)
        print("stand-in")
        sys.modules["numpy"] = real
        typed_arguments(real)
        fast_path(real)
        print("real")
        sys.modules["numpy"] = types.SimpleNamespace(ndarray=memoryview)
        typed_arguments(real)
        fast_path(real)
        print("stand-in again")
    """)
    assert_printed(done, "stand-in", "real", "stand-in again")


def test_without_numpy_in_sys_modules_buffers_are_read_through_the_buffer_protocol():
    """No NumPy at all, then a stand-in naming bytearray (a type not seen before), then none
    again: buffer objects work, NumPy is never imported to check a type, and NumPy imported at
    last is found then (no failure was cached)."""
    done = run_python("""
        import array, sys, types
        import amso_rust_ext as ext

        def buffers():
            values = array.array("d", [1.0, 2.5])
            ext.mult(2.0, values)
            view = memoryview(array.array("d", [-1.0]))
            ext.mult(3.0, view)
            assert values.tolist() == [2.0, 5.0] and view.tolist() == [-3.0], (values, view)

        def bytearrays():
            raw = bytearray(16)
            try:
                ext.mult(2.0, raw)
            except TypeError as error:
                assert "got a uint8 array" in str(error), error
            else:
                raise SystemExit("a bytearray was taken for float64 memory")
            view = memoryview(raw).cast("d")
            view[1] = 0.25
            ext.mult(2.0, view)
            assert view.tolist() == [0.0, 0.5], view.tolist()

        buffers()
        assert "numpy" not in sys.modules, "NumPy imported to check a type"
        print("no numpy")
        sys.modules["numpy"] = types.SimpleNamespace(ndarray=bytearray)
        bytearrays()
        buffers()
        print("stand-in")
        del sys.modules["numpy"]
        bytearrays()
        buffers()
        assert "numpy" not in sys.modules, "NumPy imported to check a type"
        print("none again")
        import numpy as np
    """, TYPED_ARGUMENTS, """
        typed_arguments(np)
        fast_path(np)
        print("numpy")
    """)
    assert_printed(done, "no numpy", "stand-in", "none again", "numpy")


# Fakes of NumPy's `_ARRAY_API`, under every module name its C API is found by: not a capsule,
# a capsule of another name, and NumPy's (unnamed) capsule over a table whose `PyArray_Type`
# entry (index 2) and `PyArrayDescr_Type` entry (3) are `bytearray`, made with ctypes; its
# functions are NULL, so trusting it crashes.
FAKE_APIS = {
    "not a capsule": "42",
    "capsule of another name": "capsule(b'numpy._fake_api')",
    "table naming bytearray": "capsule(None)",
}


@pytest.mark.parametrize("fake", FAKE_APIS)
def test_a_fake_numpy_c_api_is_refused_not_trusted(fake):
    """NumPy imported, then its C API modules replaced by fakes before any extension used
    them: typed arguments still work (NumPy's arrays through DLPack), a NumPy result is
    refused with an ImportError saying what `_ARRAY_API` should be; the real modules restored,
    NumPy works on the fast path again (the refusal was not cached)."""
    done = run_python(f"""
        import ctypes, sys, types
        import numpy as np
        import amso_rust_ext as ext
        table = (ctypes.c_void_p * 320)()
        table[2] = table[3] = id(bytearray)
        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        def capsule(name):
            return capsule_new(ctypes.addressof(table), name, None)
        names = ["numpy._core.multiarray", "numpy._core._multiarray_umath", "numpy.core.multiarray",
                 "numpy.core._multiarray_umath"]
        real = {{name: sys.modules.pop(name) for name in names if name in sys.modules}}
        for name in names:
            sys.modules[name] = types.ModuleType(name)
            sys.modules[name]._ARRAY_API = {FAKE_APIS[fake]}
        raw = bytearray(16)
        view = memoryview(raw).cast("d")
        view[0] = 1.0
        ext.mult(3.0, view)
        x = np.arange(3.0)
        ext.mult(2.0, x)
        assert view.tolist() == [3.0, 0.0] and x.tolist() == [0.0, 2.0, 4.0], (view, x)
        try:
            ext.axpy(1.0, x, x)
        except ImportError as error:
            assert "_ARRAY_API" in str(error) and "real NumPy" in str(error), error
        else:
            raise SystemExit("a fake _ARRAY_API was trusted")
        for name in names:
            del sys.modules[name]
        sys.modules.update(real)
    """, TYPED_ARGUMENTS, """
        typed_arguments(np)
        fast_path(np)
        print("refused")
    """)
    assert_printed(done, "refused")


def test_numpy_functions_are_called_only_on_the_real_numpy():
    """amso calls NumPy's Python functions (to_numpy, pickles of device arrays, dtypes) through
    the module `import numpy` gives: a stand-in there is refused, not kept, and the real NumPy
    restored works; a patched numpy.empty cannot make amso write into memory it did not get."""
    done = run_python("""
        import sys, types
        import numpy as np
        real = sys.modules["numpy"]
        import amso
        a = amso.MemArray(4, "float64")
        a[1] = 2.5
        sys.modules["numpy"] = types.SimpleNamespace(ndarray=bytearray, empty=lambda *a, **k: bytearray(32),
                                                     dtype=real.dtype)
        try:
            a.to_numpy()
            raise SystemExit("the stand-in was used")
        except ImportError as error:
            assert "is not the real NumPy" in str(error), error
            print("refused")
        sys.modules["numpy"] = real
        print(a.to_numpy().tolist())
        immutable = bytes(32)
        real.empty = lambda *args, **kwargs: np.frombuffer(immutable, np.float64)
        try:
            a.to_numpy()
            raise SystemExit("wrote into a read-only buffer")
        except TypeError as error:
            assert "numpy.empty gave a ndarray of 32 bytes, read-only" in str(error), error
            print("refused")
        assert immutable == bytes(32)
    """)
    assert_printed(done, "refused", "[0.0, 2.5, 0.0, 0.0]", "refused")


def test_a_patched_numpy_empty_returning_a_subclass_is_not_written_through():
    """A subclass's `reshape` could hand amso's writer an unrelated (or freed) buffer: only an
    exact ndarray whose own bytes the buffer is gets written, by to_numpy and by device pickles."""
    done = run_python("""
        import pickle
        import numpy as np
        import amso

        class Sly(np.ndarray):
            def reshape(self, *args, **kwargs):
                return np.zeros(self.size * self.itemsize, np.uint8)  # an unrelated array

        real_empty = np.empty
        np.empty = lambda *args, **kwargs: real_empty(*args, **kwargs).view(Sly)
        arrays = [amso.MemArray(4, "float64")]
        if amso.cuda.is_available():
            arrays.append(amso.MemArray(4, "float64", on_device=True))
        for a in arrays:
            try:
                a.to_numpy() if not a.__dlpack_device__()[0] == 2 else pickle.dumps(a, protocol=5)
                raise SystemExit("wrote through a subclass's buffer")
            except TypeError as error:
                assert "numpy.empty gave a Sly" in str(error), error
        np.empty = real_empty
        print("refused")
    """)
    assert_printed(done, "refused")


def test_a_patched_numpy_dtype_never_describes_memory_it_does_not_fit():
    """The descriptor `numpy.dtype` gives for a type NumPy builds from a spec (a record, an
    ml_dtypes type) describes arrays over amso's and Rust's memory: one of another size or
    layout (a patched numpy.dtype, a stand-in ml_dtypes) is refused before any array is made
    over it, and is not kept; the real one, restored, works."""
    pytest.importorskip("amso_peers")
    done = run_python("""
        import sys, types
        import numpy as np
        import amso, amso_peers
        real = np.dtype
        np.dtype = lambda *args, **kwargs: real("V4096")
        try:
            amso_peers.record_new(3)
            raise SystemExit("an array of 4096-byte elements over 40-byte records")
        except TypeError as error:  # the first descriptor built (a field's, or the record's) is refused
            assert "itemsize is 4096 bytes, where" in str(error) and "is not the real one" in str(error), error
            print("refused")
        # The fields' descriptors real, the record's (built from a dict) 40 bytes of other fields.
        np.dtype = lambda spec, *a, **k: real([("a", "<f8", (5,))]) if isinstance(spec, dict) else real(spec, *a, **k)
        try:
            amso_peers.record_new(3)
            raise SystemExit("a 40-byte dtype of other fields")
        except TypeError as error:
            assert "field 0 is named `a`, where the record has `pos`" in str(error), error
            print("refused")
        np.dtype = real
        print(amso_peers.record_new(3)["id"].tolist())
        real_ml = sys.modules["ml_dtypes"]
        sys.modules["ml_dtypes"] = types.SimpleNamespace(bfloat16=real("V4096"))
        try:
            amso.MemArray(3, "bfloat16").to_numpy()
            raise SystemExit("a 4096-byte bfloat16")
        except TypeError as error:
            assert "itemsize is 4096 bytes, where bfloat16 has 2" in str(error), error
            print("refused")
        sys.modules["ml_dtypes"] = real_ml
        print(amso.MemArray(3, "bfloat16").to_numpy().dtype)
    """)
    assert_printed(done, "refused", "refused", "[0, 1, 2]", "refused", "bfloat16")
