"""amso device arrays in NCCL collectives through torch.distributed: one process per GPU.

    python examples/python/distributed/nccl_allreduce.py [--bandwidth]

Each rank fills an amso array on its GPU with its rank, wraps it with torch.from_dlpack (no
copy: the pointers are checked), runs all_reduce and broadcast, and reads the result back from
the amso array. torch.from_dlpack hands amso the stream torch will use, so amso's pending work
on the array (the upload) is ordered before the collective. With --bandwidth, the all_reduce of
a 1 GiB float32 amso array is timed against the same on a plain torch tensor. NVLink
multicast (NVLS) stays off. Prints one JSON line per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import amso


def bandwidth(tensor, repeats=10) -> float:
    """all_reduce algorithm bandwidth in GB/s (bytes / seconds), median of `repeats`."""
    times = []
    for _ in range(repeats + 2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return tensor.numel() * tensor.element_size() / sorted(times[2:])[repeats // 2] / 1e9


def run(rank: int, world: int, measure: bool) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    n = 1 << 20
    a = amso.MemArray(n, np.float32, device_id=rank)
    a.read_numpy_array(np.full(n, float(rank), np.float32))
    a.move_memory(amso.dlpack.kDLCUDA, async_copy=True)  # pending work the collective must follow
    t = torch.from_dlpack(a)
    report = {"rank": rank, "zero_copy": t.data_ptr() == a.__cuda_array_interface__["data"][0]}
    dist.all_reduce(t)
    expected = sum(range(world))
    report["all_reduce_ok"] = bool((a.to_numpy() == expected).all())
    if rank == 0:
        t.fill_(42.0)
    dist.broadcast(t, src=0)
    report["broadcast_ok"] = bool((a.to_numpy() == 42.0).all())
    if measure:
        big = amso.MemArray(1 << 28, np.float32, device_id=rank, on_device=True)  # 1 GiB
        report["amso_GBps"] = bandwidth(torch.from_dlpack(big))
        del big
        report["torch_GBps"] = bandwidth(torch.zeros(1 << 28, dtype=torch.float32, device="cuda"))
        report["ratio"] = report["amso_GBps"] / report["torch_GBps"]
    print(json.dumps(report), flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bandwidth", action="store_true")
    args = parser.parse_args()
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    world = torch.cuda.device_count()
    if world < 2:
        raise SystemExit("needs two or more GPUs")
    mp.spawn(run, args=(world, args.bandwidth), nprocs=world, join=True)


if __name__ == "__main__":
    main()
