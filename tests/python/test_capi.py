"""The C ABI, from C: tests/c/test_capi.c compiled with cc against the installed amso.h
(amso.get_include(), the text of generated/amso.h) and loaded into this process with ctypes.PyDLL.
The C example, built by its own build line: test_include.py."""

from __future__ import annotations

import ctypes
import gc
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hostile import impostors
from test_dlpack import DLTensor, versioned

import amso

ROOT = Path(__file__).resolve().parents[2]
OK, NULL_ARGUMENT, NOT_AN_AMSO_ARRAY = 0, 1, 2
# DLPack (code, bits, lanes), written down by hand as the independent reference.
DLPACK_TYPES = {
    "bool": (6, 8, 1), "int32": (0, 32, 1), "int64": (0, 64, 1), "uint8": (1, 8, 1), "float16": (2, 16, 1),
    "bfloat16": (4, 16, 1), "float32": (2, 32, 1), "float64": (2, 64, 1), "complex64": (5, 64, 1),
}


class Description(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("ndim", ctypes.c_int32), ("size", ctypes.c_int64),
        ("shape", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8), ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16), ("itemsize", ctypes.c_int64), ("flags", ctypes.c_uint32),
        ("lock_id", ctypes.c_uint64),
    ]


def build(source: Path, output: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    include = sysconfig.get_paths()["include"]
    command = [compiler, "-shared", "-fPIC", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror",
               f"-I{include}", f"-I{amso.get_include()}", str(source), "-o", str(output)]
    subprocess.run(command, check=True)
    return output


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    library = ctypes.PyDLL(str(build(ROOT / "tests" / "c" / "test_capi.c", tmp_path_factory.mktemp("c") / "test_capi.so")))
    py = ctypes.py_object
    signatures = {
        "describe": [py, ctypes.POINTER(Description)],
        "handle_code": [py],
        "placement": [py, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int32)],
        "null_argument_codes": [py],
        "typed_codes": [py, py],
        "exchange_version": [py, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32)],
        "exchange_dltensor": [py, ctypes.POINTER(DLTensor)],
        "exchange_managed_matches": [py],
        "exchange_allocate_and_wrap": [py, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32, py],
        "exchange_wrap_counting": [py, ctypes.c_int64, ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint64, py],
        "current_stream": [py, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)],
        "deleter_count": [],
    }
    for name in ("last_error", "last_allocator_error"):
        getattr(library, name).restype = ctypes.c_char_p
    for name, argtypes in signatures.items():
        getattr(library, name).argtypes = argtypes
        getattr(library, name).restype = ctypes.c_int
    return library


def describe(lib, array) -> Description:
    d = Description()
    assert lib.describe(array, ctypes.byref(d)) == OK, lib.last_error()
    return d


@pytest.mark.parametrize(
    "name, shape",
    [("float32", (2, 3, 4)), ("int64", (5,)), ("uint8", (3, 1, 2)), ("bool", (0,)), ("complex64", (4, 4)),
     ("float16", (7,)), ("bfloat16", (3,)), ("float64", (1, 1)), ("int32", (2, 0, 5))],
)
def test_every_getter_matches_python(lib, name, shape):
    a = amso.MemArray(shape, name)
    dtype = a.dtype
    d = describe(lib, a)
    assert (d.ndim, d.size) == (a.ndim, a.size)
    assert tuple(d.shape[: d.ndim]) == a.shape
    # C-order strides in elements, by hand (zero-size axes count as 1, as in amso's DLPack export).
    expected_strides = tuple(int(np.prod([max(x, 1) for x in shape[i + 1 :]])) for i in range(len(shape)))
    assert tuple(d.strides[: d.ndim]) == expected_strides
    assert (d.device_type, d.device_id) == a.__dlpack_device__()
    assert (d.code, d.bits, d.lanes) == DLPACK_TYPES[name]
    assert d.itemsize == dtype.itemsize
    assert (d.flags, d.lock_id) == (0, 0)
    capsule = a.__dlpack__(max_version=(1, 0))
    assert (d.data or 0) == (versioned(capsule).dl_tensor.data or 0)


