"""Device arrays shared between processes on one machine (a.share(), SharedHandle.open()): two
processes on one GPU (spawn), writes seen both ways, the exporter's array dropped first, an
importer killed, 1,000 share/open/close cycles back to the memory's baseline, the refusals, and
multiprocessing's reducer. Handles damaged or forged in every way a file can be are refused
here without a GPU (the checks run before any driver call)."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import amso

GPU = amso.cuda.is_available()
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device")
SPAWN = multiprocessing.get_context("spawn")


def start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def handle_bytes(pid, start, serial, *, dtype=b"float32", dims=(4,), readonly=0, nbytes=16):
    """A handle's bytes, written field by field as the format says (for forged handles)."""
    out = b"AMSOSHR1" + struct.pack("<IQQQ", pid, start, serial, 1) + bytes(16) + struct.pack("<Q", nbytes)
    out += bytes(range(64)) + bytes(64) + bytes([len(dtype)]) + dtype + bytes([len(dims)])
    return out + b"".join(struct.pack("<q", d) for d in dims) + bytes([readonly])


# --- handles refused before any driver call (no GPU needed) ---


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:40], "truncated"),
    (lambda b: b + b"\0", "after its end"),
    (lambda b: b"XMSOSHR1" + b[8:], "does not start as an amso handle"),
    (lambda b: b[:-1] + b"\x07", "read-only flag is 7"),
    (lambda b: b"", "truncated"),
])
def test_damaged_handles_are_refused(damage, message):
    good = handle_bytes(os.getpid(), start_time(os.getpid()), 1)
    with pytest.raises(ValueError, match=message):
        amso.cuda.SharedHandle.from_bytes(damage(good))


def test_a_handle_of_a_process_that_is_gone_is_refused():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(done.stdout)
    handle = amso.cuda.SharedHandle.from_bytes(handle_bytes(pid, 12345, 1))
    with pytest.raises(ValueError, match=rf"the process that shared this array \(pid {pid}\) is gone"):
        handle.open()


def test_a_forged_handle_of_a_running_process_names_no_export():
    parent = os.getppid()
    handle = amso.cuda.SharedHandle.from_bytes(handle_bytes(parent, start_time(parent), 424242))
    with pytest.raises(ValueError, match=f"process {parent} has no shared array 424242 matching this handle"):
        handle.open()


def test_a_forged_handle_of_this_process_names_no_export():
    handle = amso.cuda.SharedHandle.from_bytes(handle_bytes(os.getpid(), start_time(os.getpid()), 99999))
    with pytest.raises(ValueError, match="this process shared no array 99999"):
        handle.open()


def test_a_handle_of_an_uncompiled_dtype_says_so():
    handle = amso.cuda.SharedHandle.from_bytes(handle_bytes(os.getpid(), 1, 1, dtype=b"uint16", dims=(2, 2)))
    with pytest.raises(TypeError, match="uint16 with ndim 2, which this module does not compile"):
        handle.open()


def test_host_arrays_and_pool_memory_are_not_shared():
    with pytest.raises(ValueError, match="this array's data is on the host"):
        amso.MemArray(4, np.float32).share()


@pytest.mark.parametrize("dims, dtype", [((5,), b"float32"), ((2, 3), b"float64"), ((1 << 62, 4), b"float32")])
def test_a_handle_describing_more_than_it_shares_is_refused(dims, dtype):
    handle = amso.cuda.SharedHandle.from_bytes(handle_bytes(os.getpid(), start_time(os.getpid()), 1, dtype=dtype, dims=dims))
    with pytest.raises(ValueError, match="more than the 16 bytes it shares: it is damaged or forged"):
        handle.open()


# --- two processes on one GPU ---


def child_main(connection, command):
    """A spawned importer: runs `command` against handles the parent sends."""
    import amso

    try:
        while True:
            message = connection.recv()
            if message is None:
                break
            kind, data = message
            handle = amso.cuda.SharedHandle.from_bytes(data) if data else None
            if kind == "read":
                b = handle.open()
                values, address = b.to_numpy().tolist()[:8], b.__cuda_array_interface__["data"][0]
                del b  # closed before the reply: the parent then sees no hold of this process
                gc.collect()
                connection.send(("ok", values, address))
            elif kind == "write":
                b = handle.open()
                b[0] = 42.0
                b[1] = -1.0
                del b
                gc.collect()
                connection.send(("ok", None, None))
            elif kind == "hold":
                b = handle.open()
                connection.send(("ok", b[0], None))
                time.sleep(600)
            elif kind == "cycle":
                b = handle.open()
                value = b[3]
                del b
                connection.send(("ok", value, None))
            elif kind == "device":
                try:
                    handle.open(device_id=1)
                    connection.send(("opened", None, None))
                except ValueError as error:
                    connection.send(("refused", str(error), None))
            elif kind == "export":
                mine = amso.MemArray(4, np.float32, on_device=True, shareable=True)
                connection.send(("ok", bytes(mine.share()), None))
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which fails the test
        connection.send(("error", repr(error), None))


class Child:
    def __init__(self):
        self.connection, theirs = SPAWN.Pipe()
        self.process = SPAWN.Process(target=child_main, args=(theirs, None), daemon=True)
        self.process.start()

    def ask(self, kind, handle=b"", timeout=120):
        self.connection.send((kind, bytes(handle) if not isinstance(handle, bytes) else handle))
        if not self.connection.poll(timeout):
            raise TimeoutError(kind)
        status, value, extra = self.connection.recv()
        assert status != "error", value
        return status, value, extra

    def close(self):
        if self.process.is_alive():
            self.connection.send(None)
            self.process.join(60)


@pytest.fixture()
def child():
    c = Child()
    yield c
    c.close()
    if c.process.is_alive():
        c.process.kill()


