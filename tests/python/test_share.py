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
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import amso

GPU = amso.cuda.is_available()
gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device")
SPAWN = multiprocessing.get_context("spawn")


UID = os.geteuid()
SHM = Path("/dev/shm")
ROOT = UID == 0
as_root = pytest.mark.skipif(not ROOT, reason="plays another local user with setpriv, which needs root")
NOBODY = 65534


def handle_bytes(*, uid=UID, pid=None, serial=1, token=None, pending=1, uuid=bytes(16), nbytes=16,
                 memory=bytes(range(64)), event=bytes(64), dtype=b"float32", dims=(4,), readonly=0):
    """A handle's bytes, written field by field as the format says (for forged handles)."""
    token = token if token is not None else os.urandom(16)
    pid = os.getppid() if pid is None else pid
    out = b"AMSOSHR2" + struct.pack("<IIQ", uid, pid, serial) + token + struct.pack("<Q", pending) + uuid
    out += struct.pack("<Q", nbytes) + memory + event + bytes([len(dtype)]) + dtype + bytes([len(dims)])
    return out + b"".join(struct.pack("<q", d) for d in dims) + bytes([readonly])


def fields(handle: bytes) -> dict:
    uid, pid, serial = struct.unpack_from("<IIQ", handle, 8)
    return dict(uid=uid, pid=pid, serial=serial, token=handle[24:40])


def record_of(handle: bytes) -> bytes:
    """What the export's folder records: the handle less its pending hold, GPU and event."""
    return handle[:40] + bytes(8) + bytes(16) + handle[64:72] + handle[72:136] + bytes(64) + handle[200:]


def folder_of(handle: bytes) -> Path:
    f = fields(handle)
    return SHM / f"amso-shared-{f['uid']}-{f['token'].hex()}"


class Planted:
    """An export folder made by hand, as an exporter (or a forger) would: `live` locked by this
    process while `alive`, `lock`, and `record`."""

    def __init__(self, handle: bytes, *, alive=True, record=None):
        import fcntl

        self.path = folder_of(handle)
        self.path.mkdir(mode=0o700)
        os.chmod(self.path, 0o700)
        for name, data in (("live", b""), ("lock", b""), ("record", record_of(handle) if record is None else record)):
            (self.path / name).write_bytes(data)
            os.chmod(self.path / name, 0o600)
        self.live = open(self.path / "live", "rb")
        if alive:
            fcntl.flock(self.live, fcntl.LOCK_EX)

    def remove(self):
        self.live.close()
        subprocess.run(["rm", "-rf", str(self.path)], check=True)


def listed(folder: Path) -> None:
    """List an export folder in its user's index, as an exporter does (`share/lease.rs`): only
    listed folders are collected."""
    index = SHM / f"amso-index-{folder.name.split('-')[2]}"
    index.mkdir(mode=0o700, exist_ok=True)
    os.chmod(index, 0o700)
    (index / folder.name).touch()
    os.chmod(index / folder.name, 0o600)


@pytest.fixture()
def planted():
    made = []

    def plant(handle, **kwargs):
        made.append(Planted(handle, **kwargs))
        return made[-1]

    yield plant
    for p in made:
        p.remove()


def open_in_child(handle: bytes, user: int | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`SharedHandle.from_bytes(handle).open()` in a fresh process (as `user` if given), which
    prints the exception's type and message; a ticker thread shows the GIL was free meanwhile."""
    code = textwrap.dedent(f"""
        import threading, time, amso
        ticks = []
        def tick():
            while True:
                ticks.append(1)
                time.sleep(0.01)
        threading.Thread(target=tick, daemon=True).start()
        time.sleep(0.05)
        try:
            amso.cuda.SharedHandle.from_bytes({handle!r}).open()
            print("opened")
        except Exception as error:
            print(type(error).__name__, error)
    """)
    prefix = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    return subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


# --- handles refused before any driver call (no GPU needed) ---


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:40], "truncated"),
    (lambda b: b + b"\0", "after its end"),
    (lambda b: b"XMSOSHR2" + b[8:], "does not start as an amso handle"),
    (lambda b: b"AMSOSHR1" + b[8:], "does not start as an amso handle"),  # the format before 0.1's trust fixes
    (lambda b: b[:-1] + b"\x07", "read-only flag is 7"),
    (lambda b: b"", "truncated"),
])
def test_damaged_handles_are_refused(damage, message):
    with pytest.raises(ValueError, match=message):
        amso.cuda.SharedHandle.from_bytes(damage(handle_bytes()))