def test_handle_follows_locks_and_flags(lib):
    a = amso.MemArray((2, 2), np.float32, readonly=True)
    assert describe(lib, a).flags & 1
    b = amso.MemArray(3, np.float64)
    with b.get_dlpack() as ctx:
        assert describe(lib, b).lock_id == ctx.lock_id
    assert describe(lib, b).lock_id == 0


def test_error_codes_for_non_amso_objects_and_null(lib):
    assert lib.handle_code(np.zeros(3)) == NOT_AN_AMSO_ARRAY
    assert b"not an amso array" in lib.last_error()
    assert lib.handle_code(None) == NOT_AN_AMSO_ARRAY
    null_call = lib["handle_code"]
    null_call.argtypes, null_call.restype = [ctypes.c_void_p], ctypes.c_int
    assert null_call(None) == NULL_ARGUMENT
    assert lib.null_argument_codes(amso.MemArray(2, np.float32)) == 0b11111


def placement(lib, array) -> tuple[int, int]:
    """(data address, device type) of `array`, read by C in one call."""
    data, device_type = ctypes.c_void_p(), ctypes.c_int32()
    assert lib.placement(array, ctypes.byref(data), ctypes.byref(device_type)) == OK, lib.last_error()
    return data.value or 0, device_type.value


@pytest.mark.parametrize("case, impostor", impostors(), ids=[case for case, _ in impostors()])
def test_impostors_are_not_amso_arrays(lib, case, impostor):
    # Before: an int `_amso_header` attribute was dereferenced as a header (SIGSEGV).
    assert lib.handle_code(impostor) == NOT_AN_AMSO_ARRAY
    assert b"is not an amso array" in lib.last_error()


def test_python_subclasses_are_amso_arrays(lib):
    base = amso.class_for((2, 3), np.float32)
    subclass = type("Positions", (base,), {"label": "mine"})
    a = subclass((2, 3))
    a[1, 2] = 4.0
    assert isinstance(a, base) and a.label == "mine"
    d = describe(lib, a)
    assert tuple(d.shape[: d.ndim]) == (2, 3)
    assert d.data == versioned(a.__dlpack__(max_version=(1, 0))).dl_tensor.data


def test_arrays_of_another_crate_are_recognised(lib):
    # The user-crate module links its own copy of amso's runtime; amso's C API (the bundled
    # module's) recognises its arrays through their `__amso_type__` capsule.
    ue = pytest.importorskip("amso_user_example")
    density = ue.Density((2, 3, 4))
    d = describe(lib, density)
    assert (d.ndim, tuple(d.shape[:3]), (d.code, d.bits)) == (3, (2, 3, 4), (2, 64))
    assert d.data == versioned(density.__dlpack__(max_version=(1, 0))).dl_tensor.data
    tensor = DLTensor()
    assert lib.exchange_dltensor(density, ctypes.byref(tensor)) == 0
    assert (tensor.data, tensor.ndim) == (d.data, 3)


def test_typed_exports(lib):
    so = ctypes.PyDLL(amso._amso.__file__)
    shape_of = so.amso_float32_3d_shape
    shape_of.argtypes, shape_of.restype = [ctypes.py_object, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))], ctypes.c_int
    data_of = so.amso_float32_3d_data
    data_of.argtypes, data_of.restype = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int
    a = amso.MemArray((2, 3, 4), np.float32)
    a[1, 2, 3] = 5.0
    shape = ctypes.POINTER(ctypes.c_int64)()
    assert shape_of(a, ctypes.byref(shape)) == OK and shape[:3] == [2, 3, 4]
    data = ctypes.c_void_p()
    assert data_of(a, ctypes.byref(data)) == OK
    assert (ctypes.c_float * 24).from_address(data.value)[23] == 5.0
    assert shape_of(amso.MemArray((2, 3, 4), np.float64), ctypes.byref(shape)) == NOT_AN_AMSO_ARRAY
    assert shape_of(np.zeros((2, 3, 4), np.float32), ctypes.byref(shape)) == NOT_AN_AMSO_ARRAY


