"""amso arrays in Dask: a LocalCluster of two worker processes maps a function over amso host
arrays and reduces the results. The arrays cross processes by pickle protocol 5, their data as
out-of-band buffers. Prints one JSON line.

    python examples/python/distributed/dask_map.py
"""

from __future__ import annotations

import json

import numpy as np
from dask.distributed import Client, LocalCluster

import amso


def square(a):
    """On a worker: a new amso array holding the squares (it travels back by pickle too)."""
    assert isinstance(a, amso.MemArray), type(a)
    out = amso.MemArray(a.shape, a.dtype)
    out.read_numpy_array(np.asarray(a) ** 2)
    return out


def total(arrays) -> float:
    return float(sum(np.asarray(a).sum() for a in arrays))


def main() -> None:
    chunks = []
    for k in range(8):
        a = amso.MemArray((256, 4), np.float64)
        a.read_numpy_array(np.full((256, 4), float(k)))
        chunks.append(a)
    # (dask's annotations type a synchronous client's results as possibly coroutines, and
    # dashboard_address as str though None turns the dashboard off: ignored for pyright.)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:  # pyright: ignore[reportArgumentType]
        with Client(cluster) as client:
            squares = client.map(square, chunks)
            result = client.submit(total, squares).result()
            who_has = client.who_has(squares)
            workers = {w for w in who_has.values() for w in w}  # pyright: ignore[reportAttributeAccessIssue]
            back: amso.MemArrayBase = client.gather(squares[3])  # pyright: ignore[reportAssignmentType]
    expected = sum(1024 * k * k for k in range(8))
    print(json.dumps({
        "result": result, "expected": expected, "ok": result == expected, "workers": len(workers),
        "returned_type": type(back).__name__, "returned_ok": bool((back.to_numpy() == 9.0).all()),
    }), flush=True)


if __name__ == "__main__":
    main()