def test_a_handle_whose_exporter_is_gone_is_refused(planted):
    """The exporter's `live` lock is free (it was killed): its memory went with it."""
    handle = handle_bytes()
    planted(handle, alive=False)
    with pytest.raises(ValueError, match=rf"the process that shared this array \(pid {os.getppid()}\) is gone"):
        amso.cuda.SharedHandle.from_bytes(handle).open()


def test_a_forged_handle_names_no_export():
    handle = handle_bytes(serial=424242)
    with pytest.raises(ValueError, match=f"process {os.getppid()} has no shared array 424242 matching this handle"):
        amso.cuda.SharedHandle.from_bytes(handle).open()


@pytest.mark.parametrize("alter", [
    lambda h: h[:-1] + b"\x01",                               # read-only
    lambda h: h[:-9] + struct.pack("<q", 2) + h[-1:],          # the last dim
    lambda h: h[:64] + struct.pack("<Q", 1 << 20) + h[72:],    # the size shared
    lambda h: h[:72] + bytes(64) + h[136:],                    # the memory's IPC handle
])
def test_a_handle_with_an_altered_description_names_no_export(planted, alter):
    good = handle_bytes()
    planted(good)
    with pytest.raises(ValueError, match="has no shared array 1 matching this handle"):
        amso.cuda.SharedHandle.from_bytes(alter(good)).open()


def test_a_handle_of_an_uncompiled_dtype_says_so():
    handle = amso.cuda.SharedHandle.from_bytes(handle_bytes(dtype=b"uint17", dims=(2, 2)))
    with pytest.raises(TypeError, match="cannot open the shared array: amso has no compiled array for dtype uint17"):
        handle.open()


def test_host_arrays_and_pool_memory_are_not_shared():
    with pytest.raises(ValueError, match="this array's data is on the host"):
        amso.MemArray(4, np.float32).share()


@pytest.mark.parametrize("dims, dtype", [((5,), b"float32"), ((2, 3), b"float64"), ((1 << 62, 4), b"float32"),
                                         ((1,), b"particle"), ((2,), b"float32x4"), ((1 << 60,), b"particle")])
def test_a_handle_describing_more_than_it_shares_is_refused(dims, dtype):
    handle = amso.cuda.SharedHandle.from_bytes(handle_bytes(dtype=dtype, dims=dims))
    with pytest.raises(ValueError, match="more than the 16 bytes it shares: it is damaged or forged"):
        handle.open()


# --- /dev/shm is every local user's: what is planted there is refused, quickly ---


def test_a_planted_fifo_record_neither_hangs_nor_holds_the_gil(planted):
    handle = handle_bytes()
    p = planted(handle)
    (p.path / "record").unlink()
    os.mkfifo(p.path / "record", 0o600)
    done = open_in_child(handle, timeout=30)  # the old code blocked in read() with the GIL held
    assert done.stdout.startswith("ValueError") and "its record file is a FIFO, not a file" in done.stdout, done
    assert "Nothing was opened" in done.stdout


@pytest.mark.parametrize("target", ["/dev/zero", "elsewhere"])
def test_a_planted_record_link_is_not_followed(planted, target, tmp_path):
    handle = handle_bytes()
    p = planted(handle)
    if target == "elsewhere":  # a link to a record that matches
        target = tmp_path / "record"
        target.write_bytes(record_of(handle))
    (p.path / "record").unlink()
    os.symlink(target, p.path / "record")
    started = time.monotonic()
    with pytest.raises(ValueError, match="its record file is a symbolic link"):
        amso.cuda.SharedHandle.from_bytes(handle).open()
    assert time.monotonic() - started < 5  # the old code read 1 GiB of /dev/zero first


def test_a_planted_folder_link_is_not_followed(tmp_path):
    handle = handle_bytes()
    elsewhere = tmp_path / "export"
    elsewhere.mkdir(mode=0o700)
    for name, data in (("live", b""), ("lock", b""), ("record", record_of(handle))):
        (elsewhere / name).write_bytes(data)
        os.chmod(elsewhere / name, 0o600)
    os.symlink(elsewhere, folder_of(handle))
    try:
        with pytest.raises(ValueError, match="its export folder .* is not one amso made \\(it is a symbolic link\\)"):
            amso.cuda.SharedHandle.from_bytes(handle).open()
    finally:
        folder_of(handle).unlink()


