#!/usr/bin/env python3
"""Issue 15's goal rows across several one-process reports (report.json files of
benchmarks/run.py), as a markdown table: each run's value and whether it meets its goal. The
machines the GPU tool lends differ from call to call, so a ratio near its goal is only read
together with its spread.

    python3 benchmarks/goal_spread.py RUN_DIR/report.json [...] > spread.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def goals(report: dict) -> list[tuple[str, float, str, bool]]:
    """(goal row, value, goal text, met) for one report."""
    protocols, calls, transfers = report["protocols"], report["calls"], report["transfers"]
    tvm, typed = calls["tvm_ffi"], calls["typed_args"]["torch"]
    host = protocols["__dlpack__() host"]
    versioned = protocols["__dlpack__(max_version=(1, 0)) host"]
    cai = protocols["__cuda_array_interface__ device"]
    pageable, pinned = transfers["pageable"], transfers["pinned"]
    empty = report["alloc"]["alloc_free_us"]["amso.empty(256, float32, on_device=True)"]
    rows = [
        ("host `__dlpack__()` / NumPy", host["amso"] / host["numpy"], "<= 1.0"),
        ("host `__dlpack__(max_version)` / NumPy", versioned["amso"] / versioned["numpy"], "<= 1.0"),
        ("CAI / CuPy", cai["amso"] / cai["cupy"], "<= 0.3"),
        ("TVM-FFI, 1 CUDA array / torch", tvm["amso"]["1 array"] / tvm["torch"]["1 array"], "<= 1.0"),
        ("TVM-FFI, 3 CUDA arrays / torch", tvm["amso"]["3 arrays"] / tvm["torch"]["3 arrays"], "<= 1.0"),
        ("typed args, 1 torch tensor / TVM-FFI",
         typed["amso typed args"]["1 array"] / typed["TVM-FFI"]["1 array"], "<= 1.0"),
        ("typed args, 3 torch tensors / TVM-FFI",
         typed["amso typed args"]["3 arrays"] / typed["TVM-FFI"]["3 arrays"], "<= 1.0"),
        ("`amso.empty` (us)", empty, "<= 1.0"),
        ("pageable H2D / pinned", pageable["amso_h2d_GBps"] / pinned["amso_h2d_GBps"], ">= 0.8"),
        ("pageable D2H / pinned", pageable["amso_d2h_GBps"] / pinned["amso_d2h_GBps"], ">= 0.8"),
        ("CIC / best peer", report["cic"]["speedup_over_best_peer"], ">= 2.0"),
    ]
    out = []
    for name, value, goal in rows:
        bound = float(goal.split()[1])
        out.append((name, value, goal, value <= bound if goal.startswith("<=") else value >= bound))
    return out


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]]
    if not paths:
        sys.exit(__doc__)
    reports = [json.loads(p.read_text()) for p in paths]
    runs = [goals(report) for report in reports]
    numpy_ns = [report["protocols"]["__dlpack__() host"]["numpy"] for report in reports]
    print("| goal | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | goal | met in |")
    print("|---|" + "---|" * len(runs) + "---|---|")
    for index, (name, _, goal, _) in enumerate(runs[0]):
        cells = [f"{run[index][1]:.2f}{'' if run[index][3] else ' ✗'}" for run in runs]
        met = sum(run[index][3] for run in runs)
        print(f"| {name} | " + " | ".join(cells) + f" | {goal} | {met} of {len(runs)} |")
    print("| NumPy `__dlpack__()` (ns): the host's speed | " + " | ".join(f"{ns:.0f}" for ns in numpy_ns) + " | | |")
    print()
    for i, path in enumerate(paths):
        print(f"- run {i + 1}: `{path}`")


if __name__ == "__main__":
    main()