def test_exchange_table_and_dltensor_match_the_capsule(lib):
    a = amso.MemArray((3, 5), np.float64)
    major, minor = ctypes.c_uint32(), ctypes.c_uint32()
    assert lib.exchange_version(a, ctypes.byref(major), ctypes.byref(minor)) == 0
    assert (major.value, minor.value) == (1, 3)
    assert amso.MemArray.__name__ and type(a).__c_dlpack_exchange_api__ > 0
    t = DLTensor()
    assert lib.exchange_dltensor(a, ctypes.byref(t)) == 0
    reference = versioned(a.__dlpack__(max_version=(1, 0))).dl_tensor
    for field in ("data", "device_type", "device_id", "ndim", "code", "bits", "lanes", "byte_offset"):
        assert getattr(t, field) == getattr(reference, field), field
    assert t.shape[:2] == reference.shape[:2] and t.strides[:2] == reference.strides[:2]
    assert lib.exchange_managed_matches(a) == 0
    with a.get_dlpack():
        with pytest.raises(BufferError, match="locked"):
            lib.exchange_dltensor(a, ctypes.byref(t))


def test_allocator_round_trip_gives_a_working_array(lib):
    a = amso.MemArray(1, np.float32)
    made = []
    shape = (ctypes.c_int64 * 2)(2, 3)
    assert lib.exchange_allocate_and_wrap(a, 2, shape, 1, made) == 0, lib.last_allocator_error()
    (b,) = made
    assert type(b).__name__ == "MemArray2DFloat32" and b.shape == (2, 3)
    np.testing.assert_array_equal(b.to_numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    b[1, 2] = -1.0
    assert np.from_dlpack(b)[1, 2] == -1.0
    shape9 = (ctypes.c_int64 * 9)(*(1,) * 9)
    assert lib.exchange_allocate_and_wrap(a, 9, shape9, 1, made) == -3
    assert b"TypeError: amso has no compiled array for dtype float32 with ndim 9" in lib.last_allocator_error()


def test_to_py_object_wraps_without_copy_and_runs_the_deleter_once(lib):
    a = amso.MemArray(1, np.float32)
    before = lib.deleter_count()
    made = []
    assert lib.exchange_wrap_counting(a, 6, 2, 32, 0, made) == 0
    wrapped = made.pop()
    np.testing.assert_array_equal(wrapped.to_numpy(), 0.5 * np.arange(6, dtype=np.float32))
    view = np.from_dlpack(wrapped)
    wrapped[0] = 9.0
    assert view[0] == 9.0, "wrapped, not copied"
    del wrapped
    gc.collect()
    assert lib.deleter_count() == before, "a view still uses the memory"
    del view
    gc.collect()
    assert lib.deleter_count() == before + 1
    assert lib.exchange_wrap_counting(a, 2, 2, 32, 1, made) == 0  # READ_ONLY flag
    assert made[0].readonly
    made.clear()
    gc.collect()
    assert lib.deleter_count() == before + 2


def test_to_py_object_refusal_still_frees_the_tensor_once(lib):
    a = amso.MemArray(1, np.float32)
    before = lib.deleter_count()
    with pytest.raises(TypeError, match="kDLComplex with 32 bits"):
        lib.exchange_wrap_counting(a, 3, 5, 32, 0, [])  # complex32: not a DLPack type
    assert lib.deleter_count() == before + 1


def test_current_work_stream_follows_the_stream_context(lib):
    a = amso.MemArray(1, np.float32)
    stream = ctypes.c_void_p()
    assert lib.current_stream(a, 2, ctypes.byref(stream)) == 0 and stream.value is None
    with amso.cuda.stream(0x5A5A00):
        assert lib.current_stream(a, 2, ctypes.byref(stream)) == 0 and stream.value == 0x5A5A00
        assert lib.current_stream(a, 1, ctypes.byref(stream)) == 0 and stream.value is None
    assert lib.current_stream(a, 2, ctypes.byref(stream)) == 0 and stream.value is None


@pytest.mark.skipif(not amso.cuda.is_available(), reason="no CUDA driver here; the GPU suite runs on the GPU machine (scripts/gpu_suite.sh)")
def test_handle_after_move_reports_the_device_data(lib):
    a = amso.MemArray((4, 4), np.float32)
    host = describe(lib, a)
    a.move_memory(amso.dlpack.kDLCUDA)
    device = describe(lib, a)
    assert (device.device_type, device.device_id) == (2, 0) and device.flags & 2
    assert device.data == a.__cuda_array_interface__["data"][0] != host.data
    t = DLTensor()
    assert lib.exchange_dltensor(a, ctypes.byref(t)) == 0 and t.device_type == 2 and t.data == device.data
    a.move_memory(amso.dlpack.kDLCPU)
    assert describe(lib, a).data == host.data


@pytest.mark.skipif(not amso.cuda.is_available(), reason="no CUDA driver here; the GPU suite runs on the GPU machine (scripts/gpu_suite.sh)")
def test_allocator_on_the_device(lib):
    made = []
    shape = (ctypes.c_int64 * 2)(3, 3)
    assert lib.exchange_allocate_and_wrap(amso.MemArray(1, np.float32), 2, shape, 2, made) == 0, lib.last_allocator_error()
    (b,) = made
    assert b.on_device and b.__dlpack_device__() == (2, 0)
    b.add_index_tuple()
    np.testing.assert_array_equal(b.to_numpy(), np.indices((3, 3)).sum(axis=0))


def test_typed_exports_through_the_import_table_refuse_bad_input_without_an_exception(lib):
    """In a CPython extension the typed exports are inline calls through the table amso_import()
    loads: the right class answers, any other object or a NULL is its error code, and no Python
    exception is set (ctypes.PyDLL would raise it)."""
    right = amso.MemArray((2, 3, 4), np.float32)
    wrongs = [amso.MemArray((2, 3, 4), np.float64), amso.MemArray(24, np.float32), np.zeros((2, 3, 4), np.float32),
              None, "text"]
    for name, wrong in [(repr(w)[:40], w) for w in wrongs] + impostors():
        assert lib.typed_codes(right, wrong) == 0b111111, name


def test_a_header_of_another_spec_is_refused_at_import(tmp_path):
    """amso_import() compares the header's AMSO_TYPED_KEY (the spec's pairs, in order) with the
    installed module's table: a header generated from another spec is an ImportError, never
    another class's functions."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    header = (Path(amso.get_include()) / "amso.h").read_text()
    altered = re.sub(r"#define AMSO_TYPED_KEY 0x[0-9a-f]+ull", "#define AMSO_TYPED_KEY 0x1ull", header)
    assert altered != header
    (tmp_path / "amso.h").write_text(altered)  # found first: beside the source
    (tmp_path / "importer.c").write_text('#include <Python.h>\n#include "amso.h"\nint import_code(void) { return amso_import(); }\n')
    include = sysconfig.get_paths()["include"]
    subprocess.run([compiler, "-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{include}",
                    str(tmp_path / "importer.c"), "-o", str(tmp_path / "importer.so")], check=True)
    importer = ctypes.PyDLL(str(tmp_path / "importer.so"))
    importer.import_code.restype = ctypes.c_int
    with pytest.raises(ImportError, match="another spec"):
        importer.import_code()


def test_record_typed_exports_and_the_exchange_api_refusal(lib):
    """The record class's C getters (amso_particle_1d_*) give its records; the DLPack exchange
    API, which has no record type, refuses them as `__dlpack__` does."""
    so = ctypes.PyDLL(amso._amso.__file__)
    data_of = so.amso_particle_1d_data
    data_of.argtypes, data_of.restype = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int
    a = amso.MemArray(3, "particle")
    a["mass"] = [0.5, 1.5, 2.5]
    data = ctypes.c_void_p()
    assert data_of(a, ctypes.byref(data)) == OK
    assert [ctypes.c_double.from_address(data.value + 40 * i + 24).value for i in range(3)] == [0.5, 1.5, 2.5]
    assert data_of(amso.MemArray(3, np.float64), ctypes.byref(data)) == NOT_AN_AMSO_ARRAY
    assert data_of(np.zeros(3, a.dtype), ctypes.byref(data)) == NOT_AN_AMSO_ARRAY
    t = DLTensor()
    with pytest.raises(BufferError, match=r'particle is a record .*DLPack has no record type.*a\["mass"\]'):
        lib.exchange_dltensor(a, ctypes.byref(t))
    with pytest.raises(BufferError, match="DLPack has no record type"):
        lib.exchange_managed_matches(a)
