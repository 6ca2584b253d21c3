import numpy as np, amso, traceback
K = amso.dlpack.kDLCUDA
def step(name, f):
    try: r = f(); print("ok ", name, r)
    except Exception as e: print("ERR", name, type(e).__name__, e)
a = amso.MemArray(1000, np.float64); a.read_numpy_array(np.arange(1000.0))
step("to dev0", lambda: a.move_memory(K, 0))
step("to dev1", lambda: a.move_memory(K, 1))
b = amso.MemArray(1000, np.float64, device_id=1)
step("host->dev1", lambda: b.move_memory(K, 1))
step("b read", lambda: b[3])
c = amso.MemArray(1000, np.float64)
step("to dev0", lambda: c.move_memory(K, 0))
step("c to host", lambda: c.move_memory(1))
step("c to dev1", lambda: c.move_memory(K, 1))
d = amso.MemArray(10, np.float64, device_id=1, on_device=True)
step("on_device dev1", lambda: d[0])
