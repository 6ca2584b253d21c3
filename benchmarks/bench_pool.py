"""One pool for every library (docs/memory.md): allocating and freeing through each library's
plug-in into amso's pool, against that library's own pool and against the plug-in point's floor
(the same hook over a C allocator that does no work, `benchmarks/peers/src/hook_floor.rs`), at
four sizes, on the default stream and on a stream of the library's own; and the GPU memory held
while the four libraries allocate and free 256 MiB blocks in turn and together, with amso's one
pool against each library's own.

A plug-in must be set before its library's first allocation, so each configuration runs in a
fresh child process. Within it the contenders are timed in turn, three times, each cell its
best: CuPy and RMM switch allocators, and PyTorch's and Numba's floor and amso share one
forwarding plug-in (a C function, a manager whose `memalloc` is switched), because whole
processes on the GPU machine run at one of two speeds (up to 2x apart, pinned to a core or not)
and drift within one, which a ratio between two processes, or between cells timed one after
the other, would take for the allocator's. Every row is the median of `PROCESSES`
rounds of fresh children, with the ratio's spread. The figures are gathered here, in
run.py's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

PROCESSES = int(os.environ.get("AMSO_POOL_PROCESSES", "5"))  # fewer only for a quick look
SIZES = {"256 B": 256, "64 KiB": 64 << 10, "64 MiB": 64 << 20, "256 MiB": 256 << 20}
STREAMS = ("default", "own stream")
LIBRARIES = ("torch", "cupy", "numba", "rmm")
BLOCK = 256 << 20

CHILD = r"""
import gc, importlib, json, sys, time
import numpy as np
np.row_stack = np.vstack  # Numba's JIT with NumPy 2.5
import amso

SIZES = %(sizes)r
ITERATIONS = {256: 4000, 64 << 10: 4000, 64 << 20: 500, 256 << 20: 500}

def per_pair_us(make, iterations):
    for _ in range(min(iterations, 200)):
        make()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            make()
        times.append((time.perf_counter() - start) / iterations)
    return min(times) * 1e6

def rows(make, side):
    out = {}
    for stream, enter in (("default", None), ("own stream", side)):
        out[stream] = {}
        for label, size in SIZES.items():
            if enter is None:
                out[stream][label] = per_pair_us(lambda: make(size), ITERATIONS[size])
            else:
                with enter():
                    out[stream][label] = per_pair_us(lambda: make(size), ITERATIONS[size])
    return out

def best_of(targets, switch, make, side):
    # Each target's rows, its allocator switched in with `switch`, timed in turn three times:
    # each cell its best.
    out = {}
    for _ in range(3):
        for which, target in targets.items():
            switch(target)
            found = rows(make, side)
            best = out.setdefault(which, found)
            for stream in found:
                for label in found[stream]:
                    best[stream][label] = min(best[stream][label], found[stream][label])
    return out

def floor_block():
    import amso_peers
    keep = amso.empty(%(block)d, np.uint8, on_device=True)
    amso_peers.set_floor_block(keep.__cuda_array_interface__["data"][0])
    return keep

library, mode = sys.argv[1], sys.argv[2]
out = {}
if library == "torch":
    import torch
    if mode == "plug":
        # One plug-in for the process, forwarding to the floor's functions or to amso's in turn
        # (no tensor lives across a switch): the two are timed in one process, alternately.
        import ctypes, amso_peers
        keep = floor_block()
        torch.cuda.memory.change_current_allocator(
            torch.cuda.memory.CUDAPluggableAllocator(amso_peers.amso_peers.__file__, "forward_torch_alloc", "forward_torch_free"))
        extension = ctypes.CDLL(amso._amso.__file__)
        alloc, free = (ctypes.cast(getattr(extension, name), ctypes.c_void_p).value
                       for name in ("amso_torch_alloc", "amso_torch_free"))
        # "least": the least pool that checks its frees (hook_floor.rs), a diagnostic of what any
        # such pool adds to the hook.
        # "floor + capture query": the floor that also asks the driver whether the stream is
        # capturing, as a stream-ordered pool must before it reuses a block on it; "least +
        # capture query", the least pool that asks it.
        targets = {"floor": amso_peers.torch_floor_functions(), "least": amso_peers.least_torch_functions(),
                   "floor + capture query": amso_peers.torch_floor_capture_functions(),
                   "least + capture query": amso_peers.least_torch_capture_functions(), "amso": (alloc, free)}
    side = torch.cuda.Stream()
    make = lambda size: torch.empty(size, dtype=torch.uint8, device="cuda")
    if mode == "own":
        out["own"] = rows(make, lambda: torch.cuda.stream(side))
    else:
        out |= best_of(targets, lambda t: amso_peers.forward_torch_to(t[0], t[1], False), make,
                       lambda: torch.cuda.stream(side))
        # amso's two C functions alone, called from a C loop as PyTorch calls them (GIL released).
        out["amso's part (ns)"] = {
            stream: {label: min(amso_peers.time_torch_pairs(alloc, free, size, handle, 20000, True) for _ in range(3))
                     for label, size in SIZES.items()}
            for stream, handle in (("default", 0), ("own stream", side.cuda_stream))}
        least = amso_peers.least_torch_functions()
        out["least pool's part (ns)"] = {
            stream: {label: min(amso_peers.time_torch_pairs(*least, size, handle, 20000, True) for _ in range(3))
                     for label, size in SIZES.items()}
            for stream, handle in (("default", 0), ("own stream", side.cuda_stream))}
