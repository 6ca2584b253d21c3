"""Trust boundaries, round two (issue 54): each case as the outside review reproduced it, in a
child process where it needs a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def child(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120)


def test_a_rust_owned_result_numpy_still_holds_at_exit_leaves_no_panic_text():
    """Case 7: NumPy holds a Rust-owned result when the interpreter exits; the owner's capsule
    destructor runs during finalization, where PyO3 cannot attach: the owner is leaked quietly,
    as NumPy leaks its own, with no panic message."""
    pytest.importorskip("amso_user_example")
    done = child("""
        import amso_user_example as ue
        kept, _ = ue.owned_memarray(1 << 10, False, "numpy")
        also = [ue.owned_memarray(8, False, "numpy")[0] for _ in range(3)]
        assert kept.sum() == sum(range(1 << 10))
    """)
    assert done.returncode == 0, done.stderr
    assert "panicked" not in done.stderr and "panic" not in done.stderr.lower(), done.stderr


def test_a_user_dtype_renamed_before_first_use_is_refused_not_misread():
    """Case 2: a NumPy user dtype whose name claims a spec dtype of another size (the name is
    writable) is a TypeError naming both sizes, never 8-byte reads of a 2-byte array."""
    pytest.importorskip("ml_dtypes")
    done = child("""
        import numpy as np, ml_dtypes, amso
        ml_dtypes.bfloat16.__name__ = "float64"
        x = np.zeros(4, ml_dtypes.bfloat16)
        for attempt in (lambda: amso.asarray(x, copy=False), lambda: amso.asarray(x)):
            try:
                attempt()
                print("accepted")
            except TypeError as error:
                print("refused:", error)
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("refused:") for line in lines), done.stdout
    assert "2 bytes" in lines[0] and "8" in lines[0], lines[0]


def test_renaming_a_user_dtype_after_first_use_changes_nothing():
    pytest.importorskip("ml_dtypes")
    done = child("""
        import numpy as np, ml_dtypes, amso
        a = amso.asarray(np.arange(4, dtype=ml_dtypes.bfloat16), copy=False)
        ml_dtypes.bfloat16.__name__ = "float64"
        b = amso.asarray(np.arange(4, dtype=ml_dtypes.bfloat16), copy=False)
        print(a.dtype == b.dtype, b.dtype.itemsize, b.to_numpy().astype(np.float32).tolist())
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True 2 [0.0, 1.0, 2.0, 3.0]", done.stdout


PLANT = """
import ctypes
api = ctypes.pythonapi
api.PyInterpreterState_Get.restype = ctypes.c_void_p
api.PyInterpreterState_GetDict.restype = ctypes.py_object
api.PyInterpreterState_GetDict.argtypes = [ctypes.c_void_p]
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
shared = api.PyInterpreterState_GetDict(api.PyInterpreterState_Get())
"""


@pytest.mark.parametrize("planted, found", [
    ('table = (ctypes.c_uint32 * 64)(99, 256)\n'
     'shared["_amso_pool"] = api.PyCapsule_New(ctypes.addressof(table), b"_amso_pool.table", None)', "version 99"),
    ('shared["_amso_pool_v1"] = api.PyCapsule_New(1, b"_amso_pool_v1.table", None)', "version 1"),
    ('shared["_amso_process_v3"] = api.PyCapsule_New(1, b"_amso_process_v3.table", None)', "an earlier layout"),
    ('table = (ctypes.c_uint32 * 64)(99, 256)\n'
     'shared["_amso_process_v4"] = api.PyCapsule_New(ctypes.addressof(table), b"_amso_process_v4.table", None)',
     "version 99"),
], ids=["pool-version-99", "pool-version-1", "process-earlier-name", "process-version-99"])
def test_a_shared_table_of_another_layout_is_refused_at_import(planted, found):
    """Case 8: the tables every runtime copy shares (the process table of borrows, the pool
    table) start with their version and size; a copy meeting one of another layout (planted here,
    as an older or newer amso would publish it), or an earlier layout's name, refuses to load
    instead of keeping a second table or reading the wrong struct."""
    done = child(PLANT + planted + """
try:
    import amso
    print("loaded")
except ImportError as error:
    print("refused:", error)
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused:") and found in done.stdout and "rebuild" in done.stdout, done.stdout


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn",
                                  "float4_e2m1fn"])
