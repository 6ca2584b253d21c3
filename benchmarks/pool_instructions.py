"""amso's instructions per allocate+free pair through PyTorch's hook functions (`amso_torch_alloc`
and `amso_torch_free`, called from a C loop as PyTorch calls them), counted by callgrind over a
stand-in CUDA driver (`stand_in_driver.c`), so that the pool's own cost in the plug-in path is
measured on a machine without a GPU. Each case runs twice, with 2,000 and 12,000 pairs after 100
of warm-up; the difference over 10,000 is one pair in steady state (the first allocation's trip
to the driver excluded). The counts are amso's, plus about 15 instructions of the harness that
are the same in every build (the C loop's return into `amso_peers`, the stand-in's own calls); the
real driver's cuStreamIsCapturing (on a non-default stream, about 200 with driver 580) and the
hook around the functions are not in them.

With `--cold`, each pair runs after 2 MiB of other memory was written (a library's own work
between two allocations, which evicts amso's data: `amso_peers.time_torch_pairs_cold`), under
callgrind's cache simulation with a 1 MiB last-level cache, and the counts are the cache lines a
pair touches: data lines that missed the last level, and the instruction lines it runs (each
instruction run at every pair, by line; the eviction does not evict code, so these are counted
rather than simulated).

    python3 benchmarks/pool_instructions.py [--cold]  # needs valgrind, a C compiler, amso and amso_peers
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = [("default", 256), ("default", 65536), ("default", 64 << 20), ("own", 256), ("own", 65536), ("own", 64 << 20)]
PAIRS = (2000, 12000)
COLD_PAIRS = (200, 1200)
# Written between two cold pairs: twice the simulated last-level cache.
EVICT = 2 << 20
LAST_LEVEL = "--LL=1048576,16,64"


def child(stream_kind: str, size: int, pairs: int, cold: bool) -> None:
    """The measured process: the pairs on the legacy default stream or on a made stream (with
    `cold`, each after `EVICT` bytes of other memory were written)."""
    import numpy as np
    import amso
    import amso_peers

    keep = amso.empty(1 << 20, np.uint8, on_device=True)  # the driver, the context and the pool
    extension = ctypes.CDLL(amso._amso.__file__)
    alloc, free = (ctypes.cast(getattr(extension, name), ctypes.c_void_p).value for name in ("amso_torch_alloc", "amso_torch_free"))
    stream = ctypes.c_void_p()
    if stream_kind == "own":
        assert ctypes.CDLL("libcuda.so.1").cuStreamCreate(ctypes.byref(stream), 1) == 0
    amso_peers.time_torch_pairs(alloc, free, size, stream.value or 0, 100, False)
    if cold:
        amso_peers.time_torch_pairs_cold(alloc, free, size, stream.value or 0, pairs, EVICT)
    else:
        amso_peers.time_torch_pairs(alloc, free, size, stream.value or 0, pairs, False)
    del keep


def count(driver: Path, stream_kind: str, size: int, pairs: int, out: Path, cold: bool = False) -> dict[str, int]:
    """Callgrind's totals inside the two hook functions over 100 + `pairs` pairs (with `cold`,
    its cache simulation's too, and `I-lines`: the instruction cache lines of the instructions
    run at least `pairs` times)."""
    simulate = ["--cache-sim=yes", LAST_LEVEL, "--dump-instr=yes"] if cold else ["--dump-instr=no"]
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", *simulate, f"--callgrind-out-file={out}",
         "--toggle-collect=amso_torch_alloc", "--toggle-collect=amso_torch_free",
         sys.executable, __file__, "--child", stream_kind, str(size), str(pairs), *(["--cold"] if cold else [])],
        env=dict(os.environ, LD_LIBRARY_PATH=f"{driver}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}"),
        capture_output=True, text=True, timeout=600,
    )
    events = re.search(r"Events    : (.*)", result.stderr)
    collected = re.search(r"Collected : ([\d, ]+)", result.stderr)
    if result.returncode != 0 or collected is None or events is None:
        sys.exit(f"pool_instructions: the {stream_kind} {size} B run failed:\n{result.stdout}{result.stderr}")
    totals = dict(zip(events.group(1).split(), (int(n.replace(",", "")) for n in collected.group(1).split())))
    if cold:
        totals["I-lines"] = instruction_lines(out, pairs)
    return totals


def instruction_lines(out: Path, pairs: int) -> int:
    """The instruction cache lines (64 bytes) holding the instructions a callgrind file (with
    `--dump-instr=yes`) counts at least `pairs` times: the code every pair runs."""
    runs: dict[tuple[str, int], int] = {}
    names: dict[str, str] = {}
    binary, address, call_cost = "", 0, False
    for line in out.read_text().splitlines():
        if line.startswith(("ob=", "cob=")):
            found = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line)
            if found and found.group(2):
                names[found.group(1)] = found.group(2)
            if found and line.startswith("ob="):
                binary = names.get(found.group(1), "")
        elif line.startswith("calls="):
            call_cost = True  # the next cost line is a call's inclusive cost
        elif line and (line[0].isdigit() or line[0] in "+-*"):
            fields = line.split()
            position = fields[0]
            # Callgrind's positions: "0x..." is hexadecimal, a bare number decimal, and one
            # after a sign is relative to the position before.
            if position[0] in "+-":
                address += int(position, 0)
            elif position != "*":
                address = int(position, 0)
            if call_cost:
                call_cost = False
                continue
            key = (binary, address)
            runs[key] = runs.get(key, 0) + (int(fields[2]) if len(fields) > 2 else 0)
    return len({(binary, address >> 6) for (binary, address), ran in runs.items() if ran >= pairs})


def main(cold: bool) -> None:
    for tool in ("valgrind", "cc"):
        if shutil.which(tool) is None:
            sys.exit(f"pool_instructions: {tool} not found (it counts, or builds the stand-in driver)")
    with tempfile.TemporaryDirectory() as scratch:
        driver = Path(scratch)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", driver / "libcuda.so.1", Path(__file__).with_name("stand_in_driver.c")],
                       check=True)
        if cold:
            print("stream   block      per cold pair: instructions, data lines missed, instruction lines run")
        else:
            print("stream   block      instructions per pair (amso's, steady state)")
        pairs = COLD_PAIRS if cold else PAIRS
        for stream_kind, size in CASES:
            low, high = (count(driver, stream_kind, size, n, driver / f"cg.{n}", cold) for n in pairs)
            per_pair = {event: (high[event] - low[event]) / (pairs[1] - pairs[0]) for event in high}
            if cold:
                missed = per_pair["DLmr"] + per_pair["DLmw"]
                print(f"{stream_kind:8} {size:>9}  {per_pair['Ir']:.0f}  {missed:.1f}  {high['I-lines']}")
            else:
                print(f"{stream_kind:8} {size:>9}  {per_pair['Ir']:.0f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:6] == ["--cold"])
    else:
        main(sys.argv[1:2] == ["--cold"])