@pytest.mark.parametrize("what, mode, message", [
    ("folder", 0o755, "it is a folder of mode 0755, not 0700"),
    ("record", 0o644, "its record file is a file of mode 0644, open to other users"),
    ("live", 0o666, "its live file is a file of mode 0666"),
])
def test_planted_files_open_to_other_users_are_refused(planted, what, mode, message):
    handle = handle_bytes()
    p = planted(handle)
    os.chmod(p.path if what == "folder" else p.path / what, mode)
    with pytest.raises(ValueError, match=message):
        amso.cuda.SharedHandle.from_bytes(handle).open()


def test_a_handle_of_another_user_is_refused():
    handle = handle_bytes(uid=UID + 1)
    with pytest.raises(PermissionError, match=f"an export of user {UID + 1}, and this process runs as user {UID}"):
        amso.cuda.SharedHandle.from_bytes(handle).open()


PLANT = """
import fcntl, os, sys, time
path, record = sys.argv[1], bytes.fromhex(sys.argv[2])
os.mkdir(path, 0o700)
for name, data in (("live", b""), ("lock", b""), ("record", record)):
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)
    os.chmod(os.path.join(path, name), 0o600)
live = open(os.path.join(path, "live"), "rb")
fcntl.flock(live, fcntl.LOCK_EX)
print("planted", flush=True)
time.sleep(600)
"""


def plant_as(user: int, path: Path, record: bytes) -> subprocess.Popen:
    """Another local user plants an export folder with a matching record and holds its `live`
    lock, as a live exporter would."""
    planter = subprocess.Popen(["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "/usr/bin/python3",
                                "-c", PLANT, str(path), record.hex()], stdout=subprocess.PIPE, text=True)
    assert planter.stdout.readline().strip() == "planted"
    return planter


@as_root
@pytest.mark.parametrize("victim", ["root", "daemon"])
@pytest.mark.parametrize("dtype, itemsize", [(b"float32", 4), (b"particle", 40), (b"float32x4", 16)])
def test_another_users_planted_export_is_refused(victim, dtype, itemsize):
    """User nobody plants the folder a handle of the victim names, with a matching record and
    its lock held: the victim (root, or the unprivileged user daemon) refuses it before any
    driver call, where the old code went on to map a handle of 1 TiB; records and vectors too."""
    victim_uid = 0 if victim == "root" else 1
    handle = handle_bytes(uid=victim_uid, nbytes=1 << 40, dims=((1 << 40) // itemsize,), dtype=dtype)
    planter = plant_as(NOBODY, folder_of(handle), record_of(handle))
    try:
        done = open_in_child(handle, user=None if victim == "root" else victim_uid)
        assert done.stdout.startswith("ValueError"), done
        assert f"not one amso made (it is owned by uid {NOBODY}, not uid {victim_uid})" in done.stdout, done
    finally:
        planter.kill()
        planter.wait()
        subprocess.run(["rm", "-rf", str(folder_of(handle))], check=True)


@as_root
def test_a_fifo_planted_by_another_user_does_not_hang_an_unprivileged_victim():
    handle = handle_bytes(uid=1)
    path = folder_of(handle)
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c",
                    f"import os; os.mkdir({str(path)!r}, 0o700); os.mkfifo({str(path / 'record')!r}, 0o666)"], check=True)
    try:
        done = open_in_child(handle, user=1, timeout=30)
        assert done.stdout.startswith("ValueError") and f"owned by uid {NOBODY}" in done.stdout, done
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=True)


@as_root
def test_another_user_can_neither_read_nor_remove_an_export(planted):
    handle = handle_bytes()
    p = planted(handle)
    attack = (f"import os, shutil\nfor act in (lambda: open({str(p.path / 'record')!r}, 'rb').read(), "
              f"lambda: os.unlink({str(p.path / 'live')!r}), lambda: shutil.rmtree({str(p.path)!r}), "
              f"lambda: os.rename({str(p.path)!r}, '/dev/shm/stolen')):\n"
              "    try:\n        act()\n        print('done')\n    except PermissionError:\n        print('refused')\n")
    done = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3",
                           "-c", attack], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["refused"] * 4, done
    assert sorted(os.listdir(p.path)) == ["live", "lock", "record"]


# --- exporters' folders: liveness by lock, whatever the PID namespace ---


