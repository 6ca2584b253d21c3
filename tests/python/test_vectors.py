"""Vector element types (issue 40): the spec's `float32x4`, CUDA's `float4` (4 lanes of float32,
16 bytes, aligned to 16), compiled into the bundled module at ndim 1. NumPy has no vector dtype,
so NumPy, the buffer protocol and the array interfaces see the lanes as a last axis of float32,
without a copy; `a.dtype` is NumPy's subarray dtype `('<f4', (4,))`. DLPack carries the vector
itself (lanes = 4): TVM-FFI takes it; consumers that refuse lanes get `a.scalar_view()`, the same
memory as float32 `(n, 4)`. Rust functions take `[f32; 4]` arrays from amso and NumPy; C reads
`amso_float32x4_t`, CUDA `float4`. NumPy and hand-computed values are the references."""

from __future__ import annotations

import copy
import ctypes
import gc
import pickle
import shutil
import subprocess

import numpy as np
import pytest
from hostile import Tensor
from test_dlpack import versioned

import amso

VECTOR = np.dtype((np.float32, (4,)))
on_gpu = pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device (scripts/gpu_suite.sh)")


def lanes(n=5):
    return np.arange(4 * n, dtype=np.float32).reshape(n, 4) - 3.5


def vectors(n=5, **kwargs):
    a = amso.MemArray((n,), "float32x4", **kwargs)
    a.read_numpy_array(lanes(n))
    return a


def address(array) -> int:
    return np.asarray(array).ctypes.data


@pytest.mark.parametrize("dtype", ["float32x4", VECTOR, ("float32", 4), np.dtype(("<f4", (4,)))])
def test_made_by_name_or_by_numpys_subarray_dtype(dtype):
    a = amso.MemArray((3,), dtype)
    assert type(a).__name__ == "MemArray1DFloat32x4" and isinstance(a, amso.MemArray)
    assert a.shape == (3,) and a.dtype == VECTOR and a.itemsize == 16 and a.nbytes == 48
    np.testing.assert_array_equal(np.asarray(a), np.zeros((3, 4), np.float32))
    assert ("float32x4", 1) in amso.supported()


def test_vectors_that_are_not_compiled_are_named():
    with pytest.raises(TypeError, match=r"no compiled vector dtype \(the vectors: float32x4 \('<f4', \(4,\)\)\)"):
        amso.MemArray(2, (np.float64, 4))
    with pytest.raises(TypeError, match="no compiled vector dtype"):
        amso.MemArray(2, (np.float32, (2, 2)))
    with pytest.raises(TypeError, match="no compiled array for dtype float32x4 with ndim 2"):
        amso.MemArray((2, 2), "float32x4")


def test_numpy_views_are_the_lanes_as_a_last_axis_of_the_same_memory():
    a = vectors()
    view = np.asarray(a)
    assert view.shape == (5, 4) and view.dtype == np.float32 and view.strides == (16, 4)
    assert not view.flags.owndata and view.ctypes.data % 16 == 0
    np.testing.assert_array_equal(view, lanes())
    view[2, 3] = 99.0
    assert a.to_numpy()[2, 3] == 99.0
    np.testing.assert_array_equal(a[2], [4.5, 5.5, 6.5, 99.0])  # one element: its 4 lanes
    a[1] = 7  # NumPy's broadcasting through the view
    a[0] = [1, 2, 3, 4]
    np.testing.assert_array_equal(a.to_numpy()[:2], [[1, 2, 3, 4], [7, 7, 7, 7]])
    np.testing.assert_array_equal([row.tolist() for row in a], a.to_numpy().tolist())
    assert len(a) == 5
    np.testing.assert_array_equal(a == a.to_numpy(), np.ones((5, 4), bool))
    # NumPy expands a subarray dtype asked of an array (its own arrays too): the same here.
    assert np.asarray(a, dtype=VECTOR).shape == np.asarray(a.to_numpy(), dtype=VECTOR).shape == (5, 4, 4)
    np.testing.assert_array_equal(np.asarray(a, dtype=np.float64), a.to_numpy().astype(np.float64))
    with pytest.raises(ValueError, match="needs a copy, but copy=False"):
        a.__array__(dtype=np.float64, copy=False)


