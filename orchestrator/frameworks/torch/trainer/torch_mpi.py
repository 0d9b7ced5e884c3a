"""DDP's gradients over MPI's shared memory (``--transport shm``): DDP keeps its buckets, its broadcast of rank 0's
weights and its order of the all-reduces; its communication hook hands each bucket to MPI instead of gloo.

Each bucket's all-reduce starts when DDP hands the bucket over (``Iallreduce``, in place on the bucket's memory)
and backward goes on computing the next bucket's gradients; the futures complete at the last bucket, which is
when DDP waits for them. MPICH moves a non-blocking collective on within MPI's calls, so each later bucket's hand-over
also tests the earlier ones. As gloo's hook does, the bucket is divided by the world size and summed over the ranks.
"""
from __future__ import annotations

import time
from typing import Any

from .mpi_wait import wait


def communicator(rank: int, world: int) -> tuple[Any, Any]:
    """MPI's world communicator (MPI initialised here); the rank must be this replica's, in a world of its size."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size != world or comm.rank != rank:
        raise RuntimeError(f"MPI placed rank {comm.rank} of {comm.size} in replica {rank} of {world}")
    return comm, MPI


class MpiHook:
    """DDP's communication hook over MPI, timed per bucket as the gloo hook is (``calls``, ``in_flight``)."""

    def __init__(self, torch: Any, comm: Any, mpi: Any, yielding: bool) -> None:
        self.torch, self.comm, self.mpi, self.yielding = torch, comm, mpi, yielding
        self.world = comm.size
        self.calls: list[float] = []  # when each bucket of this step was handed over
        self.in_flight: list[float] = []  # each bucket's all-reduce, handed over to done
        self._pending: list[tuple[Any, Any, Any, float]] = []  # (request, future, bucket tensor, handed over)

    # Unannotated on purpose: DDP inspects a hook's signature and refuses any annotation of its bucket or its return
    # but torch's own classes, and with postponed annotations every annotation here would be a string.
    def hook(self, _state, bucket):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        self.calls.append(began)
        tensor = bucket.buffer().div_(self.world)
        request = self.comm.Iallreduce(self.mpi.IN_PLACE, tensor.numpy(), op=self.mpi.SUM)
        future = self.torch.futures.Future()
        self._pending.append((request, future, tensor, began))
        if bucket.is_last():
            self._complete()
        else:
            self.mpi.Request.Testall([p[0] for p in self._pending])  # moves the earlier buckets on
        return future

    def _complete(self) -> None:
        for request, future, tensor, began in self._pending:
            wait(request, self.yielding)
            self.in_flight.append(time.perf_counter() - began)
            future.set_result(tensor)
        self._pending.clear()
