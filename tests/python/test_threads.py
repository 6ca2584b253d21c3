"""8 threads creating, locking, exporting and (with a GPU) moving shared and private arrays:
no deadlock, no crash, lock invariants hold, and no data is lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import amso

THREADS, ITERATIONS = 8, 300


def test_threads_share_and_own_arrays():
    shared = amso.MemArray((64,), np.int64)
    errors: list[BaseException] = []
    held = []  # lock ids seen holding the shared array; never two at once
    start = threading.Barrier(THREADS)
    gpu = amso.cuda.is_available()

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        own = amso.MemArray((32, 4), np.float32)
        try:
            start.wait()
            for i in range(ITERATIONS):
                own.read_numpy_array(np.full((32, 4), float(i), np.float32))
                view = np.from_dlpack(own)
                assert view[0, 0] == i
                if gpu and i % 50 == 0:
                    own.move_memory(amso.dlpack.kDLCUDA)
                    own.move_memory(amso.dlpack.kDLCPU)
                try:
                    with shared.get_dlpack() as ctx:
                        held.append(ctx.lock_id)
                        assert shared.locked and len(held) == 1
                        exported = np.from_dlpack(ctx)
                        exported[seed] += 1  # only the lock holder writes
                        held.remove(ctx.lock_id)
                except BufferError:
                    pass  # another thread holds the lock: the refusal is the invariant
                if rng.random() < 0.1:
                    amso.MemArray(int(rng.integers(1, 100)), np.float64)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "deadlock: a thread did not finish"
    assert not errors, errors
    assert not shared.locked and shared.export_count == 0
    counts = shared.to_numpy()
    assert counts[:THREADS].sum() > 0 and (counts[:THREADS] <= ITERATIONS).all() and counts[THREADS:].sum() == 0


def run_threads(*targets, timeout: float = 300) -> list[BaseException]:
    """Run each target in its own thread; the exceptions they raised."""
    errors: list[BaseException] = []

    def guarded(target):
        def run():
            try:
                target()
            except BaseException as error:  # noqa: BLE001 - reported by the caller
                errors.append(error)
        return run

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(thread.is_alive() for thread in threads), "deadlock: a thread did not finish"
    return errors


def test_sixteen_threads_create_read_write_export_and_lock_shared_arrays():
    import pickle

    try:
        import amso_user_example as typed  # typed array arguments from many threads
    except ImportError:
        typed = None
    threads, iterations = 16, 200
    counters = amso.MemArray((threads,), np.int64)  # slot i belongs to thread i
    table = amso.MemArray((8, 8), np.float64)
    table.read_numpy_array(np.arange(64.0).reshape(8, 8))
    successes = [0] * threads
    lock_refusals = [0] * threads
    start = threading.Barrier(threads)

    def worker(me: int):
        def run():
            rng = np.random.default_rng(me)
            start.wait()
            for i in range(iterations):
                assert (counters.shape, counters.ndim, counters.nbytes, counters.dtype) == ((threads,), 1, 128, np.int64)
                assert table.to_numpy().sum() == 2016.0 and np.from_dlpack(table)[7, 7] == 63.0
                try:
                    counters[me] = counters[me] + 1
                    successes[me] += 1
                except BufferError as error:  # the documented refusal while another thread holds the lock
                    assert "locked" in str(error)
                    lock_refusals[me] += 1
                if i % 10 == me % 10:
                    try:
                        with counters.get_dlpack() as ctx:
                            view = np.from_dlpack(ctx)
                            assert view.shape == (threads,) and counters.locked
                    except BufferError as error:
                        assert "locked" in str(error)
                private = amso.MemArray((int(rng.integers(1, 50)),), np.float32)
                private[0] = float(i)
                assert np.from_dlpack(private)[0] == i
                # NumPy's habits (issue 56) on the shared table and a private array: methods and
                # ufuncs through NumPy's view, `in`, in-place arithmetic and fill under the write rules.
                assert table.sum() == 2016.0 and 63.0 in table and (table + 0)[7, 7] == 63.0
                private += 1
                assert private[0] == i + 1
                private.fill(3.0)
                assert private.max() == 3.0 and bool(amso.zeros(1)) is False
                # `__dlpack__`'s one keyword cache, switched between call sites by the threads.
                if me % 2:
                    assert "versioned" in repr(table.__dlpack__(max_version=(1, 0), copy=None))
                else:
                    assert "versioned" not in repr(table.__dlpack__(copy=None, max_version=(0, 8)))
                # The newer paths on the shared arrays: buffers (export counting), copies, pickle.
                with memoryview(table) as view:
                    assert view[7, 7] == 63.0
                assert table.copy()[7, 7] == 63.0
                assert pickle.loads(pickle.dumps(table, protocol=5))[3, 3] == 27.0
                if typed is not None:
                    assert typed.count_true(np.array([True, False, bool(i % 2)])) == 1 + i % 2
        return run

    errors = run_threads(*(worker(me) for me in range(threads)))
    assert not errors, errors[:3]
    assert not counters.locked and counters.export_count == 0 and table.export_count == 0
    table.move_memory(amso.dlpack.kDLCPU)  # no buffer export left behind: nothing pins the table
    with memoryview(table):
        with pytest.raises(BufferError, match="1 live buffer export"):
            table.move_memory(amso.dlpack.kDLCUDA)
    np.testing.assert_array_equal(counters.to_numpy(), successes)
    np.testing.assert_array_equal(table.to_numpy(), np.arange(64.0).reshape(8, 8))
    assert sum(successes) > 0


@pytest.fixture(scope="module")
def capi(tmp_path_factory):
    import ctypes

    from test_capi import ROOT, build

    output = tmp_path_factory.mktemp("c") / "test_capi.so"
    library = ctypes.PyDLL(str(build(ROOT / "tests" / "c" / "test_capi.c", output)))
    library.placement.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int32)]
    library.placement.restype = ctypes.c_int
    return library


def readers_during(long_operation, array, capi, allowed: dict[int, set[int]]):
    """While `long_operation` runs, one thread reads the array's facts from Python and another
    reads its (data, device type) from C; both must succeed every time and every C reading must
    be one of `allowed` (device type -> data addresses). Returns the errors and the readings."""
    import ctypes

    done = threading.Event()
    seen: list[tuple[int, int]] = []
    shape = array.shape

    def python_reader():
        while not done.is_set():
            assert array.shape == shape and array.ndim == len(shape)
            assert array.nbytes == array.size * array.itemsize
            assert array.on_device in (True, False) and not array.locked

    def c_reader():
        data, device_type = ctypes.c_void_p(), ctypes.c_int32()
        while not done.is_set():
            assert capi.placement(array, ctypes.byref(data), ctypes.byref(device_type)) == 0
            seen.append((device_type.value, data.value or 0))

    def writer():
        try:
            long_operation()
        finally:
            done.set()

    errors = run_threads(writer, python_reader, c_reader)
    bad = [(kind, hex(address)) for kind, address in set(seen) if address not in allowed.get(kind, set())]
    return errors, seen, bad


def test_typed_exports_through_the_import_table_from_eight_threads(capi):
    """The typed C exports (through the table amso_import() loads) from 8 threads at once, each
    over arrays the others also read and over a wrong object, while a ninth writes the array."""
    import ctypes

    capi.typed_codes.argtypes, capi.typed_codes.restype = [ctypes.py_object, ctypes.py_object], ctypes.c_int
    right, wrong = amso.MemArray((4, 5, 6), np.float32), amso.MemArray((4, 5, 6), np.float64)

    def reader():
        for _ in range(2000):
            assert capi.typed_codes(right, wrong) == 0b111111

    def writer():
        for value in range(200):
            right[...] = value

    assert run_threads(writer, *[reader] * 8) == []


def test_facts_and_c_header_stay_readable_during_a_long_copy_in(capi):
    n = 32 << 20  # 256 MiB of float64: each copy in takes a while, detached
    array = amso.MemArray((n,), np.float64)
    host = np.from_dlpack(array).ctypes.data
    source = np.ones(n)
    errors, seen, bad = readers_during(lambda: [array.read_numpy_array(source * k) for k in range(4)], array, capi,
                                       {1: {host}})
    assert not errors, errors
    assert seen and not bad, bad
    assert array[n - 1] == 3.0


@pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
def test_moves_of_one_gib_while_python_and_c_read(capi):
    # Before the frozen object model: `RuntimeError: Already mutably borrowed` in the reader.
    n = 1 << 28  # 1 GiB of float32
    array = amso.MemArray((n,), np.float32)
    array[n - 1] = 7.0
    host = np.from_dlpack(array).ctypes.data
    array.move_memory(amso.dlpack.kDLCUDA)
    device = array.__cuda_array_interface__["data"][0]
    array.move_memory(amso.dlpack.kDLCPU)

    def moves():
        for _ in range(4):
            array.move_memory(amso.dlpack.kDLCUDA)
            array.move_memory(amso.dlpack.kDLCPU)

    errors, seen, bad = readers_during(moves, array, capi, {1: {host}, 2: {device}})
    assert not errors, errors
    assert not bad, f"torn header readings: {bad}"
    assert {kind for kind, _ in seen} == {1, 2}, "the C reader saw both placements"
    assert array[n - 1] == 7.0


@pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
def test_shares_and_opens_while_python_and_c_read(capi):
    # share() and open() release the GIL for the driver and the export's folder: the array's
    # facts and C header stay readable, and two threads sharing one array make one export.
    array = amso.MemArray((1 << 20,), np.float32, on_device=True, shareable=True)
    array[5] = 3.0
    device = array.__cuda_array_interface__["data"][0]
    serials = set()

    def shares():
        for _ in range(200):
            handle = array.share()
            serials.add(repr(handle).split("serial=")[1])
            assert handle.open()[5] == 3.0  # this process: the same memory, referenced

    errors, seen, bad = readers_during(shares, array, capi, {2: {device}})
    second = run_threads(shares, shares)
    assert not errors and not second, errors + second
    assert seen and not bad, bad
    assert len(serials) == 1, f"one export per memory, got serials {serials}"


@pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
def test_staged_moves_of_four_threads_at_once_keep_their_data():
    # Pageable moves of 48 MiB and a bit go through the staging ring (three chunks, a short
    # last one): four threads' crews and rings at once, while each array's facts stay readable.
    n = (48 << 20) // 8 + 1237  # float64 keeps value + position exact
    arrays = [amso.asarray(np.arange(n, dtype=np.float64) * (k + 1)) for k in range(4)]

    def mover(k):
        def run():
            for _ in range(3):
                arrays[k].move_memory(amso.dlpack.kDLCUDA)
                arrays[k].add_index_tuple()  # position added on the device: a misplaced chunk shows
                arrays[k].move_memory(amso.dlpack.kDLCPU)
        return run

    def reader():
        for _ in range(200):
            for array in arrays:
                assert array.shape == (n,) and array.nbytes == 8 * n

    errors = run_threads(*(mover(k) for k in range(4)), reader)
    assert not errors, errors[:3]
    for k, array in enumerate(arrays):
        expected = np.arange(n, dtype=np.float64) * (k + 4)  # three add_index_tuple calls
        np.testing.assert_array_equal(array.to_numpy(), expected)


@pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
def test_device_arrays_free_through_their_allocator_while_another_thread_switches_it():
    # An allocation reads the plugged-in allocator without a lock while none is plugged in;
    # four threads make and drop device arrays while a fifth plugs a Python allocator in and
    # out. Every block that allocator made must come back to it, and no other block.
    import gc

    runtime = pytest.importorskip("cupy").cuda.runtime
    made, freed, ledger = [], [], threading.Lock()

    def malloc(size, device_id, stream):
        runtime.setDevice(device_id)
        pointer = runtime.malloc(size)
        with ledger:
            made.append(pointer)
        return pointer

    def free(pointer, size, device_id, stream):
        runtime.free(pointer)
        with ledger:
            freed.append(pointer)

    makers_left = [4]

    def switcher():
        plugged = False
        while makers_left[0]:
            plugged = not plugged
            if plugged:
                amso.set_allocator(malloc, free, name="switching")
            else:
                amso.set_allocator()
            time.sleep(0.0002)  # lets the makers allocate under each allocator

    def maker():
        try:
            for _ in range(100):
                a = amso.MemArray(64, np.float32, on_device=True)
                a.add_index_tuple()
                assert a.to_numpy()[63] == 63.0
                del a
        finally:
            with ledger:
                makers_left[0] -= 1

    previous = amso.deferred_limits()
    pool_before = sum(amso.memory_info()[key] for key in ("hits", "misses"))
    amso.deferred_limits(count=1)
    try:
        errors = run_threads(switcher, maker, maker, maker, maker)
    finally:
        amso.set_allocator()
        gc.collect()
        amso.flush_frees()
        amso.deferred_limits(*previous)
    assert not errors, errors[:3]
    pool_after = sum(amso.memory_info()[key] for key in ("hits", "misses"))
    assert made and pool_after > pool_before, "both the Python allocator and amso's pool served arrays"
    assert sorted(freed) == sorted(made)


def test_threads_creating_arrays_of_many_dtypes_at_once_each_get_their_class():
    # The class cache is filled by whichever thread sees a (dtype, ndim) first, and read
    # without a lock. In a fresh process (an empty cache), 8 threads race on the same keys.
    code = textwrap.dedent(
        """
        import threading, numpy as np, amso
        from amso._amso import _class_cache_len
        numpy_names = {n for n, _, _, lanes, _, module in amso._amso._dtypes() if module is None and lanes == 1}
        pairs = [(n, d) for n, d in amso.supported() if n in numpy_names]
        barrier, failures = threading.Barrier(8), []
        def work(seed):
            try:
                barrier.wait()
                for name, ndim in pairs[seed:] + pairs[:seed]:
                    for dtype in (np.dtype(name), getattr(np, name if name != "bool" else "bool_"), name):
                        for make in (amso.empty, amso.MemArray):
                            array = make((1,) * ndim, dtype)
                            if type(array) is not amso.class_for((1,) * ndim, name):
                                failures.append(f"{make.__name__}({name!r}, {ndim}) made {type(array).__name__}")
            except BaseException as error:
                failures.append(repr(error))
        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert failures == [], failures[:5]
        # One entry per (key, ndim), however many threads raced to add it.
        assert _class_cache_len() == 3 * len(pairs), (_class_cache_len(), len(pairs))
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_typed_arguments_from_every_host_protocol_across_threads():
    """16 threads pass the same shared inputs, through every host protocol typed arguments read
    (NumPy and a subclass, memoryview, array.array, an amso array, TVM-FFI where installed),
    to two extension crates while each writes rows of its own: every result right, every
    borrow released, every buffer view given back."""
    import array

    ue = pytest.importorskip("amso_user_example")
    ext = pytest.importorskip("amso_rust_ext")
    values = np.arange(64.0)
    shared = [values, values.view(np.ndarray).view(type("Sub", (np.ndarray,), {})), memoryview(values),
              array.array("d", values.tolist()), amso.asarray(values.copy())]
    try:
        import tvm_ffi

        shared.append(tvm_ffi.from_dlpack(values.copy()))
    except ImportError:
        pass
    rows = np.zeros((16, 64))
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def worker(index: int) -> None:
        try:
            start.wait()
            for i in range(200):
                source = shared[(index + i) % len(shared)]
                assert ue.sum_any(source) == 2016.0
                # Reads the shared input, returns the source's framework, written to its own row.
                rows[index] = np.from_dlpack(ext.axpy(1.0, source, rows[index]))
                ext.mult(0.5, rows[index])
                if i % 50 == 0:  # another thread's row for writing: refused or granted, never both
                    try:
                        ue.while_writing(rows[(index + 1) % 16], lambda: None)
                    except BufferError:
                        pass
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "deadlock: a thread did not finish"
    assert not errors, errors
    # Each round adds the values, then halves: r -> (r + v) / 2, which after 200 rounds from 0
    # is v * (1 - 2**-200).
    expected = values * (1 - 0.5 ** 200)
    np.testing.assert_allclose(rows, np.tile(expected, (16, 1)))
    assert amso._amso._live_borrows() == 0
    np.testing.assert_array_equal(values, np.arange(64.0))


