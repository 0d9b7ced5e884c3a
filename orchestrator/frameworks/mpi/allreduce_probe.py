"""MPI's probe for `orch bench allreduce`: MPI_Allreduce through mpi4py.

The harness (``bench_scripts/allreduce.py``) runs it as ``probe.py`` beside itself, in each rank's container or
host process. ``measure`` returns rank 0's result (None on the other ranks); ``leave`` ends the rank and says
whether the harness may then return normally."""
from __future__ import annotations

import time
from typing import Any

import numpy as np

API = "mpi"


def measure(sizes: list[int], iterations: int, warmup: int) -> dict[str, Any] | None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rows = []
    for size in sizes:
        buffer = np.ones(max(1, size // 4), dtype=np.float32)
        times = np.empty(iterations)
        for i in range(warmup + iterations):
            comm.Barrier()
            started = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
            if i >= warmup:
                times[i - warmup] = time.perf_counter() - started
        slowest = np.empty_like(times)
        comm.Reduce(times, slowest, op=MPI.MAX, root=0)
        rows.append({"bytes": int(buffer.nbytes), "samples": slowest.tolist()})
    library = MPI.Get_library_version().splitlines()[0]
    return {"api": "mpi", "ranks": comm.size, "library": library, "rows": rows} if comm.rank == 0 else None


def leave() -> bool:
    """Only once rank 0's file is written: MPI may end the other ranks' processes after this."""
    from mpi4py import MPI

    MPI.COMM_WORLD.Barrier()
    MPI.Finalize()
    return True  # a normal exit: after Finalize, os._exit made Hydra SIGKILL the job now and then (3 in 12 runs)