def test_buffer_protocol_and_copies_in_and_out():
    a = vectors(3)
    m = memoryview(a)
    assert (m.format, m.shape, m.strides, m.itemsize, m.nbytes) == ("f", (3, 4), (16, 4), 4, 48)
    # The lanes axis counts: a C-contiguous (3, 4) buffer is no Fortran-contiguous one.
    view = (ctypes.c_char * 88)()
    get_buffer = ctypes.pythonapi.PyObject_GetBuffer
    get_buffer.argtypes, get_buffer.restype = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int], ctypes.c_int
    PYBUF_F_CONTIGUOUS = 0x0040 | 0x0018  # with PyBUF_STRIDES
    with pytest.raises(BufferError, match="a Fortran-contiguous buffer of this shape does not exist"):
        get_buffer(a, ctypes.addressof(view), PYBUF_F_CONTIGUOUS)
    assert m.tolist() == lanes(3).tolist()
    m.release()
    out = a.to_numpy()
    assert out.shape == (3, 4) and out.dtype == np.float32 and out.flags.owndata
    a.read_numpy_array(np.ones((3, 4), np.int16))  # NumPy's same_kind casting, per lane
    np.testing.assert_array_equal(a.to_numpy(), np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"the input has shape \(3,\), the MemArray has shape \(3, 4\)"):
        a.read_numpy_array(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="cannot cast complex64 to float32"):
        a.read_numpy_array(np.ones((3, 4), np.complex64))


def test_one_integer_per_axis_of_the_view_is_one_lane():
    """Indexing is NumPy's over the lanes' view: `a[i, k]` is lane k of vector i (Rust's
    `Element::to_scalar` refuses a whole vector, a unit test of element.rs)."""
    a = vectors(2)
    assert a[1, 2] == lanes(2)[1, 2] and isinstance(a[1, 2], np.float32)
    a[1, 2] = 0.5
    assert a.to_numpy()[1, 2] == 0.5
    with pytest.raises(IndexError):
        a[0, 4]


def test_pickles_and_copies_keep_the_lanes():
    a = vectors()
    for other in (pickle.loads(pickle.dumps(a, protocol=5)), pickle.loads(pickle.dumps(a, protocol=2)), a.copy(),
                  copy.deepcopy(a), copy.copy(a)):
        assert type(other) is type(a) and other.dtype == VECTOR
        np.testing.assert_array_equal(np.asarray(other), lanes())
        assert address(other) != address(a)


def test_dlpack_exports_the_vector_with_its_lanes():
    a = vectors(3)
    capsule = a.__dlpack__(max_version=(1, 3))
    t = versioned(capsule).dl_tensor
    assert (t.code, t.bits, t.lanes, t.ndim, t.shape[0]) == (2, 32, 4, 1, 3) and t.data == address(a)
    back = amso.from_dlpack(a)
    assert type(back) is type(a) and address(back) == address(a)


def test_tvm_ffi_takes_the_vector_and_gives_it_back_without_a_copy():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    a = vectors(3)
    tensor = tvm_ffi.from_dlpack(a)
    assert str(tensor.dtype) == "float32x4" and tuple(tensor.shape) == (3,)
    back = amso.from_dlpack(tensor)
    assert type(back) is type(a) and address(back) == address(a)
    np.testing.assert_array_equal(np.asarray(back), lanes(3))


