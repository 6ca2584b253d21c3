"""Python-level protocol costs, amso vs its peers in one process: `__dlpack__` (with and without
`max_version`), `__cuda_array_interface__`, and `from_dlpack` of an amso array vs of the
consumer's own arrays. Host rows run anywhere; device rows need a GPU and the peer."""

from __future__ import annotations

import math
import timeit
from typing import Callable, TypeVar

import numpy as np

import amso

K = TypeVar("K")


def paired(calls: dict[K, Callable[[], object]], number: int = 100_000) -> dict[K, float]:
    """Nanoseconds per call of each of `calls`: the best of 7 rounds, with every call timed once
    in each round. The contenders of a row share each round, so they see the same machine: the
    lent hosts switch between fast and slow phases lasting seconds, and with one contender's 7
    rounds timed before the other's, the `max_version` ratio read 0.75 and 2.89 in two reports
    taken minutes apart on one machine (2026-11-23)."""
    for call in calls.values():
        call()
    best = dict.fromkeys(calls, math.inf)
    for _ in range(7):
        for key, call in calls.items():
            best[key] = min(best[key], timeit.timeit(call, number=number) / number * 1e9)
    return best


def collect() -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    host = amso.MemArray(64, np.float32)
    x = np.zeros(64, np.float32)
    rows["__dlpack__() host"] = paired({"amso": lambda: host.__dlpack__(), "numpy": lambda: x.__dlpack__()})
    rows["__dlpack__(max_version=(1, 0)) host"] = paired(
        {"amso": lambda: host.__dlpack__(max_version=(1, 0)), "numpy": lambda: x.__dlpack__(max_version=(1, 0))}
    )
    rows["np.from_dlpack(x) host"] = paired({"amso": lambda: np.from_dlpack(host), "numpy": lambda: np.from_dlpack(x)})
    if not amso.cuda.is_available():
        return rows
    device = amso.MemArray(64, np.float32, on_device=True)
    peers = {}
    try:
        import cupy as cp

        peers["cupy"] = cp.zeros(64, np.float32)
    except ImportError:
        pass
    try:
        import torch

        peers["torch"] = torch.zeros(64, device="cuda")
    except ImportError:
        pass
    arrays = {"amso": device, **peers}
    rows["__dlpack__() device"] = paired({name: lambda a=a: a.__dlpack__() for name, a in arrays.items()})
    rows["__dlpack__(max_version=(1, 0)) device"] = paired(
        {name: lambda a=a: a.__dlpack__(max_version=(1, 0)) for name, a in arrays.items()}
    )
    rows["__cuda_array_interface__ device"] = paired(
        {name: lambda a=a: a.__cuda_array_interface__ for name, a in arrays.items()}
    )
    if "cupy" in peers:
        cp = __import__("cupy")
        rows["cupy.from_dlpack(x) device"] = paired(
            {"amso": lambda: cp.from_dlpack(device), "cupy": lambda: cp.from_dlpack(peers["cupy"])}, 20_000
        )
    if "torch" in peers:
        torch = __import__("torch")
        rows["torch.from_dlpack(x) device"] = paired(
            {"amso": lambda: torch.from_dlpack(device), "torch": lambda: torch.from_dlpack(peers["torch"])}, 20_000
        )
    return rows


def spread_cell(ratios: list[float] | None) -> str:
    """A row's ratio over the processes it was timed in: lowest-highest."""
    return f" {min(ratios):.2f}-{max(ratios):.2f} |" if ratios else " - |"


def markdown(rows: dict[str, dict[str, float]], spread: dict[str, list[float]] | None = None) -> str:
    peers = sorted({k for r in rows.values() for k in r if k != "amso"})
    lines = ["| call | amso (ns) | " + " | ".join(f"{p} (ns)" for p in peers) + " | amso / best peer |"
             + (" spread |" if spread else ""), "|---" * (len(peers) + 3 + bool(spread)) + "|"]
    for call, values in rows.items():
        others = [values[p] for p in peers if p in values]
        ratio = f"{values['amso'] / min(others):.2f}" if others else "-"
        cells = [f"{values[p]:.0f}" if p in values else "-" for p in peers]
        lines.append(f"| `{call}` | {values['amso']:.0f} | " + " | ".join(cells) + f" | {ratio} |"
                     + (spread_cell(spread.get(call)) if spread else ""))
    lines += ["", "ns per call, every contender timed in the same rounds (goal: amso / best peer <= 1.0; on the host, "
              "NumPy's own arrays are the peer)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(collect()))
