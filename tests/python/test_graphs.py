"""amso inside CUDA graph capture: operations captured with ``torch.cuda.graph`` on a side
stream, the graph replayed several times, the results checked against NumPy after the
replays; and what a capture cannot hold, refused with the capture left valid."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import amso

pytestmark = pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
torch = pytest.importorskip("torch")

REPLAYS = 3
SHAPE = (33, 65)
INDEX_SUM = np.indices(SHAPE).sum(axis=0).astype(np.float32)
KCUDA = amso.dlpack.kDLCUDA
KCPU = amso.dlpack.kDLCPU


def start() -> np.ndarray:
    return np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)


def on_device(x: np.ndarray):
    a = amso.asarray(x.copy())
    a.move_memory(KCUDA)
    return a


def capture(body) -> torch.cuda.CUDAGraph:
    """``body(stream)`` captured on a side stream. Thread-local mode: every call of this thread
    (amso's included) must be capture-safe, as in torch's default global mode, but the native
    threads of other libraries in the process (JAX's, once test_kernels has used it) cannot
    invalidate the capture at random."""
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
        body(side)
    return graph


def replay(graph: torch.cuda.CUDAGraph, times: int = REPLAYS) -> None:
    for _ in range(times):
        graph.replay()
    torch.cuda.synchronize()


def test_torch_from_dlpack_then_a_torch_op_reads_the_array_at_each_replay():
    a = on_device(start())
    a.add_index_tuple()  # pending work on amso's stream: completed before the capture records
    captured = {}

    def body(_):
        view = torch.from_dlpack(a)  # torch hands its current (capturing) stream to __dlpack__
        captured["out"] = view * 2 + 1

    graph = capture(body)
    view = torch.from_dlpack(a)
    for k in range(REPLAYS):
        data = np.full(SHAPE, k, np.float32) + INDEX_SUM
        view.copy_(torch.from_numpy(data))  # a new input, on torch's stream, as the replay
        graph.replay()
        np.testing.assert_array_equal(captured["out"].cpu().numpy(), data * 2 + 1)


def test_cupy_from_dlpack_and_the_interface_inside_a_capture():
    cupy = pytest.importorskip("cupy")
    x = start()
    a = on_device(x)
    dl_out, cai_out = cupy.empty(SHAPE, cupy.float32), cupy.empty(SHAPE, cupy.float32)
    cupy.multiply(cupy.from_dlpack(a), 3, out=dl_out)  # compiles CuPy's kernels outside the capture
    cupy.add(cupy.asarray(a), 1, out=cai_out)

    def body(side):
        with cupy.cuda.ExternalStream(side.cuda_stream):
            cupy.multiply(cupy.from_dlpack(a), 3, out=dl_out)
            cupy.add(cupy.asarray(a), 1, out=cai_out)  # __cuda_array_interface__: no stream to wait on

    graph = capture(body)
    view = torch.from_dlpack(a)
    for k in range(REPLAYS):
        data = x + k
        view.copy_(torch.from_numpy(data))
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(dl_out), data * 3)
        np.testing.assert_array_equal(cupy.asnumpy(cai_out), data + 1)


def test_add_index_tuple_is_captured_and_runs_once_per_replay():
    x = start()
    a = on_device(x)
    graph = capture(lambda side: a.add_index_tuple(stream=side))
    np.testing.assert_array_equal(a.to_numpy(), x, err_msg="capturing runs nothing")
    replay(graph)
    np.testing.assert_allclose(a.to_numpy(), x + REPLAYS * INDEX_SUM, rtol=1e-6)


SCALE = r"""
#include "amso.cuh"
extern "C" __global__ void scale_add(amso::Indexer<float, 2> x, float by, float plus) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < x.size()) x.data[i] = x.data[i] * by + plus;
}
"""


def test_a_user_kernel_compiled_and_launched_inside_the_capture():
    x = start()
    a = on_device(x)
    kernel = amso.cuda.Kernel(SCALE, "scale_add")  # first compiled and loaded inside the capture
    size = int(np.prod(SHAPE))
    graph = capture(lambda side: kernel((size + 255) // 256, 256, (a, np.float32(2), np.float32(1)), stream=side))
    replay(graph)
    expected = x
    for _ in range(REPLAYS):
        expected = expected * np.float32(2) + np.float32(1)
    np.testing.assert_allclose(a.to_numpy(), expected, rtol=1e-6)


def test_the_user_crates_deposit_with_torch_inputs_on_the_capturing_stream():
    ue = pytest.importorskip("amso_user_example")
    from test_typed_args import BOX, particles, reference
    from test_typed_args import SHAPE as GRID

    p = particles(20_000)
    positions = torch.from_numpy(p).cuda()
    density = torch.zeros(GRID, dtype=torch.float64, device="cuda")
    ue.deposit(positions, torch.zeros_like(density), BOX)  # loads the kernel outside the capture
    torch.cuda.synchronize()
    graph = capture(lambda _: ue.deposit(positions, density, BOX))  # torch's current stream: the capture
    assert float(density.abs().sum()) == 0.0, "capturing runs nothing"
    replay(graph)
    np.testing.assert_allclose(density.cpu().numpy(), REPLAYS * reference(p), rtol=1e-9)


def test_pinned_asynchronous_moves_there_and_back_are_captured():
    x = start()
    a = amso.MemArray(SHAPE, np.float32, pinned=True)
    a.read_numpy_array(x)

    def body(side):
        a.move_memory(KCUDA, stream=side, async_copy=True)
        a.add_index_tuple(stream=side)
        a.move_memory(KCPU, stream=side, async_copy=True)

    graph = capture(body)
    assert not a.on_device
    np.testing.assert_array_equal(a.to_numpy(), x, err_msg="capturing runs nothing")
    replay(graph)  # each launch: copy up, add, copy back
    np.testing.assert_allclose(a.to_numpy(), x + REPLAYS * INDEX_SUM, rtol=1e-6)


def test_what_a_capture_cannot_hold_is_refused_and_the_capture_stays_valid():
    x = start()
    pageable = amso.asarray(x.copy())
    pinned = amso.MemArray(SHAPE, np.float32, pinned=True)
    other = amso.MemArray((4,), np.float32, on_device=True)
    a = on_device(x)
    errors = {}

    def body(side):
        for name, call in {
            "pageable": lambda: pageable.move_memory(KCUDA, stream=side, async_copy=True),
            "synchronous": lambda: pinned.move_memory(KCUDA, stream=side, async_copy=False),
        }.items():
            with pytest.raises(RuntimeError) as error:
                call()
            errors[name] = str(error.value)
        errors["element"] = float(other[0])  # a host wait for amso's own stream: allowed
        a.add_index_tuple(stream=side)  # the capture goes on

    graph = capture(body)
    assert "pageable host memory" in errors["pageable"] and "pinned=True" in errors["pageable"]
    assert "synchronous move" in errors["synchronous"] and "async_copy=True" in errors["synchronous"]
    assert "capture is still valid" in errors["pageable"] and "capture is still valid" in errors["synchronous"]
    assert errors["element"] == 0.0
    assert not pageable.on_device and not pinned.on_device
    replay(graph)
    np.testing.assert_allclose(a.to_numpy(), x + REPLAYS * INDEX_SUM, rtol=1e-6)


def test_arrays_made_in_the_stream_context_and_frees_deferred_during_capture():
    shared = [amso.MemArray((256,), np.float32, on_device=True) for _ in range(24)]
    exported = [torch.from_dlpack(s) for s in shared]  # handed to a consumer: freeing waits for the device
    del exported
    amso.flush_frees()
    host = [amso.MemArray((1024,), np.float32, pinned=True)]  # pinned: its free synchronises the device
    # Earlier tests' garbage is collected first: it may hold a torch CUDAGraph, whose destructor
    # invalidates a capture in global and thread-local mode (torch's rule, not amso's;
    # torch.cuda.graph does not collect).
    gc.collect()
    cycle = [amso.MemArray((8,), np.float32, on_device=True)]
    cycle.append(cycle)
    del cycle  # garbage that only the collector frees
    made = {}

    def body(side):
        with amso.cuda.stream(side.cuda_stream):
            made["z"] = amso.MemArray(SHAPE, np.float32, on_device=True)  # zero-filled on the capture
        made["z"].add_index_tuple(stream=side)
        shared.clear()  # 24 frees, over the flush limit: queued, not run, while capturing
        host.clear()  # held until the capture ends
        # The amso array in the cycle, freed by the collector inside the capture. Other
        # libraries' collector hooks are left out: JAX's frees XLA buffers, which a capture
        # forbids (seen when test_kernels had imported JAX first).
        hooks, gc.callbacks[:] = gc.callbacks[:], []
        try:
            gc.collect()
        finally:
            gc.callbacks[:] = hooks
        assert amso.memory_info()["pending_frees"] >= 25

    graph = capture(body)
    replay(graph)
    np.testing.assert_allclose(made["z"].to_numpy(), INDEX_SUM, rtol=1e-6, err_msg="zeroed, then added, per replay")
    amso.flush_frees()
    assert amso.memory_info()["pending_frees"] == 0, "the held frees run once the capture has ended"