def in_use() -> int:
    """Bytes of amso's live device allocations, once the frees queued so far have run."""
    gc.collect()
    amso.flush_frees()
    return amso.memory_info()["in_use"]


@gpu
def test_another_process_reads_and_writes_the_same_memory(child):
    a = amso.MemArray(1024, np.float32, on_device=True, shareable=True)
    a.read_numpy_array(np.arange(1024, dtype=np.float32))
    handle = a.share()
    status, values, their_address = child.ask("read", handle)
    assert values == list(range(8))
    assert their_address != 0  # mapped in the other process's own address space
    child.ask("write", handle)
    assert a[0] == 42.0 and a[1] == -1.0 and a[2] == 2.0


@gpu
def test_the_memory_outlives_the_exporting_array(child):
    a = amso.MemArray(1 << 20, np.float64, on_device=True, shareable=True)
    a.read_numpy_array(np.full(1 << 20, 7.0))
    handle = a.share()
    del a
    gc.collect()
    assert amso.cuda.collect_shared() == 0  # kept: the handle is not opened yet (a pending hold)
    status, values, _ = child.ask("read", handle)
    assert values == [7.0] * 8
    held = in_use()
    assert amso.cuda.collect_shared() == 1
    assert in_use() <= held - (8 << 20)  # the export's 8 MiB went back


@gpu
def test_a_killed_importer_lets_the_memory_go(child):
    a = amso.MemArray(1 << 18, np.float32, on_device=True, shareable=True)
    a[0] = 5.0
    handle = a.share()
    status, value, _ = child.ask("hold", handle)
    assert value == 5.0
    del a
    gc.collect()
    assert amso.cuda.collect_shared() == 0  # the importer still runs and holds it
    os.kill(child.process.pid, signal.SIGKILL)
    child.process.join(30)
    held = in_use()
    assert amso.cuda.collect_shared() == 1
    assert in_use() <= held - (1 << 20)  # the export's 1 MiB went back


@gpu
def test_a_thousand_share_open_close_cycles_return_to_the_baseline(child, monkeypatch):
    monkeypatch.setenv("AMSO_SHARE_PENDING_SECONDS", "0")  # unopened handles of earlier tests hold nothing
    amso.cuda.collect_shared()
    baseline = in_use()
    for cycle in range(1000):
        if cycle == 1:  # the child's CUDA context exists from the first open on
            driver_free = amso.cuda.memory_info(0)[0]
        a = amso.MemArray(1024, np.float32, on_device=True, shareable=True)
        a[3] = float(cycle)
        status, value, _ = child.ask("cycle", a.share())
        assert value == float(cycle)
        del a
    gc.collect()
    amso.cuda.collect_shared()
    assert in_use() == baseline
    assert amso.cuda.memory_info(0)[0] >= driver_free - (64 << 20)  # the driver's view too
    left = [p for p in Path("/dev/shm").glob(f"amso-shared-{os.getpid()}-*")]
    assert left == [], left


@gpu
def test_the_exporting_process_opens_its_own_handle_as_a_plain_reference():
    a = amso.MemArray(16, np.float32, on_device=True, shareable=True)
    again = a.share().open()
    assert again.__cuda_array_interface__["data"][0] == a.__cuda_array_interface__["data"][0]
    again[2] = 9.0
    assert a[2] == 9.0


@gpu
def test_pool_memory_is_not_shared():
    with pytest.raises(ValueError, match=r"amso's\s+stream-ordered pool, which cannot be exported: create the array with shareable=True"):
        amso.MemArray(4, np.float32, on_device=True).share()


@gpu
@pytest.mark.parametrize("field", ["readonly", "dims"])
def test_a_live_handle_with_an_altered_description_names_no_export(field):
    a = amso.MemArray(16, np.float32, on_device=True, shareable=True)
    good = bytes(a.share())
    # The description's tail: ndim, the dims (8 bytes each), the read-only flag.
    forged = good[:-1] + b"\x01" if field == "readonly" else good[:-9] + struct.pack("<q", 8) + good[-1:]
    with pytest.raises(ValueError, match="matching this handle"):
        amso.cuda.SharedHandle.from_bytes(forged).open()


@gpu
def test_a_handle_opened_for_another_device_is_refused(child):
    a = amso.MemArray(16, np.float32, on_device=True, shareable=True)
    status, message, _ = child.ask("device", a.share())
    # With one GPU device 1 does not exist; with more, the memory is on device 0's GPU (by UUID).
    assert status == "refused" and "not on device 1" in message, message


@gpu
def test_a_handle_whose_exporter_exited_is_refused(child):
    status, data, _ = child.ask("export")
    child.close()
    child.process.join(60)
    with pytest.raises(ValueError, match="is gone, and its device memory with it"):
        amso.cuda.SharedHandle.from_bytes(data).open()


def echo_sum(queue_in, queue_out):
    import amso  # noqa: F401 - the reducer's module, for unpickling

    array = queue_in.get()
    queue_out.put((type(array).__name__, float(array.to_numpy().sum()), array.__cuda_array_interface__["data"][0]))


@gpu
def test_multiprocessing_sends_shareable_arrays_as_handles():
    amso.cuda.share_through_multiprocessing()
    queue_in, queue_out = SPAWN.Queue(), SPAWN.Queue()
    process = SPAWN.Process(target=echo_sum, args=(queue_in, queue_out))
    process.start()
    a = amso.MemArray(100, np.float64, on_device=True, shareable=True)
    a.read_numpy_array(np.arange(100.0))
    queue_in.put(a)
    name, total, _ = queue_out.get(timeout=120)
    process.join(60)
    assert name == "MemArray1DFloat64" and total == 4950.0
