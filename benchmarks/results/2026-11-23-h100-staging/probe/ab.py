"""One process: amso.empty decomposition (paired rounds) and amso's pageable/pinned transfers."""
import sys, json
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp, amso, bench_cuda
from protocols import paired
f32 = np.float32
rt = cp.cuda.runtime
calls = {
    "amso.empty host": lambda: amso.empty(256, f32),
    "amso.empty device": lambda: amso.empty(256, f32, on_device=True),
    "np.empty": lambda: np.empty(256, f32),
    "cupy.empty": lambda: cp.empty(256, f32),
}
empty = {k: round(v, 1) for k, v in paired(calls, 20_000).items()}
t = bench_cuda.transfers(cp, 256 << 20, 20)
pin = t["pinned"]
row = {
    "H2D/pinned": round(t["pageable"]["amso_h2d_GBps"] / pin["amso_h2d_GBps"], 3),
    "D2H/pinned": round(t["pageable"]["amso_d2h_GBps"] / pin["amso_d2h_GBps"], 3),
    "pageable": {k: round(v, 1) for k, v in t["pageable"].items()},
    "pinned": {k: round(v, 1) for k, v in pin.items()},
}
print(json.dumps({"site": sys.argv[1], "empty": empty, "transfers": row}))
