"""Your own CUDA kernels over amso arrays and other frameworks' arrays (amso.cuda.Kernel), on
the stream amso's rule picks, and the user crate's cloud-in-cell deposit on the GPU. References
are NumPy computations of the same formulas."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import np_dtype
from test_typed_args import BOX, SHAPE, particles, reference

import amso

pytestmark = pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")

# Writes scale * (sum of the element's indices) into each element, as the element's type.
INDEX_SUM = r"""
#include "amso.cuh"
extern "C" __global__ void index_sum(amso::Indexer<ELEMENT, N> x, double scale) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= x.size()) return;
    uint64_t at[N];
    x.unravel(i, at);
    uint64_t sum = 0;
    for (int d = 0; d < N; ++d) sum += at[d];  // N: a -D macro of this kernel's own
    x.data[i] = CONVERT(scale * (double)sum);
}
"""
CONVERT = {
    "float32": "(float)", "float64": "(double)", "int32": "(int)", "int64": "(long long)",
    "float16": "__double2half", "complex64": "COMPLEX",
}
COMPLEX = "-DCOMPLEX(v)=amso::complex64{(float)(v), -1.0f}"


def index_sum_kernel(name, ndim):
    options = [f"-DELEMENT=amso::{name}", f"-DN={ndim}", f"-DCONVERT={CONVERT[name]}"]
    if name == "complex64":
        options.append(COMPLEX)
    return amso.cuda.Kernel(INDEX_SUM, "index_sum", options=options)


def expected_index_sum(name, shape, scale):
    value = scale * np.indices(shape).sum(axis=0).astype(np.float64)
    return (value - 1j) if name == "complex64" else value.astype(np_dtype(name))


@pytest.mark.parametrize("name, shape", [
    ("float32", (37, 5)), ("float64", (3, 4, 5)), ("int32", (100,)), ("int64", (2, 3)),
    ("float16", (50,)), ("complex64", (6, 7)),
])
def test_a_kernel_over_amso_arrays_of_several_dtypes_and_ranks(name, shape):
    a = amso.MemArray(shape, name, on_device=True)
    index_sum_kernel(name, len(shape))((int(np.prod(shape)) + 127) // 128, 128, (a, 1.5))
    np.testing.assert_array_equal(a.to_numpy(), expected_index_sum(name, shape, 1.5))


def test_the_same_kernel_over_torch_and_cupy_on_explicit_and_current_streams():
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    kernel = index_sum_kernel("float32", 2)
    expected = expected_index_sum("float32", (64, 32), 2.0)
    side = torch.cuda.Stream()
    t = torch.zeros((64, 32), device="cuda")
    kernel(16, 128, (t, 2.0), stream=side)  # an explicit stream object
    side.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), expected)
    t.zero_()
    with torch.cuda.stream(side):
        kernel(16, 128, (t, 2.0))  # torch's current stream, through its exchange API
        copy = t.cpu()  # ordered on the same stream
    np.testing.assert_array_equal(copy.numpy(), expected)
    c = cupy.zeros((64, 32), dtype=cupy.float32)
    s = cupy.cuda.Stream()
    kernel(16, 128, (c, 2.0), stream=s.ptr)
    s.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(c), expected)


def test_ordering_after_amso_work_and_before_a_torch_consumer():
    torch = pytest.importorskip("torch")
    doubled = amso.cuda.Kernel(
        '#include "amso.cuh"\n'
        'extern "C" __global__ void twice(amso::Indexer<double, 1> x) {\n'
        '    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;\n'
        '    if (i < x.size()) { for (int k = 0; k < 2000; ++k) x(i) += 0.0; x(i) *= 2.0; }\n'
        '}\n', "twice")
    n = 1 << 20
    a = amso.MemArray(n, np.float64)
    a.read_numpy_array(np.ones(n))
    side = torch.cuda.Stream()
    a.add_index_tuple(stream=side)  # queued on a side stream
    doubled((n + 255) // 256, 256, (a,))  # amso's stream: must wait for add_index
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        seen = torch.from_dlpack(a).sum().item()  # another stream, after the kernel
    assert seen == 2 * (n + n * (n - 1) / 2)
    np.testing.assert_array_equal(a.to_numpy(), 2 * (1 + np.arange(n)))


def test_compile_errors_and_wrong_arguments():
    broken = amso.cuda.Kernel('extern "C" __global__ void broken() { undefined_name; }', "broken")
    with pytest.raises(RuntimeError, match=r"could not compile kernel `broken` for sm_\d+ \(NVRTC_ERROR_COMPILATION\):\n(.|\n)*undefined_name"):
        broken(1, 1, ())
    missing = amso.cuda.Kernel('extern "C" __global__ void present() {}', "absent")
    with pytest.raises(ValueError, match="no kernel named `absent`"):
        missing(1, 1, ())
    kernel = index_sum_kernel("float32", 1)
    with pytest.raises(ValueError, match="kernel argument 0: the array is in host memory"):
        kernel(1, 32, (amso.MemArray(4, np.float32), 1.0))
    with pytest.raises(TypeError, match="kernel argument 1: expected an array .* got str"):
        kernel(1, 32, (amso.MemArray(4, np.float32, on_device=True), "two"))
    with pytest.raises(OverflowError, match="kernel argument 1: a Python int is passed as int64_t"):
        kernel(1, 32, (amso.MemArray(4, np.float32, on_device=True), 1 << 70))
    with pytest.raises(ValueError, match="grid and block must hold 1 to 3 positive ints"):
        kernel((1, 2, 3, 4), 32, ())
    if amso.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="kernel argument 1: the array is on CUDA device 1"):
            kernel(1, 32, (amso.MemArray(4, np.float32, on_device=True),
                           amso.MemArray(4, np.float32, 1, on_device=True)))


# --- the cloud-in-cell deposit on the GPU ---

ue = pytest.importorskip("amso_user_example")


def test_deposit_with_torch_on_its_current_stream():
    torch = pytest.importorskip("torch")
    p = particles(20_000)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        positions = torch.from_numpy(p).cuda()
        density = torch.zeros(SHAPE, dtype=torch.float64, device="cuda")
        ue.deposit(positions, density, BOX)
        out = ue.cic_density(positions, SHAPE, BOX)
        got, made = density.cpu().numpy(), out.cpu().numpy()
    assert isinstance(out, torch.Tensor) and out.is_cuda
    np.testing.assert_allclose(got, reference(p), rtol=1e-9)
    np.testing.assert_allclose(made, reference(p), rtol=1e-9)


def test_deposit_on_the_stream_amso_cuda_stream_names_is_ordered_before_cupys_reads():
    """The user crate links its own copy of amso's runtime, which must launch on the stream
    `amso.cuda.stream(...)` names: on any other stream, CuPy's copy of the grid right after the
    call reads it before the kernel is done (a slow deposit: 400,000 particles into 192 cells)."""
    cupy = pytest.importorskip("cupy")
    p = particles(400_000)
    expected = reference(p)
    positions = cupy.asarray(p)
    side = cupy.cuda.Stream(non_blocking=True)
    for stream in [cupy.cuda.Stream.null, side] * 4:
        with stream:
            density = cupy.zeros(SHAPE, dtype=cupy.float64)
            with amso.cuda.stream(stream.ptr):
                ue.deposit(positions, density, BOX)
            got = cupy.asnumpy(density, stream=stream)  # waits for this stream's work only
        np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_deposit_with_cupy_jax_amso_and_mixed_inputs():
    cupy = pytest.importorskip("cupy")
    p = particles(20_000)
    expected = reference(p)
    density = cupy.zeros(SHAPE, dtype=cupy.float64)
    with amso.cuda.stream(cupy.cuda.get_current_stream().ptr):  # CuPy's stream: its later reads wait
        ue.deposit(cupy.asarray(p), density, BOX)
    np.testing.assert_allclose(cupy.asnumpy(density), expected, rtol=1e-9)
    made = ue.cic_density(cupy.asarray(p), SHAPE, BOX)  # CuPy in, CuPy out: amso's memory, handed over
    assert isinstance(made, cupy.ndarray) and made.dtype == cupy.float64
    np.testing.assert_allclose(cupy.asnumpy(made), expected, rtol=1e-9)
    mine = amso.asarray(p)
    mine.move_memory(amso.dlpack.kDLCUDA)
    grid = amso.MemArray(SHAPE, np.float64, on_device=True)
    ue.deposit(mine, grid, BOX)
    np.testing.assert_allclose(grid.to_numpy(), expected, rtol=1e-9)
    out = ue.cic_density(mine, SHAPE, BOX)
    assert out.on_device
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-9)
    mixed = amso.MemArray(SHAPE, np.float64, on_device=True)
    ue.deposit(cupy.asarray(p), mixed, BOX)  # CuPy positions, amso density
    np.testing.assert_allclose(mixed.to_numpy(), expected, rtol=1e-9)
    jax = pytest.importorskip("jax")
    jax_positions = jax.device_put(p, jax.devices("gpu")[0])  # JAX arrays are read-only
    jax_grid = amso.MemArray(SHAPE, np.float64, on_device=True)
    ue.deposit(jax_positions, jax_grid, BOX)
    np.testing.assert_allclose(jax_grid.to_numpy(), expected, rtol=1e-9)
    jax_out = ue.cic_density(jax_positions, SHAPE, BOX)  # JAX in, JAX out
    assert isinstance(jax_out, jax.Array)
    # Without jax_enable_x64, JAX's from_dlpack turns float64 into a float32 copy, as it does
    # for every array it is given.
    x64 = bool(getattr(jax.config, "jax_enable_x64", False))
    assert jax_out.dtype == (np.float64 if x64 else np.float32)
    np.testing.assert_allclose(np.asarray(jax_out), expected, rtol=1e-9 if x64 else 1e-6)
