"""The one boundary to Slurm: every sbatch, squeue, scontrol and scancel call goes through ``Slurm.run``, bounded in
time, with Slurm's words translated into orch's errors. The cluster is the one the environment names (``SLURM_CONF``
or the node's own configuration), as for a user's own `sbatch`."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional, Sequence

from orchestrator.errors import SlurmError, SlurmUnreachable

QUICK = 30.0  # seconds for a query or a submission: the controller answers in well under one
INSTALL_HINT = ("orch runs Slurm jobs with the cluster's own commands (sbatch, squeue, scontrol, scancel); run orch on "
                "a login node of the cluster, or install Slurm's client (Debian: slurm-client) with the cluster's "
                "slurm.conf")
FIELD_SEP = "\x1f"  # between squeue's fields: no name, state or folder holds it
# squeue's fields, in order: job id, name, state, working folder, reason.
SQUEUE_FORMAT = FIELD_SEP.join(("%i", "%j", "%T", "%Z", "%r"))
_SAFE = re.compile(r"[^\x20-\x7e]+")


@dataclass(frozen=True)
class Job:
    """One Slurm job as squeue lists it."""

    id: str
    name: str
    state: str  # Slurm's JobState, upper case: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY, ...
    workdir: str
    reason: str


def one_line(text: str, limit: int = 300) -> str:
    """Slurm's output as one printable line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return _SAFE.sub(" ", lines[-1] if lines else "")[:limit]


def parse_jobs(text: str) -> list[Job]:
    """squeue's lines (``SQUEUE_FORMAT``) as jobs; a line of another shape is skipped."""
    jobs = []
    for line in text.splitlines():
        parts = line.split(FIELD_SEP)
        if len(parts) == 5 and re.fullmatch(r"[0-9]+(_[0-9]+)?", parts[0].strip()):
            jobs.append(Job(*(p.strip() for p in parts)))
    return jobs


class Slurm:
    """Slurm's commands on this host."""

    def run(self, argv: Sequence[str], what: str, seconds: float = QUICK, stdin: Optional[str] = None) -> str:
        """``argv``'s standard output; SlurmUnreachable where the command is missing or the controller does not
        answer, SlurmError with Slurm's own last line where it fails."""
        if shutil.which(argv[0]) is None:
            raise SlurmUnreachable(f"{what}: `{argv[0]}` is not installed here; {INSTALL_HINT}")
        try:
            proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=seconds,
                                  errors="replace")
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"{what}: `{argv[0]}` did not answer within {seconds:.0f} s; is the cluster's "
                                   "controller (slurmctld) up? `scontrol ping` tells") from None
        if proc.returncode != 0:
            said = one_line(proc.stderr or proc.stdout)
            if "Could not establish a configuration source" in said:
                raise SlurmUnreachable(f"{what}: Slurm finds no cluster here (no slurm.conf); set SLURM_CONF to the "
                                       "cluster's, or run orch on a login node of the cluster")
            if "Unable to contact slurm controller" in said or "Connection refused" in said or \
                    "Zero Bytes were transmitted" in said:
                raise SlurmUnreachable(f"{what}: Slurm's controller does not answer ({said}); `scontrol ping` tells")
            raise SlurmError(f"{what} failed: {said}", details=proc.stderr)
        return proc.stdout

    def ping(self) -> None:
        """SlurmUnreachable unless the cluster's controller answers."""
        out = self.run(["scontrol", "ping"], "scontrol ping")
        if "UP" not in out:
            raise SlurmUnreachable(f"Slurm's controller is down ({one_line(out)}); ask the cluster's admins, or "
                                   "start slurmctld")

    def submit(self, script: str, test_only: bool = False) -> str:
        """Submit the batch script ``script`` (its text, on stdin); the job's id. With ``test_only``, only ask
        Slurm whether it would take it (`sbatch --test-only`), and return its answer."""
        if test_only:
            proc_out = self._test_only(script)
            return proc_out
        out = self.run(["sbatch", "--parsable"], "sbatch", stdin=script).strip()
        job = out.split(";")[0]
        if not re.fullmatch(r"[0-9]+", job):
            raise SlurmError(f"sbatch gave no job id ({one_line(out)})")
        return job

    def _test_only(self, script: str) -> str:
        if shutil.which("sbatch") is None:
            raise SlurmUnreachable(f"sbatch --test-only: `sbatch` is not installed here; {INSTALL_HINT}")
        try:
            proc = subprocess.run(["sbatch", "--test-only"], input=script, capture_output=True, text=True,
                                  timeout=QUICK, errors="replace")
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"sbatch --test-only did not answer within {QUICK:.0f} s") from None
        said = one_line(proc.stderr or proc.stdout)
        if proc.returncode != 0:
            raise SlurmError(f"Slurm would not take the job: {said}", details=proc.stderr)
        return said

    def jobs(self, name: Optional[str] = None) -> list[Job]:
        """This user's jobs that Slurm still lists (pending, running, and ended within its MinJobAge), of the name
        ``name`` where given."""
        argv = ["squeue", "--me", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}"]
        if name is not None:
            argv.append(f"--name={name}")
        return parse_jobs(self.run(argv, "squeue"))

    def ended_jobs(self, name: str) -> list[Job]:
        """The jobs of the name ``name`` from Slurm's accounting (sacct), for one that squeue no longer lists; [] where
        the cluster keeps no accounting."""
        argv = ["sacct", "--noheader", "--allocations", "--parsable2", f"--name={name}",
                "--format=JobID,JobName,State,WorkDir"]
        try:
            text = self.run(argv, "sacct")
        except SlurmError as exc:
            if "accounting storage is disabled" in exc.message or isinstance(exc, SlurmUnreachable):
                return []
            raise
        lines = [FIELD_SEP.join([*line.split("|")[:4], ""]) for line in text.splitlines() if line.count("|") == 3]
        return parse_jobs("\n".join(lines))

    def cancel(self, job_id: str, signal: Optional[str] = None) -> None:
        """scancel the job (with ``signal`` to its steps' tasks, e.g. KILL); one already ended is no error."""
        argv = ["scancel", *([f"--signal={signal}", "--full"] if signal else []), job_id]
        try:
            self.run(argv, f"scancel {job_id}")
        except SlurmError as exc:
            if "Invalid job id" in exc.message or "already completing or completed" in exc.message:
                return
            raise

    def hostnames(self, nodelist: str) -> list[str]:
        """The host names of a node list (``node[1-3]``)."""
        return self.run(["scontrol", "show", "hostnames", nodelist], "scontrol show hostnames").split()

    def nodes(self) -> list[dict[str, str]]:
        """Every node of the cluster with its fields (`scontrol show nodes -o`)."""
        out = self.run(["scontrol", "show", "nodes", "--oneliner"], "scontrol show nodes")
        nodes = []
        for line in out.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if fields.get("NodeName"):
                nodes.append(fields)
        return nodes
