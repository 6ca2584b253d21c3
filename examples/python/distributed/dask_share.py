"""Dask LocalCluster workers on one GPU exchanging amso device arrays through shared handles:
one worker makes a device array (shareable=True) and returns its handle, not its data; another
opens the handle over the same device memory, doubles it in place with a kernel and sums it;
the first reads the doubled values in place. Nothing crosses the process boundary but the
handle's bytes. Prints one JSON line that tests/python/test_distributed.py checks."""

from __future__ import annotations

import json

import numpy as np


def produce(n: int):
    """In worker A: a device array 0..n-1 and its handle. The array stays alive in this worker
    (kept on the worker object) while others use it."""
    from distributed import get_worker

    import amso

    array = amso.MemArray(n, np.float64, on_device=True, shareable=True)
    array.read_numpy_array(np.arange(n, dtype=np.float64))
    setattr(get_worker(), "amso_kept", array)  # an attribute of our own on the worker
    return array.share(), __import__("os").getpid()


def consume(handle):
    """In worker B: open the handle, double the values in place with a kernel, sum them."""
    import os

    import amso

    twice = amso.cuda.Kernel(
        '#include "amso.cuh"\n'
        'extern "C" __global__ void twice(amso::Indexer<double, 1> x) {\n'
        "    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < x.size()) x(i) *= 2.0;\n"
        "}\n",
        "twice",
    )
    opened = handle.open()
    twice((opened.size + 255) // 256, 256, (opened,))
    total = float(opened.to_numpy().sum())
    del opened  # the hold on the exporter's memory goes with it
    return total, os.getpid()


def read_back(_token):
    """In worker A again: the array it made now holds the doubled values."""
    from distributed import get_worker

    return getattr(get_worker(), "amso_kept").to_numpy().tolist()[:4]


def main() -> None:
    from dask.distributed import Client, LocalCluster

    n = 1 << 16
    # (dask's annotation says str, but None turns the dashboard off: ignored for pyright.)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:  # pyright: ignore[reportArgumentType]
        with Client(cluster) as client:
            a, b = sorted(client.scheduler_info()["workers"])
            handle, producer_pid = client.submit(produce, n, workers=[a], pure=False).result()
            total, consumer_pid = client.submit(consume, handle, workers=[b], pure=False).result()
            first = client.submit(read_back, total, workers=[a], pure=False).result()
    expected = float(np.arange(n, dtype=np.float64).sum() * 2)
    print(json.dumps({
        "ok": total == expected and first == [0.0, 2.0, 4.0, 6.0],
        "two_processes": producer_pid != consumer_pid,
        "sum": total,
        "expected": expected,
        "first": first,
    }))


if __name__ == "__main__":
    main()
