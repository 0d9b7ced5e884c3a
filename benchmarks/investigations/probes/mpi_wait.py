"""Runs as an orch `--script` job of `--framework mpi`: orch's own MPI trainer, with one way of waiting for the
all-reduce changed (benchmarks/investigations/mpi_wait.py).

    python3 mpi_wait.py WAY

WAY is one of:
  block      orch's loop as it is: the all-reduce op in the graph, a blocking MPI_Allreduce that MPICH completes
             by polling;
  numpy      the gradients leave the graph through tf.numpy_function for mpi4py's blocking Allreduce (orch's loop
             before the op);
  sleep:US   through tf.numpy_function, a non-blocking Iallreduce, tested every US microseconds with a sleep in
             between, so that a rank that waits gives its core to a rank that shares it;
  yield      the same, with sched_yield between the tests instead of a sleep;
  NAME=VALUE[,NAME=VALUE...]   MPICH control variables, set before MPI starts (e.g. its progress throttle), with
             the op.
Then it runs the trainer's own entry point, which reads the job orch planned from the environment.
"""
import os
import sys
import time

way = sys.argv[1] if len(sys.argv) > 1 else "block"

import orch_trainer.mpi_loop as loop  # noqa: E402
from orch_trainer.train import main  # noqa: E402

if way in ("numpy", "yield") or way.startswith("sleep:"):
    nap = float(way.split(":", 1)[1]) * 1e-6 if ":" in way else None

    def _leaving(tf):
        """The trainer's all-reduce outside the graph, timed as the op times itself: the gradients go through
        tf.numpy_function to mpi4py and back."""
        import numpy as np
        from mpi4py import MPI

        comm = MPI.COMM_WORLD

        def call(flat):
            out = np.empty_like(flat)
            began = time.perf_counter()
            if way == "numpy":
                comm.Allreduce(flat, out, op=MPI.SUM)
            else:
                request = comm.Iallreduce(flat, out, op=MPI.SUM)
                while not request.Test():
                    if nap is None:
                        os.sched_yield()
                    else:
                        time.sleep(nap)
            return out, np.float64(time.perf_counter() - began)

        def allreduce(flat):
            out, seconds = tf.numpy_function(call, [flat], [tf.float32, tf.float64], stateful=True)
            out.set_shape(flat.shape)
            return out, seconds

        return allreduce

    loop.allreduce_op = _leaving
elif way != "block":
    for pair in way.split(","):
        name, _, value = pair.partition("=")
        os.environ[name] = value

sys.exit(main())