def test_a_consumer_that_refuses_lanes_is_pointed_to_the_scalar_view():
    """NumPy reads lanes == 1 only; the capsule it drops as it raises adds a note naming the
    view, which NumPy then takes without a copy."""
    a = vectors(3)
    with pytest.raises((RuntimeError, BufferError), match="Unsupported lanes") as refused:  # NumPy 2.4, 2.5
        np.from_dlpack(a)
    assert any("a.scalar_view()" in note and "float32x4" in note for note in refused.value.__notes__)
    view = a.scalar_view()
    assert type(view).__name__ == "MemArray2DFloat32" and view.shape == (3, 4)
    taken = np.from_dlpack(view)
    assert taken.ctypes.data == address(a) and taken.shape == (3, 4)
    np.testing.assert_array_equal(taken, lanes(3))
    # An unrelated error raised while a vector capsule dies unconsumed gets no note: here the
    # capsule is a temporary argument, dropped as the division raises.
    def take(capsule, value):
        return capsule, value

    for versions in ({"max_version": (1, 0)}, {}):  # the versioned and the legacy capsule's destructor
        with pytest.raises(ZeroDivisionError) as unrelated:
            take(a.__dlpack__(**versions), 1 / 0)
        assert not getattr(unrelated.value, "__notes__", [])
    # A lane refusal that drops the legacy capsule gets the note too.
    def refuse():
        raise BufferError("lanes != 1 unsupported")

    with pytest.raises(BufferError) as legacy:
        take(a.__dlpack__(), refuse())
    assert any("a.scalar_view()" in note for note in legacy.value.__notes__)


def test_vector_arrays_over_foreign_memory_start_aligned_to_16_bytes():
    """A producer's lanes=4 tensor is adopted only where C's amso_float32x4_t and CUDA's float4
    can load it; `amso.asarray(t, dtype="float32x4")` of such a producer takes it as it is."""
    probe = Tensor(shape=(2,), dtype=(2, 32, 4), nbytes=80)
    offset = -ctypes.addressof(probe.buffer) % 16  # the offset that makes the data 16-aligned
    misaligned = Tensor(shape=(2,), dtype=(2, 32, 4), nbytes=80, byte_offset=offset + 4)
    with pytest.raises(BufferError, match="not aligned to 16 bytes, as float32x4 elements are"):
        amso.from_dlpack(misaligned.producer())
    assert misaligned.deleted == 1
    aligned = Tensor(shape=(2,), dtype=(2, 32, 4), nbytes=80)
    aligned.managed.dl_tensor.byte_offset = -ctypes.addressof(aligned.buffer) % 16
    over = amso.from_dlpack(aligned.producer())
    assert over.shape == (2,) and address(over) % 16 == 0
    tvm_ffi = pytest.importorskip("tvm_ffi")
    a = vectors(3)
    back = amso.asarray(tvm_ffi.from_dlpack(a), dtype="float32x4", copy=False)
    assert type(back) is type(a) and address(back) == address(a)
    with pytest.raises(ValueError, match=r"needs a last axis of 4 float32 lanes; the input is float32, shape \[4\]"):
        amso.asarray(np.zeros(4, np.float32), dtype="float32x4", copy=False)


def test_the_scalar_view_shares_memory_and_holds_it():
    a = vectors(4)
    view = a.scalar_view()
    np.asarray(view)[1, 2] = -8.0
    assert a.to_numpy()[1, 2] == -8.0
    a[3] = 0.25
    np.testing.assert_array_equal(np.asarray(view)[3], [0.25] * 4)
    expected = a.to_numpy()
    del a
    gc.collect()
    np.testing.assert_array_equal(np.asarray(view), expected)  # the view holds the memory
    with pytest.raises(TypeError, match="float64 elements are single values already"):
        amso.MemArray(3, np.float64).scalar_view()


