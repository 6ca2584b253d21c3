"""Serialization at memory speed, amso against its peers in one process (best of 3):
- host: a 256 MiB float32 protocol-5 round trip (dumps with buffer_callback, loads with the
  buffers), amso against NumPy (goal: amso at most NumPy's + 1 ms);
- device: the same for a device array, amso against CuPy (goal: <= 1.0x), and dumps alone;
- sharing: opening a shared 1 GiB device array in a second process, amso's handle against
  torch.multiprocessing's pickled CUDA tensor (goal: <= 1.0x), timed in that process from the
  handle's bytes to an array it can use.

    PYTHONPATH=... python3 benchmarks/bench_pickle.py
"""

from __future__ import annotations

import gc
import multiprocessing
import pickle
import time

import numpy as np

import amso

MIB = 1 << 20


def best(function, repeat: int = 3) -> float:
    """The best of `repeat` runs of `function()`, in milliseconds."""
    times = []
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times) * 1e3


def round_trip(array, synchronize=lambda: None):
    buffers = []
    payload = pickle.dumps(array, protocol=5, buffer_callback=buffers.append)
    back = pickle.loads(payload, buffers=buffers)
    synchronize()
    return back


def host_rows(nbytes: int) -> dict:
    mine = amso.MemArray(nbytes // 4, np.float32)
    theirs = np.zeros(nbytes // 4, np.float32)
    return {"amso_ms": best(lambda: round_trip(mine)), "numpy_ms": best(lambda: round_trip(theirs))}


def device_rows(nbytes: int) -> dict:
    import cupy

    mine = amso.MemArray(nbytes // 4, np.float32, on_device=True)
    theirs = cupy.zeros(nbytes // 4, cupy.float32)
    sync = cupy.cuda.Device().synchronize

    def dumps(array):
        return pickle.dumps(array, protocol=5, buffer_callback=[].append)

    return {
        "amso_ms": best(lambda: round_trip(mine, sync)),
        "cupy_ms": best(lambda: round_trip(theirs, sync)),
        "amso_dumps_ms": best(lambda: dumps(mine)),
        "cupy_dumps_ms": best(lambda: dumps(theirs)),
    }


def _open_amso(connection):
    import amso  # noqa: F401 - the classes, for opening

    while (message := connection.recv()) is not None:
        started = time.perf_counter()
        array = amso.cuda.SharedHandle.from_bytes(message).open()
        array.__cuda_array_interface__  # usable: its device address
        elapsed = time.perf_counter() - started
        del array
        connection.send(elapsed)


def _open_torch(connection):
    from multiprocessing.reduction import ForkingPickler

    import torch

    torch.cuda.init()
    while (message := connection.recv()) is not None:
        started = time.perf_counter()
        tensor = ForkingPickler.loads(message)
        tensor.data_ptr()
        elapsed = time.perf_counter() - started
        del tensor
        connection.send(elapsed)


def share_rows(nbytes: int, repeat: int = 10) -> dict:
    """Opening a shared array in a second process, a fresh export each time (a process maps a
    handle once; reopening one is a cache hit for both libraries)."""
    import io
    from multiprocessing.reduction import ForkingPickler

    import torch

    spawn = multiprocessing.get_context("spawn")
    results = {}
    for name, target in (("amso", _open_amso), ("torch", _open_torch)):
        mine, theirs = spawn.Pipe()
        process = spawn.Process(target=target, args=(theirs,))
        process.start()
        times = []
        for _ in range(repeat + 1):  # the first opens the process's CUDA context: not counted
            if name == "amso":
                array = amso.MemArray(nbytes // 4, np.float32, on_device=True, shareable=True)
                mine.send(bytes(array.share()))
            else:
                array = torch.zeros(nbytes // 4, dtype=torch.float32, device="cuda")
                buffer = io.BytesIO()
                ForkingPickler(buffer, 5).dump(array)
                mine.send(buffer.getvalue())
            times.append(mine.recv())
            del array
            gc.collect()
            if name == "amso":
                amso.cuda.collect_shared()
        mine.send(None)
        process.join(60)
        results[f"{name}_open_ms"] = min(times[1:]) * 1e3
    return results


def collect() -> dict:
    report = {"host_MiB": 256, "host": host_rows(256 * MIB)}
    if amso.cuda.is_available():
        report["device_MiB"] = 256
        report["device"] = device_rows(256 * MIB)
        try:
            report["share_MiB"] = 1024
            report["share"] = share_rows(1024 * MIB)
        except ImportError:  # no torch: no peer for the sharing row
            report.pop("share_MiB")
    return report


def markdown(report: dict) -> str:
    host = report["host"]
    lines = ["| round trip (protocol 5, out of band) | amso (ms) | peer (ms) | ratio / goal |", "|---|---|---|---|",
             f"| host, {report['host_MiB']} MiB float32 | {host['amso_ms']:.2f} | NumPy {host['numpy_ms']:.2f} | "
             f"+{host['amso_ms'] - host['numpy_ms']:.2f} ms (goal: <= +1 ms) |"]
    if "device" in report:
        d = report["device"]
        lines += [f"| device, {report['device_MiB']} MiB | {d['amso_ms']:.1f} | CuPy {d['cupy_ms']:.1f} | "
                  f"{d['amso_ms'] / d['cupy_ms']:.2f}x (goal: <= 1.0x) |",
                  f"| device, dumps only | {d['amso_dumps_ms']:.1f} | CuPy {d['cupy_dumps_ms']:.1f} | "
                  f"{d['amso_dumps_ms'] / d['cupy_dumps_ms']:.2f}x |"]
    if "share" in report:
        s = report["share"]
        lines += ["", "| opening a shared device array in a second process | amso (ms) | torch.multiprocessing (ms) | ratio |",
                  "|---|---|---|---|",
                  f"| {report['share_MiB']} MiB float32 | {s['amso_open_ms']:.2f} | {s['torch_open_ms']:.2f} | "
                  f"{s['amso_open_ms'] / s['torch_open_ms']:.2f}x (goal: <= 1.0x) |"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(collect()))
