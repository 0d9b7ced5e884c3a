"""`orch doctor --backend slurm`: what a Slurm cluster gives orch, asked of the cluster and of its nodes themselves.

Here: Slurm's commands and its controller. On every node that can take a job now: one task each (srun), which says
which container runtimes the node has and writes a file into the runs folder, which this host must then see (the
folder the nodes share: the run's records come home through it).
"""
from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Optional

from orchestrator.backends.slurm.commands import Slurm
from orchestrator.docker.doctor import Check
from orchestrator.errors import SlurmError
from orchestrator.paths import Paths, default_paths

COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "srun")
PROBE_SECONDS = 120.0
READY = ("idle", "mixed", "allocated", "completing")
# What each node's task prints: its name, then each runtime's version or "-".
PROBE = r"""ch=$(command -v ch-run >/dev/null && USER=${USER:-$(id -un)} ch-run --version 2>&1 | head -n 1 | tr -d ' ')
dk=$(docker version --format '{{.Server.Version}}' 2>/dev/null | tr -d ' ')
printf '%s ch-run=%s docker=%s\n' "$(hostname)" "${ch:--}" "${dk:--}"
touch "$1/.orch-doctor-$2-$SLURM_NODEID"
"""


def checks(paths: Optional[Paths] = None, slurm: Optional[Slurm] = None) -> list[Check]:
    """Slurm's checks, in the order a user fixes them."""
    paths = paths or default_paths()
    slurm = slurm or Slurm()
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        return [Check("slurm", False, f"{', '.join(missing)} not installed here",
                      "run orch on a login node of the cluster, or install Slurm's client with its slurm.conf")]
    out = [Check("slurm", True, "sbatch, squeue, scontrol, scancel and srun are here")]
    try:
        slurm.ping()
        nodes = slurm.nodes()
    except SlurmError as exc:
        return [*out, Check("slurm controller", False, exc.message, "ask the cluster's admins, or start slurmctld")]
    ready = [n for n in nodes if n.get("State", "").lower().split("+")[0] in READY]
    out.append(Check("slurm controller", True, f"answers; {len(nodes)} node(s), {len(ready)} up"))
    out.append(Check("slurm nodes", bool(ready), ", ".join(f"{n['NodeName']} {n.get('State', '?').lower()}"
                                                          for n in nodes) or "none",
                     "no node can take a job; `sinfo -R` says why"))
    if ready:
        out.extend(_probe(slurm, paths.runs, len(ready)))
    return out


def _probe(slurm: Slurm, runs: Path, count: int) -> list[Check]:
    """One task on each of ``count`` nodes: its runtimes, and a file in the runs folder this host must see."""
    runs.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(4)
    try:
        text = slurm.run(["srun", f"--nodes={count}", "--ntasks-per-node=1", "--time=2", "--job-name=orch-doctor",
                          "--overcommit", "sh", "-c", PROBE, "probe", str(runs), token], "srun (a probe on each node)",
                         seconds=PROBE_SECONDS)
    except SlurmError as exc:
        return [Check("slurm probe", False, exc.message, "the nodes must take a short job (`srun hostname`)")]
    finally:
        seen = sorted(runs.glob(f".orch-doctor-{token}-*"))
        for path in seen:
            path.unlink(missing_ok=True)
    out = []
    for line in sorted(text.splitlines()):
        name, _, rest = line.partition(" ")
        found = dict(part.split("=", 1) for part in rest.split() if "=" in part)
        charliecloud = found.get("ch-run", "-")
        docker = found.get("docker", "-")
        ok = charliecloud.startswith(tuple("0123456789")) or docker.startswith(tuple("0123456789"))
        out.append(Check(f"node {name}", ok, f"charliecloud {charliecloud if charliecloud != '-' else 'no'}, "
                                             f"docker {docker if docker != '-' else 'no'}",
                         "install charliecloud (--slurm-runtime charliecloud) or give jobs a Docker engine "
                         "(--slurm-runtime docker)"))
    out.append(Check("shared runs folder", len(seen) == count,
                     f"{len(seen)} of {count} node(s) wrote into {runs} where this host sees it",
                     "point ORCH_RUNS_DIR (and ORCH_CACHE_DIR) at storage every node mounts"))
    return out
