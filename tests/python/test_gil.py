"""No driver call with the GIL held: a host function queued on a CUDA stream whose callback is
Python code (ctypes takes the GIL to run it) must be able to run while amso waits for that
stream, or for the whole device. With the GIL held through the wait, the process deadlocks:
each scenario runs in a child process with a timeout, so a hang fails the test instead of
hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import amso

pytestmark = pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")

# Queues, on `stream`, a host function that runs Python code: it needs the GIL, and the stream
# cannot move past it until it has run.
PRELUDE = textwrap.dedent("""
    import ctypes, threading, numpy as np, amso
    cuda = ctypes.CDLL("libcuda.so.1")
    HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    cuda.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, HOST_FN, ctypes.c_void_p]
    ran = []
    callback = HOST_FN(lambda _: ran.append(threading.get_ident()))

    def queue_python_host_function(stream):
        context, popped = ctypes.c_void_p(), ctypes.c_void_p()
        assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0
        assert cuda.cuCtxPushCurrent_v2(context) == 0
        try:
            status = cuda.cuLaunchHostFunc(ctypes.c_void_p(stream), callback, None)
            assert status == 0, f"cuLaunchHostFunc returned {status}"
        finally:
            cuda.cuCtxPopCurrent_v2(ctypes.byref(popped))
""")

SCENARIOS = {
    # Element access waits for the array's stream (a synchronous read).
    "element-access": """
        a = amso.MemArray(4, np.float32, on_device=True)
        queue_python_host_function(a.__cuda_array_interface__["stream"])
        assert a[1] == 0.0
    """,
    # A free of memory a consumer was given waits for the whole device (cuCtxSynchronize) on
    # the device waiter's thread, which holds no GIL; a flush waits for that batch, and must
    # let the host function take the GIL meanwhile.
    "free-of-shared-memory": """
        a = amso.MemArray(1 << 20, np.float32, on_device=True)
        view = amso.from_dlpack(a)  # the memory is handed to a consumer: freed after the device waits
        queue_python_host_function(a.__cuda_array_interface__["stream"])
        del a, view
        amso.flush_frees()
    """,
    # Copies out of the device wait for its stream.
    "to-numpy-and-copies": """
        a = amso.MemArray((64, 64), np.float64, on_device=True)
        queue_python_host_function(a.__cuda_array_interface__["stream"])
        assert not a.copy().to_numpy().any()
    """,
    # A new device array while a host function holds up the stream it zeroes on.
    "new-device-arrays": """
        side = amso.MemArray(4, np.float32, on_device=True).__cuda_array_interface__["stream"]
        with amso.cuda.stream(side):
            queue_python_host_function(side)
            arrays = [amso.MemArray(256, np.float32, on_device=True) for _ in range(8)]
            assert not arrays[-1].to_numpy().any()
    """,
}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=list(SCENARIOS))
def test_a_python_host_function_runs_while_amso_waits_in_the_driver(scenario):
    script = PRELUDE + textwrap.dedent(SCENARIOS[scenario]) + "\nassert ran, 'the host function never ran'\nprint('ok')\n"
    try:
        timeout = float(os.environ.get("AMSO_DEADLOCK_TIMEOUT", "60"))
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{scenario}: deadlocked (a driver wait with the GIL held, behind a host function that needs it)")
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr
