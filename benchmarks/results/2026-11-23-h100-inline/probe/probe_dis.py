import dis, sys, timeit, numpy as np, amso
host = amso.MemArray(64, np.float32); x = np.zeros(64, np.float32)
f = lambda: host.__dlpack__()
g = lambda: x.__dlpack__()
for _ in range(2000): f(); g()
dis.dis(f, adaptive=True); dis.dis(g, adaptive=True)
def paired(calls, number=200_000):
    best = dict.fromkeys(calls, 1e9)
    for _ in range(7):
        for k, c in calls.items():
            best[k] = min(best[k], timeit.timeit(c, number=number) / number * 1e9)
    return {k: round(v, 1) for k, v in best.items()}
bh, bx = host.__dlpack__, x.__dlpack__
print(sys.version)
print(paired({"amso lambda": f, "numpy lambda": g, "amso bound": bh, "numpy bound": bx,
              "amso device": host.__dlpack_device__, "numpy device": x.__dlpack_device__,
              "amso mv": lambda: host.__dlpack__(max_version=(1, 0)), "numpy mv": lambda: x.__dlpack__(max_version=(1, 0))}))