def test_numpy_lanes_are_adopted_as_vectors_without_a_copy():
    x = lanes(6)
    a = amso.asarray(x, dtype="float32x4")
    assert type(a).__name__ == "MemArray1DFloat32x4" and address(a) == x.ctypes.data
    x[0, 0] = 42.0
    assert a.to_numpy()[0, 0] == 42.0
    assert amso.asarray(a, dtype=VECTOR) is a
    converted = amso.asarray(x.astype(np.float64), dtype="float32x4")  # a cast copies
    np.testing.assert_array_equal(np.asarray(converted), x)
    assert amso.asarray(x.tolist(), dtype="float32x4").shape == (6,)
    misaligned = np.frombuffer(np.zeros(4 * 6 * 4 + 4, np.uint8)[4:].data, np.float32).reshape(6, 4)
    with pytest.raises(BufferError, match="not aligned to 16 bytes, as float32x4 elements are"):
        amso.asarray(misaligned, dtype="float32x4", copy=False)
    assert address(amso.asarray(misaligned, dtype="float32x4")) % 16 == 0  # copied, aligned
    with pytest.raises(ValueError, match=r"needs a last axis of 4 float32 lanes; the input is float32, shape \[6, 3\]"):
        amso.asarray(np.zeros((6, 3), np.float32), dtype="float32x4", copy=False)
    with pytest.raises(ValueError, match=r"needs a last axis of 4 float32 lanes; the input has shape \(6, 3\)"):
        amso.asarray(np.zeros((6, 3), np.float32), dtype="float32x4")


def test_rust_functions_take_vectors_from_amso_and_numpy():
    peers = pytest.importorskip("amso_peers")
    a = vectors()
    norms = np.linalg.norm(lanes(), axis=1)
    np.testing.assert_allclose(peers.vector_norms(a), norms, rtol=1e-6)
    np.testing.assert_allclose(peers.vector_norms(lanes()), norms, rtol=1e-6)  # NumPy's (n, 4), in place
    np.testing.assert_allclose(peers.vector_norms(peers.Vectors((2,))), [0, 0])  # the crate's own class
    assert peers.vector_shape(np.zeros((2, 3, 4), np.float32)) == [2, 3]
    x = lanes()
    peers.vector_bump_w(x)
    peers.vector_bump_w(a)
    np.testing.assert_array_equal(x[:, 3], lanes()[:, 3] + 1)
    np.testing.assert_array_equal(a.to_numpy(), x)
    made = peers.vector_new(3)
    assert made.shape == (3, 4) and made.dtype == np.float32
    np.testing.assert_array_equal(made, np.arange(3)[:, None] * np.float32([1, 2, 3, 4]))
    for bad in (np.zeros((5, 8), np.float32)[:, ::2], np.zeros((5, 3), np.float32), np.zeros((5, 4))):
        with pytest.raises(TypeError, match=r"expected a float32x4 array with 1 dimension \(or a float32 array with "
                                            r"2 dimensions, its last axis the 4 lanes side by side\)"):
            peers.vector_norms(bad)


def test_the_c_getter_gives_the_vectors():
    so = ctypes.PyDLL(amso._amso.__file__)
    data_of = so.amso_float32x4_1d_data
    data_of.argtypes, data_of.restype = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int
    a = vectors(3)
    data = ctypes.c_void_p()
    assert data_of(a, ctypes.byref(data)) == 0 and data.value % 16 == 0
    assert [ctypes.c_float.from_address(data.value + 16 * 2 + 4 * k).value for k in range(4)] == lanes(3)[2].tolist()
    assert data_of(amso.MemArray((3, 4), np.float32), ctypes.byref(data)) != 0


