"""One memory pool for every library in a process (docs/memory.md, "One pool"): Numba, CuPy,
PyTorch and RMM allocate from amso's pool through their own plug-in points, amso draws from
RMM's, and every copy of amso's runtime in a process (the bundled module, each user crate)
shares one pool. A plug-in must be set before its library's first allocation, so each GPU
test runs in a fresh interpreter. Without a GPU, what runs is the plug-ins' import and their
refusals."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import amso

GPU = amso.cuda.is_available()
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device")
HERE = Path(__file__).parent

# Numba's JIT with NumPy 2.5 needs the alias NumPy removed (the machine's numba-cuda predates it).
PRELUDE = """
import gc, sys
import numpy as np
np.row_stack = np.vstack
"""
HELPERS = """
import amso
def in_use(client):
    gc.collect()
    amso.flush_frees()
    return amso.memory_info()["clients"][client]["in_use"]
def current_bytes(adaptor):
    counts = adaptor.allocation_counts
    return counts["current_bytes"] if isinstance(counts, dict) else counts.current_bytes
"""


def run(body: str, first: str = "", timeout: int = 300) -> str:
    """Run `first` (what must load before amso), the helpers and `body` in a fresh interpreter;
    its stdout (the test fails on a non-zero exit)."""
    script = PRELUDE + textwrap.dedent(first) + HELPERS + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, cwd=HERE)
    assert done.returncode == 0, f"exit status {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def needs(*modules: str):
    missing = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


# --- without a GPU: the plug-ins import, and say what is missing ---


@pytest.mark.parametrize("name, module, package", [
    ("NumbaManager", "numba", "numba-cuda"), ("ShareableNumbaManager", "numba", "numba-cuda"),
    ("cupy_malloc", "cupy", "cupy-cuda13x"), ("cupy_python_malloc", "cupy", "cupy-cuda13x"),
    ("cupy_pinned_malloc", "cupy", "cupy-cuda13x"),
    ("torch_allocator", "torch", "torch"), ("rmm_resource", "rmm", "rmm-cu13"),
])
def test_a_plug_in_without_its_library_says_what_to_install(name, module, package):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        sys.modules[{module!r}] = None  # as if not installed
        import amso.allocators as plugins
        try:
            plug_in = getattr(plugins, {name!r})
            if {name!r}.islower():
                plug_in(*{(16,) if name.startswith("cupy") else ()!r})
        except ImportError as error:
            print(error)
    """)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and f"pip install {package}" in done.stdout, done


def test_cupys_c_allocator_refuses_a_cupy_older_than_13():
    """CuPy 12 and older are built with Cython 0.29, whose code would keep the -1 a C malloc
    returns with an error set as an address: the C plug-in refuses them, naming the Python one."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys, types
        for name in ("cupy", "cupy.cuda", "cupy.cuda.stream", "cupy.cuda.memory"):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["cupy"].__version__ = "12.3.0"
        sys.modules["cupy"].cuda = sys.modules["cupy.cuda"]
        import amso.allocators
        try:
            amso.allocators.cupy_malloc
        except ImportError as error:
            print(error)
    """)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "needs CuPy 13 or later (found 12.3.0)" in done.stdout and "cupy_python_malloc" in done.stdout, done.stdout


def test_memory_given_back_that_amso_never_lent_is_refused():
    for client in (1, 2, 3, 4):
        with pytest.raises(ValueError, match="is not memory amso lent .* nothing was freed"):
            amso._amso._reclaim(0xDEAD0000, 0, client)
    with pytest.raises(ValueError, match="client 9 is not one of amso's plug-in clients"):
        amso._amso._reclaim(0xDEAD0000, 0, 9)


# --- on the GPU: each library through its plug-in ---


