"""The one pool, production grade (docs/memory.md, "amso's pool"): frees that never wait for the
device, a cache at every size and on every stream, cross-stream reuse only after an event, the
cache given back on out-of-memory, bounded fragmentation, and threads. Every library is plugged
in before its first allocation, so each case runs in a fresh interpreter (`test_pool.run`)."""

from __future__ import annotations

import textwrap

import pytest

from test_pool import gpu, needs, run


def script(*parts: str) -> str:
    """The parts of a child's script, each dedented on its own."""
    return "\n".join(textwrap.dedent(part) for part in parts)

SIZES = [256, 64 << 10, 64 << 20, 256 << 20]

# A kernel that runs for `seconds` on `stream` (the GPU's nanosecond clock), then writes 1 into
# `n` bytes at `out`: work that holds a block while the host frees it.
SPIN = '''
import cupy as cp, time
_spin = cp.RawKernel(r"""
extern "C" __global__ void spin(unsigned long long ns, unsigned long long out, unsigned long long n) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
    unsigned char* bytes = (unsigned char*)out;
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) bytes[i] = 1;
}""", "spin")
def spin(seconds, stream, out=0, n=0):
    with stream:
        _spin((1,), (256,), (cp.uint64(int(seconds * 1e9)), cp.uint64(out), cp.uint64(n)))
def side_stream():
    return cp.cuda.Stream(non_blocking=True)
'''

PLUG = {
    "torch": "import torch\ntorch.cuda.memory.change_current_allocator(amso.allocators.torch_allocator())\n",
    "cupy": "cp.cuda.set_allocator(amso.allocators.cupy_malloc)\n",
    # The lookup amso falls back to on a CuPy without `get_stream_ptr` (the one CuPy's pool calls).
    # (On a CuPy without `get_stream_ptr`, before 14, the plain "cupy" case is this one.)
    "cupy-current": ("import importlib\nplug = importlib.import_module('amso.allocators.cupy')\n"
                     "plug._stream_function = lambda cupy: cupy.cuda.stream.__pyx_capi__['get_current_stream_ptr']\n"
                     "cp.cuda.set_allocator(amso.allocators.cupy_malloc)\n"),
    "rmm": "import rmm\nrmm.mr.set_current_device_resource(amso.allocators.rmm_resource())\n",
    "amso": "",
}
MAKE = {
    "torch": "lambda size: torch.empty(size, dtype=torch.uint8, device='cuda')",
    "cupy": "lambda size: cp.empty(size, cp.uint8)",
    "cupy-current": "lambda size: cp.empty(size, cp.uint8)",
    "rmm": "lambda size: rmm.DeviceBuffer(size=size)",
    "amso": "lambda size: amso.empty(size, np.uint8, on_device=True)",
}


@gpu
@needs("cupy", "torch", "rmm")
@pytest.mark.parametrize("library", list(PLUG))
def test_a_free_never_waits_for_other_streams_work(library):
    """50 allocate/free pairs at each size finish well inside a 1 s kernel on another stream."""
    out = run(script(SPIN, PLUG[library], f"""
        make = {MAKE[library]}
        for size in {SIZES!r}:        # warmed up: each size's block is cached
            make(size)
        gc.collect()
        stream = side_stream()
        spin(0.001, stream); stream.synchronize()   # the kernel compiled and loaded
        spin(1.0, stream)
        start = time.perf_counter()
        for size in {SIZES!r}:
            for _ in range(50):
                x = make(size)
                del x
        took = time.perf_counter() - start
        busy = not stream.done
        stream.synchronize()
        print(took, busy)
    """))
    took, busy = out.split()
    assert float(took) < 0.3 and busy == "True", f"{library}: 200 pairs took {float(took):.3f} s beside a 1 s kernel"


