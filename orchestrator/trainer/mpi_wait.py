"""How an MPI rank waits for its gradients' all-reduce in PyTorch's and JAX's trainers under ``--transport shm``
(``--framework mpi``'s graph op polls at every N unless ORCH_MPI_WAIT=yield: yielding measured no better there,
benchmarks/investigations/transport.md).

MPICH's blocking calls poll: a rank waiting for a slower one holds its core. With a core per rank that costs
nothing, and polling answers soonest. Where ranks outnumber the cores, the rank being waited for may be the one
that needs the core; there a waiting rank gives it up between its tests (``sched_yield``: the scheduler runs a
neighbour that is ready, and comes back at once when there is none). ``ORCH_MPI_WAIT`` (poll or yield) overrides
the choice, for measuring one against the other (benchmarks/floor.py's ``_env``).
"""
from __future__ import annotations

import os
from typing import Any


def crowded(ranks: int, cores: int) -> bool:
    """Whether ``ranks`` ranks on ``cores`` cores outnumber them, so that a waiting rank should give up its core."""
    chosen = os.environ.get("ORCH_MPI_WAIT", "")
    return chosen == "yield" if chosen in ("poll", "yield") else ranks > max(1, cores)


def wait(request: Any, yielding: bool) -> None:
    """Wait for ``request`` (an mpi4py request): in MPICH's own polling wait, or, ``yielding``, testing it and
    giving up the core between tests."""
    if not yielding:
        request.Wait()
        return
    while not request.Test():
        os.sched_yield()
