"""DLPack 1.3's low-precision floats (float8, float6, float4) and CUDA managed memory.

Values are checked against ml_dtypes (every bit pattern, and rounding of random values), DLPack
fields against the standard (codes, bits, lanes, the padded flag), exchanges against PyTorch,
JAX and CuPy where installed (by address: no copies), and kernels against NumPy."""

from __future__ import annotations

import ctypes
import gc
import pickle

import ml_dtypes
import numpy as np
import pytest
from conftest import DTYPES
from hostile import Tensor
from test_dlpack import versioned

import amso

GPU = amso.cuda.is_available()
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device")
PADDED = 4  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED

# The spec's low-precision dtypes and their DLPack codes (DLPack 1.3's enumeration).
CODES = {
    "float8_e3m4": 7, "float8_e4m3": 8, "float8_e4m3b11fnuz": 9, "float8_e4m3fn": 10, "float8_e4m3fnuz": 11,
    "float8_e5m2": 12, "float8_e5m2fnuz": 13, "float8_e8m0fnu": 14, "float6_e2m3fn": 15, "float6_e3m2fn": 16,
    "float4_e2m1fn": 17,
}
FLOAT8 = ["float8_e4m3fn", "float8_e5m2"]  # two of the formats, each compiled at ndim 1 to 8


def patterns(name: str) -> np.ndarray:
    """Every value of `name`: its bit patterns (a sub-byte type's in the low bits)."""
    bits = DTYPES[name][1]
    return np.arange(2 ** bits, dtype=np.uint8).view(getattr(ml_dtypes, name))


def address(array) -> int:
    return array.__array_interface__["data"][0]


# --- the spec ---


def test_every_dlpack_1_3_code_is_a_spec_dtype_named_as_ml_dtypes_names_it():
    for name, code in CODES.items():
        spec_code, bits, lanes, numpy_name, module = DTYPES[name]
        assert (spec_code, lanes, numpy_name, module) == (code, 1, name, "ml_dtypes")
        assert bits == 8 * np.dtype(getattr(ml_dtypes, name)).itemsize or name.startswith(("float6", "float4"))
    assert tuple(DTYPES["float4_e2m1fn_x2"][:3]) == (17, 4, 2)  # PyTorch's packed pair
    compiled = set(amso.supported())
    assert {(name, ndim) for name in FLOAT8 for ndim in (1, 2, 3)} <= compiled


# --- values, against ml_dtypes ---


@pytest.mark.parametrize("name", FLOAT8 + ["float4_e2m1fn"])
def test_every_value_reads_as_ml_dtypes_reads_it(name):
    values = patterns(name)
    a = amso.asarray(values)  # the NumPy array's memory, through its struct
    assert a.dtype == values.dtype and address(np.asarray(a)) == address(values)
    for i, expected in enumerate(values.astype(np.float64)):
        got = a[i]
        assert type(got) is float and (got == expected or (np.isnan(got) and np.isnan(expected))), (i, got)


@pytest.mark.parametrize("name", FLOAT8)
def test_writes_round_as_ml_dtypes_rounds(name):
    rng = np.random.default_rng(7)
    finite = patterns(name).astype(np.float64)
    finite = finite[np.isfinite(finite)]
    values = np.concatenate([rng.normal(0, 30, 3000), rng.normal(0, 1e-3, 1000), (finite[:-1] + finite[1:]) / 2,
                             [1e6, -1e6, np.inf, -np.inf]])
    expected = values.astype(getattr(ml_dtypes, name))
    through_numpy = amso.MemArray(len(values), name)
    through_numpy.read_numpy_array(values)
    by_item = amso.MemArray(len(values), name)
    for i, v in enumerate(values):
        by_item[i] = float(v)
    for a in (through_numpy, by_item):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), expected.view(np.uint8))


def test_a_value_of_the_wrong_kind_is_refused_and_nothing_changes():
    a = amso.MemArray(3, "float8_e5m2")
    a[1] = 2.0
    with pytest.raises(TypeError, match="complex"):
        a[1] = 1 + 2j
    assert a[1] == 2.0


# --- NumPy, the buffer protocol, pickle ---


