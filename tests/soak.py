#!/usr/bin/env python3
"""Leak soak: N cycles of create / export (DLPack capsule consumed by NumPy, the C handle and
its getters, with a GPU the interface dict and a device DLPack export) / import (amso.from_dlpack
of NumPy memory) / delete. Process RSS after the cycles must stay within 1% of RSS after a
warm-up (allocator pools and caches filled), and device memory in use must return to its
start. Prints one JSON line; exit status 1 when a bound is broken.

    python3 tests/soak.py --cycles 1000000        # the issue's soak (tens of seconds)
    python3 tests/soak.py --cycles 20000          # the CI smoke (tests/python/test_soak.py)
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import time

import numpy as np

import amso
import amso._amso as _amso


class CApi(ctypes.Structure):
    handle = ctypes.c_void_p
    _fields_ = [
        ("version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32),
        ("header_version", ctypes.c_uint32), ("header_size", ctypes.c_uint32),
        ("get_handle", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))),
        ("data", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))),
        ("ndim", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32))),
        ("size", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))),
    ]


def c_api() -> CApi:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return CApi.from_address(get(_amso._C_API, b"amso._amso._C_API"))


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cycle(api: CApi, gpu: bool, source: np.ndarray) -> None:
    a = amso.MemArray((8, 4), np.float32)
    a[1, 2] = 3.0
    view = np.from_dlpack(a)  # DLPack export, consumed by NumPy
    assert view[1, 2] == 3.0
    handle, n = ctypes.c_void_p(), ctypes.c_int64()
    assert api.get_handle(a, ctypes.byref(handle)) == 0 and api.size(handle, ctypes.byref(n)) == 0 and n.value == 32
    b = amso.from_dlpack(source)  # import of NumPy memory
    assert b[3] == source[3]
    if gpu:
        a.move_memory(amso.dlpack.kDLCUDA)
        interface = a.__cuda_array_interface__
        assert interface["shape"] == (8, 4)
        capsule = a.__dlpack__(max_version=(1, 0))  # a device export never consumed
        del capsule, interface
    del view, a, b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--tolerance", type=float, default=0.01)
    args = parser.parse_args()
    api = c_api()
    gpu = amso.cuda.is_available()
    source = np.arange(16, dtype=np.float64)
    for _ in range(args.warmup):
        cycle(api, gpu, source)
    gc.collect()
    if gpu:
        amso.flush_frees()
        device_start = amso.memory_info()["in_use"]
    rss_start = rss_bytes()
    started = time.monotonic()
    for _ in range(args.cycles):
        cycle(api, gpu, source)
    seconds = time.monotonic() - started
    gc.collect()
    rss_end = rss_bytes()
    report = {
        "cycles": args.cycles, "seconds": round(seconds, 1), "gpu": gpu,
        "rss_start_mib": round(rss_start / 2**20, 2), "rss_end_mib": round(rss_end / 2**20, 2),
        "rss_growth": round((rss_end - rss_start) / rss_start, 5),
    }
    ok = rss_end <= rss_start * (1 + args.tolerance)
    if gpu:
        amso.flush_frees()
        device_end = amso.memory_info()["in_use"]
        report.update(device_in_use_start=device_start, device_in_use_end=device_end)
        ok = ok and device_end == device_start
    report["ok"] = ok
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
