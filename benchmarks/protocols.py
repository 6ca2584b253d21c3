"""Python-level protocol costs, amso vs its peers in one process: `__dlpack__` (with and without
`max_version`), `__cuda_array_interface__`, and `from_dlpack` of an amso array vs of the
consumer's own arrays. Host rows run anywhere; device rows need a GPU and the peer."""

from __future__ import annotations

import timeit

import numpy as np

import amso


def ns(call, number: int = 100_000) -> float:
    call()
    return min(timeit.repeat(call, number=number, repeat=7)) / number * 1e9


def collect() -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    host = amso.MemArray(64, np.float32)
    x = np.zeros(64, np.float32)
    rows["__dlpack__() host"] = {"amso": ns(lambda: host.__dlpack__()), "numpy": ns(lambda: x.__dlpack__())}
    rows["__dlpack__(max_version=(1, 0)) host"] = {
        "amso": ns(lambda: host.__dlpack__(max_version=(1, 0))),
        "numpy": ns(lambda: x.__dlpack__(max_version=(1, 0))),
    }
    rows["np.from_dlpack(x) host"] = {"amso": ns(lambda: np.from_dlpack(host)), "numpy": ns(lambda: np.from_dlpack(x))}
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
    rows["__dlpack__() device"] = {"amso": ns(lambda: device.__dlpack__())}
    rows["__dlpack__(max_version=(1, 0)) device"] = {"amso": ns(lambda: device.__dlpack__(max_version=(1, 0)))}
    rows["__cuda_array_interface__ device"] = {"amso": ns(lambda: device.__cuda_array_interface__)}
    for name, peer in peers.items():
        rows["__dlpack__() device"][name] = ns(lambda p=peer: p.__dlpack__())
        rows["__dlpack__(max_version=(1, 0)) device"][name] = ns(lambda p=peer: p.__dlpack__(max_version=(1, 0)))
        rows["__cuda_array_interface__ device"][name] = ns(lambda p=peer: p.__cuda_array_interface__)
    if "cupy" in peers:
        cp = __import__("cupy")
        rows["cupy.from_dlpack(x) device"] = {"amso": ns(lambda: cp.from_dlpack(device), 20_000), "cupy": ns(lambda: cp.from_dlpack(peers["cupy"]), 20_000)}
    if "torch" in peers:
        torch = __import__("torch")
        rows["torch.from_dlpack(x) device"] = {"amso": ns(lambda: torch.from_dlpack(device), 20_000), "torch": ns(lambda: torch.from_dlpack(peers["torch"]), 20_000)}
    return rows


def markdown(rows: dict[str, dict[str, float]]) -> str:
    peers = sorted({k for r in rows.values() for k in r if k != "amso"})
    lines = ["| call | amso (ns) | " + " | ".join(f"{p} (ns)" for p in peers) + " | amso / best peer |", "|---" * (len(peers) + 3) + "|"]
    for call, values in rows.items():
        others = [values[p] for p in peers if p in values]
        ratio = f"{values['amso'] / min(others):.2f}" if others else "-"
        cells = [f"{values[p]:.0f}" if p in values else "-" for p in peers]
        lines.append(f"| `{call}` | {values['amso']:.0f} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(collect()))