def test_only_folders_of_exporters_that_are_gone_are_removed():
    """collect_shared() removes this user's export folders whose `live` lock is free, and none
    whose lock a process holds: a pid is no proof across PID namespaces (a container sharing
    /dev/shm), a lock is."""
    alive, dead = handle_bytes(pid=999_999_999), handle_bytes(pid=os.getpid())
    holder = subprocess.Popen([sys.executable, "-c", PLANT, str(folder_of(alive)), record_of(alive).hex()],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "planted"
    gone = Planted(dead, alive=False)
    for handle in (alive, dead):  # older than a folder being made, whose `live` is unlocked for an instant
        os.utime(folder_of(handle), (time.time() - 60, time.time() - 60))
        listed(folder_of(handle))
    try:
        amso.cuda.collect_shared()
        assert folder_of(alive).is_dir(), "a live exporter's folder was removed"
        assert not folder_of(dead).exists(), "a dead exporter's folder was kept"
        fresh = Planted(handle_bytes(), alive=False)  # being made: `live` not locked yet
        listed(fresh.path)
        amso.cuda.collect_shared()
        assert fresh.path.is_dir(), "a folder being made was taken for a dead exporter's"
        fresh.remove()
        holder.kill()
        holder.wait()
        amso.cuda.collect_shared()
        assert not folder_of(alive).exists()
    finally:
        holder.kill()
        gone.live.close()
        subprocess.run(["rm", "-rf", str(folder_of(alive)), str(folder_of(dead))], check=True)


@as_root
def test_other_users_folders_are_left_alone():
    handle = handle_bytes(uid=NOBODY)
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c",
                    f"import os; os.mkdir({str(folder_of(handle))!r}, 0o700)"], check=True)
    try:
        amso.cuda.collect_shared()
        assert folder_of(handle).is_dir()
    finally:
        subprocess.run(["rm", "-rf", str(folder_of(handle))], check=True)


@as_root
def test_folders_another_user_plants_by_the_hundred_thousand_cost_collect_nothing():
    """Case 6 of the second review: any local user can plant folders named after another user's
    exports. collect_shared() reads the user's own index, never the whole of /dev/shm: with
    200,000 planted folders it still takes under 50 ms, and leaves them alone."""
    tag = os.urandom(4).hex()
    plant = (f"import os\nfor i in range(200_000):\n    os.mkdir('/dev/shm/amso-shared-{os.getuid()}-{tag}' + format(i, '024x'), 0o700)")
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c", plant],
                   check=True, timeout=300)
    try:
        amso.cuda.collect_shared()  # warmed: the index is looked up once before
        took = []
        for _ in range(3):
            start = time.perf_counter()
            amso.cuda.collect_shared()
            took.append(time.perf_counter() - start)
        assert min(took) < 0.05, f"collect_shared() took {min(took) * 1000:.1f} ms beside 200,000 planted folders"
        assert len([n for n in os.listdir(SHM) if tag in n]) == 200_000, "a planted folder was touched"
    finally:
        subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c",
                        f"import os\nfor n in os.listdir('/dev/shm'):\n    '{tag}' in n and os.rmdir('/dev/shm/' + n)"],
                       check=True, timeout=300)


@as_root
def test_an_index_another_user_took_leaves_collecting_alone():
    """Another user makes `amso-index-UID` first: amso does not use it (not this user's), and
    collect_shared() still runs."""
    index, aside = SHM / f"amso-index-{os.getuid()}", SHM / f"amso-index-{os.getuid()}-aside"
    if index.exists():
        index.rename(aside)
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c",
                    f"import os; os.mkdir({str(index)!r}, 0o700)"], check=True)
    try:
        assert amso.cuda.collect_shared() >= 0
        assert index.stat().st_uid == NOBODY and not os.listdir(index), "amso wrote into another user's index"
    finally:
        index.rmdir()
        if aside.exists():
            aside.rename(index)


@pytest.mark.parametrize("variable", ["AMSO_SHARE_PENDING_SECONDS"])
@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "soon", "1e400"])
def test_environment_seconds_must_be_finite_numbers(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=f'{variable}="{value}" is not a number of seconds'):
        amso.cuda.collect_shared()


@pytest.mark.parametrize("value", ["1e20", "-5", "0"])
def test_environment_seconds_out_of_range_are_clamped(monkeypatch, value):
    monkeypatch.setenv("AMSO_SHARE_PENDING_SECONDS", value)
    assert amso.cuda.collect_shared() >= 0


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
            elif kind == "records":
                b = handle.open()
                records = b.to_numpy()
                answer = (type(b).__name__, b.dtype.descr, records["id"].tolist(), records["mass"].tolist())
                records["mass"] *= 2
                b.read_numpy_array(records)  # written back into the shared device memory
                del b
                gc.collect()
                connection.send(("ok", answer, None))
            elif kind == "lanes":
                b = handle.open()
                lanes = b.to_numpy()
                answer = (type(b).__name__, str(b.dtype), lanes.tolist())
                b.read_numpy_array(lanes * 2)  # written back into the shared device memory
                del b
                gc.collect()
                connection.send(("ok", answer, None))
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
    assert mine() == []


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


