"""The MPI framework's trainer entry: MPI is initialised before TensorFlow's threads start, then the
ranks train with TensorFlow, all-reducing through MPI (``mpi_loop``)."""
from __future__ import annotations

import os
from typing import Any

from .reporter import Reporter
from .session import start


def run(reporter: Reporter, job: dict[str, Any], worker: int, num_workers: int, data_dir: str) -> None:
    from .mpi_loop import communicator, train_with_mpi

    comm, mpi = communicator(num_workers)
    cores = len(os.sched_getaffinity(0))  # the container's, before the session pins the rank to its share
    train_with_mpi(start(reporter, job, worker, num_workers, data_dir), comm, mpi, cores)