@pytest.mark.parametrize("name", FLOAT8)
def test_numpy_views_copies_and_pickles(name):
    a = amso.MemArray((2, 3), name)
    a.read_numpy_array(np.array([[0.5, -1.5, 2.0], [3.0, -0.25, 448.0 if name.endswith("fn") else 57344.0]]))
    view = np.asarray(a)
    assert view.dtype == np.dtype(getattr(ml_dtypes, name)) and view.ctypes.data == a.__array__().ctypes.data
    copy = a.to_numpy()
    np.testing.assert_array_equal(copy, view)
    assert copy.ctypes.data != view.ctypes.data
    with pytest.raises(BufferError, match="no buffer-protocol"):
        memoryview(a)
    restored = pickle.loads(pickle.dumps(a, protocol=5))
    assert type(restored) is type(a)
    np.testing.assert_array_equal(np.asarray(restored), view)


# --- DLPack ---


@pytest.mark.parametrize("name", FLOAT8)
def test_dlpack_exports_carry_the_code_and_come_back_without_a_copy(name):
    a = amso.MemArray(4, name)
    capsule = a.__dlpack__(max_version=(1, 3))
    t = versioned(capsule).dl_tensor
    assert (t.code, t.bits, t.lanes) == (CODES[name], 8, 1)
    assert versioned(capsule).flags & PADDED == 0
    back = amso.from_dlpack(a)
    assert type(back) is type(a) and address(np.asarray(back)) == address(np.asarray(a))


@pytest.mark.parametrize("name", FLOAT8)
def test_tvm_ffi_takes_float8_and_gives_it_back_without_a_copy(name):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    a = amso.MemArray(5, name)
    a[3] = -1.5
    tensor = tvm_ffi.from_dlpack(a)
    assert str(tensor.dtype) == name  # TVM-FFI names the code as ml_dtypes does
    back = amso.from_dlpack(tensor)
    assert type(back) is type(a) and address(np.asarray(back)) == address(np.asarray(a)) and back[3] == -1.5


def test_numpy_2_5_imports_float8_through_dlpack_once_amso_registered_it():
    if not hasattr(np.dtypes, "register_dlpack_dtype"):
        pytest.skip(f"NumPy {np.__version__} has no register_dlpack_dtype (2.5 and later)")
    a = amso.MemArray(3, "float8_e4m3fn")
    a[2] = -3.5
    view = np.from_dlpack(a)
    assert view.dtype == np.dtype(ml_dtypes.float8_e4m3fn) and view[2] == -3.5
    assert view.ctypes.data == a.__array__().ctypes.data


def test_sub_byte_values_are_padded_to_a_byte_and_say_so():
    """float4 e2m1fn as ml_dtypes stores it: one value per byte, exported with the padded flag,
    and only in a versioned capsule (a legacy one cannot say it)."""
    values = np.array([0.5, -6.0, 1.5, 0.0, 4.0], dtype=ml_dtypes.float4_e2m1fn)  # an odd count
    a = amso.asarray(values)
    assert type(a).__name__ == "MemArray1DFloat4E2m1fn" and address(np.asarray(a)) == address(values)
    capsule = a.__dlpack__(max_version=(1, 0))
    t = versioned(capsule).dl_tensor
    assert (t.code, t.bits, t.lanes, t.shape[0]) == (17, 4, 1, 5)
    assert versioned(capsule).flags & PADDED
    with pytest.raises(BufferError, match="only a versioned DLPack tensor can say"):
        a.__dlpack__()
    # A padded producer's tensor imports without a copy; a packed one is refused (corpus).
    tensor = Tensor(shape=(5,), dtype=(17, 4, 1), nbytes=5, flags=PADDED)
    ctypes.memmove(ctypes.addressof(tensor.buffer), values.ctypes.data, 5)
    imported = amso.from_dlpack(tensor.producer())
    assert address(np.asarray(imported)) == ctypes.addressof(tensor.buffer)
    np.testing.assert_array_equal(np.asarray(imported), values)
    del imported
    gc.collect()
    assert tensor.deleted == 1


