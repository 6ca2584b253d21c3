"""Rust functions inside compiled graphs (`#[amso_macros::op]`, docs/ops.md): the user crate's
`drift`, `density` and `running_sum` ops, each one Rust function, called eagerly, under
`jax.jit` and `jax.vmap` through XLA's FFI (`amso.ops.jax`), and under `torch.compile` through
`torch.library` (`amso.ops.torch`). References: the eager call, and NumPy for the formulas.

The JAX tests run on the CPU here and on CUDA on the GPU machine; the torch tests run where
torch is installed (the GPU machine: PyTorch's wheels carry CUDA libraries of several GiB)."""

from __future__ import annotations

import ctypes
import functools
import subprocess
import sys
import threading

import numpy as np
import pytest

import amso
import amso.ops

ext = pytest.importorskip("amso_user_example")
cuda = pytest.mark.skipif(
    not amso.cuda.is_available(), reason="no CUDA driver here; the GPU suite runs on the GPU machine (scripts/gpu_suite.sh)"
)
BOX = 10.0


def particles(n: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.random((n, 3)) * BOX).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32)


def drift_reference(x: np.ndarray, v: np.ndarray, dt: float) -> np.ndarray:
    moved = np.fmod(x.astype(np.float64) + dt * v.astype(np.float64), BOX)
    return np.where(moved < 0, moved + BOX, moved).astype(np.float32)


# --- the description and the eager entry ------------------------------------------------------


def test_an_op_describes_its_signature_from_the_rust_function():
    params = ext.__amso_ops__["density"]["params"]
    assert [(p["role"], p.get("name")) for p in params] == [
        ("input", "positions"),
        ("output", "grid"),
        ("attr", "box_size"),
        ("attr", "cells"),
        ("stream", None),
    ]
    assert params[0]["dtype"] == "float32" and params[0]["ndim"] == 2
    assert params[1]["shape"] == [("attr", "cells")] * 3
    assert ext.__amso_ops__["running_sum"]["platforms"] == ["cpu"]
    assert ext.__amso_ops__["drift"]["platforms"] == ["cpu", "cuda"]


def test_the_eager_entry_takes_numpy_and_writes_the_output_in_place():
    x, v = particles()
    moved = np.empty_like(x)
    assert ext.drift(x, v, moved, 0.25, BOX) is None
    np.testing.assert_array_equal(moved, drift_reference(x, v, 0.25))


def test_the_eager_density_matches_the_deposit_it_wraps():
    x, _ = particles()
    grid = np.full((8, 8, 8), np.nan)
    ext.density(x, grid, BOX, 8)
    reference = np.zeros((8, 8, 8))
    ext.deposit(x, reference, BOX)
    np.testing.assert_array_equal(grid, reference)
    assert grid.sum() == pytest.approx(len(x))


def test_an_eager_error_of_the_function_is_a_runtime_error_naming_the_op():
    x, _ = particles(10)
    with pytest.raises(RuntimeError, match=r"density\(\): .*box_size must be a positive number, got -1"):
        ext.density(x, np.empty((4, 4, 4)), -1.0, 4)


def test_an_eager_panic_is_a_runtime_error_and_the_process_goes_on():
    with pytest.raises(RuntimeError, match=r"running_sum\(\) panicked: running_sum was asked to panic at index 1"):
        ext.running_sum(np.arange(4.0), np.empty(4), False, 1)
    out = np.empty(4)
    ext.running_sum(np.arange(4.0), out, False, -1)
    np.testing.assert_array_equal(out, np.cumsum(np.arange(4.0)))
    ext.running_sum(np.arange(4.0), out, True, -1)  # a bool attribute
    np.testing.assert_array_equal(out, np.cumsum(np.arange(4.0)[::-1])[::-1])


def test_an_eager_argument_of_the_wrong_dtype_is_refused_by_name():
    with pytest.raises(TypeError, match="argument 'x'.*float64"):
        ext.running_sum(np.arange(4, dtype=np.float32), np.empty(4), False, -1)


def test_an_eager_strided_argument_is_refused_with_the_copy_to_make():
    x, v = particles(20)
    with pytest.raises(ValueError, match=r"argument 'positions': drift\(\) takes arrays in C order .*np.ascontiguousarray"):
        ext.drift(x[::2], v[::2], np.empty((10, 3), np.float32), 0.1, BOX)
    with pytest.raises(ValueError, match="argument 'moved': drift.. takes arrays in C order"):
        ext.drift(x, v, np.empty((3, 20), np.float32).T, 0.1, BOX)


