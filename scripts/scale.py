#!/usr/bin/env python3
"""Codegen at scale: build the bundled module from a small spec (12 instantiations), a middle one
(every dtype at ndim 1 to 3, and float32 at 4 to 6) and the spec as shipped (every scalar dtype at ndim 1 to 8, and its records and vectors), and measure for each the release rebuild time after the spec edit, the
extension's size and its import time; smoke-test every class of the full build. Works in a
copy of the repository (its own target folder); writes scale.json and scale.md to --out.

    python3 scripts/scale.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def spec_with(text: str, instantiations: list[tuple[str, list[int]]]) -> str:
    head = text.split("\ninstantiations:")[0]
    lines = [f"  - {{dtype: {name}, ndim: [{', '.join(map(str, ndims))}]}}" for name, ndims in instantiations]
    return head + "\ninstantiations:\n" + "\n".join(lines) + "\n"


def dtype_names(text: str) -> list[str]:
    """The dtype table's names (not the records' field names, listed alike further down)."""
    table = text.split("\ndtypes:")[1].split("\ninstantiations:")[0]
    return re.findall(r"-\s*\{name:\s*(\w+)", table)


def run(command: list[str], cwd: Path, env: dict | None = None) -> float:
    started = time.monotonic()
    subprocess.run(command, cwd=cwd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="amso-scale-"))
    copy = work / "repo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("target", ".venv", ".git", "wheels", "__pycache__"))
    text = (copy / "specs" / "types.yaml").read_text()
    names = dtype_names(text)
    core = [(n, [1, 2, 3]) for n in ("int32", "int64", "float32", "float64")]
    sizes = [
        core,  # 12
        [(n, [1, 2, 3]) for n in names] + [("float32", [4, 5, 6])],  # every dtype x ndim 1..3, and more float32
        None,  # the spec as shipped: the wheel's classes
    ]
    # A clean build (a fresh target folder: every dependency compiled), which also warms the
    # folder, so every measured row after it is a rebuild after a spec edit.
    clean_seconds = run([str(VENV_PYTHON), "-m", "maturin", "build", "--release", "--quiet", "-m", "amso-python/Cargo.toml",
                         "-o", str(work / "warm")], copy)
    results = []
    for instantiations in sizes:
        (copy / "specs" / "types.yaml").write_text(text if instantiations is None else spec_with(text, instantiations))
        subprocess.run(["cargo", "run", "-q", "-p", "amso-codegen", "--bin", "amso-generate"], cwd=copy, check=True)
        dist = work / f"dist-{len(results)}"
        seconds = run([str(VENV_PYTHON), "-m", "maturin", "build", "--release", "--quiet", "-m", "amso-python/Cargo.toml", "-o", str(dist)], copy)
        site = work / f"site-{len(results)}"
        subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), *map(str, dist.glob("*.whl"))], check=True)
        extension = next(site.glob("amso/_amso*.so"))
        env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
        imports, totals = [], []
        for _ in range(7):
            out = subprocess.run([str(VENV_PYTHON), "-c", "import time, numpy; t = time.perf_counter(); import amso; print(time.perf_counter() - t)"],
                                 check=True, capture_output=True, text=True, env=env).stdout
            imports.append(float(out))
            out = subprocess.run([str(VENV_PYTHON), "-c", "import time; t = time.perf_counter(); import amso; print(time.perf_counter() - t)"],
                                 check=True, capture_output=True, text=True, env=env).stdout
            totals.append(float(out))
        smoke = subprocess.run([str(VENV_PYTHON), "-c", SMOKE], capture_output=True, text=True, env=env)
        classes = subprocess.run([str(VENV_PYTHON), "-c", "import amso; print(len(amso.supported()))"],
                                 check=True, capture_output=True, text=True, env=env).stdout
        results.append({
            "instantiations": int(classes),
            "rebuild_seconds": seconds,
            "extension_bytes": extension.stat().st_size,
            "wheel_bytes": next(dist.glob("*.whl")).stat().st_size,
            "import_ms": statistics.median(imports) * 1e3,
            "import_with_numpy_ms": statistics.median(totals) * 1e3,
            "smoke": smoke.stdout.strip() or smoke.stderr.strip()[-400:],
            "smoke_ok": smoke.returncode == 0,
        })
        print(results[-1], flush=True)
    small, full = results[1], results[-1]  # 48 -> full: both past the fixed costs
    extra = full["instantiations"] - small["instantiations"]
    report = {
        "results": results,
        "per_instantiation": {
            "rebuild_seconds": (full["rebuild_seconds"] - small["rebuild_seconds"]) / extra,
            "extension_bytes": (full["extension_bytes"] - small["extension_bytes"]) / extra,
        },
        "machine": {"python": sys.version.split()[0], "cores": __import__("os").cpu_count()},
        "clean_build_seconds": clean_seconds,
    }
    lines = ["# amso codegen at scale", "", f"Release builds (maturin, thin LTO) on this {report['machine']['cores']}-core machine; "
             "rebuild = the build after editing specs/types.yaml (dependencies already built).", "",
             "Import times are medians of 7 fresh interpreters: `import amso` after `import numpy` (amso's own cost), "
             "and `import amso` alone (NumPy and ml_dtypes included).", "",
             "| classes | rebuild (s) | extension (KiB) | wheel (KiB) | import amso after NumPy (ms) | import amso, NumPy included (ms) | smoke test |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['instantiations']} | {r['rebuild_seconds']:.1f} | {r['extension_bytes'] / 1024:.0f} | {r['wheel_bytes'] / 1024:.0f} "
                     f"| {r['import_ms']:.1f} | {r['import_with_numpy_ms']:.1f} | {'pass' if r['smoke_ok'] else 'FAIL'}: {r['smoke']} |")
    per = report["per_instantiation"]
    lines += ["", f"Per extra instantiation ({small['instantiations']} -> {full['instantiations']}): "
              f"{per['rebuild_seconds']:.3f} s of rebuild time and {per['extension_bytes'] / 1024:.1f} KiB of extension.",
              "", f"The wheel's matrix (the spec as shipped: every scalar dtype at ndim 1 to 8, with its records and vectors, "
              f"{full['instantiations']} classes) against the goals: "
              f"wheel {full['wheel_bytes'] / 2**20:.1f} MiB (goal < 10 MB, {'met' if full['wheel_bytes'] < 10_000_000 else 'missed'}); clean release build of the wheel "
              f"{clean_seconds:.0f} s, rebuild after a spec edit {full['rebuild_seconds']:.0f} s; import: amso's own "
              f"{full['import_ms']:.1f} ms after NumPy (goal < 50 ms, {'met' if full['import_ms'] < 50 else 'missed'}); "
              f"a fresh `import amso` with NumPy and ml_dtypes takes {full['import_with_numpy_ms']:.1f} ms here, "
              f"{'under' if full['import_with_numpy_ms'] < 50 else 'over'} 50 ms, "
              f"{full['import_with_numpy_ms'] - full['import_ms']:.1f} ms of it NumPy's and ml_dtypes' own import."]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)


SMOKE = r"""
import numpy as np, amso
count = 0
# NumPy imports through DLPack the dtypes it defines (not ml_dtypes' nor packed vectors).
numpy_dlpack = {name for name, _, _, lanes, _, module in amso._amso._dtypes() if module is None and lanes == 1}
scalars_and_vectors = {name for name, *_ in amso._amso._dtypes()}
for name, ndim in amso.supported():
    shape, at = (2,) * ndim, (1,) * ndim
    a = amso.MemArray(shape, name)
    if name in scalars_and_vectors:
        a[at] = 1
        assert np.all(np.asarray(a[at]) == 1)
    else:  # a record: its zero value written back and read
        zero = a[at]
        a[at] = zero
        assert a[at] == zero
    if name in numpy_dlpack:
        view = np.from_dlpack(a)
        assert view.shape == shape and view[(1,) * ndim] == 1
    count += 1
print(f"{count} classes: create, item set/get, DLPack view")
"""

if __name__ == "__main__":
    main()