@gpu
@needs("numba.cuda")
def test_numba_arrays_kernels_pinned_memory_and_ipc_through_the_manager():
    out = run("""
        from numba import cuda
        cuda.set_memory_manager(amso.allocators.NumbaManager)
        @cuda.jit
        def add_one(x):
            i = cuda.grid(1)
            if i < x.size:
                x[i] += 1
        d = cuda.to_device(np.arange(1 << 20, dtype=np.float64))
        assert in_use("numba") >= 8 << 20, amso.memory_info()["clients"]
        add_one[(1 << 20) // 256, 256](d)
        np.testing.assert_array_equal(d.copy_to_host(), np.arange(1 << 20) + 1)
        a = amso.MemArray(1024, np.float32, on_device=True)       # an amso array in a Numba kernel
        add_one[4, 256](cuda.as_cuda_array(a))
        cuda.synchronize()
        assert a.to_numpy().sum() == 1024
        pinned, mapped = cuda.pinned_array(1000, np.float32), cuda.mapped_array(1000, np.float32)
        pinned[:] = 3
        mapped[:] = 0
        add_one[4, 256](mapped)                                      # the GPU writes mapped host memory
        cuda.synchronize()
        assert (mapped == 1).all() and (pinned == 3).all()
        try:
            d.get_ipc_handle()
            raise SystemExit("pool memory exported through CUDA IPC")
        except RuntimeError as error:
            assert "ShareableNumbaManager" in str(error), error
        scratch = cuda.device_array(1 << 20, np.float64)             # touched by nothing else
        before = in_use("numba")
        with cuda.defer_cleanup():
            del scratch
            held = in_use("numba")
        assert held == before, "a free ran inside defer_cleanup"
        assert in_use("numba") == before - (8 << 20), (amso.memory_info(), amso._amso._refused_frees())
        print("numba", amso.memory_info()["clients"]["numba"]["allocations"])
    """)
    assert out.startswith("numba ") and int(out.split()[1]) >= 1


@gpu
@needs("numba.cuda")
def test_numba_ipc_handles_through_the_shareable_manager():
    out = run("""
        import multiprocessing
        from numba import cuda
        cuda.set_memory_manager(amso.allocators.ShareableNumbaManager)
        d = cuda.to_device(np.arange(256, dtype=np.float32))
        handle = d.get_ipc_handle()
        child = multiprocessing.get_context("spawn")
        with child.Pool(1) as pool:
            total = pool.apply(__import__("pool_child").ipc_sum, (handle,))
        print("sum", total)
    """)
    assert out.split() == ["sum", str(float(sum(range(256))))]


@gpu
@needs("numba.cuda")
def test_a_numba_free_after_a_reset_is_refused_not_repeated():
    out = run("""
        from numba import cuda
        cuda.set_memory_manager(amso.allocators.NumbaManager)
        d = cuda.device_array(1 << 20, np.float64)
        cuda.current_context().memory_manager.reset()     # the context's loans taken back at once
        assert in_use("numba") == 0
        e = cuda.to_device(np.arange(1 << 20, dtype=np.float64))  # the pool may lend the same address again
        del d                                              # its finalizer gives back what is gone: refused
        gc.collect()
        np.testing.assert_array_equal(e.copy_to_host(), np.arange(1 << 20))
        print("refused", amso._amso._refused_frees(), in_use("numba") == 8 << 20)
    """)
    assert out.strip() == "refused 1 True"


@gpu
@needs("cupy")
def test_cupy_works_on_several_streams_through_amso():
    out = run("""
        import cupy as cp
        cp.cuda.set_allocator(amso.allocators.cupy_malloc)
        cp.cuda.set_pinned_memory_allocator(amso.allocators.cupy_pinned_malloc)
        results = []
        streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
        for k, stream in enumerate(streams):
            with stream:
                x = cp.arange(1 << 20, dtype=cp.float64) * (k + 1)
                results.append(float(x.sum()))
                stream.synchronize()
        assert results == [float(np.arange(1 << 20).sum() * (k + 1)) for k in range(2)], results
        assert amso.memory_info()["clients"]["cupy"]["allocations"] >= 2
        kept = cp.zeros(1 << 18, cp.float32)
        assert in_use("cupy") >= 1 << 20
        pinned = cp.cuda.alloc_pinned_memory(4096)
        assert pinned.ptr != 0
        host = np.empty(1 << 18, np.float32)
        kept.get(out=host)
        del kept, x, pinned
        assert in_use("cupy") == 0, amso.memory_info()["clients"]
        print("cupy ok")
    """)
    assert out.strip() == "cupy ok"