# --- JAX: jax.jit and jax.vmap through XLA's FFI -----------------------------------------------

jax = pytest.importorskip("jax")


@pytest.fixture(autouse=True)
def on_the_host_by_default():
    # JAX's default device is a GPU on the GPU machine; these tests place arrays on the host
    # unless they put them on a GPU themselves (the CUDA tests below).
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def test_drift_under_jax_jit_equals_the_eager_call():
    x, v = particles()
    drift = amso.ops.jax(ext.drift)
    got = jax.jit(drift, static_argnames=("dt", "box_size"))(x, v, dt=0.25, box_size=BOX)
    eager = np.empty_like(x)
    ext.drift(x, v, eager, 0.25, BOX)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(np.asarray(got), eager)


def test_an_op_composes_with_jax_operations_in_one_jitted_function():
    x, v = particles()
    drift = amso.ops.jax(ext.drift)

    @functools.partial(jax.jit, static_argnames="steps")
    def run(x, v, steps):
        for _ in range(steps):
            x = drift(x, v * 2.0, 0.1, BOX)
        return x.sum()

    expected = x
    for _ in range(3):
        expected = drift_reference(expected, v * 2.0, 0.1)
    assert float(run(x, v, 3)) == pytest.approx(float(expected.astype(np.float64).sum()), rel=1e-5)


def test_density_under_jax_jit_takes_its_shape_from_an_attribute():
    x, _ = particles()
    density = jax.jit(amso.ops.jax(ext.density), static_argnames=("box_size", "cells"))
    with jax.enable_x64(True):
        grid = density(x, box_size=BOX, cells=6)
    eager = np.empty((6, 6, 6))
    ext.density(x, eager, BOX, 6)
    assert grid.shape == (6, 6, 6) and grid.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(grid), eager)


def test_jax_vmap_runs_the_op_per_batch_element():
    xs = np.stack([particles(50, seed)[0] for seed in range(3)])
    vs = np.stack([particles(50, seed)[1] for seed in range(3)])
    drift = functools.partial(amso.ops.jax(ext.drift), dt=0.5, box_size=BOX)
    got = jax.jit(jax.vmap(drift))(xs, vs)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(got[i]), drift_reference(xs[i], vs[i], 0.5))


def test_a_traced_attribute_is_refused_with_what_to_do():
    x, v = particles(10)
    with pytest.raises(TypeError, match="attribute 'dt' is compiled into the graph.*static_argnames"):
        jax.jit(amso.ops.jax(ext.drift))(x, v, 0.5, BOX)


def test_a_wrong_dtype_or_rank_is_refused_by_argument_name_before_xla():
    drift = amso.ops.jax(ext.drift)
    x, v = particles(10)
    with pytest.raises(TypeError, match="argument 'velocities' must be a float32 array of 2 dimension"):
        drift(x, v.astype(np.int32), 0.5, BOX)
    with pytest.raises(TypeError, match="argument 'positions' must be a float32 array of 2 dimension"):
        drift(x[0], v, 0.5, BOX)
    with pytest.raises(TypeError, match="missing argument.*'box_size'"):
        drift(x, v, 0.5)


def test_the_handler_itself_refuses_a_wrong_dtype_and_rank_from_xla_by_name():
    target = amso.ops.jax(ext.drift).target  # registered
    assert target.startswith("amso.") and target.endswith(".drift")
    x, v = particles(10)
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, np.float32))
    with pytest.raises(Exception, match="INVALID_ARGUMENT: .*argument 'velocities' must be float32 .*got XLA type 4"):
        call(x, v.astype(np.int32), dt=np.float64(0.5), box_size=np.float64(BOX)).block_until_ready()
    with pytest.raises(Exception, match="argument 'positions' must have 2 dimension"):
        call(x.ravel(), v, dt=np.float64(0.5), box_size=np.float64(BOX)).block_until_ready()
    # (another value than above: JAX caches executables by attribute values, and 10.0 == float32 10.0)
    with pytest.raises(Exception, match="INVALID_ARGUMENT: .*attribute 'box_size' must be a float64 scalar"):
        call(x, v, dt=np.float64(0.5), box_size=np.float32(9.0)).block_until_ready()
    with pytest.raises(Exception, match="attribute 'dt' is missing"):
        call(x, v, box_size=np.float64(BOX)).block_until_ready()


