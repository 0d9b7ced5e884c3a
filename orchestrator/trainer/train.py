"""Entry point of a worker container: set up, run the job's framework's trainer entry, report a failure."""
from __future__ import annotations

import faulthandler
import importlib
import sys
import traceback

from . import contract
from .entries import ENTRIES
from .reporter import Reporter, job_from_env, role_from_env


def main() -> int:
    faulthandler.enable()  # a crash inside a framework's C++ still shows where Python was
    job, worker, num_workers, data_dir, out_dir = job_from_env()
    reporter = Reporter(out_dir, worker, role_from_env())
    try:
        if job["framework"] not in ENTRIES:
            raise ValueError(f"this image has no trainer for framework {job['framework']!r}; it has "
                             f"{', '.join(sorted(ENTRIES))}")
        # Each framework's entry (frameworks/<name>/trainer/ on the host), named by the image's entries.py.
        importlib.import_module(f".{ENTRIES[job['framework']]}", __package__).run(
            reporter, job, worker, num_workers, data_dir)
    except Exception as exc:  # report, then fail the container: the orchestrator reads the exit code
        reporter.event(contract.EVENT_ERROR, message=f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 1
    sys.stdout.flush()
    return 0
