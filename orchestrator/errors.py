"""Typed errors; each message says what happened and what to do next."""
from __future__ import annotations

from typing import Any

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class OrchError(Exception):
    """Base of every error orch reports to a user."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidSpec(OrchError):
    """A flag, experiment file or spec field is not valid. ``problems`` (jobspec.messages.Problem) say which
    fields, so the CLI can name them by their flags."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, details: str = "", problems: tuple[Any, ...] = ()) -> None:
        super().__init__(message, details=details)
        self.problems = tuple(problems)


class EngineUnreachable(OrchError):
    """The Docker engine does not answer."""

    exit_code = EXIT_USAGE


class ComposeMissing(OrchError):
    """Docker Compose v2 (the `docker compose` plugin) is not installed."""

    exit_code = EXIT_USAGE


class RenderOnlyBackend(OrchError):
    """The backend renders manifests that a user applies; orch cannot run them itself."""

    exit_code = EXIT_USAGE


class ImageMissing(OrchError):
    """A trainer or base image is not present in the local engine."""

    exit_code = EXIT_USAGE


class DataError(OrchError):
    """A data set cannot be prepared or failed verification."""

    exit_code = EXIT_USAGE


class RunNotFound(OrchError):
    """No run has the given id."""

    exit_code = EXIT_USAGE


class BuildError(OrchError):
    """An image build step failed."""


class DockerError(OrchError):
    """The Docker engine or CLI refused an operation."""


class WorkerFailed(OrchError):
    """A worker exited non-zero or disappeared; the job was stopped."""

    def __init__(self, worker: int, exit_code: int | None, message: str, *, details: str = "",
                 retryable: bool = False) -> None:
        super().__init__(message, details=details)
        self.worker = worker
        self.worker_exit_code = exit_code
        self.retryable = retryable


class FunctionFailed(WorkerFailed):
    """A function run as the job (``orchestrator.run``) raised on a worker: ``traceback`` is its text, escaped
    (``safetext.printable``), as the worker wrote it."""

    def __init__(self, worker: int, exit_code: int | None, message: str, *, traceback: str = "",
                 role: str = "worker") -> None:
        super().__init__(worker, exit_code, message, details=traceback)
        self.traceback = traceback
        self.role = role


class WorkerTraceback(Exception):
    """A replica's traceback (escaped), the ``__cause__`` of the FunctionFailed that carries it, so that Python and
    Jupyter print it under the error, as concurrent.futures prints a worker process's."""

    def __init__(self, replica: str, text: str) -> None:
        super().__init__(replica, text)
        self.replica, self.text = replica, text

    def __str__(self) -> str:
        return f"the traceback on {self.replica}:\n\"\"\"\n{self.text.rstrip()}\n\"\"\""


class JobTimedOut(OrchError):
    """A worker did not join the cluster in time; the job was stopped."""


class DiskFull(OrchError):
    """A results or runs folder has no space left."""

    exit_code = EXIT_USAGE


class ContractMismatch(OrchError):
    """A trainer wrote records of a contract version this orch does not read."""

    exit_code = EXIT_USAGE


class ClusterError(OrchError):
    """The Kubernetes API server refused or failed a request; ``status`` is its HTTP status, if it answered."""

    def __init__(self, message: str, *, details: str = "", status: int | None = None) -> None:
        super().__init__(message, details=details)
        self.status = status


class ClusterRefused(ClusterError):
    """The Kubernetes API server refused a request for what orch was given: credentials, permissions, a name that
    exists, an object it finds invalid."""

    exit_code = EXIT_USAGE


class SlurmError(OrchError):
    """A Slurm command (sbatch, squeue, scancel, ...) failed or is not there; the message gives Slurm's own words."""


class SlurmUnreachable(SlurmError):
    """Slurm's commands are missing here, or its controller does not answer."""

    exit_code = EXIT_USAGE


class Stopped(KeyboardInterrupt):
    """A run's supervisor was told to stop the run (SIGTERM: `orch down`, or a client's cancel): it finishes the run
    as an interrupt does, and records it stopped."""


_KINDS: dict[str, type[OrchError]] = {cls.__name__: cls for cls in (
    OrchError, InvalidSpec, EngineUnreachable, ComposeMissing, ImageMissing, DataError, BuildError, DockerError,
    WorkerFailed, JobTimedOut, DiskFull, ContractMismatch, ClusterError, ClusterRefused, SlurmError, SlurmUnreachable)}


def to_record(exc: BaseException, message: str) -> dict[str, Any]:
    """How a run's supervisor failed, as run.json keeps it, for a client in another process to raise again."""
    kind = next((cls.__name__ for cls in type(exc).__mro__ if cls.__name__ in _KINDS), "OrchError")
    record: dict[str, Any] = {"kind": kind, "message": message, "details": getattr(exc, "details", "") or ""}
    if isinstance(exc, KeyboardInterrupt):
        record["kind"] = "Stopped" if isinstance(exc, Stopped) else "KeyboardInterrupt"
    if isinstance(exc, WorkerFailed):
        record.update(worker=exc.worker, exit_code=exc.worker_exit_code, retryable=exc.retryable)
    return record


def from_record(record: Any, message: str) -> BaseException:
    """The error a run recorded (``to_record``), to raise where its run was awaited; ``message`` when it has none.
    An interrupt comes back as KeyboardInterrupt; a run stopped by `orch down` as an OrchError saying so."""
    record = record if isinstance(record, dict) else {}
    kind, text = str(record.get("kind") or "OrchError"), str(record.get("message") or message)
    details = str(record.get("details") or "")
    if kind == "KeyboardInterrupt":
        return KeyboardInterrupt()
    cls = _KINDS.get(kind, OrchError)
    if issubclass(cls, WorkerFailed):
        worker, code = record.get("worker"), record.get("exit_code")
        return cls(worker if isinstance(worker, int) else -1, code if isinstance(code, int) else None, text,
                   details=details, retryable=bool(record.get("retryable")))
    return cls(text, details=details)
