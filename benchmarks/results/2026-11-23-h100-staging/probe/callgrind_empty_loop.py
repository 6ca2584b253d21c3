import sys, numpy as np, amso
f32 = np.float32
which, n = sys.argv[1], int(sys.argv[2])
f = {"amso": lambda: amso.empty(256, f32), "amso0": lambda: amso.empty(0, f32), "np": lambda: np.empty(256, f32), "none": lambda: None}[which]
for _ in range(n): f()
