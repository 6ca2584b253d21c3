"""amso arrays as MPI buffers, with mpi4py: run with two ranks,

    mpiexec -n 2 python examples/python/distributed/mpi_exchange.py [--device]

Host arrays go through the buffer protocol: the sender hands MPI the array's own memory (no
copy), the receiver receives into an amso array, and Allreduce writes into one. With
`--device` (and a GPU per rank), device arrays go to MPI through DLPack where the MPI is
CUDA-aware; where it is not (the MPICH wheel from PyPI is not), they are staged through host
copies, and the script says so. Prints one JSON line per rank.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from mpi4py import MPI

import amso


def cuda_aware() -> bool:
    try:
        return bool(getattr(MPI, "Query_cuda_support")())  # MPIX, absent from mpi4py's stubs
    except (AttributeError, NotImplementedError):  # an MPI without the MPIX query
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", action="store_true", help="also exchange device arrays")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    assert size == 2, "run with two ranks: mpiexec -n 2 ..."
    n = 1 << 16
    report: dict[str, object] = {"rank": rank}

    # Point to point: rank 0 sends its array's own memory; rank 1 receives into an amso array.
    if rank == 0:
        a = amso.MemArray(n, np.float64)
        a.read_numpy_array(np.arange(n, dtype=np.float64))
        sent_from = MPI.buffer(a).address  # the memory MPI reads: the array's, not a copy
        report["zero_copy_send"] = sent_from == np.from_dlpack(a).ctypes.data
        comm.Send(a, dest=1, tag=7)
    else:
        b = amso.MemArray(n, np.float64)
        comm.Recv(b, source=0, tag=7)
        report["received_ok"] = bool((b.to_numpy() == np.arange(n)).all())

    # A collective into an amso array: every rank contributes rank + 1.
    mine = amso.MemArray(n, np.float32)
    mine.read_numpy_array(np.full(n, rank + 1, np.float32))
    total = amso.MemArray(n, np.float32)
    comm.Allreduce(mine, total, op=MPI.SUM)
    report["allreduce_ok"] = bool((total.to_numpy() == sum(range(1, size + 1))).all())

    if args.device:
        report["cuda_aware_mpi"] = cuda_aware()
        d = amso.MemArray(n, np.float32, device_id=rank % amso.cuda.device_count(), on_device=True)
        d.add_index_tuple()  # device data: 0, 1, 2, ...
        out = amso.MemArray(n, np.float32, device_id=d.device_id, on_device=True)
        if report["cuda_aware_mpi"]:
            comm.Allreduce(d, out, op=MPI.SUM)  # mpi4py reads DLPack / __cuda_array_interface__
            got = out.to_numpy()
            report["device_path"] = "CUDA-aware MPI, device buffers through DLPack"
        else:
            host_in, host_out = d.to_numpy(), np.empty(n, np.float32)
            comm.Allreduce(host_in, host_out, op=MPI.SUM)
            out.read_numpy_array(host_out)
            got = out.to_numpy()
            report["device_path"] = "MPI is not CUDA-aware: staged through host copies"
        report["device_allreduce_ok"] = bool((got == size * np.arange(n, dtype=np.float32)).all())
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
