"""One process: host __dlpack__ per call, amso vs NumPy (min of 7 x 100k, as benchmarks/protocols.py)."""
import sys, timeit, json
import numpy as np, amso
def ns(call, number=100_000):
    call()
    return min(timeit.repeat(call, number=number, repeat=7)) / number * 1e9
host = amso.MemArray(64, np.float32); x = np.zeros(64, np.float32)
r = {
  "plain": (ns(lambda: host.__dlpack__()), ns(lambda: x.__dlpack__())),
  "max_version": (ns(lambda: host.__dlpack__(max_version=(1, 0))), ns(lambda: x.__dlpack__(max_version=(1, 0)))),
  "device_query": (ns(lambda: host.__dlpack_device__()), ns(lambda: x.__dlpack_device__())),
}
print(sys.argv[1], json.dumps({k: [round(a, 1), round(b, 1), round(a / b, 3)] for k, (a, b) in r.items()}))