elif library == "cupy":
    import cupy as cp, amso_peers
    import cupy.cuda.stream
    side = cp.cuda.Stream(non_blocking=True)
    make = lambda size: cp.empty(size, cp.uint8)
    keep = floor_block()
    own_pool = cp.get_default_memory_pool().malloc
    malloc, free = amso_peers.floor_cupy_functions()
    floor = cp.cuda.memory.CFunctionAllocator(0, malloc, free, None).malloc
    lookup = importlib.import_module("amso.allocators.cupy")._stream_function(cp)
    malloc, free = amso_peers.floor_cupy_stream_functions(lookup)
    floor_stream = cp.cuda.memory.CFunctionAllocator(0, malloc, free, None).malloc
    malloc, free = amso_peers.floor_cupy_stream_capture_functions(lookup)
    floor_asked = cp.cuda.memory.CFunctionAllocator(0, malloc, free, None).malloc
    malloc, free = amso_peers.least_cupy_functions(lookup)
    least_asked = cp.cuda.memory.CFunctionAllocator(0, malloc, free, None).malloc
    targets = {"own": own_pool, "floor": floor, "floor + stream": floor_stream,
               "floor + stream + capture query": floor_asked, "least + stream + capture query": least_asked,
               "amso": amso.allocators.cupy_malloc}
    out |= best_of(targets, cp.cuda.set_allocator, make, lambda: side)
    out["amso's part (ns)"] = {stream: {label: amso._amso._pool_pair_ns(size, handle, 2, 20000) for label, size in SIZES.items()}
                               for stream, handle in (("default", 1), ("own stream", side.ptr))}
elif library == "numba":
    from numba import cuda
    if mode == "plug":
        # One manager for the process, whose `memalloc` is the floor's or amso's in turn (an
        # instance attribute: no frame of its own), timed in one process as PyTorch's are.
        # "floor + barrier" and "least + barrier": the floor's block and the least pool's, each
        # given back behind the barrier a Numba free must queue (`NumbaLoan` in hook_floor.rs),
        # their pointers owning the loan as amso's do.
        import amso_peers
        from cuda.bindings.driver import CUdeviceptr
        from numba.cuda import HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer
        import weakref
        keep = floor_block()
        address = keep.__cuda_array_interface__["data"][0]
        class Plug(HostOnlyCUDAMemoryManager):
            # What each plug-in below shares: no IPC, no memory figures, Numba's interface 1.
            def initialize(self): pass
            def get_ipc_handle(self, memory): raise NotImplementedError
            def get_memory_info(self): return MemoryInfo(free=0, total=0)
            @property
            def interface_version(self): return 1
        def lending(lend):
            class Lending(Plug):
                def initialize(self):
                    context = weakref.proxy(self.context)
                    def memalloc(size):
                        loan = lend(size)
                        pointer = MemoryPointer(context, CUdeviceptr(loan.ptr), size)
                        pointer._loan = loan
                        return pointer
                    self.memalloc = memalloc
                def memalloc(self, size): raise AssertionError("replaced in initialize")
            return Lending
        class Floor(Plug):
            def memalloc(self, size):
                return MemoryPointer(weakref.proxy(self.context), CUdeviceptr(address), size)
        class Forward(Plug):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.targets = {"floor": Floor(*args, **kwargs),
                                "floor + barrier": lending(amso_peers.floor_numba_lend)(*args, **kwargs),
                                "least + barrier": lending(amso_peers.least_numba_lend)(*args, **kwargs),
                                "amso": amso.allocators.NumbaManager(*args, **kwargs)}
                self.memalloc = self.targets["floor"].memalloc
            def initialize(self):
                for target in self.targets.values():
                    target.initialize()
            def memalloc(self, size): raise AssertionError("replaced in __init__")
            def get_memory_info(self): return self.targets["amso"].get_memory_info()
        cuda.set_memory_manager(Forward)
    side = cuda.stream()
    import contextlib
    @contextlib.contextmanager
    def on_side():
        global stream_arg
        stream_arg = side
        yield
        stream_arg = 0
    stream_arg = 0
    make = lambda size: cuda.device_array(size, np.uint8, stream=stream_arg)
    if mode == "own":
        out["own"] = rows(make, on_side)
    else:
        manager = cuda.current_context().memory_manager
        out |= best_of(manager.targets, lambda target: setattr(manager, "memalloc", target.memalloc), make, on_side)
        failed = amso_peers.numba_barrier_failures()
        assert failed == 0, f"{failed} of the Numba floor's and least pool's barriers could not be queued"
