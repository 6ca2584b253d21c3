"""Per-call costs of functions over arrays, in one process: TVM-FFI's compiled no-op
(`testing.nop`, C++ in the apache-tvm-ffi wheel) called with amso, PyTorch, CuPy and NumPy
arrays, and the user crate's typed-argument `#[pyfunction]`s that do nothing (`extract_one`,
`extract_three`) called with the same PyTorch CUDA tensors. Rows whose peer is missing are
left out and say so in the report."""

from __future__ import annotations

import numpy as np

import amso
from protocols import paired

N = 64


def arrays() -> dict[str, list]:
    """Three arrays per producer, of 64 float32 (device arrays where a GPU is present)."""
    found = {"numpy (host)": [np.zeros(N, np.float32) for _ in range(3)],
             "amso (host)": [amso.MemArray(N, np.float32) for _ in range(3)]}
    if amso.cuda.is_available():
        found["amso"] = [amso.MemArray(N, np.float32, on_device=True) for _ in range(3)]
        try:
            import torch

            found["torch"] = [torch.zeros(N, device="cuda") for _ in range(3)]
        except ImportError:
            pass
        try:
            import cupy

            found["cupy"] = [cupy.zeros(N, np.float32) for _ in range(3)]
        except ImportError:
            pass
    return found


def collect() -> dict:
    report: dict = {"tvm_ffi": {}, "typed_args": {}, "missing": []}
    producers = arrays()
    try:
        import tvm_ffi

        nop = tvm_ffi.get_global_func("testing.nop")
        calls = {}
        for name, (a, b, c) in producers.items():
            calls[name, "1 array"] = lambda a=a: nop(a)
            calls[name, "3 arrays"] = lambda a=a, b=b, c=c: nop(a, b, c)
        for (name, arity), value in paired(calls, 20_000).items():
            report["tvm_ffi"].setdefault(name, {})[arity] = value
    except (ImportError, ValueError) as error:  # not installed, or a build without its testing functions
        report["missing"].append(f"TVM-FFI rows: {error!r}")
        nop = None
    try:
        import amso_user_example as ue
    except ImportError as error:
        report["missing"].append(f"typed-argument rows: {error!r}")
        return report
    names = [name for name in ("torch", "amso", "numpy (host)", "amso (host)") if name in producers]
    calls = {}
    for name in names:
        a, b, c = producers[name]
        calls[name, "1 array"] = lambda a=a: ue.extract_one(a)
        calls[name, "3 arrays"] = lambda a=a, b=b, c=c: ue.extract_three(a, b, c)
        if nop is not None:  # timed again beside the typed calls: a ratio comes from one set of rounds
            calls[name, "TVM-FFI 1 array"] = lambda a=a: nop(a)
            calls[name, "TVM-FFI 3 arrays"] = lambda a=a, b=b, c=c: nop(a, b, c)
    timed = paired(calls, 20_000)
    for name in names:
        row = {"amso typed args": {arity: timed[name, arity] for arity in ("1 array", "3 arrays")}}
        if nop is not None:
            row["TVM-FFI"] = {arity: timed[name, f"TVM-FFI {arity}"] for arity in ("1 array", "3 arrays")}
        report["typed_args"][name] = row
    return report


def markdown(report: dict) -> str:
    lines = ["TVM-FFI's compiled no-op (`testing.nop`) called with each producer's float32 arrays (ns per call):", "",
             "| arguments | 1 array | 3 arrays | 3 - 1 |", "|---|---|---|---|"]
    for name, row in report["tvm_ffi"].items():
        lines.append(f"| {name} | {row['1 array']:.0f} | {row['3 arrays']:.0f} | {row['3 arrays'] - row['1 array']:.0f} |")
    lines += ["", "A Rust `#[pyfunction]` over typed arguments (`ArrayRef<f32, 1>`) that does nothing, against TVM-FFI's "
              "no-op with the same arrays (ns per call; goal: ratio <= 1.0):", "",
              "| arrays | amso, 1 | TVM-FFI, 1 | ratio | amso, 3 | TVM-FFI, 3 | ratio |", "|---|---|---|---|---|---|---|"]
    for name, row in report["typed_args"].items():
        ours, theirs = row["amso typed args"], row.get("TVM-FFI")
        cells = []
        for k in ("1 array", "3 arrays"):
            cells += [f"{ours[k]:.0f}", f"{theirs[k]:.0f}" if theirs else "-",
                      f"{ours[k] / theirs[k]:.2f}" if theirs else "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [f"Not measured: {m}" for m in report["missing"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(collect()))
