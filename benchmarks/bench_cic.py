"""Cloud-in-cell deposit of 16M uniform particles into a 256^3 float64 grid, in one process:
the user crate's CUDA kernel (amso.cuh, launched from Rust on torch's current stream) against
the best PyTorch formulation (index_put_ with accumulate over the 8 corners, and index_add_ on
the flattened grid) and CuPy's cupyx.scatter_add. Results are checked against each other.
The same kernel reading the particles as records (issue 40: an amso array of the spec's 40-byte
`particle`, positions in its `pos` field, an array of structs) is timed beside the float32
(n, 3) positions in the same run, and the ratio of the two reported (goal: records within 1.5x).

    python3 benchmarks/bench_cic.py --out results/
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from bench_cuda import median_seconds


def corners(xp, positions, cells, box):
    """(flat cell index, weight) of the 8 corners of every particle, float64 weights."""
    wide = positions.double() if hasattr(positions, "double") else positions.astype(xp.float64)
    u = wide / (box / cells) - 0.5
    lower = xp.floor(u)
    fraction = u - lower
    lower = (lower.long() if hasattr(lower, "long") else lower.astype(xp.int64)) % cells
    upper = (lower + 1) % cells
    out = []
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                ix = upper[:, 0] if a else lower[:, 0]
                iy = upper[:, 1] if b else lower[:, 1]
                iz = upper[:, 2] if c else lower[:, 2]
                w = ((fraction[:, 0] if a else 1 - fraction[:, 0]) * (fraction[:, 1] if b else 1 - fraction[:, 1])
                     * (fraction[:, 2] if c else 1 - fraction[:, 2]))
                out.append(((ix * cells + iy) * cells + iz, w))
    return out


# The records row: the user crate's kernel reading `pos` from 40-byte particle records.
RECORDS = "amso kernel, records"


def timed(run, sync, repeats):
    run()  # warm-up: compile, allocate
    sync()
    return median_seconds(lambda: (run(), sync()), repeats)


def collect(n: int = 16 << 20, cells: int = 256, repeats: int = 5) -> dict:
    """The measurement (benchmarks/run.py's CIC rows)."""
    import cupy
    import cupyx
    import torch

    import amso_user_example as ue

    box = 1.0
    rng = np.random.default_rng(0)
    host = rng.random((n, 3), dtype=np.float32)
    positions = torch.from_numpy(host).cuda()
    grid = torch.zeros((cells,) * 3, dtype=torch.float64, device="cuda")
    sync = torch.cuda.synchronize

    def amso_kernel():
        grid.zero_()
        ue.deposit(positions, grid, box)

    def torch_index_put():
        grid.zero_()
        flat = grid.view(-1)
        for index, weight in corners(torch, positions, cells, box):
            flat.index_put_((index,), weight, accumulate=True)

    def torch_index_add():
        grid.zero_()
        flat = grid.view(-1)
        for index, weight in corners(torch, positions, cells, box):
            flat.index_add_(0, index, weight)

    import amso

    records = ue.Particles(n)  # the same positions as records: pos, then vel, mass and id
    fields = np.zeros(n, records.dtype)
    fields["pos"] = host
    fields["mass"] = 1.0
    fields["id"] = np.arange(n)
    records.read_numpy_array(fields)
    del fields
    records.move_memory(amso.dlpack.kDLCUDA)

    def amso_records():
        grid.zero_()
        ue.deposit_records(records, grid, box)

    cupy_positions = cupy.asarray(host)
    cupy_grid = cupy.zeros(cells ** 3, dtype=cupy.float64)

    def cupy_scatter_add():
        cupy_grid.fill(0)
        for index, weight in corners(cupy, cupy_positions, cells, box):
            cupyx.scatter_add(cupy_grid, index, weight)

    results = {}
    amso_kernel(); sync()
    reference = grid.clone()
    # An independent check of the kernel: total mass, and NumPy's np.add.at on a subset.
    mass = float(reference.sum())
    subset = host[:100_000]
    numpy_grid = np.zeros(cells ** 3)
    for index, weight in corners(np, subset, cells, box):
        np.add.at(numpy_grid, index, weight)
    small = torch.zeros((cells,) * 3, dtype=torch.float64, device="cuda")
    ue.deposit(torch.from_numpy(subset).cuda(), small, box)
    numpy_error = float(np.abs(small.cpu().numpy().reshape(-1) - numpy_grid).max() / numpy_grid.max())
    for name, run, synchronize in [
        ("amso kernel", amso_kernel, sync), (RECORDS, amso_records, sync), ("torch index_put_", torch_index_put, sync),
        ("torch index_add_", torch_index_add, sync),
        ("cupyx.scatter_add", cupy_scatter_add, cupy.cuda.runtime.deviceSynchronize),
    ]:
        seconds = timed(run, synchronize, repeats)
        got = grid if name != "cupyx.scatter_add" else torch.from_dlpack(cupy_grid).view((cells,) * 3)
        error = float((got - reference).abs().max() / reference.abs().max())
        results[name] = {"seconds": seconds, "particles_per_second": n / seconds, "max_relative_difference": error}
    best_peer = min(v["seconds"] for k, v in results.items() if k not in ("amso kernel", RECORDS))
    ratio = best_peer / results["amso kernel"]["seconds"]
    records_ratio = results[RECORDS]["seconds"] / results["amso kernel"]["seconds"]
    report = {"particles": n, "cells": cells, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cupy": cupy.__version__, "results": results, "speedup_over_best_peer": ratio,
              "records_over_positions": records_ratio,
              "total_mass": mass, "max_relative_difference_vs_numpy_on_100k": numpy_error,
              "fp64_atomics_per_second": 8 * n / results["amso kernel"]["seconds"], "repeats": repeats}
    return report


def markdown(report: dict) -> str:
    """The report as markdown (also rendered by benchmarks/run.py from a saved report)."""
    n, results = report["particles"], report["results"]
    lines = [f"CIC deposit, {n} particles into {report['cells']}^3 float64, {report['gpu']} (median of {report['repeats']})",
             "", "| implementation | ms | particles/s | max rel. diff vs amso |", "|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['seconds'] * 1e3:.2f} | {r['particles_per_second']:.3g} | {r['max_relative_difference']:.1e} |")
    lines += ["", f"amso is {report['speedup_over_best_peer']:.2f}x the fastest peer; "
              f"{report['fp64_atomics_per_second']:.3g} FP64 atomicAdd/s."]
    if "records_over_positions" in report:  # reports before issue 40's records row lack it
        lines += [f"Particles as records (amso's array of 40-byte `particle` structs, `{RECORDS}`) take "
                  f"{report['records_over_positions']:.2f}x the time of float32 (n, 3) positions (`amso kernel`); "
                  "goal: at most 1.5x."]
    lines += [f"Checks: total mass {report['total_mass']:.6g} (particles: {n}); against NumPy's np.add.at on 100,000 "
              f"particles, max relative difference {report['max_relative_difference_vs_numpy_on_100k']:.1e}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--particles", type=int, default=16 << 20)
    parser.add_argument("--cells", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    report = collect(args.particles, args.cells, args.repeats)
    text = markdown(report)
    print(text)
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from output import write
    write(args.out, "bench_cic", report, text)


if __name__ == "__main__":
    main()
