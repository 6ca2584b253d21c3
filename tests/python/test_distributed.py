"""The distributed examples (examples/python/distributed/): MPI with two ranks and Dask with two
worker processes here, NCCL with two GPUs where a machine has them. Each example prints JSON
that the test checks; the reference values are computed by hand in the examples' assertions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import amso

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python" / "distributed"


def reports(command, timeout=300):
    """The JSON objects a command printed (ranks' lines may arrive interleaved on one line)."""
    # Open MPI's mpiexec refuses to run as root unless told (GPU machines run tests as root);
    # MPICH ignores these.
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    decoder, text, found = json.JSONDecoder(), run.stdout, []
    position = text.find("{")
    while position != -1:
        value, end = decoder.raw_decode(text, position)
        found.append(value)
        position = text.find("{", end)
    return found


def mpiexec():
    pytest.importorskip("mpi4py")
    found = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec (pip install mpich)")
    return found


def test_mpi_sends_receives_and_reduces_amso_arrays():
    command = [mpiexec(), "-n", "2", sys.executable, str(EXAMPLES / "mpi_exchange.py")]
    if amso.cuda.is_available():
        command.append("--device")
    by_rank = {r["rank"]: r for r in reports(command)}
    assert by_rank[0]["zero_copy_send"] and by_rank[1]["received_ok"]
    assert all(r["allreduce_ok"] for r in by_rank.values())
    if amso.cuda.is_available():
        assert all(r["device_allreduce_ok"] for r in by_rank.values()), by_rank


def test_dask_maps_and_reduces_amso_arrays_across_processes():
    pytest.importorskip("distributed")
    (report,) = reports([sys.executable, str(EXAMPLES / "dask_map.py")])
    assert report["ok"] and report["workers"] == 2, report
    assert report["returned_type"] == "MemArray2DFloat64" and report["returned_ok"]


@pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")
def test_dask_workers_exchange_device_arrays_as_shared_handles():
    pytest.importorskip("distributed")
    (report,) = reports([sys.executable, str(EXAMPLES / "dask_share.py")])
    assert report["ok"] and report["two_processes"], report


def test_dask_serialises_amso_arrays_out_of_band():
    protocol = pytest.importorskip("distributed.protocol")
    a = amso.MemArray((256, 256), np.float64)
    header, frames = protocol.serialize(a, serializers=("pickle",))
    assert any(memoryview(frame).nbytes == a.nbytes for frame in frames), [memoryview(f).nbytes for f in frames]
    assert sum(memoryview(frame).nbytes for frame in frames) < a.nbytes + 4096
    back = protocol.deserialize(header, frames)
    assert type(back) is type(a) and (back.to_numpy() == 0).all()


@pytest.mark.skipif(not amso.cuda.is_available() or amso.cuda.device_count() < 2, reason="needs two GPUs")
def test_nccl_all_reduce_and_broadcast_on_amso_device_arrays():
    pytest.importorskip("torch")
    by_rank = reports([sys.executable, str(EXAMPLES / "nccl_allreduce.py")], timeout=600)
    assert len(by_rank) >= 2
    assert all(r["zero_copy"] and r["all_reduce_ok"] and r["broadcast_ok"] for r in by_rank), by_rank