NUMBA_NO_WAIT = SPIN + """
from numba import cuda
if PLUGGED:
    cuda.set_memory_manager(amso.allocators.NumbaManager)
for size in SIZES:
    cuda.device_array(size, np.uint8)
gc.collect()
stream = side_stream()
spin(0.001, stream); stream.synchronize()
spin(1.0, stream)
start = time.perf_counter()
for size in SIZES:
    for _ in range(50):
        x = cuda.device_array(size, np.uint8)
        del x
took = time.perf_counter() - start
stream.synchronize()
print(took)
"""


@gpu
@needs("cupy", "numba.cuda")
def test_numba_through_amso_never_waits_for_the_device():
    """Numba names no stream: each free queues a barrier on the legacy stream and the block goes
    back to the cache at once, so 200 pairs finish well inside a 1 s kernel on another stream
    (Numba's own deferred cuMemFree synchronises on the freeing thread)."""
    own = float(run(f"PLUGGED = False\nSIZES = {SIZES!r}\n" + NUMBA_NO_WAIT))
    plugged = float(run(f"PLUGGED = True\nSIZES = {SIZES!r}\n" + NUMBA_NO_WAIT))
    assert plugged < 0.3 and plugged <= own + 0.05, f"Numba through amso {plugged:.3f} s, Numba's own {own:.3f} s"


# A Numba stream's handle (a driver binding's CUstream, or a ctypes pointer in older Numba).
NUMBA_HANDLE = """
def handle(stream):
    raw = stream.handle
    return raw.value if hasattr(raw, "value") else int(raw)
"""


@gpu
@needs("cupy", "numba.cuda")
def test_a_numba_block_returns_to_the_cache_at_once():
    """A freed Numba block is back in amso's cache at once, with no batch to fill, no flush and
    no wait for a kernel that runs on another stream: the next allocation of its size hits."""
    out = run(script(SPIN, """
        from numba import cuda
        cuda.set_memory_manager(amso.allocators.NumbaManager)
        n = 256 << 20
        x = cuda.device_array(n, np.uint8)
        stream = side_stream()
        spin(0.5, stream)
        del x
        gc.collect()
        before = amso.memory_info()
        y = cuda.device_array(n, np.uint8)
        after = amso.memory_info()
        print(before["pending_frees"], after["hits"] - before["hits"], after["misses"] - before["misses"], stream.done)
    """))
    waiting, hits, misses, done = out.split()
    assert (waiting, hits, misses, done) == ("0", "1", "0", "False"), out


NUMBA_REUSE = SPIN + NUMBA_HANDLE + """
from numba import cuda
cuda.set_memory_manager(amso.allocators.NumbaManager)
n = 64 << 20
first_stream = cuda.stream()
if WRITER == "numba":    # one of Numba's own (blocking) streams
    writer = cp.cuda.ExternalStream(handle(first_stream))
elif WRITER == "amso":   # amso's own stream (non-blocking), which amso's arrays publish
    writer = cp.cuda.ExternalStream(amso.MemArray(1, np.uint8, on_device=True).__cuda_array_interface__["stream"])
else:                    # a non-blocking stream of another library
    writer = side_stream()
x = cuda.device_array(n, np.uint8)
first = x.device_ctypes_pointer.value
spin(0.5, writer, first, n)              # writes 1s into x at its end
del x                                    # freed while the kernel still writes it
gc.collect()
y = cuda.device_array(n, np.uint8)       # the same block, at once
second = cuda.stream()
start = time.perf_counter()
cp.cuda.runtime.memsetAsync(y.device_ctypes_pointer.value, 0, n, handle(second))
second.synchronize()
waited = time.perf_counter() - start
cuda.synchronize()
print(y.device_ctypes_pointer.value == first, int(cp.asarray(y).sum()), waited > 0.3)
"""


@gpu
@needs("cupy", "numba.cuda")
def test_a_numba_block_is_reused_behind_the_kernels_of_numbas_streams():
    """One of Numba's streams (blocking) still writes a block when it is freed: the next Numba
    array of that size gets the block at once, and zeroing it on another of Numba's streams
    waits behind the kernel (the barrier queued on the legacy stream at the free), so the
    zeros are what stays."""
    same, total, waited = run("WRITER = 'numba'\n" + NUMBA_REUSE).split()
    assert (same, total, waited) == ("True", "0", "True"), (same, total, waited)


