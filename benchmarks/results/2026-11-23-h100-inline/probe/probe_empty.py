"""Where amso.empty(256, float32, on_device=True) spends its time, against floors in one process."""
import sys, json, timeit
import numpy as np, cupy as cp, amso
sys.path.insert(0, "benchmarks")
from protocols import paired
f32 = np.float32
rt = cp.cuda.runtime
def driver_pair():
    p = rt.mallocAsync(1024, 0)
    rt.freeAsync(p, 0)
calls = {
    "amso.empty host": lambda: amso.empty(256, f32),
    "amso.empty device": lambda: amso.empty(256, f32, on_device=True),
    "np.empty": lambda: np.empty(256, f32),
    "cupy.empty": lambda: cp.empty(256, f32),
    "cudaMallocAsync+cudaFreeAsync (CuPy's binding)": driver_pair,
    "cudaGetDevice (CuPy's binding)": rt.getDevice,
}
print(json.dumps({k: round(v, 1) for k, v in paired(calls, 20_000).items()}))