@gpu
@needs("torch")
def test_torch_works_on_several_streams_through_amso():
    out = run("""
        import torch
        torch.cuda.memory.change_current_allocator(amso.allocators.torch_allocator())
        side = torch.cuda.Stream()
        a = torch.arange(1 << 20, device="cuda", dtype=torch.float64)
        with torch.cuda.stream(side):
            b = torch.ones(1 << 20, device="cuda", dtype=torch.float64) * 2
        torch.cuda.synchronize()
        assert float((a + b).sum()) == float(np.arange(1 << 20).sum() + 2 * (1 << 20))
        info = amso.memory_info()["clients"]["torch"]
        assert info["allocations"] >= 3 and info["in_use"] >= 16 << 20, info
        del a, b
        torch.cuda.synchronize()
        assert in_use("torch") == 0, amso.memory_info()["clients"]
        print("torch ok")
    """)
    assert out.strip() == "torch ok"


@gpu
@needs("torch")
def test_a_double_or_foreign_free_from_torch_is_refused_and_reported():
    out = run("""
        import ctypes, torch
        lib = ctypes.CDLL(amso._amso.__file__)
        lib.amso_torch_alloc.restype = ctypes.c_void_p
        lib.amso_torch_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.amso_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        ptr = lib.amso_torch_alloc(4096, 0, None)
        assert ptr and in_use("torch") == 4096
        lib.amso_torch_free(ptr, 4096, 1, None)        # another device: refused
        lib.amso_torch_free(ptr, 4096, 0, None)
        lib.amso_torch_free(ptr, 4096, 0, None)        # twice: refused
        lib.amso_torch_free(0xDEAD0000, 64, 0, None)   # never lent: refused
        assert in_use("torch") == 0 and amso._amso._refused_frees() == 3
        again = lib.amso_torch_alloc(4096, 0, None)    # handed out once more, to one owner
        try:
            amso._amso._reclaim(again, 0, 2)           # CuPy giving back PyTorch's memory
            raise SystemExit("another client's loan was freed")
        except ValueError as error:
            assert "was lent to torch" in str(error), error
        lib.amso_torch_free(again, 4096, 0, None)
        print("refused", amso._amso._refused_frees())
    """)
    assert out.strip() == "refused 4"


@gpu
@needs("rmm")
def test_rmm_allocates_from_amso_and_amso_from_rmm():
    out = run("""
        import rmm
        rmm.mr.set_current_device_resource(amso.allocators.rmm_resource())
        buffer = rmm.DeviceBuffer(size=1 << 20)
        assert in_use("rmm") == 1 << 20, amso.memory_info()["clients"]
        del buffer
        assert in_use("rmm") == 0
        # The other way: amso's arrays from RMM's resource (counted by RMM's statistics).
        counted = rmm.mr.StatisticsResourceAdaptor(rmm.mr.CudaMemoryResource())
        rmm.mr.set_current_device_resource(counted)
        amso.set_allocator(*amso.allocators.rmm())
        a = amso.MemArray(1 << 18, np.float32, on_device=True)
        assert current_bytes(counted) >= 1 << 20, counted.allocation_counts
        del a
        gc.collect(); amso.flush_frees()
        assert current_bytes(counted) == 0, counted.allocation_counts
        amso.set_allocator()
        print("rmm ok")
    """)
    assert out.strip() == "rmm ok"