def test_the_headers_declare_the_vector_as_c_and_cuda_do(tmp_path):
    """amso.h's amso_float32x4_t is 16 bytes aligned to 16 with lanes x, y, z, w; amso.cuh's
    float32x4 is CUDA's float4 (here its host stand-in), indexed as any element."""
    cc, cxx = shutil.which("cc"), shutil.which("c++") or shutil.which("g++")
    if cc is None or cxx is None:
        pytest.skip("no C or C++ compiler")
    include = amso.get_include()
    c = tmp_path / "v.c"
    c.write_text('#include <Python.h>\n#include <stddef.h>\n#include "amso.h"\n'
                 "_Static_assert(sizeof(amso_float32x4_t) == 16 && _Alignof(amso_float32x4_t) == 16, \"size\");\n"
                 "_Static_assert(offsetof(amso_float32x4_t, w) == 12, \"w\");\n"
                 "int main(void) { amso_float32x4_t v = {1, 2, 3, 4}; return v.x + v.w == 5 ? 0 : 1; }\n")
    import sysconfig

    subprocess.run([cc, "-std=c11", f"-I{include}", f"-I{sysconfig.get_path('include')}", str(c), "-o",
                    str(tmp_path / "v")], check=True)
    assert subprocess.run([str(tmp_path / "v")]).returncode == 0
    cpp = tmp_path / "v.cpp"
    cpp.write_text('#include "amso.cuh"\nstatic_assert(alignof(amso::float32x4) == 16, "float4");\n'
                   "int main() { amso::float32x4 d[2] = {{1, 2, 3, 4}, {5, 6, 7, 8}};\n"
                   "  amso::Indexer<amso::float32x4, 1> v{d, {2}};\n"
                   "  return v.size() == 2 && v.data[v.offset(1)].w == 8 ? 0 : 1; }\n")
    subprocess.run([cxx, "-std=c++17", "-D__host__=", "-D__device__=", f"-I{include}", str(cpp), "-o",
                    str(tmp_path / "vpp")], check=True)
    assert subprocess.run([str(tmp_path / "vpp")]).returncode == 0


# ---- on the GPU ----

LANE_SUM = r"""
#include "amso.cuh"
extern "C" __global__ void lane_sum(amso::Indexer<amso::float32x4, 1> v, amso::Indexer<float, 1> out) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= v.size()) return;
    const float4 p = v(i);  // one aligned 16-byte load
    out(i) = p.x + p.y + p.z + p.w;
    v(i).w = -1.0f;
}
"""


