"""Instructions per call under callgrind, for the report's profile of paths above their goal:
run once with N=1000 and once with N=6000 calls of one case; (I(6000) - I(1000)) / 5000 is the
cost of one call, start-up excluded. PYTHONHASHSEED=0 keeps the interpreter's own dictionary
lookups the same from run to run: with random seeds they alone move a case by 100 instructions.

    PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=cg.CASE.N python3 benchmarks/callgrind_calls.py CASE N
"""
import sys, numpy as np, amso
import amso_user_example as ue
import tvm_ffi
which = sys.argv[1]
N = int(sys.argv[2])
a0, a1, a2 = (amso.MemArray(64, np.float32) for _ in range(3))
x = np.zeros(64, np.float32)
nop = tvm_ffi.get_global_func("testing.nop")
calls = {
    "amso_dlpack": lambda: a0.__dlpack__(),
    "amso_dlpack_v": lambda: a0.__dlpack__(max_version=(1, 0)),
    "numpy_dlpack": lambda: x.__dlpack__(),
    "numpy_dlpack_v": lambda: x.__dlpack__(max_version=(1, 0)),
    "extract_three": lambda: ue.extract_three(a0, a1, a2),
    "tvm_nop_three": lambda: nop(a0, a1, a2),
    "extract_one": lambda: ue.extract_one(a0),
    "tvm_nop_one": lambda: nop(a0),
    "empty": lambda: None,
}
f = calls[which]
for _ in range(200): f()
def run():
    for _ in range(N): f()
run()
