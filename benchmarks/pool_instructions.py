"""amso's instructions per allocate+free pair through PyTorch's hook functions (`amso_torch_alloc`
and `amso_torch_free`, called from a C loop as PyTorch calls them), counted by callgrind over a
stand-in CUDA driver (`stand_in_driver.c`), so that the pool's own cost in the plug-in path is
measured on a machine without a GPU. Each case runs twice, with 2,000 and 12,000 pairs after 100
of warm-up; the difference over 10,000 is one pair in steady state (the first allocation's trip
to the driver excluded). The counts are amso's, plus about 15 instructions of the harness that
are the same in every build (the C loop's return into `amso_peers`, the stand-in's own calls); the
real driver's cuStreamIsCapturing (on a non-default stream, about 200 with driver 580) and the
hook around the functions are not in them.

    python3 benchmarks/pool_instructions.py     # needs valgrind, a C compiler, amso and amso_peers
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


def child(stream_kind: str, size: int, pairs: int) -> None:
    """The measured process: the pairs on the legacy default stream or on a made stream."""
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
    amso_peers.time_torch_pairs(alloc, free, size, stream.value or 0, pairs, False)
    del keep


def count(driver: Path, stream_kind: str, size: int, pairs: int, out: Path) -> int:
    """Instructions inside the two hook functions over 100 + `pairs` pairs."""
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={out}",
         "--toggle-collect=amso_torch_alloc", "--toggle-collect=amso_torch_free",
         sys.executable, __file__, "--child", stream_kind, str(size), str(pairs)],
        env=dict(os.environ, LD_LIBRARY_PATH=f"{driver}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}"),
        capture_output=True, text=True, timeout=600,
    )
    collected = re.search(r"Collected : ([\d,]+)", result.stderr)
    if result.returncode != 0 or collected is None:
        sys.exit(f"pool_instructions: the {stream_kind} {size} B run failed:\n{result.stdout}{result.stderr}")
    return int(collected.group(1).replace(",", ""))


def main() -> None:
    for tool in ("valgrind", "cc"):
        if shutil.which(tool) is None:
            sys.exit(f"pool_instructions: {tool} not found (it counts, or builds the stand-in driver)")
    with tempfile.TemporaryDirectory() as scratch:
        driver = Path(scratch)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", driver / "libcuda.so.1", Path(__file__).with_name("stand_in_driver.c")],
                       check=True)
        print("stream   block      instructions per pair (amso's, steady state)")
        for stream_kind, size in CASES:
            low, high = (count(driver, stream_kind, size, n, driver / f"cg.{n}") for n in PAIRS)
            print(f"{stream_kind:8} {size:>9}  {(high - low) / (PAIRS[1] - PAIRS[0]):.0f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