def mine() -> list[Path]:
    """This process's export folders (their record names the exporting pid)."""
    return [p for p in SHM.glob(f"amso-shared-{UID}-*") if fields((p / "record").read_bytes())["pid"] == os.getpid()]


@gpu
def test_export_folders_are_private_and_named_by_chance():
    a, b = (amso.MemArray(16, np.float32, on_device=True, shareable=True) for _ in range(2))
    first, second = bytes(a.share()), bytes(b.share())
    for handle in (first, second):
        folder = folder_of(handle)
        assert folder.is_dir() and folder in mine()
        assert (folder.stat().st_mode & 0o777, folder.stat().st_uid) == (0o700, UID)
        assert len(fields(handle)["token"]) == 16
    assert fields(first)["token"] != fields(second)["token"]


@gpu
def test_a_forged_handle_over_a_real_smaller_export_is_unmapped_and_refused(child, planted):
    """A same-user forger copies a real 16-byte export's memory handle into a handle, and a
    folder of its own, that claim 1 MiB: the driver maps the 16 bytes, and the mapping's size
    refuses the claim (the old code gave out-of-bounds device access)."""
    status, data, _ = child.ask("export")
    real = fields(data)
    forged = handle_bytes(pid=real["pid"], uuid=data[48:64], nbytes=1 << 20, memory=data[72:136], dims=(1 << 18,))
    planted(forged)
    with pytest.raises(ValueError, match=r"names is \d+ bytes, but the handle claims 1048576: it is damaged or forged"):
        amso.cuda.SharedHandle.from_bytes(forged).open()
    status, values, _ = child.ask("read", data)  # the real export is untouched and still opens
    assert status == "ok"


@gpu
@pytest.mark.parametrize("value", ["inf", "1e20", "nan"])
def test_an_exporter_exits_cleanly_whatever_its_exit_wait(value):
    code = textwrap.dedent("""
        import numpy as np, amso
        a = amso.MemArray(4, np.float32, on_device=True, shareable=True)
        h = a.share()
        print("shared", flush=True)
    """)
    env = dict(os.environ, AMSO_SHARE_EXIT_WAIT=value, AMSO_SHARE_PENDING_SECONDS="0")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "shared", done.stderr
    assert "panic" not in done.stderr.lower()
    if value == "nan":
        assert 'AMSO_SHARE_EXIT_WAIT="nan" is not a number of seconds' in done.stderr


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
    # Its exit hook removed the export's folder (a killed exporter's is refused as gone: above).
    with pytest.raises(ValueError, match="has no shared array 1 matching this handle: it was released"):
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


@gpu
def test_record_arrays_are_shared_with_their_layout(child):
    """A device record array (issue 40) opens in another process as the same record class,
    whose writes the exporter sees."""
    particle = np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])
    values = np.zeros(4, particle)
    values["id"], values["mass"] = [3, 1, 4, 1], [0.5, 1.5, 2.5, 3.5]
    a = amso.MemArray(4, "particle", on_device=True, shareable=True)
    a.read_numpy_array(values)
    status, (class_name, descr, ids, masses), _ = child.ask("records", a.share())
    assert (class_name, ids, masses) == ("MemArray1DParticle", [3, 1, 4, 1], [0.5, 1.5, 2.5, 3.5])
    assert np.dtype(descr) == particle
    np.testing.assert_array_equal(a.to_numpy()["mass"], [1.0, 3.0, 5.0, 7.0])


@gpu
def test_vector_arrays_are_shared_as_vectors(child):
    """A device float32x4 array opens in another process as the same vector class; both sides
    see the lanes as a last axis."""
    a = amso.MemArray(3, "float32x4", on_device=True, shareable=True)
    a.read_numpy_array(np.arange(12, dtype=np.float32).reshape(3, 4))
    status, (class_name, dtype, values), _ = child.ask("lanes", a.share())
    assert (status, class_name, dtype) == ("ok", "MemArray1DFloat32x4", "('<f4', (4,))")
    assert values == np.arange(12).reshape(3, 4).tolist()
    np.testing.assert_array_equal(a.to_numpy(), np.arange(12).reshape(3, 4) * 2)