def test_an_error_of_the_function_under_jit_is_an_xla_error_with_its_message():
    x, _ = particles(10)
    density = amso.ops.jax(ext.density)
    with jax.enable_x64(True), pytest.raises(Exception, match="INTERNAL: .*box_size must be a positive number, got -2"):
        jax.jit(density, static_argnames=("box_size", "cells"))(x, box_size=-2.0, cells=4).block_until_ready()


def test_a_panic_under_jit_is_an_xla_error_and_the_process_goes_on():
    running_sum = jax.jit(amso.ops.jax(ext.running_sum), static_argnames=("reverse", "panic_at"))
    with jax.enable_x64(True):
        with pytest.raises(Exception, match=r"running_sum\(\) panicked: running_sum was asked to panic at index 2"):
            running_sum(np.arange(5.0), reverse=False, panic_at=2).block_until_ready()
        got = running_sum(np.arange(5.0), reverse=False, panic_at=-1)
        np.testing.assert_array_equal(np.asarray(got), np.cumsum(np.arange(5.0)))


def test_a_bool_attribute_and_an_empty_array_under_jit():
    running_sum = jax.jit(amso.ops.jax(ext.running_sum), static_argnames=("reverse", "panic_at"))
    with jax.enable_x64(True):
        got = running_sum(np.arange(5.0), reverse=True, panic_at=-1)
        np.testing.assert_array_equal(np.asarray(got), np.cumsum(np.arange(5.0)[::-1])[::-1])
        empty = running_sum(np.zeros(0), reverse=False, panic_at=-1)
        assert empty.shape == (0,) and empty.dtype == np.float64


def test_attributes_of_the_wrong_kind_are_refused_not_converted():
    running_sum = amso.ops.jax(ext.running_sum)
    with jax.enable_x64(True):
        with pytest.raises(TypeError, match="attribute 'panic_at' must be an integer, got float 1.7"):
            running_sum(np.arange(3.0), reverse=False, panic_at=1.7)
        with pytest.raises(TypeError, match="attribute 'panic_at' must be an integer, got bool True"):
            running_sum(np.arange(3.0), reverse=False, panic_at=True)
        with pytest.raises(TypeError, match="attribute 'reverse' must be a bool, got int 1"):
            running_sum(np.arange(3.0), reverse=1, panic_at=-1)
    with pytest.raises(TypeError, match="attribute 'box_size' must be a real number, got str"):
        amso.ops.jax(ext.drift)(*particles(4), 0.1, "10")


def test_a_float64_argument_without_x64_says_how_to_enable_it():
    with pytest.raises(TypeError, match="argument 'x' must be a float64 .*got float32.*jax_enable_x64"):
        amso.ops.jax(ext.running_sum)(np.arange(3.0), reverse=False, panic_at=-1)


def test_a_traced_shape_attribute_is_refused_with_what_to_do():
    x, _ = particles(10)
    density = amso.ops.jax(ext.density)
    with jax.enable_x64(True), pytest.raises(TypeError, match="attribute 'box_size' is compiled into the graph"):
        jax.jit(density, static_argnames="cells")(x, box_size=BOX, cells=4)
    with jax.enable_x64(True), pytest.raises(TypeError, match="attribute 'cells' is compiled into the graph"):
        jax.jit(lambda x, c: density(x, box_size=BOX, cells=c))(x, 4)


def test_an_output_too_large_to_make_is_refused_before_xla():
    x, _ = particles(10)
    with pytest.raises(ValueError, match="output 'grid' of shape .* is too large to make"):
        amso.ops.jax(ext.density)(x, box_size=BOX, cells=2**31 + 5)


def test_an_output_aliasing_an_input_is_refused_by_the_handler():
    # input_output_aliases would make the output's BufferMut share the input's memory.
    target = amso.ops.jax(ext.running_sum).target
    with jax.enable_x64(True):
        x = jax.numpy.arange(4.0)
        call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((4,), np.float64), input_output_aliases={0: 0})
        with pytest.raises(Exception, match="INVALID_ARGUMENT: .*'x' and 'out' share memory, and 'out' is written"):
            jax.jit(lambda x: call(x, reverse=False, panic_at=np.int64(-1)))(x).block_until_ready()