def test_the_item_size_check_keeps_every_ml_dtypes_type_zero_copy(name):
    """The check of case 2 compares a user dtype's item size with the spec dtype's storage: a
    sub-byte type takes one byte (padded), as ml_dtypes stores it, so it still imports in place."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    import amso

    values = np.array([0.5, 1.5, 0.0], dtype=getattr(ml_dtypes, name))
    a = amso.asarray(values, copy=False)
    assert np.asarray(a).ctypes.data == values.ctypes.data
    np.testing.assert_array_equal(np.asarray(a).astype(np.float32), [0.5, 1.5, 0.0])


def test_a_renamed_record_descriptor_is_compared_again():
    """Case 4: a descriptor that matched the record once, then renamed in place (`dtype.names =
    ...`, which frees its names tuple): the new tuple must never pass for the old one at a reused
    address. Swapping `mass` and `id` is refused each time; the original names pass each time."""
    peers = pytest.importorskip("amso_peers")
    import numpy as np

    layout = {"names": ["pos", "vel", "mass", "id"], "formats": [("<f4", (3,)), ("<f4", (3,)), "<f8", "<i8"],
              "offsets": [0, 12, 24, 32], "itemsize": 40}
    particles = np.zeros(3, np.dtype(layout))
    particles["mass"], particles["id"] = [1.0, 2.0, 4.0], [100, 200, 300]
    original, swapped = ("pos", "vel", "mass", "id"), ("pos", "vel", "id", "mass")
    for _ in range(20):
        particles.dtype.names = original
        assert peers.record_total_mass(particles) == 7.0
        particles.dtype.names = swapped
        with pytest.raises(TypeError, match="expected an array of record particle"):
            peers.record_total_mass(particles)


def test_a_vector_unpickled_over_a_misaligned_buffer_is_copied_to_its_alignment():
    """Case 1: a float32x4 array unpickled (protocol 5) over an out-of-band buffer that is 4- but
    not 16-byte aligned (as a transport slicing buffers from one receive buffer gives) is copied
    to 16-byte-aligned memory, as C's `amso_float32x4_t` and CUDA's `float4` loads need, never
    adopted in place."""
    import pickle

    import numpy as np

    import amso

    a = amso.asarray(np.arange(32, dtype=np.float32).reshape(8, 4), dtype="float32x4")
    buffers: list = []
    payload = pickle.dumps(a, protocol=5, buffer_callback=buffers.append)
    raw = bytes(buffers[0].raw())
    receive = np.zeros(len(raw) + 64, np.uint8)
    offset = next(k for k in range(4, 64, 4) if (receive.ctypes.data + k) % 16 == 4)
    receive[offset:offset + len(raw)] = np.frombuffer(raw, np.uint8)
    b = pickle.loads(payload, buffers=[memoryview(receive)[offset:offset + len(raw)]])
    lanes = np.asarray(b)
    assert lanes.ctypes.data % 16 == 0, f"adopted at {lanes.ctypes.data:#x}"
    assert lanes.ctypes.data != receive.ctypes.data + offset
    np.testing.assert_array_equal(lanes.reshape(8, 4), np.arange(32, dtype=np.float32).reshape(8, 4))
    # A 16-byte-aligned buffer is still adopted without a copy.
    aligned = next(k for k in range(0, 64, 4) if (receive.ctypes.data + k) % 16 == 0)
    receive[aligned:aligned + len(raw)] = np.frombuffer(raw, np.uint8)
    c = pickle.loads(payload, buffers=[memoryview(receive)[aligned:aligned + len(raw)]])
    assert np.asarray(c).ctypes.data == receive.ctypes.data + aligned


def _unpickled_over_a_misaligned_buffer(n):
    """A float32x4 array of `n` vectors unpickled (protocol 5) over an out-of-band buffer 4 bytes
    past a 16-byte boundary, and the values it must hold."""
    import pickle

    import numpy as np

    import amso

    values = np.arange(4 * n, dtype=np.float32).reshape(n, 4) - 3.5
    buffers: list = []
    payload = pickle.dumps(amso.asarray(values, dtype="float32x4"), protocol=5, buffer_callback=buffers.append)
    raw = bytes(buffers[0].raw())
    receive = np.zeros(len(raw) + 64, np.uint8)
    offset = next(k for k in range(4, 64, 4) if (receive.ctypes.data + k) % 16 == 4)
    receive[offset:offset + len(raw)] = np.frombuffer(raw, np.uint8)
    return pickle.loads(payload, buffers=[memoryview(receive)[offset:offset + len(raw)]]), values


_LANE_SUM = r"""
#include "amso.cuh"
extern "C" __global__ void lane_sum(amso::Indexer<amso::float32x4, 1> v, amso::Indexer<float, 1> out) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= v.size()) return;
    const float4 p = v(i);  // one aligned 16-byte load, which faults on a misaligned address
    out(i) = p.x + p.y + p.z + p.w;
}
"""


@pytest.mark.skipif("not __import__('amso').cuda.is_available()", reason="needs a CUDA device (scripts/gpu_suite.sh)")
def test_a_vector_unpickled_over_a_misaligned_buffer_reaches_the_gpu_aligned():
    """Case 1's GPU path: the unpickled vector, exported to the device (DLPack with its lanes to
    amso's device array, then a float4 kernel) and to CuPy, arrives 16-byte aligned with its values."""
    import numpy as np

    import amso

    b, values = _unpickled_over_a_misaligned_buffer(1000)
    host = amso.from_dlpack(b)  # the host export carries lanes = 4: its address must be aligned
    assert np.asarray(host).ctypes.data % 16 == 0 and np.asarray(host).ctypes.data == np.asarray(b).ctypes.data
    b.move_memory("cuda")
    assert b.__cuda_array_interface__["data"][0] % 16 == 0
    out = amso.MemArray(1000, np.float32, on_device=True)
    amso.cuda.Kernel(_LANE_SUM, "lane_sum")((1000 + 127) // 128, 128, (b, out))
    np.testing.assert_array_equal(out.to_numpy(), values.sum(axis=1))
    cupy = pytest.importorskip("cupy")
    np.testing.assert_array_equal(cupy.asnumpy(cupy.asarray(b)), values)


def _legacy_interpreter():
    """A subinterpreter that shares the main GIL (3.11's kind; `isolated=False` from 3.12)."""
    try:
        import _xxsubinterpreters as interpreters
    except ImportError:
        interpreters = pytest.importorskip("_interpreters")
    for make in (lambda: interpreters.create(isolated=False), lambda: interpreters.create("legacy"),
                 lambda: interpreters.create()):
        try:
            return interpreters, make()
        except TypeError:
            continue
    pytest.skip("this Python cannot make a legacy subinterpreter")


@pytest.mark.parametrize("module", ["amso._amso", "amso_user_example.amso_user_example"])
def test_a_runtime_copy_first_imported_in_a_subinterpreter_is_refused(module):
    """Case 3: a copy of the runtime first imported in a subinterpreter would keep a second borrow
    registry and pool there; every copy serves the main interpreter only, whichever imports first.
    Loaded from its file (the packages would stop earlier, at NumPy's own check)."""
    import importlib.util

    package = module.split(".")[0]
    spec = importlib.util.find_spec(package)
    if spec is None:
        pytest.skip(f"needs {package}")
    import glob
    import os

    files = glob.glob(os.path.join(os.path.dirname(spec.origin), module.split(".")[1] + "*.so"))
    assert files, f"no extension file of {module}"
    done = child(f"""
        import os, sys
        sys.path[:0] = {sys.path!r}
        import test_trust_round_two as here
        interpreters, interpreter = here._legacy_interpreter()
        read, write = os.pipe()
        code = (
            "import importlib.util, os\\n"
            "spec = importlib.util.spec_from_file_location({module!r}, {files[0]!r})\\n"
            "try:\\n"
            "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\\n"
            f"    os.write({{write}}, b'loaded')\\n"
            "except ImportError as error:\\n"
            f"    os.write({{write}}, str(error).encode())\\n"
        )
        interpreters.run_string(interpreter, code)
        os.close(write)
        print(os.read(read, 4096).decode())
    """)
    assert done.returncode == 0, done.stderr
    assert "serves the main interpreter only" in done.stdout, done.stdout


def test_renaming_one_record_arrays_dtype_renames_nothing_of_amsos():
    """Case 5: NumPy lets a descriptor's field names be set in place; `a.dtype` of a record array
    is a copy of amso's descriptor, so renaming it changes neither another array's fields nor
    what typed arguments accept."""
    import numpy as np

    import amso

    a, b = amso.MemArray(3, "particle"), amso.MemArray(2, "particle")
    assert a.dtype is not b.dtype and a.dtype == b.dtype
    renamed = a.dtype
    renamed.names = ("pos", "vel", "id", "mass")
    assert b.dtype.names == ("pos", "vel", "mass", "id") and a.dtype.names == ("pos", "vel", "mass", "id")
    peers = pytest.importorskip("amso_peers")
    b_numpy = np.asarray(b)
    b_numpy["mass"] = [1.0, 2.0]
    assert peers.record_total_mass(b) == 3.0 and peers.record_total_mass(b_numpy) == 3.0
