"""Runs as an orch `--script` job of `--framework mpi`: orch's own MPI trainer, with one way of waiting for the
all-reduce changed (benchmarks/mpi_wait.py).

    python3 mpi_wait.py WAY

WAY is one of:
  block      orch's loop as it is: a blocking Allreduce, which MPICH completes by polling;
  sleep:US   a non-blocking Iallreduce, tested every US microseconds with a sleep in between, so that a rank
             that waits gives its core to a rank that shares it;
  yield      the same, with sched_yield between the tests instead of a sleep;
  NAME=VALUE[,NAME=VALUE...]   MPICH control variables, set before MPI starts (e.g. its progress throttle).
Then it runs the trainer's own entry point, which reads the job orch planned from the environment.
"""
import os
import sys
import time

way = sys.argv[1] if len(sys.argv) > 1 else "block"

import orch_trainer.mpi_loop as loop  # noqa: E402
from orch_trainer.train import main  # noqa: E402

if way.startswith("sleep:") or way == "yield":
    nap = float(way.split(":", 1)[1]) * 1e-6 if ":" in way else None

    class _Waiting(loop._Allreduce):
        """The trainer's all-reduce, timed as the trainer times it, waiting between tests instead of polling."""

        def __call__(self, flat):
            import numpy as np

            out = np.empty_like(flat)
            began = time.perf_counter()
            request = self.comm.Iallreduce(flat, out, op=self.sum)
            while not request.Test():
                if nap is None:
                    os.sched_yield()
                else:
                    time.sleep(nap)
            self.seconds += time.perf_counter() - began
            return out

    loop._Allreduce = _Waiting
elif way != "block":
    for pair in way.split(","):
        name, _, value = pair.partition("=")
        os.environ[name] = value

sys.exit(main())