@gpu
@needs("cupy", "numba.cuda")
def test_a_numba_block_is_reused_behind_amsos_own_stream():
    """amso's own stream is non-blocking, and amso works there on a Numba array that comes
    without a stream: the barrier joins it, so a block amso's stream still writes when it is
    freed is zeroed on one of Numba's streams only after that work."""
    same, total, waited = run("WRITER = 'amso'\n" + NUMBA_REUSE).split()
    assert (same, total, waited) == ("True", "0", "True"), (same, total, waited)


@gpu
@needs("cupy", "numba.cuda")
def test_a_kernel_on_a_non_blocking_stream_is_not_waited_for():
    """docs/memory.md's limit: a kernel on a non-blocking stream (one Numba reaches through
    `cuda.external_stream`) is not behind the barrier, so a Numba array it still uses must not
    be dropped before that stream is synchronised: here the zeroing runs at once and the
    kernel's later writes land in the new array."""
    same, total, waited = run("WRITER = 'side'\n" + NUMBA_REUSE).split()
    assert (same, total, waited) == ("True", str(64 << 20), "False"), (same, total, waited)


@gpu
@needs("cupy", "torch")
def test_a_block_freed_under_a_running_kernel_never_reaches_another_stream():
    """Stream A's kernel still writes a block when A frees it: stream B, asking for the same size,
    gets other memory, and its zeros survive A's writes. Once A's work is done, B reuses A's
    block (after the event the pool recorded on A)."""
    out = run(script(SPIN, PLUG["torch"], """
        n = 64 << 20
        a, b = torch.cuda.Stream(), torch.cuda.Stream()
        with torch.cuda.stream(a):
            x = torch.empty(n, dtype=torch.uint8, device="cuda")
            first = x.data_ptr()
            spin(0.5, cp.cuda.ExternalStream(a.cuda_stream), first, n)   # writes 1s at its end
            del x                                                          # freed on A, while A writes
        with torch.cuda.stream(b):
            y = torch.zeros(n, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        assert y.data_ptr() != first, "B got the block A's kernel was still writing"
        assert int(y.sum()) == 0, "A's writes reached B's memory"
        del y
        before = amso.memory_info()["cross_stream_hits"]
        with torch.cuda.stream(b):
            z = torch.empty(n, dtype=torch.uint8, device="cuda")   # A's block, A's work done
            w = torch.empty(n, dtype=torch.uint8, device="cuda")
        hits = amso.memory_info()["cross_stream_hits"] - before
        print(first in (z.data_ptr(), w.data_ptr()) or hits >= 1, hits)
    """))
    reused, hits = out.split()
    assert reused == "True", out


@gpu
@needs("cupy")
def test_the_cupy_plug_in_reads_the_stream_by_device_where_cupy_exports_it():
    out = run(script("import cupy as cp\n", PLUG["cupy"], """
        import importlib
        import cupy_backends.cuda.stream as backend
        chosen = importlib.import_module("amso.allocators.cupy")._stream_function(cp)
        by_device = getattr(backend, "__pyx_capi__", {}).get("get_stream_ptr")
        print(chosen is (by_device or cp.cuda.stream.__pyx_capi__["get_current_stream_ptr"]), by_device is not None)
    """))
    chosen, by_device = out.split()
    assert chosen == "True", out
    major = int(__import__("cupy").__version__.split(".")[0])
    assert by_device == str(major >= 14), f"CuPy {major}: get_stream_ptr exported: {by_device}"


