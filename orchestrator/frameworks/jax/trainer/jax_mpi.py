"""JAX's gradients over MPI's shared memory (``--transport shm``): each process a JAX of its own, its step split
where the gradients cross.

The step's two halves are jitted: this process's gradient of the global batch's mean loss (its rows' summed
loss over the global batch), flattened into one vector, and the optimiser's update from the summed vector. Between
them MPI sums the vectors over the ranks (``Iallreduce`` over shared memory), so every process applies the
serial run's update, up to the order of sums. Neither mpi4jax nor XLA's MPI collectives ship as wheels; both
would compile against MPI in the image, where mpi4py's all-reduce of a NumPy view is already there. The other
collectives of the run (its start, each epoch's figures and checkpoint) go through MPI too: no coordinator.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from .mpi_wait import wait

QUIET_POLL_S = 0.002  # how often a process waiting in ``sync`` tests whether the others have come


def communicator(rank: int, world: int) -> tuple[Any, Any]:
    """MPI's world communicator (MPI initialised here); the rank must be this replica's, in a world of its size."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size != world or comm.rank != rank:
        raise RuntimeError(f"MPI placed rank {comm.rank} of {comm.size} in replica {rank} of {world}")
    return comm, MPI


class MpiGroup:
    """The run's collectives outside the step, over MPI."""

    def __init__(self, comm: Any, mpi: Any, yielding: bool) -> None:
        self.comm, self.mpi, self.yielding = comm, mpi, yielding
        self.allreduce_seconds = 0.0  # the gradients' all-reduces of the run, waits included

    def sync(self, _name: str) -> None:
        """Every process here, without holding a core while waiting (a non-blocking barrier)."""
        request = self.comm.Ibarrier()
        while not request.Test():
            time.sleep(QUIET_POLL_S)

    def summed(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(self.comm.allreduce(np.asarray(values, np.float64), op=self.mpi.SUM))

    def gathered(self, value: int) -> list[int]:
        return [int(v) for v in self.comm.allgather(int(value))]

    def step(self, jax: Any, optax: Any, model: Any, optimizer: Any, params: Any, global_batch: int) -> Callable[..., Any]:
        """The training step: (params, opt_state, x, y) of this process's rows -> (params, opt_state, its rows'
        loss over the global batch, its rows' correct count)."""
        from jax.flatten_util import ravel_pytree

        _, unravel = ravel_pytree(params)

        def grads_of(p: Any, x: Any, y: Any) -> Any:
            def loss_of(q: Any) -> Any:
                logits = model.apply(q, x)
                return optax.softmax_cross_entropy_with_integer_labels(logits, y).sum() / global_batch, logits

            (loss, logits), grads = jax.value_and_grad(loss_of, has_aux=True)(p)
            return ravel_pytree(grads)[0], loss, (logits.argmax(-1) == y).sum()

        def apply(p: Any, opt_state: Any, flat: Any) -> Any:
            updates, opt_state = optimizer.update(unravel(flat), opt_state, p)
            return optax.apply_updates(p, updates), opt_state

        grads_jit, apply_jit = jax.jit(grads_of), jax.jit(apply, donate_argnums=(0, 1))

        def step(p: Any, opt_state: Any, x: Any, y: Any) -> Any:
            flat, loss, correct = grads_jit(p, x, y)
            summed = np.array(flat)  # writable, for MPI to sum in place
            began = time.perf_counter()
            wait(self.comm.Iallreduce(self.mpi.IN_PLACE, summed, op=self.mpi.SUM), self.yielding)
            self.allreduce_seconds += time.perf_counter() - began
            p, opt_state = apply_jit(p, opt_state, summed)
            return p, opt_state, loss, correct

        return step
