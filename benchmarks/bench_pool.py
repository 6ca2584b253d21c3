"""One pool for every library (docs/memory.md): allocating and freeing through each library's
plug-in into amso's pool, against that library's own pool, for 256 B and 64 MiB blocks; and the
seed's scenario, PyTorch, CuPy, Numba and amso each allocating and freeing 256 MiB in turn,
with the GPU memory held by one amso pool against each library's default pool.

A plug-in must be set before its library's first allocation, so each configuration runs in a
child process that `collect` starts (CuPy and RMM switch within one child: own pool, then
amso's); the figures are gathered here, in run.py's process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SIZES = {"256 B": 256, "64 MiB": 64 << 20}
GOALS = {"torch": 1.2, "cupy": 1.0, "rmm": 1.0}  # amso / own, at most; Numba: own / amso, at least 10

CHILD = """
import gc, json, sys, time
import numpy as np
np.row_stack = np.vstack  # Numba's JIT with NumPy 2.5
import amso

def per_call_us(make, iterations):
    for _ in range(min(iterations, 200)):
        make()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            make()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best * 1e6

SIZES = {"256 B": 256, "64 MiB": 64 << 20}
ITERATIONS = {"256 B": 20000, "64 MiB": 2000}
def rows(make):
    return {label: per_call_us(lambda: make(size), ITERATIONS[label]) for label, size in SIZES.items()}

mode, out = sys.argv[1], {}
if mode in ("torch-own", "torch-amso"):
    import torch
    if mode == "torch-amso":
        torch.cuda.memory.change_current_allocator(amso.allocators.torch_allocator())
    out = rows(lambda size: torch.empty(size, dtype=torch.uint8, device="cuda"))
elif mode == "cupy":
    import cupy as cp
    out["own"] = rows(lambda size: cp.empty(size, cp.uint8))
    cp.cuda.set_allocator(amso.allocators.cupy_malloc)
    out["amso"] = rows(lambda size: cp.empty(size, cp.uint8))
elif mode in ("numba-own", "numba-amso"):
    from numba import cuda
    if mode == "numba-amso":
        cuda.set_memory_manager(amso.allocators.NumbaManager)
    out = rows(lambda size: cuda.device_array(size, np.uint8))
elif mode == "rmm":
    import rmm
    rmm.mr.set_current_device_resource(rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 30))
    out["own"] = rows(lambda size: rmm.DeviceBuffer(size=size))
    rmm.mr.set_current_device_resource(amso.allocators.rmm_resource())
    out["amso"] = rows(lambda size: rmm.DeviceBuffer(size=size))
elif mode in ("scenario-own", "scenario-amso"):
    import torch, cupy as cp
    from numba import cuda
    if mode == "scenario-amso":
        torch.cuda.memory.change_current_allocator(amso.allocators.torch_allocator())
        cuda.set_memory_manager(amso.allocators.NumbaManager)
        cp.cuda.set_allocator(amso.allocators.cupy_malloc)
    block = 256 << 20
    def free_memory():
        torch.cuda.synchronize()
        cuda.synchronize()
        return amso.memory_info()["free"]
    torch.empty(1, device="cuda"); cp.empty(1); cuda.device_array(1); amso.MemArray(1, np.float32, on_device=True)
    gc.collect(); amso.flush_frees()
    baseline = lowest = free_memory()
    for _ in range(3):
        for make in (lambda: torch.empty(block, dtype=torch.uint8, device="cuda"), lambda: cp.empty(block, cp.uint8),
                     lambda: cuda.device_array(block, np.uint8), lambda: amso.empty(block // 4, np.float32, on_device=True)):
            x = make()
            lowest = min(lowest, free_memory())
            del x
            gc.collect(); amso.flush_frees()
    out = {"held_blocks": (baseline - free_memory()) / block, "peak_blocks": (baseline - lowest) / block}
print(json.dumps(out))
"""


def child(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def collect() -> dict:
    cupy, rmm = child("cupy"), child("rmm")
    return {
        "torch": {"own": child("torch-own"), "amso": child("torch-amso")},
        "cupy": {"own": cupy.get("own", cupy), "amso": cupy.get("amso", cupy)},
        "numba": {"own": child("numba-own"), "amso": child("numba-amso")},
        "rmm": {"own": rmm.get("own", rmm), "amso": rmm.get("amso", rmm)},
        "scenario": {"own": child("scenario-own"), "amso": child("scenario-amso")},
    }


LABELS = {
    "torch": ("torch.empty via amso", "torch's caching allocator"),
    "cupy": ("cupy.empty via amso", "CuPy's pool"),
    "numba": ("numba.cuda.device_array via amso", "Numba's cuMemAlloc"),
    "rmm": ("rmm.DeviceBuffer via amso", "RMM's PoolMemoryResource"),
}


def markdown(report: dict) -> str:
    rows = ["| allocate + free | block | amso | peer | amso / peer | goal |", "|---|---|---|---|---|---|"]
    for library, (ours, theirs) in LABELS.items():
        own, amso = report[library]["own"], report[library]["amso"]
        for label in SIZES:
            if label not in own or label not in amso:
                rows.append(f"| {ours} | {label} | {amso.get('error', '?')} | {own.get('error', '?')} | | |")
                continue
            ratio = amso[label] / own[label]
            goal = f"<= {GOALS[library]}x" if library in GOALS else ">= 10x faster"
            met = ratio <= GOALS[library] if library in GOALS else ratio <= 0.1
            rows.append(f"| {ours} | {label} | {amso[label]:.2f} us | {theirs} {own[label]:.2f} us | {ratio:.2f} | "
                        f"{goal}: {'met' if met else 'missed'} |")
    own, amso = report["scenario"]["own"], report["scenario"]["amso"]
    scenario = ("PyTorch, CuPy, Numba and amso each allocating and freeing 256 MiB in turn (3 rounds): GPU memory "
                "held at the peak, in 256 MiB blocks (`cuMemGetInfo`), ")
    if "peak_blocks" in own and "peak_blocks" in amso:
        scenario += (f"one amso pool {amso['peak_blocks']:.2f} (after the rounds {amso['held_blocks']:.2f}), each library's "
                     f"default pool {own['peak_blocks']:.2f} (after {own['held_blocks']:.2f}); goal <= 1.1: "
                     f"{'met' if amso['peak_blocks'] <= 1.1 else 'missed'}.")
    else:
        scenario += f"not measured: {amso.get('error') or own.get('error')}."
    return "\n".join(rows) + "\n\n" + textwrap.fill(scenario, 100) + "\n"


if __name__ == "__main__":
    report = collect()
    print(json.dumps(report, indent=1))
    print(markdown(report))