@gpu
@needs("cupy")
@pytest.mark.parametrize("lookup", ["cupy", "cupy-current"])
def test_a_cupy_block_stays_on_its_stream(lookup):
    """CuPy's streams may be destroyed while their blocks are cached: a block freed on one CuPy
    stream is never handed to another (as CuPy's own pool files blocks by stream), through
    either of the C functions amso reads CuPy's current stream with."""
    out = run(script(SPIN, PLUG[lookup], """
        n = 1 << 20
        a, b = side_stream(), side_stream()
        with a:
            x = cp.empty(n, cp.uint8)
            first = x.data.ptr
            spin(0.3, a, first, n)
            del x
        with b:
            y = cp.zeros(n, cp.uint8)
        b.synchronize(); a.synchronize()
        assert y.data.ptr != first and int(y.sum()) == 0
        with a:
            again = cp.empty(n, cp.uint8)
        print(again.data.ptr == first)
    """))
    assert out.strip() == "True", "A's own stream reuses its block at once"


HITS = {
    "torch": ("side = torch.cuda.Stream()\nenter = lambda: torch.cuda.stream(side)\n"),
    "cupy": ("side = side_stream()\nenter = lambda: side\n"),
    "cupy-current": ("side = side_stream()\nenter = lambda: side\n"),
    "rmm": ("from rmm.pylibrmm.stream import Stream\nfrom cuda.bindings import runtime\n"
            "handle = int(runtime.cudaStreamCreateWithFlags(runtime.cudaStreamNonBlocking)[1])\n"
            "class Raw:\n    def __cuda_stream__(self): return (0, handle)\n"
            "side = Stream(Raw())\nimport contextlib\nenter = contextlib.nullcontext\n"
            "make = lambda size: rmm.DeviceBuffer(size=size, stream=side)\n"),
    "amso": ("side = side_stream()\nenter = lambda: amso.cuda.stream(side)\n"),
    "numba": ("from numba import cuda\ncuda.set_memory_manager(amso.allocators.NumbaManager)\n"
              "side = cuda.stream()\nimport contextlib\nenter = contextlib.nullcontext\n"
              "make = lambda size: cuda.device_array(size, np.uint8, stream=side)\n"),
}


@gpu
@needs("cupy", "torch", "rmm", "numba.cuda")
@pytest.mark.parametrize("library", list(HITS))
def test_every_size_hits_the_cache_on_a_stream_of_the_librarys_own(library):
    make = f"make = {MAKE[library]}\n" if library in MAKE else ""
    out = run(script(SPIN, PLUG.get(library, ""), make, HITS[library], f"""
        rates = []
        for size in {SIZES!r}:
            with enter():
                for _ in range(25):  # steady state
                    make(size)
                before = amso.memory_info()
                for _ in range(200):
                    x = make(size)
                    del x
                after = amso.memory_info()
            served = (after["hits"] - before["hits"]) + (after["misses"] - before["misses"])
            rates.append((after["hits"] - before["hits"]) / max(served, 1))
            assert after["misses"] == before["misses"] or size <= 1 << 20, (size, before, after)
        print(" ".join(f"{{rate:.3f}}" for rate in rates))
    """))
    rates = [float(rate) for rate in out.split()]
    assert all(rate >= 0.99 for rate in rates), f"{library}: hit rates {rates} at {SIZES}"