def test_an_output_of_another_shape_than_its_rule_is_refused_by_the_handler_and_eagerly():
    target = amso.ops.jax(ext.drift).target
    x, v = particles(10)
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((20, 3), np.float32))
    with pytest.raises(Exception, match=r"INVALID_ARGUMENT: .*output 'moved' must have the shape its rule gives, \[10, 3\], got \[20, 3\]"):
        call(x, v, dt=np.float64(0.1), box_size=np.float64(BOX)).block_until_ready()
    with pytest.raises(ValueError, match=r"output 'grid' must have the shape its rule gives, \[4, 4, 4\], got \[4, 4, 5\]"):
        ext.density(x, np.empty((4, 4, 5)), BOX, 4)


def test_an_eager_output_sharing_an_input_is_refused():
    x = np.arange(4.0)
    with pytest.raises(BufferError):
        ext.running_sum(x, x, False, -1)


def test_a_jitted_op_called_from_4_threads_gives_each_its_own_result():
    drift = jax.jit(amso.ops.jax(ext.drift), static_argnames=("dt", "box_size"))
    inputs = [particles(2000, seed) for seed in range(4)]
    drift(*inputs[0], dt=0.3, box_size=BOX).block_until_ready()  # compiled once, before the threads
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        for _ in range(25):
            results[i] = np.asarray(drift(*inputs[i], dt=0.3, box_size=BOX))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    for i, (x, v) in enumerate(inputs):
        np.testing.assert_array_equal(results[i], drift_reference(x, v, 0.3))


def test_no_python_runs_inside_a_compiled_call():
    # Once compiled, a call of the jitted function is XLA's: the profiler sees no Python frame
    # of amso's (amso.ops builds the call at tracing only) and no call of the eager entry.
    drift = jax.jit(amso.ops.jax(ext.drift), static_argnames=("dt", "box_size"))
    x, v = (jax.numpy.asarray(a) for a in particles(100))
    drift(x, v, dt=0.1, box_size=BOX).block_until_ready()
    seen: list[str] = []

    def profile(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_filename)
        elif event == "c_call":
            seen.append(getattr(arg, "__module__", None) or "")

    sys.setprofile(profile)
    try:
        drift(x, v, dt=0.1, box_size=BOX).block_until_ready()
    finally:
        sys.setprofile(None)
    assert not [where for where in seen if "amso" in where], seen
    assert all("jax" in where or where in ("", "sys") for where in seen), seen  # "sys": setprofile(None)


def test_differentiating_the_jax_callable_is_jaxs_error_for_an_ffi_call():
    x, v = particles(4)
    drift = amso.ops.jax(ext.drift)
    with pytest.raises(ValueError, match="cannot be differentiated"):
        jax.grad(lambda x: drift(x, v, 0.1, BOX).sum())(x)


def test_a_function_that_is_not_an_op_is_refused():
    with pytest.raises(TypeError, match=r"expected an op of an extension module .*#\[amso_macros::op\]"):
        amso.ops.jax(ext.deposit)
    with pytest.raises(TypeError, match="expected an op"):
        amso.ops.jax(len)


class _Base(ctypes.Structure):
    pass


_Base._fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", ctypes.POINTER(_Base))]