elif library == "rmm":
    import rmm, contextlib
    from rmm.pylibrmm.stream import Stream
    from cuda.bindings import runtime
    error, handle = runtime.cudaStreamCreateWithFlags(runtime.cudaStreamNonBlocking)
    class Raw:
        def __cuda_stream__(self): return (0, int(handle))
    side_stream = Stream(Raw())
    current = {"stream": None}
    @contextlib.contextmanager
    def on_side():
        current["stream"] = side_stream
        yield
        current["stream"] = None
    def make(size):
        return rmm.DeviceBuffer(size=size) if current["stream"] is None else rmm.DeviceBuffer(size=size, stream=current["stream"])
    targets = {"own": rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 31),
               "amso": amso.allocators.rmm_resource()}
    out |= best_of(targets, rmm.mr.set_current_device_resource, make, on_side)
print("ROWS " + json.dumps(out))
"""

HELD = r"""
import gc, json, sys
import numpy as np
np.row_stack = np.vstack
import amso, torch, cupy as cp, rmm
from numba import cuda
mode, how = sys.argv[1], sys.argv[2]
if mode == "amso":
    torch.cuda.memory.change_current_allocator(amso.allocators.torch_allocator())
    cuda.set_memory_manager(amso.allocators.NumbaManager)
    cp.cuda.set_allocator(amso.allocators.cupy_malloc)
    rmm.mr.set_current_device_resource(amso.allocators.rmm_resource())
else:
    rmm.mr.set_current_device_resource(rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource()))
block = %(block)d
makers = (lambda: torch.empty(block, dtype=torch.uint8, device="cuda"), lambda: cp.empty(block, cp.uint8),
          lambda: cuda.device_array(block, np.uint8), lambda: rmm.DeviceBuffer(size=block))
def free_memory():
    torch.cuda.synchronize(); cuda.synchronize()
    return amso.cuda.memory_info()[0]
torch.empty(1, device="cuda"); cp.empty(1); cuda.device_array(1); rmm.DeviceBuffer(size=1)
gc.collect()
baseline = free_memory()
held = []
for _ in range(4):
    if how == "in turn":
        for make in makers:
            x = make()
            del x
            gc.collect()
            held.append(baseline - free_memory())
    else:
        xs = [make() for make in makers]
        for i in range(len(xs)):
            xs[i] = None
            gc.collect()
            held.append(baseline - free_memory())