@gpu
@needs("torch")
def test_out_of_memory_gives_the_cache_back_and_retries():
    """The device filled with cached 2 GiB blocks: a 3 GiB request succeeds after the pool gives
    its cache back; an impossible one raises PyTorch's OutOfMemoryError in the calling thread
    (chained under CPython's SystemError: a pluggable allocator has no error channel, and
    PyTorch takes NULL for memory), never a tensor without memory."""
    out = run(script(PLUG["torch"], """
        def out_of_memory(size):
            try:
                kept = torch.empty(size, dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError as error:
                return error, None
            except SystemError as error:
                return error.__cause__, None
            assert kept.data_ptr() != 0, "a tensor without memory"
            return None, kept
        amso.set_cache_limit(1 << 50)                    # the cache may hold the whole device
        blocks = []
        while True:
            error, block = out_of_memory(2 << 30)
            if error is not None:
                assert isinstance(error, torch.OutOfMemoryError), repr(error)
                break
            blocks.append(block)
        count = len(blocks)
        del blocks, block
        cached = amso.memory_info()["cached"]
        assert cached >= count * (2 << 30), (count, cached)
        error, big = out_of_memory(3 << 30)
        assert error is None, repr(error)
        assert amso.memory_info()["cached"] < cached, "the cache went back to the driver"
        error, _ = out_of_memory(1 << 50)
        assert isinstance(error, torch.OutOfMemoryError), repr(error)
        del big
        amso.empty_cache()
        info = amso.memory_info()
        print(count, info["cached"], info["clients"]["torch"]["in_use"])
    """))
    count, cached, in_use = (int(v) for v in out.split())
    assert count >= 10 and cached == 0 and in_use == 0, out


@gpu
@needs("cupy", "numba.cuda")
def test_an_impossible_allocation_raises_each_librarys_own_error():
    out = run("""
        import cupy as cp
        from numba import cuda
        from numba.cuda.cudadrv.driver import CudaAPIError
        cp.cuda.set_allocator(amso.allocators.cupy_malloc)
        cuda.set_memory_manager(amso.allocators.NumbaManager)
        try:
            cp.empty(1 << 50, cp.uint8)
            raise SystemExit("CuPy: an impossible allocation succeeded")
        except cp.cuda.memory.OutOfMemoryError:
            pass
        caught = None
        try:
            cuda.device_array(1 << 50, np.uint8)
        except (CudaAPIError, MemoryError) as error:
            caught = type(error).__name__
        x = cp.arange(10)           # both still work
        print(caught, int(x.sum()), cuda.to_device(np.ones(4)).copy_to_host().sum())
    """)
    assert out.split()[1:] == ["45", "4.0"], out
    assert out.split()[0] in ("CudaAPIError", "MemoryError"), out


@gpu
def test_a_random_workload_holds_little_more_than_its_peak():
    """Seeded sizes from 1 KiB to 256 MiB (log-uniform), 10,000 allocations and frees: the memory
    the process holds stays within 1.25x its peak live set."""
    out = run("""
        import random
        rng = random.Random(53)
        free_memory = lambda: amso.cuda.memory_info()[0]
        amso.empty(1, np.uint8, on_device=True)
        baseline = free_memory()
        live, live_bytes, peak, held = [], 0, 0, 0
        for step in range(10_000):
            if not live or rng.random() < 0.55:
                size = int(2 ** rng.uniform(10, 28))
                live.append((amso.empty(size, np.uint8, on_device=True), size))
                live_bytes += size
                peak = max(peak, live_bytes)
            else:
                _, size = live.pop(rng.randrange(len(live)))
                live_bytes -= size
            if step % 50 == 0:
                held = max(held, baseline - free_memory())
        print(held / peak, peak >> 20)
    """)
    ratio, peak = out.split()
    assert float(ratio) <= 1.25, f"held {float(ratio):.2f}x the peak live set of {peak} MiB"


@gpu
@needs("cupy", "torch")
def test_eight_threads_on_their_own_streams_lose_no_block():
    out = run(script(PLUG["torch"], "import cupy as cp", PLUG["cupy"], """
        import threading, cupy as cp
        errors = []
        def work(k):
            try:
                if k % 2:
                    stream = torch.cuda.Stream()
                    with torch.cuda.stream(stream):
                        for i in range(300):
                            x = torch.empty((k * 977 + i * 4099) % (8 << 20) + 1, dtype=torch.uint8, device="cuda")
                            del x
                    stream.synchronize()
                else:
                    stream = cp.cuda.Stream(non_blocking=True)
                    with stream:
                        for i in range(300):
                            x = cp.empty((k * 977 + i * 4099) % (8 << 20) + 1, cp.uint8)
                            del x
                    stream.synchronize()
            except Exception as error:  # reported below
                errors.append(repr(error))
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads: t.start()
        for t in threads: t.join(120)
        assert not any(t.is_alive() for t in threads), "a thread hung"
        clients = amso.memory_info()["clients"]
        print(errors, clients["torch"]["in_use"], clients["cupy"]["in_use"])
    """), timeout=240)
    assert out.strip() == "[] 0 0", out