class _Version(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("ext", ctypes.c_void_p), ("major", ctypes.c_int), ("minor", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", _Version), ("traits", ctypes.c_uint32), ("state", ctypes.c_int64)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("base", _Base), ("metadata", ctypes.POINTER(_Metadata))]


class _List(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("ext", ctypes.c_void_p), ("size", ctypes.c_int64)] + [
        ("types", ctypes.c_void_p), ("values", ctypes.c_void_p)
    ]


class _Attrs(ctypes.Structure):
    _fields_ = _List._fields_[:4] + [("names", ctypes.c_void_p), ("values", ctypes.c_void_p)]


class _CallFrame(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t), ("ext", ctypes.POINTER(_Base)), ("api", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p), ("stage", ctypes.c_int), ("args", _List), ("rets", _List), ("attrs", _Attrs),
        ("future", ctypes.c_void_p),
    ]


def test_the_handler_answers_xlas_metadata_probe_with_the_version_it_was_told():
    # The probe XLA sends at registration (xla/ffi/ffi_api.cc, GetMetadata): a call frame whose
    # extension is the metadata to fill, with no API and no buffers.
    capsule = ext.__amso_ops__["drift"]["xla"][0]
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.argtypes, get.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
    handler = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_CallFrame))(get(capsule, b"xla._CUSTOM_CALL_TARGET"))
    module = ext.drift.__self__
    try:
        module.__amso_xla_version__(0, 7)
        metadata = _Metadata(struct_size=ctypes.sizeof(_Metadata), traits=99)
        extension = _MetadataExtension(_Base(ctypes.sizeof(_MetadataExtension), 1, None), ctypes.pointer(metadata))
        frame = _CallFrame(struct_size=ctypes.sizeof(_CallFrame), ext=ctypes.cast(ctypes.pointer(extension), ctypes.POINTER(_Base)), stage=3)
        assert handler(ctypes.byref(frame)) is None  # no error
        assert (metadata.version.major, metadata.version.minor, metadata.traits) == (0, 7, 0)
    finally:
        module.__amso_xla_version__(*amso.ops._ffi_version(jax))


def test_an_ffi_of_another_major_version_is_refused(tmp_path):
    header = tmp_path / "xla" / "ffi" / "api" / "c_api.h"
    header.parent.mkdir(parents=True)
    header.write_text("#define XLA_FFI_API_MAJOR 1\n#define XLA_FFI_API_MINOR 0\n")

    class Jaxlib:
        class ffi:
            @staticmethod
            def include_dir():
                return str(tmp_path)

    with pytest.raises(RuntimeError, match="XLA FFI is version 1.0; amso's handlers read the call frames of versions 0.x"):
        amso.ops._ffi_version(Jaxlib)
    header.write_text("#define XLA_FFI_API_MAJOR 0\n#define XLA_FFI_API_MINOR 7\n")
    assert amso.ops._ffi_version(Jaxlib) == (0, 7)