def test_new_element_kinds_and_conversions_across_threads():
    """16 threads pass shared records, object arrays, timedeltas, lists for ArrayLike and
    misaligned arrays (read through a staged copy) while each writes records and timedeltas of
    its own, builds and resizes results from nested lists (NewArray), and makes, adopts and reads
    amso record arrays: every result right, every borrow
    released, no descriptor cache confused."""
    peers = pytest.importorskip("amso_peers")
    particle = np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])
    records = np.zeros(32, particle)
    records["mass"] = np.arange(32)
    objects = np.array([object(), 1, "two"] * 8, dtype=object)
    minutes = np.ones(64, "timedelta64[m]")
    raw = bytearray(8 * 64 + 1)
    misaligned = np.frombuffer(raw, dtype=np.float64, offset=1, count=64)
    misaligned[:] = np.arange(64.0)
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def worker(index: int) -> None:
        own = np.zeros(8, particle)
        own["vel"] = index
        seconds = np.zeros(64, "timedelta64[s]")
        wrong = np.zeros(4, [("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f4"), ("id", "<i8")])
        try:
            start.wait()
            for i in range(100):
                assert peers.record_total_mass(records) == 496.0
                assert peers.amso_head(objects) is objects[0]
                peers.amso_add_minutes_to_seconds(seconds, minutes)
                assert peers.like_i32([index, i, 3])[1] == [index, i, 3]
                assert peers.like_f64(misaligned)[1][63] == 63.0
                peers.record_kick(own, 1.0)
                # Results built in the caller's framework (NewArray): filled and resized per call.
                rows = [[float(index), float(i)], [1.0, 2.0]]
                assert peers.from_vec2_like(misaligned, rows).tolist() == rows
                grown = peers.resized_like(records[:1]["mass"], rows, [3, 2])
                assert grown.tolist() == rows + [[0.0, 0.0]]
                # amso's own record arrays: made, adopted from the shared NumPy array (the
                # layout caches under contention), read by a Rust function, exported as bytes.
                mine = amso.MemArray(4, "particle")
                mine["mass"] = index
                assert peers.record_total_mass(mine) == 4.0 * index
                adopted = amso.asarray(records, copy=False)
                assert adopted["mass"][31] == 31.0 and len(bytes(adopted)) == 32 * 40
                if i % 25 == 0:
                    with pytest.raises(TypeError, match="field 2 `mass` is float32"):
                        peers.record_total_mass(wrong)
            assert (seconds == np.timedelta64(6000, "s")).all()
            np.testing.assert_array_equal(own["pos"], np.full((8, 3), 100.0 * index, np.float32))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "deadlock: a thread did not finish"
    assert not errors, errors
    assert amso._amso._live_borrows() == 0


