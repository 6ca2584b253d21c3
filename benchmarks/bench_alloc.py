"""Small device allocations from Python, amso vs CuPy (with its pool) vs PyTorch (caching
allocator), in one process: the full round trip of creating and dropping a 1 KiB array on the
GPU. Then a soak of 1,000,000 amso alloc/free cycles, reporting RSS and device memory before
and after, and the pool's hit rate. Writes bench_alloc.json and .md to --out."""

from __future__ import annotations

import argparse
import datetime
import resource
import time
from pathlib import Path

import numpy as np

import amso
import output  # this folder: results files


def per_call_us(make, iterations: int) -> float:
    for _ in range(1000):
        make()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            make()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best * 1e6


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def collect(cycles: int) -> dict:
    import cupy as cp
    import torch

    f32 = np.float32
    rows = {
        "amso.empty(256, float32, on_device=True)": per_call_us(lambda: amso.empty(256, f32, on_device=True), 100_000),
        "cupy.empty(256, float32)": per_call_us(lambda: cp.empty(256, f32), 100_000),
        "torch.empty(256, device='cuda')": per_call_us(lambda: torch.empty(256, device="cuda"), 100_000),
        "amso.MemArray(256, float32, on_device=True) (zeroed)": per_call_us(lambda: amso.MemArray(256, f32, on_device=True), 100_000),
        "cupy.zeros(256, float32)": per_call_us(lambda: cp.zeros(256, f32), 100_000),
        "torch.zeros(256, device='cuda')": per_call_us(lambda: torch.zeros(256, device="cuda"), 100_000),
    }
    amso.flush_frees()
    before = {"rss": rss_bytes(), "device_free": amso.memory_info()["free"], **{k: amso.memory_info()[k] for k in ("hits", "misses")}}
    for _ in range(cycles):
        amso.empty(256, np.float32, on_device=True)
    amso.flush_frees()
    info = amso.memory_info()
    after = {"rss": rss_bytes(), "device_free": info["free"], "hits": info["hits"], "misses": info["misses"]}
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    report = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(0),
        "versions": {"cupy": cp.__version__, "torch": torch.__version__, "numpy": np.__version__, "amso": amso.__version__},
        "alloc_free_us": rows,
        "soak": {"cycles": cycles, "before": before, "after": after, "hits": hits, "misses": misses,
                 "hit_rate": hits / max(hits + misses, 1)},
    }
    return report


def markdown(report: dict) -> str:
    rows, soak = report["alloc_free_us"], report["soak"]
    before, after, hits, misses, cycles = soak["before"], soak["after"], soak["hits"], soak["misses"], soak["cycles"]
    best_empty = min(rows["cupy.empty(256, float32)"], rows["torch.empty(256, device='cuda')"])
    best_zeros = min(rows["cupy.zeros(256, float32)"], rows["torch.zeros(256, device='cuda')"])
    lines = [f"# Allocation round trip, 1 KiB on the GPU ({report['date']}, {report['gpu']})", "",
             "| call (create + drop) | us | vs best peer of its kind |", "|---|---|---|"]
    lines += [f"| `{name}` | {value:.2f} | {value / (best_zeros if 'zero' in name else best_empty):.2f} |" for name, value in rows.items()]
    lines += ["", f"Soak: {cycles} amso alloc/free cycles: RSS {before['rss'] / 2**20:.1f} -> {after['rss'] / 2**20:.1f} MiB, "
              f"device free {before['device_free'] / 2**20:.1f} -> {after['device_free'] / 2**20:.1f} MiB, "
              f"pool hit rate {soak['hit_rate']:.4f} ({hits} hits, {misses} misses)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--cycles", type=int, default=1_000_000)
    args = parser.parse_args()
    report = collect(args.cycles)
    text = markdown(report)
    output.write(args.out, "bench_alloc", report, text)
    print(text)


if __name__ == "__main__":
    main()