def test_the_handler_reports_the_running_jaxlibs_ffi_version():
    # A fresh process: registration fetches the handler's metadata, which XLA compares with its
    # own version; a mismatch is refused at jax.ffi.register_ffi_target.
    script = (
        "import amso.ops, amso_user_example as ext, jax, numpy as np\n"
        "f = amso.ops.jax(ext.drift)\n"
        "x = np.zeros((2, 3), np.float32)\n"
        "print(np.asarray(f(x, x, 0.0, 1.0)).sum())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0.0"


# --- On the GPU machine: JAX on CUDA, and torch.compile ---------------------------------------


@cuda
def test_drift_and_density_under_jax_jit_on_cuda_equal_the_eager_call():
    devices = [d for d in jax.devices() if d.platform == "gpu"]
    if not devices:
        pytest.skip("this jax has no CUDA backend")
    x, v = particles(20_000)
    xd, vd = jax.device_put(x, devices[0]), jax.device_put(v, devices[0])
    moved = jax.jit(amso.ops.jax(ext.drift), static_argnames=("dt", "box_size"))(xd, vd, dt=0.25, box_size=BOX)
    assert moved.devices() == {devices[0]}
    eager = np.empty_like(x)
    ext.drift(x, v, eager, 0.25, BOX)
    np.testing.assert_array_equal(np.asarray(moved), eager)
    with jax.enable_x64(True):
        grid = jax.jit(amso.ops.jax(ext.density), static_argnames=("box_size", "cells"))(xd, box_size=BOX, cells=16)
        host = np.empty((16, 16, 16))
        ext.density(x, host, BOX, 16)
        np.testing.assert_allclose(np.asarray(grid), host, rtol=1e-9, atol=1e-9)  # atomics: another order of sums


@cuda
def test_a_host_op_given_cuda_buffers_under_jit_says_so():
    devices = [d for d in jax.devices() if d.platform == "gpu"]
    if not devices:
        pytest.skip("this jax has no CUDA backend")
    with jax.enable_x64(True):
        x = jax.device_put(np.arange(5.0), devices[0])
        running_sum = jax.jit(amso.ops.jax(ext.running_sum), static_argnames=("reverse", "panic_at"))
        with pytest.raises(Exception, match=r"running_sum\(\) runs on cpu buffers only .*given CUDA buffers"):
            running_sum(x, reverse=False, panic_at=-1).block_until_ready()


@cuda
def test_a_host_op_given_cuda_arrays_eagerly_says_so():
    torch = pytest.importorskip("torch")
    x = torch.arange(5.0, dtype=torch.float64, device="cuda")
    with pytest.raises(ValueError, match=r"argument 'x': running_sum\(\) runs on cpu buffers only"):
        ext.running_sum(x, torch.empty_like(x), False, -1)


@cuda
def test_an_eager_cuda_output_sharing_an_input_is_refused():
    torch = torch_or_skip()
    x, v = (torch.from_numpy(a).cuda() for a in particles(100))
    with pytest.raises(ValueError, match=r"drift\(\): arguments 'positions' and 'moved' share memory"):
        ext.drift(x, v, x, 0.1, BOX)


def test_the_torch_callable_refuses_inputs_that_require_grad():
    torch = torch_or_skip()
    drift = amso.ops.torch(ext.drift)
    x, v = (torch.from_numpy(a) for a in particles(10))
    with pytest.raises(RuntimeError, match=r"drift\(\) declares no backward.*x.detach\(\)"):
        drift(x.requires_grad_(), v, 0.1, BOX)
    with torch.no_grad():
        assert drift(x, v, 0.1, BOX).shape == (10, 3)


def torch_or_skip():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_drift_under_torch_compile_fullgraph_equals_the_eager_call(device):
    torch = torch_or_skip()
    drift = amso.ops.torch(ext.drift)
    x, v = (torch.from_numpy(a).to(device) for a in particles(5000))

    def step(x, v):
        return drift(x, v * 2.0, 0.1, BOX) + 0.0

    compiled = torch.compile(step, fullgraph=True)
    got = compiled(x, v)
    eager = torch.empty_like(x)
    ext.drift(x, v * 2.0, eager, 0.1, BOX)
    torch.testing.assert_close(got, eager, rtol=0, atol=0)
    explained = torch._dynamo.explain(step)(x, v)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_density_under_torch_compile_equals_the_eager_call(device):
    torch = torch_or_skip()
    density = amso.ops.torch(ext.density)
    x = torch.from_numpy(particles(5000)[0]).to(device)
    compiled = torch.compile(lambda x: density(x, BOX, 12), fullgraph=True)
    got = compiled(x)
    eager = torch.empty((12, 12, 12), dtype=torch.float64, device=device)
    ext.density(x, eager, BOX, 12)
    torch.testing.assert_close(got, eager, rtol=1e-9, atol=1e-9)
    assert got.sum().item() == pytest.approx(5000)


@cuda
def test_the_torch_op_under_reduce_overhead_replays_as_a_cuda_graph():
    torch = torch_or_skip()
    drift = amso.ops.torch(ext.drift)
    compiled = torch.compile(lambda x, v: drift(x, v, 0.5, BOX), mode="reduce-overhead", fullgraph=True)
    for seed in range(4):  # warm-up, recording, then replays with new inputs
        x, v = (torch.from_numpy(a).cuda() for a in particles(4096, seed))
        got = compiled(x, v).clone()
        np.testing.assert_array_equal(got.cpu().numpy(), drift_reference(*particles(4096, seed), 0.5))


@cuda
def test_the_torch_op_launches_on_torchs_current_stream():
    torch = torch_or_skip()
    drift = amso.ops.torch(ext.drift)
    side = torch.cuda.Stream()
    x, v = (torch.from_numpy(a).cuda() for a in particles(1 << 20))
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the inputs' producer is still busy on this stream
        scaled = v * 3.0
        moved = drift(x, scaled, 0.1, BOX)
        total = moved.double().sum()
    side.synchronize()
    expected = drift_reference(x.cpu().numpy(), (v * 3.0).cpu().numpy(), 0.1)
    assert total.item() == pytest.approx(float(expected.astype(np.float64).sum()), rel=1e-9)


def test_the_torch_op_has_the_schema_of_the_rust_signature():
    torch = torch_or_skip()
    op = amso.ops.torch(ext.density).op
    assert str(op.default._schema).endswith(
        "density(Tensor positions, Tensor(a!) grid, float box_size, int cells) -> ()"
    )
    with pytest.raises(TypeError, match="argument 'positions' must be a float32 array of 2 dimension"):
        amso.ops.torch(ext.density)(torch.zeros(4, 3, dtype=torch.float64), BOX, 4)