live = block if how == "in turn" else 4 * block
print("ROWS " + json.dumps({"held_max": max(held), "live": live}))
"""


def child(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=900)
    marked = [line for line in done.stdout.splitlines() if line.startswith("ROWS ")]
    if done.returncode != 0 or not marked:
        return {"error": ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]}
    return json.loads(marked[-1][5:])


def one_round() -> dict:
    """One fresh child per configuration: {library: {mode: {stream: {size: us}}}}."""
    script = CHILD % {"sizes": SIZES, "block": BLOCK}
    found: dict = {}
    for library in LIBRARIES:
        modes = {"torch": ("own", "plug"), "numba": ("own", "plug")}.get(library, ("all",))
        found[library] = {}
        for mode in modes:
            rows = child(script, library, mode)
            if "error" in rows:
                found[library].setdefault("errors", []).append(f"{mode}: {rows['error']}")
                continue
            found[library] |= rows
    return found


def collect() -> dict:
    rounds = [one_round() for _ in range(PROCESSES)]
    held_script = HELD % {"block": BLOCK}
    held = {how: {mode: child(held_script, mode, how) for mode in ("own", "amso")} for how in ("in turn", "together")}
    return {"rounds": rounds, "held": held, "processes": PROCESSES}


def _ratio_rows(report: dict) -> list[dict]:
    """Each (library, stream, size) row: the median round's figures, and the ratio's spread."""
    rows = []
    for library in LIBRARIES:
        for stream in STREAMS:
            for label in SIZES:
                figures = []
                for found in report["rounds"]:
                    modes = found.get(library, {})
                    try:
                        own, amso = modes["own"][stream][label], modes["amso"][stream][label]
                    except KeyError:
                        continue
                    floor = modes.get("floor", {}).get(stream, {}).get(label)
                    figures.append({"own": own, "amso": amso, "floor": floor})
                if not figures:
                    errors = "; ".join(e for found in report["rounds"] for e in found.get(library, {}).get("errors", []))
                    rows.append({"library": library, "stream": stream, "size": label, "error": errors or "no figures"})
                    continue
                key = (lambda f: f["amso"] / f["floor"]) if figures[0]["floor"] else (lambda f: f["amso"] / f["own"])
                ordered = sorted(figures, key=key)
                median = ordered[len(ordered) // 2]
                rows.append({"library": library, "stream": stream, "size": label, **median,
                             "spread": (key(ordered[0]), key(ordered[-1]))})
    return rows


def goal(row: dict) -> tuple[str, bool]:
    """The row's goal, and whether the median meets it (issue 53)."""
    library, own, amso, floor = row["library"], row["own"], row["amso"], row["floor"]
    if library in ("torch", "cupy"):
        if floor <= 0.9 * own:
            return "<= 1.1x floor and <= 1.0x own", amso <= 1.1 * floor and amso <= own
        return "<= 1.1x floor", amso <= 1.1 * floor
    if library == "numba":
        return "<= 1.1x floor", amso <= 1.1 * floor
    return "<= 1.0x own", amso <= own


