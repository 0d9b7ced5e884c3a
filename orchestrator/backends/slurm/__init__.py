"""Slurm: a batch job per run, one task per replica, each in a container on its node (``batch.py`` renders it).

The run's folder sits on storage every node shares (the runs folder, ORCH_RUNS_DIR), as does orch's cache (the
data set, and the image as the nodes run it: ``images.py``). So the replicas write their records into the run's
folder as on Compose, and each task writes its own start, end and output beside the batch script (``task.sh``).
A replica's state is the job's (squeue, or sacct once squeue no longer lists it) with its task's own files: the exit code a task recorded, or, for a task
that could record none, the job's end in Slurm's words (its time limit, its node's failure, a cancel).
"""
from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from orchestrator.backends import options
from orchestrator.backends.base import REMOVAL_WAIT, Backend, Key, ReplicaState, Status, Usage
from orchestrator.backends.slurm import batch
from orchestrator.backends.slurm.commands import Job, Slurm
from orchestrator.docker.engine import Engine
from orchestrator.docker.base import engine_address
from orchestrator.errors import OrchError, SlurmError
from orchestrator.safeio import Unsafe, read_bounded

__all__ = ["SlurmBackend", "task_state"]

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan

TASKS_FILE = "tasks"  # the replicas' keys in task order, one "role index" a line
MARKER_LIMIT = 200  # bytes of a task's start or exit file: a line of numbers
LOG_LIMIT = 64 << 20  # bytes of a task's output read back
# Slurm's job states in orch's terms, for a task that recorded no end of its own.
_ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUED", "STAGE_OUT",
           "SIGNALING", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED"}
_ENDED = {"BOOT_FAIL": "its node failed to boot", "CANCELLED": "the job was cancelled (scancel)",
          "DEADLINE": "the job reached its deadline", "FAILED": "the job failed",
          "NODE_FAIL": "its node failed", "OUT_OF_MEMORY": "Slurm ended it over the job's memory (--memory)",
          "PREEMPTED": "the job was preempted", "TIMEOUT": "the job reached its time limit (--slurm-time)",
          "COMPLETED": "its task ended without recording how", "REVOKED": "the job was revoked",
          "SPECIAL_EXIT": "the job ended in Slurm's special exit state"}
_STAMP = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?) ?")


def _marker(path: Path) -> Optional[list[str]]:
    """The words of a task's start or exit file, or None where it is missing or not a short line of numbers."""
    try:
        data = read_bounded(path, MARKER_LIMIT)
        if data is None:
            return None
        text = data.decode("ascii")
    except (OSError, UnicodeDecodeError, Unsafe):
        return None
    words = text.split()
    return words if words and all(re.fullmatch(r"-?[0-9]{1,12}(\.[0-9]{1,9})?", w) for w in words) else None


def _job_state(job: Job) -> str:
    """The job's state word (squeue may add a reason after it)."""
    return (job.state.split() or [""])[0]


def task_state(job: Job, folder: Path, run_id: str, position: int, key: Key) -> ReplicaState:
    """Replica ``key``, task ``position`` of ``job``, from the job's state and its task's own files in ``folder``."""
    name = f"{key[0]}-{key[1]}"
    common: dict[str, Any] = {"id": f"{job.id}.{position}", "name": name, "run": run_id, "role": key[0],
                              "index": key[1]}
    ended = _marker(folder / f"{name}.exit")
    if ended is not None and len(ended) >= 2:
        code = int(float(ended[0]))
        oom = len(ended) > 2 and ended[2] == "1"
        return ReplicaState(status=Status.SUCCEEDED if code == 0 else Status.FAILED, exit_code=code,
                            oom_killed=oom, finished_at=float(ended[1]), **common)
    state = _job_state(job)
    if state in _ACTIVE:
        started = state not in ("PENDING", "CONFIGURING") and _marker(folder / f"{name}.started") is not None
        return ReplicaState(status=Status.RUNNING if started else Status.PENDING, **common)
    if state in _ENDED:
        return ReplicaState(status=Status.FAILED, reason=f"{_ENDED[state]}; task {position} recorded no end",
                            oom_killed=state == "OUT_OF_MEMORY", **common)
    return ReplicaState(status=Status.UNKNOWN, reason=f"Slurm reports the job {state or 'in no state'}", **common)