@gpu
@needs("cupy", "torch", "amso_user_example")
def test_a_capture_another_copy_saw_holds_the_pools_frees():
    """Frees wait while a capture any copy of the runtime saw may run (docs/memory.md): a capture
    seen only by another extension module's copy (the user crate's kernel, launched on the
    stream PyTorch captures; PyTorch is not plugged into amso) holds a CuPy free of a block lent
    on the legacy stream, which amso's own copy saw nothing of; the free runs at the next flush
    once the capture has ended."""
    out = run(script(SPIN, """
        import torch
        import amso_user_example as ue
        from test_typed_args import BOX, particles
        from test_typed_args import SHAPE as GRID
        cp.cuda.set_allocator(amso.allocators.cupy_malloc)
        positions = torch.from_numpy(particles(1000)).cuda()
        density = torch.zeros(GRID, dtype=torch.float64, device="cuda")
        ue.deposit(positions, density, BOX)  # its kernel loaded outside the capture
        torch.cuda.synchronize()
        held = cp.empty(4096, cp.uint8)  # lent to CuPy on the legacy stream
        before = amso.memory_info()["pending_frees"]
        graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
            ue.deposit(positions, density, BOX)  # the user crate's copy sees the capture
            del held
        during = amso.memory_info()["pending_frees"]
        amso.flush_frees()
        print(before, during, amso.memory_info()["pending_frees"])
    """))
    before, during, after = map(int, out.split())
    assert during == before + 1, f"a free ran during a capture the user crate's copy saw: {out}"
    assert after == 0, f"the held free did not run once the capture ended: {out}"


@gpu
@needs("cupy")
def test_a_streams_capture_is_seen_from_a_thread_with_no_current_context():
    """A lend asks the driver whether its stream is being captured without making a context
    current first (the stream names its own): from a thread where no context is current, the
    driver answers the query for a stream another thread is capturing, and amso's lend on it
    takes the capture path (memory from outside the capture) instead of the stream's cache."""
    out = run(script(SPIN, """
        import ctypes, threading
        cp.cuda.set_allocator(amso.allocators.cupy_malloc)
        cuda = ctypes.CDLL("libcuda.so.1")
        s = side_stream()
        with s:
            x = cp.empty(4096, cp.uint8)
        del x  # a block cached on s
        s.begin_capture(cp.cuda.runtime.streamCaptureModeRelaxed)
        found = {}
        def probe():
            context = ctypes.c_void_p(1)
            cuda.cuCtxGetCurrent(ctypes.byref(context))
            status, ident = ctypes.c_int(-1), ctypes.c_uint64(0)
            code = cuda.cuStreamGetCaptureInfo_v3(ctypes.c_void_p(s.ptr), ctypes.byref(status), ctypes.byref(ident),
                                                  None, None, None, None)
            hits = amso.memory_info()["hits"]
            amso._amso._pool_pair_ns(4096, s.ptr, dict(amso._amso._clients())["cupy"], 1)
            found.update(context=context.value, code=code, status=status.value,
                         cache_hits=amso.memory_info()["hits"] - hits)
        thread = threading.Thread(target=probe)
        thread.start(); thread.join()
        s.end_capture()
        print(found["context"], found["code"], found["status"], found["cache_hits"])
    """))
    context, code, status, hits = out.split()
    assert context == "None", f"the thread had a current context: {out}"
    assert (code, status) == ("0", "1"), f"cuStreamGetCaptureInfo from a thread without a context: {out}"
    assert hits == "0", f"a lend on a capturing stream was served from the stream's cache: {out}"
