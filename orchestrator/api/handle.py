"""A run under way as an object (``start``, ``submit``), and a finished run with what its function
returned (``RunResult``).

``Run`` is the detached run of `orch up --detach` with the verbs a terminal would use on it: ``status`` is `orch ps`,
``logs`` `orch logs`, ``stats`` `orch stats`, ``cancel`` `orch down`, and ``wait`` waits for its supervisor to finish it.
A run started without waiting is supervised as one that is waited for (run/supervise.py): its stall and start-up
timeouts, restarts, disk guard and stats hold whether or not anything waits; ``wait(timeout)`` bounds only the
waiting.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Iterator, Optional, Union

from orchestrator.api.collected import Collected, collect
from orchestrator.backends import Backend, Key
from orchestrator.errors import OrchError, RunNotFound, WorkerFailed, from_record
from orchestrator.paths import Paths, default_paths
from orchestrator.plan import SOURCE_DIR
from orchestrator.run import function, runs, start
from orchestrator.run.lease import holder
from orchestrator.run.rundir import RunDir, RunInfo, RunState

if TYPE_CHECKING:
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

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], value: Optional[BaseException], traceback: Any) -> None:
        """Leaving a ``with`` block by an exception (a failed check, Ctrl-C in a notebook cell) cancels the run, unless
        it has ended; leaving it as written leaves the run to its supervisor."""
        if kind is not None and not self._record().state.is_terminal:
            self.cancel()

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

    def supervised(self) -> bool:
        """Whether a live supervisor holds the run (every run under way has one; one that died is adopted by the next
        ``status``, ``wait`` or orch command that finds the run)."""
        return holder(RunDir.of(self.paths, self.run_id).path) is not None

    def wait(self, timeout: Optional[float] = None) -> RunResult:
        """Wait until the run's supervisor has finished it, and return its record with what the function returned.
        WorkerFailed (FunctionFailed naming the replica, for a function that raised) if it failed; TimeoutError after
        ``timeout`` seconds, the run left running under its supervisor. A run whose supervisor is gone is adopted."""
        if self._result is not None:
            return self._result
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        run = RunDir.of(self.paths, self.run_id)
        self._record()
        while True:
            pid, info = holder(run.path), self._record()
            if pid is None:
                if info.state.is_terminal:
                    break
                self._adopt(run, info)
                continue
            if deadline is not None and self.clock.monotonic() >= deadline:
                raise TimeoutError(f"run {self.run_id} still runs after {timeout} s; wait() again, or cancel() it")
            self.clock.sleep(self.poll if deadline is None else max(0.0, min(self.poll,
                                                                           deadline - self.clock.monotonic())))
        self._result = self._returns(RunResult.of(info, []))
        return self._result

    def _adopt(self, run: RunDir, info: RunInfo) -> None:
        """A supervisor for the run, whose own is gone: a process of its own, or this one (to the run's end) for a
        backend object given to the handle, which cannot cross into another process."""
        if self.backend is None:
            start.adopt(run)
            return
        from orchestrator.plan import plan
        from orchestrator.run.runner import container_user, supervise

        assert info.spec is not None
        p = plan(info.spec, self.paths, user=container_user(), host_cpus=os.cpu_count() or 1)
        try:
            supervise(p, self.backend, run, info, poll=self.poll, clock=self.clock, stats_interval=None, adopt=True)
        except (OrchError, KeyboardInterrupt):
            pass  # recorded: the loop reads the record

    def _returns(self, result: RunResult) -> RunResult:
        """``result`` with what the function returned; the failure raised if the run failed."""
        spec, folder = result.spec, Path(result.run_dir or RunDir.of(self.paths, self.run_id).path)
        is_function = function.is_function_run(spec) and spec is not None
        if result.state == RunState.STOPPED:  # cancelled: nothing to return, nothing failed
            return result
        name = function.name_of(folder / SOURCE_DIR) if is_function else ""
        if result.state != RunState.SUCCEEDED:
            codes: dict[Key, Optional[int]] = {(str(w.get("role", "worker")), int(w.get("worker") or 0)):
                                               w.get("exit_code") for w in result.workers}
            key = next((k for k, code in codes.items() if code not in (0, None)), None)
            raised = function.failure(folder, spec.replica_keys(), name, codes, key) if is_function and spec else None
            message = f"run {self.run_id} {result.state.value}: {result.error or 'see `orch logs`'}"
            recorded = from_record(result.failure, message)
            raise raised or (recorded if isinstance(recorded, OrchError) else WorkerFailed(
                key[1] if key else 0, codes.get(key) if key else None, message))
        if is_function and spec is not None:
            result.returns = function.returns(folder, spec.replica_keys(), name)
        return result

    def collect(self, out: Union[str, Path, None] = None) -> "Collected":
        """Wait for the run, then gather it into ``out`` (default: the results folder), as `orch collect` does."""
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

