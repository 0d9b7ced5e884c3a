"""A user's JAX script under orch: ``python3 -m orch_trainer.jax_env python3 -u SCRIPT ARGS...`` runs the script in
this process, where ``jax.distributed.initialize()`` with no arguments finds the job.

orch sets what Kubeflow Trainer's JAX runtime sets, JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID,
so a script that passes them to ``initialize`` runs unchanged. JAX itself reads only the first: the process count
and id come from a cluster it detects (Slurm, Open MPI, ...). This launcher adds one more such cluster, found where
those two variables are set, so that the bare ``jax.distributed.initialize()`` of JAX's own examples works too.
A command that is not a Python script runs as it is.
"""
from __future__ import annotations

import os
import runpy
import sys
from typing import Any, Optional


def _register_cluster() -> None:
    """Teach JAX's cluster detection the environment orch sets (JAX registers every ClusterEnv subclass)."""
    try:
        from jax._src.clusters import ClusterEnv
    except ImportError:  # another JAX than the image's: the script passes the variables itself, or fails saying so
        return

    class OrchCluster(ClusterEnv):  # JAX's own, imported at run time (Any here)
        name = "orch"

        @classmethod
        def is_env_present(cls) -> bool:
            return all(os.environ.get(v) for v in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"))

        @classmethod
        def get_coordinator_address(cls, timeout_secs: Optional[int], override_coordinator_port: Any = None) -> str:
            return os.environ["JAX_COORDINATOR_ADDRESS"]

        @classmethod
        def get_process_count(cls) -> int:
            return int(os.environ["JAX_NUM_PROCESSES"])

        @classmethod
        def get_process_id(cls) -> int:
            return int(os.environ["JAX_PROCESS_ID"])

        @classmethod
        def get_local_process_id(cls) -> Optional[int]:
            return None


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python3 -m orch_trainer.jax_env COMMAND [ARGS...]")
    python = os.path.basename(argv[0]).startswith("python")
    script = argv[1:]
    while python and script and script[0].startswith("-") and script[0] in ("-u", "-B"):
        script = script[1:]
    if not python or not script or script[0].startswith("-"):
        os.execvp(argv[0], argv)  # not a script this launcher can run in its own process
    _register_cluster()
    sys.argv = script
    sys.path.insert(0, os.path.dirname(os.path.abspath(script[0])))
    runpy.run_path(script[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
