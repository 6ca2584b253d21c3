"""Rust functions inside compiled graphs (issue 58), in one process: the user crate's `drift`
op (`#[amso_macros::op]`) under `jax.jit` against the same formula as a hand-written C++ XLA FFI
handler (`xla_peer/drift.cu`, the typed FFI of `xla/ffi/api/ffi.h`, built here with nvcc against
`jax.ffi.include_dir()`), and against JAX's own elementwise ops (reported); under
`torch.compile`, `amso.ops.torch` against the same op written with `torch.library.custom_op` in
Python around the same eager function.

Each row is the time of one call of the op, from a compiled function that calls it `CALLS` times
in a chain (`jax.lax.fori_loop`; an unrolled loop for Dynamo), so what is timed is the call
inside the compiled graph, not the dispatch of the graph. Results are checked against each other.

    python3 benchmarks/bench_ops.py          # 5 fresh processes, medians and spreads
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CALLS = 100
BOX, DT = 10.0, 0.01
SIZES = (64, 1 << 20)  # particles (rows of x, y, z): the call itself, then the work (CUDA only: on
# the host, 100 chained calls over 1M particles take seconds, and the row would time the loop)


def median_seconds(run, repeats: int = 15) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def peer_library(jax) -> ctypes.CDLL:
    """The C++ handlers, built once per jaxlib (the header's version is compiled in)."""
    include = jax.ffi.include_dir()
    source = HERE / "xla_peer" / "drift.cu"
    key = hashlib.sha256(source.read_bytes() + include.encode()).hexdigest()[:16]
    library = Path(tempfile.gettempdir()) / f"amso_xla_peer_{key}.so"
    if not library.exists():
        built = library.with_suffix(".building.so")
        if shutil.which("nvcc"):
            command = ["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC"]
        else:  # the host handler only
            command = ["c++", "-O3", "-std=c++17", "-shared", "-fPIC", "-x", "c++"]
        subprocess.run([*command, "-I", include, str(source), "-o", str(built)], check=True)
        built.rename(library)
    return ctypes.cdll.LoadLibrary(str(library))


def jax_rows() -> dict[str, dict[str, float]]:
    import jax
    import jax.numpy as jnp

    import amso.ops
    import amso_user_example as ext

    peer = peer_library(jax)
    jax.ffi.register_ffi_target("amso_bench_peer_drift", jax.ffi.pycapsule(peer.peer_drift_host), platform="cpu")
    if hasattr(peer, "peer_drift_cuda"):
        jax.ffi.register_ffi_target("amso_bench_peer_drift", jax.ffi.pycapsule(peer.peer_drift_cuda), platform="CUDA")
    amso_drift = amso.ops.jax(ext.drift)

    def peer_drift(x, v, dt, box_size):
        call = jax.ffi.ffi_call("amso_bench_peer_drift", jax.ShapeDtypeStruct(x.shape, x.dtype))
        return call(x, v, dt=np.float64(dt), box_size=np.float64(box_size))

    def native_drift(x, v, dt, box_size):
        moved = jnp.fmod(x + dt * v, box_size)
        return jnp.where(moved < 0, moved + box_size, moved)

    def chained(op):
        @jax.jit
        def run(x, v):
            return jax.lax.fori_loop(0, CALLS, lambda _, x: op(x, v, DT, BOX), x)

        return run

    rows: dict[str, dict[str, float]] = {}
    platforms = ["cpu"] + (["gpu"] if any(d.platform == "gpu" for d in jax.devices()) else [])
    for platform in platforms:
        device = jax.devices(platform)[0]
        for n in SIZES if platform == "gpu" else SIZES[:1]:
            rng = np.random.default_rng(n)
            x = jax.device_put((rng.random((n, 3)) * BOX).astype(np.float32), device)
            v = jax.device_put(rng.standard_normal((n, 3)).astype(np.float32), device)
            runs = {name: chained(op) for name, op in (("amso", amso_drift), ("C++ handler", peer_drift),
                                                         ("JAX ops", native_drift))}
            results = {name: np.asarray(run(x, v)) for name, run in runs.items()}  # compiled, and checked
            np.testing.assert_array_equal(results["amso"], results["C++ handler"])
            np.testing.assert_allclose(results["amso"], results["JAX ops"], atol=1e-3)
            times = {name: median_seconds(lambda run=run: run(x, v).block_until_ready()) / CALLS
                     for name, run in runs.items()}
            where = "CUDA" if platform == "gpu" else "CPU"
            rows[f"jax.jit, {where}: drift of {n} particles, per call, against a C++ XLA FFI handler"] = {
                "amso": times["amso"], "C++ handler": times["C++ handler"]}
            rows[f"jax.jit, {where}: drift of {n} particles, per call, against JAX's own ops (reported)"] = {
                "amso": times["amso"], "JAX ops": times["JAX ops"]}
    return rows


def torch_rows() -> dict[str, dict[str, float]]:
    import torch

    import amso.ops
    import amso_user_example as ext

    if not torch.cuda.is_available():
        return {}
    amso_drift = amso.ops.torch(ext.drift)

    # The glue a user writes today: a custom op in Python around the same eager function (its
    # schema given, as this module's annotations are strings).
    peer_op = torch.library.custom_op(
        "amso_bench::drift",
        lambda positions, velocities, moved, dt, box_size: ext.drift(positions, velocities, moved, dt, box_size),
        mutates_args=("moved",),
        schema="(Tensor positions, Tensor velocities, Tensor(a!) moved, float dt, float box_size) -> ()",
    )
    peer_op.register_fake(lambda positions, velocities, moved, dt, box_size: None)

    def peer_drift(x, v, dt, box_size):
        moved = torch.empty_like(x)
        peer_op(x, v, moved, dt, box_size)
        return moved

    def chained(op):
        def run(x, v):
            for _ in range(CALLS // 10):
                x = op(x, v, DT, BOX)
            return x

        return torch.compile(run, fullgraph=True)

    rows: dict[str, dict[str, float]] = {}
    for n in SIZES:
        rng = np.random.default_rng(n)
        x = torch.from_numpy((rng.random((n, 3)) * BOX).astype(np.float32)).cuda()
        v = torch.from_numpy(rng.standard_normal((n, 3)).astype(np.float32)).cuda()
        runs = {"amso": chained(amso_drift), "torch.library.custom_op": chained(peer_drift)}
        results = {name: run(x, v).cpu().numpy() for name, run in runs.items()}
        np.testing.assert_array_equal(results["amso"], results["torch.library.custom_op"])

        def timed(run):
            def once():
                run(x, v)
                torch.cuda.synchronize()

            return median_seconds(once) / (CALLS // 10)

        times = {name: timed(run) for name, run in runs.items()}
        rows[f"torch.compile, CUDA: drift of {n} particles, per call, against torch.library.custom_op"] = times
    return rows


def collect() -> dict[str, dict[str, float]]:
    """One process's rows: {row: {"amso": seconds, peer: seconds}}."""
    return jax_rows() | torch_rows()


def markdown(rows: dict[str, dict[str, float]], spread: dict[str, list[float]]) -> str:
    lines = ["| row | amso | peer | amso / peer (spread) |", "|---|---|---|---|"]
    for name, row in rows.items():
        (_, mine), (peer_name, theirs) = list(row.items())[:2]
        ratios = spread.get(name, [])
        shown = f"{mine / theirs:.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else f"{mine / theirs:.2f}"
        lines.append(f"| {name} | {mine * 1e6:.2f} µs | {peer_name} {theirs * 1e6:.2f} µs | {shown} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(HERE))
    import run as report

    import os

    runs = report.in_processes("bench_ops", int(os.environ.get("AMSO_OPS_PROCESSES", report.PROCESSES)))
    rows, spread = report.median_rows(runs, report.pair_ratio)
    print(markdown(rows, spread))