@gpu
@needs("cupy")
def test_allocators_plugged_into_each_other_are_refused_not_recursed():
    """CuPy plugged into amso while amso is plugged into CuPy: a CuPy allocation would ask
    amso, which asks CuPy, which asks amso again. The second request is refused with an error
    naming the cycle, CuPy raises it, and nothing was lent."""
    out = run("""
        import cupy as cp
        cp.cuda.set_allocator(amso.allocators.cupy_malloc)
        cp.empty(1)  # CuPy's context, through amso's own pool
        live = {}
        def malloc(size, device_id, stream):
            memory = cp.cuda.alloc(size)  # through CuPy's allocator: amso's again
            live[memory.ptr] = memory
            return memory.ptr
        def free(pointer, size, device_id, stream):
            del live[pointer]
        amso.set_allocator(malloc, free, name="cupy.cuda.alloc")
        try:
            cp.empty(1 << 20, cp.uint8)
        except Exception as error:
            print(type(error).__name__, "|", error)
        amso.set_allocator()
        cp.empty(1 << 20, cp.uint8)  # amso's own pool again: served
        print("in use", in_use("cupy"))
    """)
    refused, after = out.strip().splitlines()[-2:]
    assert "plugged into each other in a cycle" in refused, out
    assert after == "in use 0", out


@gpu
@needs("numba.cuda", "cupy", "torch", "rmm")
def test_four_libraries_and_amso_take_turns_in_one_pool():
    """Each library allocates and frees 256 MiB in turn: the process holds about one block,
    reused across libraries, where each library's own pool would keep its own."""
    out = run("""
        import torch, cupy as cp, rmm
        from numba import cuda
        torch.cuda.memory.change_current_allocator(amso.allocators.torch_allocator())
        cuda.set_memory_manager(amso.allocators.NumbaManager)
        cp.cuda.set_allocator(amso.allocators.cupy_malloc)
        rmm.mr.set_current_device_resource(amso.allocators.rmm_resource())
        block = 256 << 20
        def free_memory():
            torch.cuda.synchronize()
            return amso.memory_info()["free"]
        # Every library's context and first allocation, then the baseline.
        torch.empty(1, device="cuda"); cp.empty(1); cuda.device_array(1); rmm.DeviceBuffer(size=1)
        amso.MemArray(1, np.float32, on_device=True)
        gc.collect(); amso.flush_frees()
        baseline, lowest = free_memory(), free_memory()
        for _ in range(3):
            for make in (lambda: torch.empty(block, dtype=torch.uint8, device="cuda"),
                         lambda: cp.empty(block, cp.uint8),
                         lambda: cuda.device_array(block, np.uint8),
                         lambda: rmm.DeviceBuffer(size=block),
                         lambda: amso.empty(block // 4, np.float32, on_device=True)):
                x = make()
                lowest = min(lowest, free_memory())
                del x
                gc.collect(); amso.flush_frees(); torch.cuda.synchronize()
        held = baseline - lowest
        print(held / block)
    """)
    assert float(out) <= 1.1, f"the pool held {float(out):.2f} blocks of 256 MiB at once"


@gpu
@needs("cupy")
def test_a_user_crate_and_the_bundled_module_share_one_pool():
    """The user crate loads first and publishes the pool; amso's allocator setting and its
    statistics then cover the user crate's allocations too."""
    pytest.importorskip("amso_user_example")
    out = run("""
        calls = []
        malloc, free = amso.allocators.cupy()
        def counting(size, device, stream):
            calls.append(size)
            return malloc(size, device, stream)
        amso.set_allocator(counting, free, name="counting")
        array, address = ue.owned_memarray(1 << 20, True, "amso")   # the user crate's copy allocates
        assert calls == [4 << 20], calls
        assert amso.memory_info()["allocator"] == "counting"
        assert amso.memory_info()["clients"]["amso"]["in_use"] >= 4 << 20
        del array
        amso.set_allocator()
        assert in_use("amso") == 0
        print("one pool")
    """, first="import amso_user_example as ue\n")
    assert out.strip() == "one pool"