def _tail(path: Path, limit: int) -> bytes:
    """The last ``limit`` bytes of a task's output file (a regular file, never followed through a link), or b""."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b""
        os.lseek(fd, max(0, info.st_size - limit), os.SEEK_SET)
        chunks, size = [], 0
        while size < limit and (data := os.read(fd, min(1 << 20, limit - size))):
            chunks.append(data)
            size += len(data)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _strip(line: str) -> tuple[Optional[float], str]:
    """A task's output line as its time and its text."""
    match = _STAMP.match(line)
    if not match:
        return None, line
    return float(match.group(1)), line[match.end():]


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1e9):09d}Z"


class SlurmBackend(Backend):
    """sbatch, squeue and scancel for up, state and down; the tasks' own files in the run's folder for the rest."""

    name = "slurm"
    artifact_name = "job.sbatch"

    def __init__(self, engine: Optional[Engine] = None, slurm: Optional[Slurm] = None) -> None:
        self._engine = engine
        self.slurm = slurm or Slurm()
        self._folders: dict[str, Path] = {}  # each replica id states() handed out -> its job's folder

    @property
    def engine(self) -> Engine:
        """The Docker engine orch's images are on, here: the batch job's image is made from them."""
        if self._engine is None:
            self._engine = Engine(kind="docker")
        return self._engine

    # -- pure ----------------------------------------------------------------------------------
    def replica_user(self, spec: "JobSpec", user: str) -> str:
        # ch-run cannot change the user: the replicas run as whoever runs orch (and its tasks) on the cluster.
        return f"{os.getuid()}:{os.getgid()}" if options.slurm(spec).slurm_runtime == "charliecloud" else user

    def engine_name(self, run_id: str) -> str:
        return batch.job_name(run_id)

    def addresses(self, spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
        return batch.addresses(spec, keys)

    def render(self, plan: "Plan") -> str:
        return batch.render(plan)

    # -- the cluster ---------------------------------------------------------------------------
    def preflight(self, plan: "Plan") -> None:
        self.slurm.ping()
        self.engine.require_image(plan.image, plan.build_hint)
        self.slurm.submit(plan.artifact, test_only=True)

    def stage(self, plan: "Plan", say: Callable[[str], None]) -> None:
        from orchestrator.backends.slurm import images

        runtime = options.slurm(plan.spec).slurm_runtime
        points = sorted({m.target for r in plan.replicas for m in r.mounts}
                        | {r.working_dir for r in plan.replicas if r.working_dir})
        images.ensure(self.engine, plan.image, runtime, plan.cache_dir, points, say)

    def apply(self, plan: "Plan", artifact: Path) -> None:
        folder = plan.run_dir / batch.JOB_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        for replica in plan.replicas:  # what the replicas mount must exist before a runtime binds it
            for mount in replica.mounts:
                if not mount.volume:
                    Path(mount.source).mkdir(parents=True, exist_ok=True)
                # A mount inside another's folder binds onto a folder there, which ch-run will not make itself.
                for outer in replica.mounts:
                    if mount.target.startswith(outer.target.rstrip("/") + "/"):
                        (Path(outer.source) / mount.target[len(outer.target):].lstrip("/")).mkdir(
                            parents=True, exist_ok=True)
        for replica in plan.replicas:  # a restart's new job: the last attempt's files were read and its logs saved
            for suffix in ("started", "exit", "out", "err"):
                (folder / f"{replica.name}.{suffix}").unlink(missing_ok=True)
        (folder / TASKS_FILE).write_text("".join(f"{r.role} {r.index}\n" for r in plan.replicas))
        job = self.slurm.submit(artifact.read_text())
        (folder / "job-id").write_text(job + "\n")

    def _jobs(self, run_id: Optional[str]) -> list[Job]:
        """The run's jobs (every orch job where None): squeue's, else, for a run whose job Slurm no longer lists
        (past its MinJobAge), its accounting's."""
        if run_id is None:
            return [j for j in self.slurm.jobs() if j.name.startswith("orch-")]
        name = batch.job_name(run_id)
        return self.slurm.jobs(name) or self.slurm.ended_jobs(name)

    def states(self, run_id: Optional[str] = None) -> list[ReplicaState]:
        out: list[ReplicaState] = []
        for job in self._jobs(run_id):
            folder = Path(job.workdir)
            if folder.name != batch.JOB_FOLDER or not (folder / "job-id").is_file():
                continue  # not a job orch submitted
            try:
                if (folder / "job-id").read_text().strip() != job.id:
                    continue  # an earlier attempt's job, of a run since restarted
            except OSError:
                continue
            record = self._record(folder)
            if record is None:
                continue
            rid, keys = record
            for position, key in enumerate(keys):
                state = task_state(job, folder, rid, position, key)
                self._folders[state.id] = folder
                out.append(state)
        return sorted(out, key=lambda r: (r.run, r.role, r.index))

    @staticmethod
    def _record(folder: Path) -> Optional[tuple[str, list[Key]]]:
        """The run id and replica keys, in task order, that ``apply`` wrote into the job's folder."""
        try:
            data = read_bounded(folder / TASKS_FILE, 1 << 16)
        except (OSError, Unsafe):
            return None
        if data is None:
            return None
        keys = []
        for line in data.decode("ascii", "replace").splitlines():
            role, _, index = line.partition(" ")
            if not (re.fullmatch(r"[a-z][a-z0-9]{0,15}", role) and index.isdigit()):
                return None
            keys.append((role, int(index)))
        return folder.parent.name, keys

    def _output(self, replica: ReplicaState, stream: str) -> Optional[Path]:
        folder = self._folders.get(replica.id)
        return None if folder is None else folder / f"{replica.name}.{'out' if stream == 'stdout' else 'err'}"

    def _lines(self, replica: ReplicaState, stream: str) -> list[str]:
        path = self._output(replica, stream)
        if path is None:
            return []
        return _tail(path, LOG_LIMIT).decode("utf-8", "replace").splitlines()

    def logs(self, replica: ReplicaState, tail: Optional[int] = None) -> str:
        stamped = [_strip(line) for s in ("stdout", "stderr") for line in self._lines(replica, s)]
        stamped.sort(key=lambda pair: pair[0] or 0.0)
        lines = [text for _t, text in stamped]
        return "\n".join(lines[-tail:] if tail else lines) + ("\n" if lines else "")

    def log_lines(self, replica: ReplicaState, stream: str, follow: bool = False,
                  since: Optional[float] = None) -> Iterator[str]:
        seen = 0
        while True:
            lines = self._lines(replica, stream)
            for line in lines[seen:]:
                at, text = _strip(line)
                if since is None or at is None or at >= since:
                    yield f"{_rfc3339(at or time.time())} {text}"
            seen = len(lines)
            if not follow:
                return
            found = next((s for s in self.states(replica.run) if s.key == replica.key), None)
            if found is None or found.status.is_terminal:
                for line in self._lines(replica, stream)[seen:]:
                    at, text = _strip(line)
                    yield f"{_rfc3339(at or time.time())} {text}"
                return
            time.sleep(1.0)

    def stats_stream(self, replica: ReplicaState) -> Iterator[Usage]:
        return iter(())

    def stats_once(self, replica: ReplicaState) -> Optional[Usage]:
        return None

    def stats_elsewhere(self, run_id: str) -> Optional[str]:
        jobs = self._jobs(run_id)
        job = jobs[0].id if jobs else "JOB"
        return (f"Slurm measures a running job's tasks itself: `sstat --jobs {job}.0` (its accounting's figures) or "
                "`sacct` once it has ended, where the cluster keeps accounting")

    def cancel(self, run_id: str, artifact: Optional[Path], grace: int, clock: Any = None) -> None:
        clock = clock or time
        jobs = [j for j in self._jobs(run_id) if _job_state(j) in _ACTIVE]
        for job in jobs:
            self.slurm.cancel(job.id, signal=None if grace else "KILL")
            if not grace:
                self.slurm.cancel(job.id)
        deadline = clock.monotonic() + grace + REMOVAL_WAIT
        while jobs:
            left = [j for j in self._jobs(run_id) if _job_state(j) in _ACTIVE]
            if not left:
                break
            if clock.monotonic() > deadline:
                raise SlurmError(f"Slurm job {left[0].id} of run {run_id} was still {left[0].state} "
                                 f"{grace + REMOVAL_WAIT} s after scancel; `orch down {run_id}` tries again")
            clock.sleep(0.5)
        self._remove_containers(run_id)

    def _remove_containers(self, run_id: str) -> None:
        """The Docker runtime's containers of the run that this host's engine still has (a task killed before it could
        remove its own); nothing where there is no engine here."""
        if self._engine is None and not os.path.exists(engine_address("docker").removeprefix("unix://")):
            return
        try:
            for leftover in self.engine.containers(run_id):
                self.engine.remove_container(leftover.id)
        except OrchError:
            pass  # no engine here: the nodes' engines are the tasks' to clean

