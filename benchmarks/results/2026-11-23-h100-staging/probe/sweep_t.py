import sys, json
sys.path.insert(0, "benchmarks")
import cupy as cp, bench_cuda
t = bench_cuda.transfers(cp, 256 << 20, 20)
pin = t["pinned"]
print(json.dumps({"v": sys.argv[1], "H2D": round(t["pageable"]["amso_h2d_GBps"] / pin["amso_h2d_GBps"], 3),
                  "D2H": round(t["pageable"]["amso_d2h_GBps"] / pin["amso_d2h_GBps"], 3),
                  "GBps": [round(t["pageable"]["amso_h2d_GBps"], 1), round(t["pageable"]["amso_d2h_GBps"], 1)]}))