def markdown(report: dict) -> str:
    if "rounds" not in report:
        return _markdown_before_floors(report)
    lines = ["| library | stream | block | own pool (us) | amso (us) | hook floor (us) | amso / floor | amso / own | "
             "spread | goal |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in _ratio_rows(report):
        if "error" in row:
            lines.append(f"| {row['library']} | {row['stream']} | {row['size']} | | | | | | | not measured: {row['error']} |")
            continue
        floor, text_met = row["floor"], goal(row)
        low, high = row["spread"]
        floor_cells = f"{floor:.2f} | {row['amso'] / floor:.2f}" if floor else " | "
        lines.append(f"| {row['library']} | {row['stream']} | {row['size']} | {row['own']:.2f} | {row['amso']:.2f} | "
                     f"{floor_cells} | {row['amso'] / row['own']:.2f} | {low:.2f}-{high:.2f} | {text_met[0]}: "
                     f"{'met' if text_met[1] else 'missed'} |")
    lines.append("")
    held = []
    for how, modes in report["held"].items():
        amso, own = modes["amso"], modes["own"]
        if "held_max" not in amso or "held_max" not in own:
            held.append(f"- {how}: not measured ({amso.get('error') or own.get('error')})")
            continue
        ratio, own_ratio = amso["held_max"] / amso["live"], own["held_max"] / own["live"]
        held.append(f"- {how} (largest live set {amso['live'] >> 20} MiB): amso's one pool held at most {ratio:.2f}x it, "
                    f"the libraries' own pools {own_ratio:.2f}x; goal <= 1.1x: {'met' if ratio <= 1.1 else 'missed'}")
    parts = []
    for library in ("torch", "cupy"):
        figures = [found[library]["amso's part (ns)"] for found in report["rounds"]
                   if "amso's part (ns)" in found.get(library, {})]
        if figures:
            values = [ns for figure in figures for stream in figure.values() for ns in stream.values()]
            parts.append(f"- {library}: {min(values):.0f}-{max(values):.0f} ns per allocate+free pair")
    # Each section: its introduction and its lines, left out when it has none (reports made before
    # the Numba targets that queue the barrier have no Numba lines).
    asked = _asked_rows(report, ASKED)
    numba = any(line.startswith("- numba") for line in asked)
    sections = [
        ("The least pool that checks its frees (one lock, a free list per size class and a map of the blocks "
         "out, nothing else: `least` in `benchmarks/peers/src/hook_floor.rs`), through PyTorch's hook in the "
         "same processes, over the same floor (median over every size and round, and spread), and its own part from "
         "a C loop:", _least_rows(report)),
        ("CuPy's stream lookup (`get_stream_ptr`, which CuPy's own pool and amso call at every allocation to "
         "file the block under the current stream, and the floor does not) through the same hook: the floor "
         "that also asks CuPy for its stream, over the floor, and amso over it (median and spread):",
         _cupy_stream_rows(report)),
        ("What every stream-ordered plug-in asks per allocation, which the floor does not: the library's "
         "current stream (CuPy's `get_stream_ptr`) and, on a stream of the library's own, whether the driver "
         "is capturing it (`cuStreamIsCapturing`; a block cached on a stream may not go to captured work, "
         "which does not follow the stream's earlier work when the graph is launched)" + (
             "; for Numba, whose frees name no stream, what each free must queue instead: a barrier on the legacy "
             "stream (`cuEventRecord`), behind which a freed block may go to its next owner at once. The floor "
             "that asks them or queues it" if numba else ": the floor that asks them") +
         ", over the floor, and amso over it (median and spread over every size and round):", asked),
        ("The least pool that checks its frees and asks " + ("(or, for Numba, queues) what every stream-ordered "
         "plug-in must" if numba else "what every stream-ordered plug-in asks") + ", through each library's hook: "
         "the least any such pool costs, over the floor (its cells at or below 1.1x, unrounded, "
         "are counted over every size and round), and amso over it:", _asked_rows(report, LEAST_ASKED)),
        ("amso's own part of a pair, outside the library (its ledger and pool in Rust; torch: its two C "
         "functions from a C loop; CuPy: `_amso._pool_pair_ns`), over every size, stream and round:", parts),
    ]
    for intro, rows in sections:
        if rows:
            lines += [intro, "", *rows, ""]
    intro = ("GPU memory held after every free (`cuMemGetInfo`), PyTorch, CuPy, Numba and RMM each allocating and "
             "freeing 256 MiB blocks, 4 rounds, no explicit flush:")
    return "\n".join(lines) + "\n" + textwrap.fill(intro, 100) + "\n\n" + "\n".join(held) + "\n"


def _median_spread(values: list[float]) -> str:
    """`values`' median and spread, as the lines under the pool table give them."""
    values = sorted(values)
    return f"{values[len(values) // 2]:.2f} ({values[0]:.2f}-{values[-1]:.2f})"


def _least_rows(report: dict) -> list[str]:
    """The least pool's figures over PyTorch's floor, per stream: one line each."""
    lines = []
    for stream in STREAMS:
        ratios, parts = [], []
        for found in report["rounds"]:
            modes = found.get("torch", {})
            for label in SIZES:
                try:
                    ratios.append(modes["least"][stream][label] / modes["floor"][stream][label])
                except (KeyError, ZeroDivisionError):
                    pass
            parts += list(modes.get("least pool's part (ns)", {}).get(stream, {}).values())
        if ratios:
            lines.append(f"- torch, {stream}: least pool / floor {_median_spread(ratios)} over every size and round; "
                         f"its part from a C loop {min(parts):.0f}-{max(parts):.0f} ns per pair")
    return lines


def _over_floor(report: dict, library: str, key: str, stream: str) -> tuple[list[float], list[float]]:
    """Over every size and round: the `key` target of `library` (a floor, or the least pool, that
    asks more) over its plain floor, and amso over that target."""
    over, beyond = [], []
    for found in report["rounds"]:
        modes = found.get(library, {})
        for label in SIZES:
            try:
                floor_with = modes[key][stream][label]
                over.append(floor_with / modes["floor"][stream][label])
                beyond.append(modes["amso"][stream][label] / floor_with)
            except (KeyError, ZeroDivisionError):
                pass
    return over, beyond


def _cupy_stream_rows(report: dict) -> list[str]:
    """CuPy's own stream lookup over its floor, and amso over the floor that makes it, per
    stream: one line each (the lookup is what CuPy's pool and amso must both do per allocation,
    and the floor does not)."""
    lines = []
    for stream in STREAMS:
        lookup, beyond = _over_floor(report, "cupy", "floor + stream", stream)
        if lookup:
            lines.append(f"- cupy, {stream}: floor + stream lookup / floor {_median_spread(lookup)}; amso / (floor + "
                         f"stream lookup) {_median_spread(beyond)}, over every size and round")
    return lines


def _asked_rows(report: dict, keys: dict[str, str]) -> list[str]:
    """The target that asks what every stream-ordered plug-in asks (`keys`: `ASKED` or
    `LEAST_ASKED`), over the floor, and amso over it, per library and stream: one line each."""
    lines = []
    for library, key in keys.items():
        for stream in STREAMS:
            asked, beyond = _over_floor(report, library, key, stream)
            if asked:
                within = sum(ratio <= 1.1 for ratio in asked)
                lines.append(f"- {library}, {stream}: ({key}) / floor {_median_spread(asked)}, at most 1.1 (unrounded) in {within} "
                             f"of {len(asked)}; amso / ({key}) {_median_spread(beyond)}")
    return lines


# The floor of each library that asks what a stream-ordered plug-in must (`_asked_rows`), and
# the least pool that asks it.
ASKED = {"torch": "floor + capture query", "cupy": "floor + stream + capture query", "numba": "floor + barrier"}
LEAST_ASKED = {"torch": "least + capture query", "cupy": "least + stream + capture query", "numba": "least + barrier"}


GOALS_BEFORE_FLOORS = {"torch": 1.2, "cupy": 1.0, "rmm": 1.0}


LABELS = {
    "torch": ("torch.empty via amso", "torch's caching allocator"),
    "cupy": ("cupy.empty via amso", "CuPy's pool"),
    "numba": ("numba.cuda.device_array via amso", "Numba's cuMemAlloc"),
    "rmm": ("rmm.DeviceBuffer via amso", "RMM's PoolMemoryResource"),
}


def _markdown_before_floors(report: dict) -> str:
    """The table of reports made before the floors (allocate + free at two sizes, and the
    taking-turns scenario), as they were rendered."""
    rows = ["| allocate + free | block | amso | peer | amso / peer | goal |", "|---|---|---|---|---|---|"]
    for library, (ours, theirs) in LABELS.items():
        own, amso = report[library]["own"], report[library]["amso"]
        for label in ("256 B", "64 MiB"):
            if label not in own or label not in amso:
                rows.append(f"| {ours} | {label} | {amso.get('error', '?')} | {own.get('error', '?')} | | |")
                continue
            ratio = amso[label] / own[label]
            goal = f"<= {GOALS_BEFORE_FLOORS[library]}x" if library in GOALS_BEFORE_FLOORS else ">= 10x faster"
            met = ratio <= GOALS_BEFORE_FLOORS[library] if library in GOALS_BEFORE_FLOORS else ratio <= 0.1
            rows.append(f"| {ours} | {label} | {amso[label]:.2f} us | {theirs} {own[label]:.2f} us | {ratio:.2f} | "
                        f"{goal}: {'met' if met else 'missed'} |")
    own, amso = report["scenario"]["own"], report["scenario"]["amso"]
    scenario = ("PyTorch, CuPy, Numba and amso each allocating and freeing 256 MiB in turn (3 rounds): GPU memory "
                "held at the peak, in 256 MiB blocks (`cuMemGetInfo`), ")
    if "peak_blocks" in own and "peak_blocks" in amso:
        scenario += (f"one amso pool {amso['peak_blocks']:.2f} (after the rounds {amso['held_blocks']:.2f}), each library's "
                     f"default pool {own['peak_blocks']:.2f} (after {own['held_blocks']:.2f}); goal <= 1.1: "
                     f"{'met' if amso['peak_blocks'] <= 1.1 else 'missed'}.")
    else:
        scenario += f"not measured: {amso.get('error') or own.get('error')}."
    return "\n".join(rows) + "\n\n" + textwrap.fill(scenario, 100) + "\n"


if __name__ == "__main__":
    report = collect()
    print(json.dumps(report, indent=1))
    print(markdown(report))
