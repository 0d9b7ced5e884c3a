"""A run under way as an object (``up(wait=False)``, ``run(wait=False)``), and a finished run with what its function
returned (``RunResult``).

``Run`` is the detached run of `orch up --detach` with the verbs a terminal would use on it: ``status`` is `orch ps`,
``logs`` `orch logs`, ``stats`` `orch stats`, ``cancel`` `orch down`, and ``wait`` watches its replicas until they
end, then finishes it as `orch down` does (logs saved, replicas removed, record written). A detached run has no orch
watching it: no stall or startup timeout, no restarts, no disk guard; ``wait(timeout)`` bounds only the waiting.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Iterator, Optional, Union

from orchestrator.backends import Backend, Key, Status
from orchestrator.errors import RunNotFound, WorkerFailed
from orchestrator.paths import Paths, default_paths
from orchestrator.plan import SOURCE_DIR
from orchestrator.run import function, runs
from orchestrator.run.rundir import RunDir, RunInfo, RunState
from orchestrator.run.supervisor import describe_exit, first_failure

if TYPE_CHECKING:
    from orchestrator.api import Collected
    from orchestrator.run.logs import LogRecord

POLL = 1.0  # seconds between two looks at the replicas while waiting


@dataclass
class RunResult(RunInfo):
    """A finished run's record, and ``returns``: what the function returned on each replica, in replica order
    (worker-0 first; empty for a job that is not a function)."""

    returns: list[Any] = field(default_factory=list)

    @classmethod
    def of(cls, info: RunInfo, returns: list[Any]) -> "RunResult":
        return cls(**{f.name: getattr(info, f.name) for f in fields(RunInfo)}, returns=returns)

    def _rows(self) -> list[dict[str, Any]]:
        rows = []
        for i, w in enumerate(self.workers):
            row = {"replica": f"{w.get('role', 'worker')}-{w.get('worker')}", "exit code": w.get("exit_code"),
                   "train seconds": w.get("train_seconds"), "test accuracy": w.get("test_accuracy")}
            if self.returns:
                row["returned"] = self.returns[i] if i < len(self.returns) else None
            rows.append(row)
        return rows

    def _repr_html_(self) -> str:
        from orchestrator.display import block

        return block(f"run {self.run_id}", [("state", self.state.value), ("wall seconds", self.wall_seconds),
                                            ("error", self.error)], self._rows())

    def to_pandas(self) -> Any:
        """The replicas as a DataFrame: exit code, train seconds, test accuracy and what each returned."""
        from orchestrator.display import dataframe

        return dataframe(self._rows())


class Run:
    """A run started without waiting: ask how it is, read its logs and stats, wait for it, collect or cancel it."""

    def __init__(self, run_id: str, *, paths: Optional[Paths] = None, backend: Optional[Backend] = None,
                 clock: Any = time, poll: float = POLL) -> None:
        self.run_id, self.paths, self.backend, self.clock, self.poll = run_id, paths or default_paths(), backend, \
            clock, poll
        self._result: Optional[RunResult] = None

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    def _record(self) -> RunInfo:
        info = RunDir.of(self.paths, self.run_id).record()
        if info is None:
            raise RunNotFound(f"no run {self.run_id!r} in {self.paths.runs}; `orch ps` lists the runs")
        return info

    def _backend(self) -> Backend:
        return runs._backend(self.backend, None, RunDir.of(self.paths, self.run_id))

    def status(self) -> RunState:
        """Where the run is now: as `orch ps` says (its replicas while they run, its record after)."""
        return runs.ps([self.run_id], paths=self.paths, backend=self.backend)[0].state

    def logs(self, follow: bool = False) -> Iterator["LogRecord"]:
        """Every line its replicas wrote, in time order; with ``follow``, then each new one until they end."""
        return runs.read_logs(self.run_id, follow=follow, paths=self.paths, backend=self.backend)[1]

    def stats(self, interval: float = 1.0) -> Generator[dict[Key, Any], None, None]:
        """Every ``interval`` seconds while it runs, the latest resource sample of each replica."""
        return runs.stats_snapshots(self.run_id, interval, paths=self.paths, backend=self.backend)[1]

    def wait(self, timeout: Optional[float] = None) -> RunResult:
        """Wait until its replicas end (or one fails), finish it as `orch down` does, and return its record with
        what the function returned. WorkerFailed (FunctionFailed naming the replica, for a function that raised) if
        it failed; TimeoutError after ``timeout`` seconds, the run left running."""
        if self._result is not None:
            return self._result
        backend = self._backend()
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        spec = self._record().spec
        expected = set(spec.replica_keys()) if spec is not None else set()
        reporting = set(spec.reporting_keys()) if spec is not None else set()
        seen: set[Key] = set()
        while True:
            if self._record().state.is_terminal:  # ended elsewhere (`orch down`, cancel()): nothing left to watch
                states, failed = [], None
                break
            states = backend.states(self.run_id)
            seen |= {s.key for s in states}
            failed = first_failure(states)
            done = {s.key for s in states if s.status == Status.SUCCEEDED}
            # Ended once one failed, the replicas that report have all succeeded (a parameter server never exits by
            # itself: the chief's exit ends the job, as the supervisor judges), or every replica has been seen and
            # none is active. A replica not listed yet (a pod its Job has not made) is still to come, not ended.
            if failed is not None or (reporting and reporting <= done) or (
                    seen >= expected and not any(s.status in runs.ACTIVE for s in states)):
                break
            if deadline is not None and self.clock.monotonic() >= deadline:
                raise TimeoutError(f"run {self.run_id} still runs after {timeout} s; wait() again, or cancel() it")
            self.clock.sleep(self.poll if deadline is None else max(0.0, min(self.poll,
                                                                           deadline - self.clock.monotonic())))
        info = self._record()
        if not info.state.is_terminal:
            runs.down([self.run_id], paths=self.paths, backend=self.backend)
            info = self._finish(states, failed)
        self._result = RunResult.of(info, [])
        self._result = self._returns(self._result, failed)
        return self._result

    def _finish(self, states: list[Any], failed: Any) -> RunInfo:
        """The record `orch down` wrote, with each replica's exit code, the wall time and, if one failed, the run
        failed (down calls a run stopped while others still ran)."""
        run = RunDir.of(self.paths, self.run_id)
        info = self._record()
        codes = {s.key: s.exit_code for s in states}
        for w in info.workers:
            w["exit_code"] = codes.get((w.get("role", "worker"), w.get("worker")))
        if failed is not None:
            info.state = RunState.FAILED
            info.error = f"{failed.role}-{failed.index} {describe_exit(failed)}"
        elif states and all(s.status == Status.SUCCEEDED for s in states if s.key in set(info.spec.reporting_keys()
                                                                                      if info.spec else [])):
            info.state = RunState.SUCCEEDED
        # The run's own time: to the end of its last replica, not to when wait() was called, which may be hours on.
        ends = [s.finished_at for s in states if s.finished_at is not None]
        end = min(max(ends), time.time()) if ends else time.time()
        info.wall_seconds = max(0.0, end - info.started) if info.started else None
        run.write_record(info)
        return info

    def _returns(self, result: RunResult, failed: Any) -> RunResult:
        """``result`` with what the function returned; the failure raised if the run failed."""
        spec, folder = result.spec, Path(result.run_dir or RunDir.of(self.paths, self.run_id).path)
        is_function = function.is_function_run(spec) and spec is not None
        if result.state == RunState.STOPPED:  # cancelled: nothing to return, nothing failed
            return result
        name = function.name_of(folder / SOURCE_DIR) if is_function else ""
        if result.state != RunState.SUCCEEDED:
            key = (failed.role, failed.index) if failed is not None else None
            codes: dict[Key, Optional[int]] = {(str(w.get("role", "worker")), int(w.get("worker") or 0)):
                                               w.get("exit_code") for w in result.workers}
            error = function.failure(folder, spec.replica_keys(), name, codes, key) if is_function and spec else None
            raise error or WorkerFailed(key[1] if key else 0, failed.exit_code if failed is not None else None,
                                        f"run {self.run_id} {result.state.value}: {result.error or 'see `orch logs`'}")
        if is_function and spec is not None:
            result.returns = function.returns(folder, spec.replica_keys(), name)
        return result

    def collect(self, out: Union[str, Path, None] = None) -> "Collected":
        """Wait for the run, then gather it into ``out`` (default: the results folder), as `orch collect` does."""
        from orchestrator.api import collect

        self.wait()
        return collect(self.run_id, out=out, paths=self.paths)

    def cancel(self) -> None:
        """Stop it and remove its replicas and network, as `orch down` does; what it wrote stays."""
        runs.down([self.run_id], paths=self.paths, backend=self.backend)

    def _repr_html_(self) -> str:
        from orchestrator.display import block

        if self._result is not None:
            return self._result._repr_html_()
        info = runs.ps([self.run_id], paths=self.paths, backend=self.backend)[0]
        rows = [{"replica": f"{w.get('role', 'worker')}-{w.get('worker')}", "exit code": w.get("exit_code"),
                 "train seconds": w.get("train_seconds")} for w in info.workers]
        return block(f"run {self.run_id}", [("state", info.state.value), ("error", info.error)], rows)