@on_gpu
def test_a_kernel_reads_float4_from_a_vector_array():
    a = vectors(1000, on_device=True)
    out = amso.MemArray(1000, np.float32, on_device=True)
    amso.cuda.Kernel(LANE_SUM, "lane_sum")((1000 + 127) // 128, 128, (a, out))
    np.testing.assert_array_equal(out.to_numpy(), lanes(1000).sum(axis=1))
    expected = lanes(1000)
    expected[:, 3] = -1
    np.testing.assert_array_equal(a.to_numpy(), expected)


@on_gpu
def test_device_vectors_meet_cupy_and_torch_through_their_lanes():
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    a = vectors(64, on_device=True)
    interface = a.__cuda_array_interface__
    assert interface["shape"] == (64, 4) and interface["typestr"] == "<f4"
    c = cupy.asarray(a)  # the CUDA array interface: lanes as a last axis, no copy
    assert c.shape == (64, 4) and c.data.ptr == interface["data"][0]
    np.testing.assert_array_equal(cupy.asnumpy(c), lanes(64))
    with pytest.raises(Exception) as refused:  # PyTorch reads lanes == 1 only: its own error type and text
        torch.from_dlpack(a)
    assert "lane" in str(refused.value).lower()
    view = a.scalar_view()
    t = torch.from_dlpack(view)
    assert t.shape == (64, 4) and t.device.type == "cuda" and t.data_ptr() == interface["data"][0]
    t[:, 0] += 100
    torch.cuda.synchronize()
    expected = lanes(64)
    expected[:, 0] += 100
    np.testing.assert_array_equal(a.to_numpy(), expected)


@on_gpu
@pytest.mark.parametrize("consumer", ["cupy", "jax"])
def test_cupy_and_jax_refuse_the_lanes_and_take_the_scalar_view(consumer):
    """CuPy's and JAX's `from_dlpack` read lanes == 1 only and raise their own error, which
    names the lanes (docs/dtypes.md); the scalar view, the same memory as float32 (n, 4), they
    take."""
    module = pytest.importorskip(consumer)
    if consumer == "jax":
        module = pytest.importorskip("jax.dlpack")
    a = vectors(64, on_device=True)
    with pytest.raises(Exception) as refused:
        module.from_dlpack(a)
    assert "lanes" in str(refused.value)
    taken = module.from_dlpack(a.scalar_view())
    address = a.__cuda_array_interface__["data"][0]
    assert tuple(taken.shape) == (64, 4)
    if consumer == "cupy":  # in place
        assert taken.data.ptr == address
        np.testing.assert_array_equal(module.asnumpy(taken), lanes(64))
    else:
        assert taken.unsafe_buffer_pointer() == address
        np.testing.assert_array_equal(np.asarray(taken), lanes(64))


@on_gpu
def test_moves_keep_the_vectors():
    a = vectors(10)
    a.move_memory(amso.dlpack.kDLCUDA)
    assert a.on_device and a.__dlpack_device__() == (2, 0)
    a.move_memory(amso.dlpack.kDLCPU)
    np.testing.assert_array_equal(np.asarray(a), lanes(10))


@on_gpu
def test_index_sums_run_on_the_lanes_view_of_device_vectors():
    a = vectors(6, on_device=True)
    with pytest.raises(RuntimeError, match=r"a float32x4 element is 4 lanes: call it on a.scalar_view\(\)"):
        a.add_index_tuple()
    a.scalar_view().add_index_tuple()  # the same device memory, float32 (6, 4)
    np.testing.assert_array_equal(a.to_numpy(), lanes(6) + np.indices((6, 4)).sum(axis=0))


def test_threads_share_a_vector_array_through_its_views():
    """Eight threads take lanes views, DLPack exports and copies of one vector array while
    others write it whole: every read is one of the values written, never a mix of two."""
    import threading

    a = vectors(64)
    errors = []

    def reader():
        try:
            for _ in range(200):
                view = np.from_dlpack(a.scalar_view())
                assert view.shape == (64, 4)
                rows = a.to_numpy()
                assert (rows == rows[0, 0]).all() or (rows == lanes(64)).all()
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    def writer(value):
        try:
            for _ in range(200):
                a.read_numpy_array(np.full((64, 4), value, np.float32))
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=reader) for _ in range(6)]
    threads += [threading.Thread(target=writer, args=(v,)) for v in (1.0, 2.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert np.asarray(a)[0, 0] in (1.0, 2.0)


def test_the_spec_names_numpy_lacks_are_amsos(tmp_path):
    """docs/python.md: every scalar name of amso.supported() is an np.dtype argument; the record
    and the vector are names amso.MemArray and amso.asarray take; float4_e2m1fn_x2 is
    MemArray's, viewed as raw uint8 bytes."""
    names = {name for name, _ in amso.supported()}
    lacking = set()
    for name in names:
        try:
            np.dtype(name)
        except TypeError:
            lacking.add(name)
    assert lacking == {"particle", "float32x4", "float4_e2m1fn_x2"}
    for name in ("particle", "float32x4"):
        made = amso.MemArray(2, name)
        assert type(amso.asarray(np.asarray(made), dtype=name)) is type(made)
    assert np.asarray(amso.MemArray(2, "float4_e2m1fn_x2")).dtype == np.uint8


def test_asarray_of_an_amso_scalar_array_to_the_vector_gives_the_lanes():
    """asarray(a, dtype="float32x4") of an amso float32 (n, 4) array is the (n,) vector array, as
    for the same NumPy array (the pair float32 at ndim 2 -> float32x4 is no early return)."""
    x = lanes(3)
    for source in (x, amso.asarray(x)):
        v = amso.asarray(source, dtype="float32x4")
        assert type(v).__name__ == "MemArray1DFloat32x4" and v.shape == (3,)
        np.testing.assert_array_equal(np.asarray(v), x)