def test_an_ops_eager_entry_from_eight_threads_on_shared_inputs_and_one_contested_output():
    """An op's eager entry (docs/ops.md) runs its function without the GIL: 8 threads call it
    at once, each writing its own output from one shared input, and each also asks to write one
    output every thread shares, half of them its forward running sum and half its reverse one.
    Each call gets the shared output or is refused with the borrow error: the shared output ends
    as one writer's whole result (two writers at once would leave a mix of both), every other
    result is the sequential one, and no borrow stays."""
    ue = pytest.importorskip("amso_user_example")
    x = np.arange(100_000, dtype=np.float64) % 7
    expected, reversed_sum = np.cumsum(x), np.cumsum(x[::-1])[::-1]
    contested = np.zeros_like(x)
    refused, written, errors = [0] * THREADS, [0] * THREADS, []
    start = threading.Barrier(THREADS)

    def worker(index: int) -> None:
        own = np.empty_like(x)
        try:
            start.wait()
            for i in range(40):
                ue.running_sum(x, own, i % 2 == 1, -1)
                np.testing.assert_array_equal(own, expected if i % 2 == 0 else reversed_sum)
                try:
                    ue.running_sum(x, contested, index % 2 == 1, -1)
                    written[index] += 1
                except BufferError as error:
                    assert "in this call or in another one still running" in str(error)
                    refused[index] += 1
        except BaseException as error:  # noqa: BLE001 - reported below with its thread
            errors.append((index, error))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert not errors, errors
    assert sum(written) + sum(refused) == THREADS * 40 and sum(written) > 0
    assert np.array_equal(contested, expected) or np.array_equal(contested, reversed_sum), "a mix of two writers"
    assert amso._amso._live_borrows() == 0
