"""amso vs CuPy on the GPU machine, measured in one process: host<->device transfers (pageable
and pinned) and the add_index kernel against device-to-device copy bandwidth and CuPy's
ElementwiseKernel doing the same work. Writes bench_cuda.json and bench_cuda.md to --out.

    PYTHONPATH=/tmp/site python3 benchmarks/bench_cuda.py --out results/
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import platform
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import amso
from amso.dlpack import kDLCPU, kDLCUDA
import output  # this folder: results files

MIB = 1 << 20


def median_seconds(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def transfers(cp, nbytes: int, repeat: int) -> dict:
    n = nbytes // 4
    results = {}
    for pinned in (False, True):
        kind = "pinned" if pinned else "pageable"
        a = amso.MemArray(n, np.float32, pinned=pinned)
        a.move_memory(kDLCUDA)  # allocate once; the device memory is kept across moves
        a.move_memory(kDLCPU)
        h2d, d2h = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            a.move_memory(kDLCUDA)
            t1 = time.perf_counter()
            a.move_memory(kDLCPU)
            t2 = time.perf_counter()
            h2d.append(t1 - t0)
            d2h.append(t2 - t1)
        # CuPy: the same sizes, host memory of the same kind.
        if pinned:
            memory = cp.cuda.alloc_pinned_memory(nbytes)
            host = np.frombuffer(memory, np.float32, n)
        else:
            host = np.zeros(n, np.float32)
        device = cp.empty(n, np.float32)
        device.set(host)
        cp.cuda.runtime.deviceSynchronize()

        def cupy_h2d():
            device.set(host)
            cp.cuda.runtime.deviceSynchronize()

        def cupy_d2h():
            device.get(out=host)
            cp.cuda.runtime.deviceSynchronize()

        gbs = lambda seconds: nbytes / seconds / 1e9  # noqa: E731
        results[kind] = {
            "amso_h2d_GBps": gbs(statistics.median(h2d)),
            "amso_d2h_GBps": gbs(statistics.median(d2h)),
            "cupy_h2d_GBps": gbs(median_seconds(cupy_h2d, repeat)),
            "cupy_d2h_GBps": gbs(median_seconds(cupy_d2h, repeat)),
        }
    return results


def staging_bound(cp, nbytes: int, repeat: int) -> dict:
    """References for a staged pageable copy on this host, measured without amso: the host's own
    copy bandwidth between pageable and pinned memory (the staging pass, with as many threads as
    amso's pipeline uses, but whole buffers rather than amso's ring of 16 MiB chunks), alone and
    while the copy engine reads other pinned memory without pause; the copy engine alone; and
    pinning the pageable buffer in place instead (cuMemHostRegister, copy, unregister), the other
    way to move pageable memory at DMA speed. Not a strict bound: amso's copy engine idles
    between chunks, so its staging meets less contention than the "during DMA" figure."""
    n = nbytes // 4
    workers = min(max(len(os.sched_getaffinity(0)), 2), 12)  # as amso's pipeline (cuda/transfer.rs)
    page = os.sysconf("SC_PAGE_SIZE")  # cuMemHostRegister takes whole pages
    raw = np.full(n + page // 4, 3, np.float32)
    start = (-raw.ctypes.data % page) // 4
    pageable = raw[start : start + n]
    pinned_memory = cp.cuda.alloc_pinned_memory(nbytes)
    pinned = np.frombuffer(pinned_memory, np.float32, n)
    pinned[:] = 2
    other = cp.cuda.alloc_pinned_memory(nbytes)
    np.frombuffer(other, np.float32, n)[:] = 0
    device = cp.empty(n, np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    share = -(-nbytes // workers)
    parts = [(offset, min(share, nbytes - offset)) for offset in range(0, nbytes, share)]
    gbs = lambda seconds: nbytes / seconds / 1e9  # noqa: E731

    with ThreadPoolExecutor(workers) as pool:

        def host_copy(dst, src):  # libc's memcpy, as amso's workers use; ctypes releases the GIL
            base_dst, base_src = dst.ctypes.data, src.ctypes.data
            list(pool.map(lambda p: ctypes.memmove(base_dst + p[0], base_src + p[0], p[1]), parts))

        def dma():
            cp.cuda.runtime.memcpyAsync(device.data.ptr, other.ptr, nbytes, 1, stream.ptr)

        def host_copy_during_dma() -> float:
            for _ in range(4):  # queued reads of pinned memory outlast the host copy
                dma()
            started = time.perf_counter()
            host_copy(pinned, pageable)
            seconds = time.perf_counter() - started
            stream.synchronize()
            return seconds

        def registered():
            cp.cuda.runtime.hostRegister(pageable.ctypes.data, nbytes, 0)
            cp.cuda.runtime.memcpyAsync(device.data.ptr, pageable.ctypes.data, nbytes, 1, stream.ptr)
            stream.synchronize()
            cp.cuda.runtime.hostUnregister(pageable.ctypes.data)

        to_pinned = median_seconds(lambda: host_copy(pinned, pageable), repeat)
        if not (pinned == 3).all():
            raise RuntimeError("the threaded host copy did not copy the pageable buffer")
        from_pinned = median_seconds(lambda: host_copy(pageable, pinned), repeat)
        dma_alone = median_seconds(lambda: (dma(), stream.synchronize()), repeat)
        during_dma = statistics.median(host_copy_during_dma() for _ in range(repeat))
        register = median_seconds(registered, repeat)
    if not bool((device == 3).all()):
        raise RuntimeError("the copy from the registered pageable buffer did not arrive")
    return {
        "threads": workers,
        "host_pageable_to_pinned_GBps": gbs(to_pinned),
        "host_pinned_to_pageable_GBps": gbs(from_pinned),
        "host_pageable_to_pinned_during_dma_GBps": gbs(during_dma),
        "dma_pinned_h2d_GBps": gbs(dma_alone),
        "register_copy_unregister_GBps": gbs(register),
    }


def kernel(cp, shape: tuple[int, ...], repeat: int) -> dict:
    stream = cp.cuda.Stream(non_blocking=True)
    a = amso.MemArray(shape, np.float32)
    a.move_memory(kDLCUDA)
    nbytes = a.nbytes
    src = cp.zeros(shape, np.float32)
    dst = cp.empty_like(src)
    add_index = cp.ElementwiseKernel(
        "int32 ny, int32 nz", "T x", "x += (T)(i / (ny * nz) + (i / nz) % ny + i % nz)", "cupy_add_index"
    )

    def timed(run) -> float:
        with stream:
            run()  # warm-up (and, for amso, NVRTC compilation on first use)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            samples = []
            for _ in range(repeat):
                start.record(stream)
                run()
                end.record(stream)
                end.synchronize()
                samples.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return statistics.median(samples)

    copy_s = timed(lambda: dst.data.copy_from_device_async(src.data, nbytes, stream))
    amso_s = timed(lambda: a.add_index_tuple(stream=stream.ptr))
    cupy_s = timed(lambda: add_index(shape[1], shape[2], src))
    gbs = lambda seconds: 2 * nbytes / seconds / 1e9  # noqa: E731  (read + write)
    # Correctness of the timed kernel: each run adds the index sum once more.
    total_runs = 1 + repeat
    probe = (shape[0] - 1, shape[1] - 1, shape[2] - 1)
    assert a[probe] == total_runs * sum(probe), (a[probe], total_runs * sum(probe))
    return {
        "shape": list(shape),
        "d2d_copy_GBps": gbs(copy_s),
        "amso_add_index_GBps": gbs(amso_s),
        "cupy_elementwise_GBps": gbs(cupy_s),
        "amso_ms": amso_s * 1e3,
        "cupy_ms": cupy_s * 1e3,
        "copy_ms": copy_s * 1e3,
    }


def environment(cp) -> dict:
    props = cp.cuda.runtime.getDeviceProperties(0)
    return {
        "date": datetime.date.today().isoformat(),
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "driver": cp.cuda.runtime.driverGetVersion(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cupy": cp.__version__,
        "amso": amso.__version__,
    }


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"# amso CUDA benchmark ({env['date']}, {env['gpu']}, driver {env['driver']}, "
        f"Python {env['python']}, NumPy {env['numpy']}, CuPy {env['cupy']}, amso {env['amso']})",
        "",
        f"## Transfers, {report['transfer_MiB']} MiB (GB/s, median of {report['repeat']})",
        "",
        "| host memory | direction | amso | CuPy | amso / CuPy |",
        "|---|---|---|---|---|",
    ]
    for kind, r in report["transfers"].items():
        if kind == "staging_bound":
            continue
        for direction in ("h2d", "d2h"):
            ours, theirs = r[f"amso_{direction}_GBps"], r[f"cupy_{direction}_GBps"]
            lines.append(f"| {kind} | {direction.upper()} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")
    k = report["kernel"]
    lines += [
        "",
        f"## add_index on {'x'.join(map(str, k['shape']))} float32 (GB/s counting reads and writes)",
        "",
        "| | GB/s | ms | share of D2D copy |",
        "|---|---|---|---|",
        f"| device-to-device copy | {k['d2d_copy_GBps']:.0f} | {k['copy_ms']:.3f} | 1.00 |",
        f"| amso add_index_tuple | {k['amso_add_index_GBps']:.0f} | {k['amso_ms']:.3f} | {k['amso_add_index_GBps'] / k['d2d_copy_GBps']:.2f} |",
        f"| CuPy ElementwiseKernel | {k['cupy_elementwise_GBps']:.0f} | {k['cupy_ms']:.3f} | {k['cupy_elementwise_GBps'] / k['d2d_copy_GBps']:.2f} |",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    import cupy as cp

    report = {
        "environment": environment(cp),
        "transfer_MiB": args.mib,
        "repeat": args.repeat,
        "transfers": transfers(cp, args.mib * MIB, args.repeat),
        "kernel": kernel(cp, (512, 512, 512), args.repeat),
    }
    text = markdown(report)
    output.write(args.out, "bench_cuda", report, text)
    print(text)


if __name__ == "__main__":
    main()
