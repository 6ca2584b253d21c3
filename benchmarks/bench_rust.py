"""amso against rust-numpy, in one process: the same `#[pyfunction]`s written against both crates
(benchmarks/peers, module amso_peers) called with the same NumPy arrays, float32 (1024, 3):
no-op with 1 and 3 arguments, a sum, an in-place scale, a new 1-D float64 result of 1024
elements handed to NumPy (rust-numpy: `into_pyarray`), and the no-op with an amso array as its
argument; rust-numpy's `head` example over an object array of 24 elements, and its
`add_minutes_to_seconds` over 1024 timedelta64[s] and [m] elements; an `ArrayLike` argument
converting a list of 8 ints (rust-numpy: `PyArrayLike1<i32, AllowTypeChange>`); a cast of 1024
int64 elements to float32 (rust-numpy: `cast_array`); new object, datetime64[s] and S4 arrays from
`Vec`s (rust-numpy: `into_pyarray`). PyO3's own call (a
function taking `&Bound<PyAny>`) is the floor under both.

A second table puts amso's own arrays beside NumPy's as the input of the same amso function
(the no-op with 1 and 3 arguments; the amso arrays come from the bundled module, another copy
of the runtime than the benchmark crate's): goal, an amso array costs no more than a NumPy one.

Instructions per call come from callgrind (valgrind), where it is installed:

    PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 python3 benchmarks/bench_rust.py --instructions OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import amso
from protocols import paired, spread_cell

ROWS = ["no-op, 1 argument", "no-op, 3 arguments", "sum", "in-place scale", "new 1-D float64 result",
        "no-op, 1 amso array argument", "object array: head", "timedelta: add minutes to seconds",
        "ArrayLike: a list of 8 ints to int32", "cast: 1024 int64 to float32",
        "object result: [None, 1, 'two']", "datetime result: 1024 datetime64[s]", "fixed-string result: 64 S4",
        "misaligned sum: 1000 float64 at an odd byte offset", "from_vec2: 8 rows of 8 float64",
        "resize: 10x10 float64 zeros to 100x100", "getter view of a frozen class's 8x8 float64",
        "record result: 1024 particles", "ArrayLike: an 8x8 nested list of floats",
        "nalgebra: 16x16 float64 (Fortran order) times a 16-vector"]
#: The same amso function, amso arrays against NumPy arrays as its input.
INPUT_ROWS = ["amso input: no-op, 1 argument", "amso input: no-op, 3 arguments"]
#: A record argument (the spec's particle, 40 bytes) against a float64 one, NumPy arrays of 1024.
RECORD_ROWS = ["record input: no-op, 1 argument", "record input: amso.asarray(x, copy=False)"]


def calls() -> dict[str, dict[str, object]]:
    """Per row: the call for amso, for rust-numpy and for PyO3 alone (where it applies)."""
    import amso_peers as p

    x, y, z = (np.zeros((1024, 3), np.float32) for _ in range(3))
    objects = np.array([object(), 1, "two"] * 8, dtype=object)  # rust-numpy's `head` example
    seconds, minutes = np.zeros(1024, "timedelta64[s]"), np.ones(1024, "timedelta64[m]")
    ints = list(range(8))  # converted by each crate's ArrayLike argument (AllowTypeChange)
    nested = [[float(8 * i + j) for j in range(8)] for i in range(8)]  # nested lists, as np.asarray reads them
    int64s = np.arange(1024, dtype=np.int64)  # cast to float32 by NumPy's cast, through each crate
    a, b, c = (amso.asarray(np.zeros((1024, 3), np.float32)) for _ in range(3))
    particle = np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])
    records, floats = np.zeros(1024, particle), np.zeros(1024)
    rows = [[float(8 * i + j) for j in range(8)] for i in range(8)]  # nested lists, to each crate's from_vec2
    holder, numpy_holder = p.Holder(8, 8), p.NumpyHolder(8, 8)  # ClassView and borrow_from_array getters
    # nalgebra's product over each crate's views (rows one element apart: nalgebra #1616).
    matrix, vector = np.asfortranarray(np.linspace(-1.0, 1.0, 256).reshape(16, 16)), np.linspace(0.0, 1.0, 16)
    # 1000 float64 one byte past an aligned address: each crate's in-place loop over them.
    misaligned = np.frombuffer(bytearray(8 * 1000 + 64), np.uint8)
    misaligned = misaligned[(-misaligned.ctypes.data) % 64 + 1:][:8000].view(np.float64)
    misaligned[...] = np.linspace(-1.0, 1.0, 1000)
    return {
        "no-op, 1 argument": {"amso": lambda: p.amso_noop1(x), "rust-numpy": lambda: p.numpy_noop1(x),
                              "PyO3 alone": lambda: p.pyo3_noop1(x)},
        "no-op, 3 arguments": {"amso": lambda: p.amso_noop3(x, y, z), "rust-numpy": lambda: p.numpy_noop3(x, y, z),
                               "PyO3 alone": lambda: p.pyo3_noop3(x, y, z)},
        "sum": {"amso": lambda: p.amso_sum(x), "rust-numpy": lambda: p.numpy_sum(x)},
        "in-place scale": {"amso": lambda: p.amso_scale(x, 1.0), "rust-numpy": lambda: p.numpy_scale(x, 1.0)},
        "new 1-D float64 result": {"amso": lambda: p.amso_arange(1024), "rust-numpy": lambda: p.numpy_arange(1024)},
        "no-op, 1 amso array argument": {"amso": lambda: p.amso_noop1(a), "rust-numpy": lambda: p.numpy_noop1(x)},
        "object array: head": {"amso": lambda: p.amso_head(objects), "rust-numpy": lambda: p.numpy_head(objects)},
        "ArrayLike: a list of 8 ints to int32": {"amso": lambda: p.like_i32_coerce(ints),
                                                 "rust-numpy": lambda: p.numpy_like_i32_coerce(ints)},
        "object result: [None, 1, 'two']": {"amso": p.amso_objects, "rust-numpy": p.numpy_objects},
        "record result: 1024 particles": {"amso": lambda: p.record_new(1024), "rust-numpy": lambda: p.numpy_record_new(1024)},
        "ArrayLike: an 8x8 nested list of floats": {"amso": lambda: p.like_f64(nested),
                                                    "rust-numpy": lambda: p.numpy_like_f64(nested)},
        "datetime result: 1024 datetime64[s]": {"amso": p.amso_days, "rust-numpy": p.numpy_days},
        "fixed-string result: 64 S4": {"amso": p.amso_words, "rust-numpy": p.numpy_words},
        "misaligned sum: 1000 float64 at an odd byte offset": {"amso": lambda: p.indexer_sum(misaligned),
                                                               "rust-numpy": lambda: p.numpy_iter_sum(misaligned)},
        "from_vec2: 8 rows of 8 float64": {"amso": lambda: p.from_vec2(rows), "rust-numpy": lambda: p.numpy_from_vec2(rows)},
        "resize: 10x10 float64 zeros to 100x100": {"amso": lambda: p.amso_zeros_resized([10, 10], [100, 100]),
                                                   "rust-numpy": lambda: p.numpy_zeros_resized([10, 10], [100, 100])},
        "getter view of a frozen class's 8x8 float64": {"amso": lambda: holder.values,
                                                         "rust-numpy": lambda: numpy_holder.values},
        "nalgebra: 16x16 float64 (Fortran order) times a 16-vector": {
            "amso": lambda: p.nalgebra_matvec(matrix, vector),
            "rust-numpy": lambda: p.numpy_nalgebra_matvec(matrix, vector)},
        "cast: 1024 int64 to float32": {"amso": lambda: p.amso_cast_f32(int64s),
                                        "rust-numpy": lambda: p.numpy_cast_f32(int64s)},
        "timedelta: add minutes to seconds": {"amso": lambda: p.amso_add_minutes_to_seconds(seconds, minutes),
                                              "rust-numpy": lambda: p.numpy_add_minutes_to_seconds(seconds, minutes)},
        "amso input: no-op, 1 argument": {"amso array": lambda: p.amso_noop1(a), "NumPy array": lambda: p.amso_noop1(x)},
        "amso input: no-op, 3 arguments": {"amso array": lambda: p.amso_noop3(a, b, c),
                                           "NumPy array": lambda: p.amso_noop3(x, y, z)},
        "record input: no-op, 1 argument": {"structured": lambda: p.record_noop(records),
                                            "float64": lambda: p.float64_noop(floats)},
        "record input: amso.asarray(x, copy=False)": {"structured": lambda: amso.asarray(records, copy=False),
                                                      "float64": lambda: amso.asarray(floats, copy=False)},
    }


def collect() -> dict:
    """Nanoseconds per call, every contender of a row timed in the same rounds."""
    try:
        rows = calls()
    except ImportError as error:
        return {"rows": {}, "missing": [f"amso_peers: {error!r}"]}
    return {"rows": {name: paired(contenders, 20_000) for name, contenders in rows.items()}, "missing": []}


def count(row: str, who: str, n: int) -> int:
    """Instructions callgrind counts over the whole process for 200 warm-up calls and `n` calls
    (the wheels are stripped, so no function can be singled out: the difference of two runs
    cancels the start-up)."""
    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
              f"import bench_rust\nf = bench_rust.calls()[{row!r}][{who!r}]\n"
              f"for _ in range(200 + {n}): f()\n")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", script],
                       check=True, env=env, capture_output=True)
        for line in out.read_text().splitlines():
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("callgrind wrote no totals")


def instructions() -> dict[str, dict[str, int]]:
    """Instructions per call, (I(6000) - I(1000)) / 5000: start-up and warm-up cancel out."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed")
    counts: dict[str, dict[str, int]] = {}
    for row, contenders in calls().items():
        counts[row] = {who: (count(row, who, 6000) - count(row, who, 1000)) // 5000 for who in contenders}
        if min(counts[row].values()) <= 0:
            raise RuntimeError(f"callgrind's counts for {row!r} make no sense: {counts[row]}")
    return counts


def markdown(report: dict, counts: dict | None = None) -> str:
    spread = report.get("spread")
    lines = ["The same `#[pyfunction]`s written against amso and against rust-numpy 0.30 (`benchmarks/peers`), "
             "called with NumPy float32 (1024, 3) arrays (ns per call; goal: amso / rust-numpy <= 1.0). "
             "\"PyO3 alone\" takes the same arguments as `&Bound<PyAny>`: the floor under both.", "",
             "| call | amso | rust-numpy | amso / rust-numpy | PyO3 alone |" + (" amso instr. | rust-numpy instr. |" if counts else "")
             + (" spread |" if spread else ""),
             "|---|---|---|---|---|" + ("---|---|" if counts else "") + ("---|" if spread else "")]
    for name in ROWS:
        row = report["rows"].get(name)
        if not row:
            continue
        floor = f"{row['PyO3 alone']:.0f}" if "PyO3 alone" in row else "-"
        line = f"| {name} | {row['amso']:.0f} | {row['rust-numpy']:.0f} | {row['amso'] / row['rust-numpy']:.2f} | {floor} |"
        if counts and name in counts:
            line += f" {counts[name]['amso']} | {counts[name]['rust-numpy']} |"
        elif counts:
            line += " - | - |"
        lines.append(line + (spread_cell(spread.get(name)) if spread else ""))
    if counts:
        lines += ["", "Instructions per call, the Python loop that makes the call included (callgrind, "
                  "`bench_rust.py --instructions`, on the CI-kind x86-64 host: the GPU hosts have no valgrind; in the "
                  "\"no-op, 1 amso array argument\" row, rust-numpy's column is its NumPy argument)."]
    lines += pair_table(report, counts, INPUT_ROWS, "amso input: ", ("amso array", "NumPy array"),
                        "The same amso `#[pyfunction]` given amso arrays (of the bundled module: another copy of the "
                        "runtime) and NumPy arrays, float32 (1024, 3) (ns per call; goal: amso array / NumPy array <= 1.0):")
    lines += pair_table(report, counts, RECORD_ROWS, "record input: ", ("structured", "float64"),
                        "Records against plain arrays: a typed argument (`ArrayRef<Particle, 1>`, the spec's 40-byte "
                        "particle) given a NumPy structured array against a float64 argument given a float64 array, and "
                        "`amso.asarray(x, copy=False)` adopting each into the bundled module's class, 1024 elements each "
                        "(ns per call; goal: structured / float64 <= 1.1):")
    lines += [f"Not measured: {m}" for m in report.get("missing", [])]
    return "\n".join(lines) + "\n"


def pair_table(report: dict, counts: dict | None, names: list[str], prefix: str, pair: tuple[str, str],
               caption: str) -> list[str]:
    """The lines of a table of two contenders per row (`pair`), their ratio and, with `counts`,
    their instructions; none when the report has none of `names`."""
    rows = [(name, report["rows"][name]) for name in names if name in report["rows"]]
    if not rows:
        return []
    first, second = pair
    spread = report.get("spread")
    lines = ["", caption, "",
             f"| call | {first} | {second} | {first} / {second} |" + (f" {first} instr. | {second} instr. |" if counts else "")
             + (" spread |" if spread else ""),
             "|---|---|---|---|" + ("---|---|" if counts else "") + ("---|" if spread else "")]
    for name, row in rows:
        line = f"| {name.removeprefix(prefix)} | {row[first]:.0f} | {row[second]:.0f} | {row[first] / row[second]:.2f} |"
        if counts and name in counts:
            line += f" {counts[name][first]} | {counts[name][second]} |"
        elif counts:
            line += " - | - |"
        lines.append(line + (spread_cell(spread.get(name)) if spread else ""))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instructions", type=Path, help="write callgrind's instructions per call to this JSON file")
    args = parser.parse_args()
    if args.instructions:
        counts = instructions()
        args.instructions.write_text(json.dumps(counts, indent=2) + "\n")
        print(json.dumps(counts, indent=2))
    else:
        print(markdown(collect()))


if __name__ == "__main__":
    main()