def test_packed_float4_pairs_are_their_raw_bytes():
    """PyTorch's float4_e2m1fn_x2: 2 lanes of 4 bits in one byte, the first value in the low
    bits. NumPy has no such dtype: amso shows the raw bytes, as item values and as uint8."""
    a = amso.MemArray(3, "float4_e2m1fn_x2")
    first, second = np.array([1.5, -2.0], dtype=ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert (first, second) == (0b0011, 0b1100)  # 1.5 = +1.1b x 2^0, -2.0 = -1.0b x 2^1
    a[0] = int(first | second << 4)
    assert a[0] == 0xC3 and type(a[0]) is int
    assert np.asarray(a).dtype == np.uint8 and np.asarray(a)[0] == 0xC3
    with pytest.raises(TypeError, match="packed 4-bit values: assign its raw bits as an integer"):
        a[1] = 1.5
    with pytest.raises(OverflowError):
        a[1] = 256
    t = versioned(a.__dlpack__(max_version=(1, 0))).dl_tensor
    assert (t.code, t.bits, t.lanes) == (17, 4, 2)


# --- typed arguments of the bundled types ---


def test_typed_float8_arguments_from_numpy_and_amso():
    ue = pytest.importorskip("amso_user_example")
    m = np.array([[0.5, 1.5], [-2.0, 448.0]], dtype=ml_dtypes.float8_e4m3fn)
    assert ue.float8_sum(m) == 448.0
    assert ue.float8_sum(amso.asarray(m)) == 448.0
    v = np.array([3.0, -0.5, 0.0], dtype=ml_dtypes.float8_e4m3fn)
    ue.float8_halve(v[::-1])  # a reversed view, written through
    np.testing.assert_array_equal(v.astype(np.float32), [1.5, -0.25, 0.0])
    with pytest.raises(TypeError, match="expected a float8_e4m3fn array with 2 dimensions, got a float8_e5m2"):
        ue.float8_sum(m.astype(ml_dtypes.float8_e5m2))


def test_torch_float8_tensors_are_typed_arguments_without_a_copy():
    ue = pytest.importorskip("amso_user_example")
    torch = pytest.importorskip("torch")
    t = torch.tensor([[0.5, 1.5], [-2.0, 448.0]]).to(torch.float8_e4m3fn)
    assert ue.float8_sum(t) == 448.0
    v = torch.tensor([3.0, -0.5]).to(torch.float8_e4m3fn)
    ue.float8_halve(v)
    assert v.float().tolist() == [1.5, -0.25]


# --- on the GPU: PyTorch and JAX by address, kernels, managed memory ---


@gpu
@pytest.mark.parametrize("name", FLOAT8)
def test_torch_float8_moves_into_amso_and_back_without_a_copy(name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name)
    t = torch.arange(8, device="cuda").float().div(4).to(dtype)
    a = amso.from_dlpack(t)
    assert a.on_device and a.__cuda_array_interface__["data"][0] == t.data_ptr()
    back = torch.from_dlpack(a)
    assert back.dtype == dtype and back.data_ptr() == t.data_ptr()
    assert torch.equal(back.float(), t.float())


@gpu
@pytest.mark.parametrize("name", FLOAT8)
def test_jax_float8_moves_into_amso_and_back_without_a_copy(name):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.asarray(np.arange(8, dtype=np.float32) / 4, dtype=getattr(jnp, name))
    x = jax.device_put(x, jax.devices("gpu")[0])
    a = amso.from_dlpack(x)
    pointer = x.unsafe_buffer_pointer()
    assert a.on_device and a.__cuda_array_interface__["data"][0] == pointer
    back = jax.dlpack.from_dlpack(a)
    assert back.dtype == x.dtype and back.unsafe_buffer_pointer() == pointer
    np.testing.assert_array_equal(np.asarray(back).astype(np.float32), np.arange(8) / 4)


@gpu
def test_torch_float4_pairs_round_trip_as_packed_bytes():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this PyTorch has no float4_e2m1fn_x2")
    raw = torch.tensor([0x21, 0xA3, 0x7F], dtype=torch.uint8, device="cuda")
    t = raw.view(torch.float4_e2m1fn_x2)
    a = amso.from_dlpack(t)
    assert type(a).__name__ == "MemArray1DFloat4E2m1fnX2" and a.__cuda_array_interface__["data"][0] == t.data_ptr()
    assert a.to_numpy().tolist() == [0x21, 0xA3, 0x7F]
    back = torch.from_dlpack(a)
    assert back.dtype == torch.float4_e2m1fn_x2 and back.data_ptr() == t.data_ptr()


@gpu
@pytest.mark.parametrize("name, cuda_type", [("float8_e4m3fn", "__nv_fp8_e4m3"), ("float8_e5m2", "__nv_fp8_e5m2")])
def test_a_user_kernel_reads_and_writes_float8(name, cuda_type):
    """amso.cuh names CUDA's own fp8 types: a kernel over Indexer<__nv_fp8_e4m3, 1> reads
    amso's float8 elements and writes them back, rounded as ml_dtypes rounds."""
    kernel = amso.cuda.Kernel(
        '#include "amso.cuh"\n'
        f'static_assert(sizeof(amso::{name}) == 1, "one byte");\n'
        f'extern "C" __global__ void triple(amso::Indexer<{cuda_type}, 1> x, amso::Indexer<float, 1> seen) {{\n'
        '    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;\n'
        '    if (i < x.size()) { seen(i) = float(x(i)); x(i) = ' + cuda_type + '(3.0f * float(x(i))); }\n'
        '}\n', "triple")
    values = np.array([0.5, -1.25, 2.0, 0.0, 10.0, -0.0625], dtype=getattr(ml_dtypes, name))
    a = amso.asarray(values, copy=True)
    a.move_memory(amso.dlpack.kDLCUDA)
    seen = amso.MemArray(len(values), np.float32, on_device=True)
    kernel(1, 64, (a, seen))
    np.testing.assert_array_equal(seen.to_numpy(), values.astype(np.float32))
    expected = (3 * values.astype(np.float32)).astype(values.dtype)
    np.testing.assert_array_equal(a.to_numpy().view(np.uint8), expected.view(np.uint8))


@gpu
def test_managed_arrays_export_as_managed_and_read_in_place_from_the_host():
    a = amso.MemArray((4, 5), np.float32, managed=True)
    assert a.managed and a.on_device and a.__dlpack_device__() == (13, 0)
    a.add_index_tuple()  # a kernel on amso's stream; host reads wait for it
    expected = np.indices((4, 5)).sum(axis=0).astype(np.float32)
    assert a[3, 4] == 7.0
    a[0, 0] = -1.0  # written in place from the host
    expected[0, 0] = -1.0
    np.testing.assert_array_equal(a.to_numpy(), expected)
    t = versioned(a.__dlpack__(max_version=(1, 0), stream=1)).dl_tensor
    assert (t.device_type, t.device_id) == (13, 0)
    assert a.__cuda_array_interface__["data"][0] == t.data


@gpu
def test_cupy_managed_arrays_import_without_a_copy_and_go_back():
    cupy = pytest.importorskip("cupy")
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(cupy.cuda.MemoryPool(cupy.cuda.malloc_managed).malloc)
    try:
        x = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
        assert x.__dlpack_device__()[0] == 13
        a = amso.from_dlpack(x)
        assert a.managed and a.__cuda_array_interface__["data"][0] == x.data.ptr
        assert a[2, 3] == 11.0  # the host reads the managed memory in place
        a[0, 0] = 100.0
        cupy.cuda.Device().synchronize()
        assert float(x[0, 0]) == 100.0
        y = cupy.from_dlpack(a)
        assert y.data.ptr == x.data.ptr and y.__dlpack_device__()[0] == 13
        mine = amso.MemArray(6, np.float64, managed=True)
        mine.read_numpy_array(np.arange(6.0))
        z = cupy.from_dlpack(mine)
        assert z.__dlpack_device__() == (13, 0) and z.data.ptr == mine.__cuda_array_interface__["data"][0]
        assert z.sum().item() == 15.0
    finally:
        cupy.cuda.set_allocator(previous)


@gpu
def test_managed_allocations_stay_within_the_free_memory():
    free, _ = amso._amso.cuda_memory_info(0)
    with pytest.raises(MemoryError, match="managed"):
        amso.MemArray((free + (1 << 30)) // 4, np.float32, managed=True)


def test_every_low_precision_format_is_compiled_at_every_rank():
    """docs/dtypes.md: the bundled module compiles every float8, float6 and float4 format of the
    spec at ndim 1 to 8."""
    import collections

    import amso

    ranks = collections.defaultdict(set)
    for name, ndim in amso.supported():
        ranks[name].add(ndim)
    formats = [name for name in ranks if name.startswith(("float8_", "float6_", "float4_"))]
    assert len(formats) == 12, formats  # eight float8, two float6, float4 and its pair
    assert all(ranks[name] == set(range(1, 9)) for name in formats), {name: ranks[name] for name in formats}
