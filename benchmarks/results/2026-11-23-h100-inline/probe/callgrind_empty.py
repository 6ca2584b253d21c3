import sys, numpy as np, amso
which, N = sys.argv[1], int(sys.argv[2])
f32 = np.float32
calls = {"amso_empty": lambda: amso.empty(256, f32), "np_empty": lambda: np.empty(256, f32), "none": lambda: None}
f = calls[which]
for _ in range(200): f()
for _ in range(N): f()
