"""The run supervisor: a pure function from what was observed to what happens next.

``decide`` reads the replicas' states (any backend's), the events and heartbeats they wrote, the clock
and the spec, and returns a verdict: keep waiting, succeeded, restart the group, failed (naming the
replica and the cause), or timed out. The restart policy lives here and nowhere else. Nothing in this
module touches an engine or a file, so every failure path is testable with made-up observations.
"""
from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from orchestrator.backends import Key, ReplicaState, Status
from orchestrator.jobspec import JobSpec
from orchestrator.run import disk
from orchestrator.run.disk import DiskUse

FINISH_GRACE = 2.0  # seconds a replica may take to exit after every result is written
FILE_TOO_LARGE = 128 + signal.SIGXFSZ.value  # a replica the kernel stopped at its file size cap (RLIMIT_FSIZE)
STARVED_SHARE = 0.9  # a working set at this share of the limit counts as starved
PINNED_SHARE = 0.98  # so does a charge (working set and page cache) held at the limit by reclaim
STUCK = "a worker is stuck (see `orch logs`)"
SLOW = "raise --startup-timeout if start-up is just slow here"


class Verdict(str, enum.Enum):
    WAIT = "wait"
    SUCCEEDED = "succeeded"
    RESTART = "restart"
    FAILED = "failed"
    TIMED_OUT = "timed-out"


@dataclass(frozen=True)
class Memory:
    """One replica's memory in bytes: its working set (as `docker stats` shows it), everything charged to
    its cgroup (the working set and the page cache), and its limit (0 if unknown)."""

    working: int
    charged: int
    limit: int

    def starved(self) -> Optional[int]:
        """The bytes to report if this replica is starved, else None.

        Near the limit the kernel evicts the pages of the framework's mapped libraries as fast as the worker
        reads them back. Whether it then counts them as active (working set at the limit) or inactive (only
        the charge stays pinned at the limit) varies from run to run, so either counts.
        """
        if not self.limit:
            return None
        if self.working >= STARVED_SHARE * self.limit:
            return self.working
        if self.charged >= PINNED_SHARE * self.limit:
            return self.charged
        return None


@dataclass(frozen=True)
class Observation:
    """One look at a run: its replicas, the events they wrote since the last look, and the clocks."""

    states: tuple[ReplicaState, ...]
    events: tuple[tuple[Key, Any], ...] = ()
    heartbeats: dict[Key, float] = field(default_factory=dict)  # wall-clock seconds of each last heartbeat
    now: float = 0.0  # wall clock
    elapsed: float = 0.0  # seconds since this attempt was launched
    disk: Optional[DiskUse] = None  # what the replicas wrote to this host's disk, when it was measured


@dataclass(frozen=True)
class Watch:
    """What the supervisor remembers between looks within one attempt."""

    stages: dict[Key, str] = field(default_factory=dict)
    done: frozenset[Key] = frozenset()
    joined_at: Optional[float] = None  # wall clock, when every replica had joined
    done_at: Optional[float] = None  # elapsed, when every replica had written its result


@dataclass(frozen=True)
class Decision:
    """The verdict, the updated memory, and for a failure the replica, the cause and the exit code."""

    verdict: Verdict
    watch: Watch
    replica: Optional[Key] = None
    failed: Optional[ReplicaState] = None  # the replica whose exit is the cause, for its logs
    message: str = ""
    exit_code: Optional[int] = None
    retryable: bool = False
    unexplained: str = ""  # the words of ``message`` that a culprit found in memory would replace
    suspects: Optional[frozenset[Key]] = None  # the replicas memory may be blamed on (None: any)

    @property
    def stalled(self) -> bool:
        """A stall or a late join with no known culprit: the caller may look at memory."""
        return bool(self.unexplained)

    @property
    def is_final(self) -> bool:
        return self.verdict in (Verdict.SUCCEEDED, Verdict.FAILED, Verdict.TIMED_OUT)


def retryable(replica: Optional[ReplicaState]) -> bool:
    """Kubeflow's ExitCode policy: a signal (exit > 128) or a vanished replica may be retried; exit codes
    1-127 are the program's own verdict, and an out-of-memory kill would only happen again."""
    return replica is None or (replica.exit_code is not None and replica.exit_code > 128 and not replica.oom_killed)


def first_failure(states: tuple[ReplicaState, ...] | list[ReplicaState]) -> Optional[ReplicaState]:
    """The replica that failed first: the cause; the others usually fail because it went away."""
    failed = [s for s in states if s.status == Status.FAILED]
    return min(failed, key=lambda s: (s.finished_at or float("inf"), s.role, s.index)) if failed else None


def describe_exit(replica: ReplicaState) -> str:
    """How a failed replica ended, as the tail of a sentence."""
    code = replica.exit_code
    if replica.oom_killed:
        return f"was killed for exceeding its memory limit (exit {code}); raise --memory"
    if code is not None and code > 128:
        return f"was killed by signal {code - 128} (exit {code})"
    if code is None and replica.reason:
        return f"failed: {replica.reason}"
    return f"exited with code {code}"


def _name(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


def observe(watch: Watch, events: tuple[tuple[Key, Any], ...], elapsed: float) -> Watch:
    """``watch`` after the new ``events``: start stages and results written."""
    stages, done = dict(watch.stages), set(watch.done)
    for key, event in events:
        if event.event == "start":
            stages[key] = event.stage
        elif event.event == "done":
            done.add(key)
    return replace(watch, stages=stages, done=frozenset(done))


def _fail(spec: JobSpec, watch: Watch, restarts: int, **fields: Any) -> Decision:
    """A failure: restart the group if the policy allows, else fail."""
    again = fields.get("retryable", False) and restarts < spec.max_restarts
    return Decision(Verdict.RESTART if again else Verdict.FAILED, watch, **fields)


def decide(spec: JobSpec, watch: Watch, obs: Observation, restarts: int = 0) -> Decision:
    """What to do after observation ``obs`` of an attempt that has had ``restarts`` restarts before it."""
    watch = observe(watch, obs.events, obs.elapsed)
    everyone = set(spec.replica_keys())
    expected = set(spec.reporting_keys())  # the replicas that train, report progress and end the job
    others = "; the other workers were stopped" if len(everyone) > 1 else ""
    present = {s.key for s in obs.states}
    paused = sorted(s.key for s in obs.states if s.status == Status.PAUSED)
    failed = first_failure(obs.states)
    # The disk first: the guard kills every writer at the limit (exit 137, which alone would look retryable).
    too_much = disk.verdict(obs.disk, spec.disk_limit_mb) if obs.disk is not None else None
    if too_much is not None:  # the host's disk matters more than the run: never retried
        return Decision(Verdict.FAILED, watch, message=too_much)
    if failed is not None and failed.exit_code == FILE_TOO_LARGE and spec.disk_limit_mb:
        return Decision(Verdict.FAILED, watch, replica=failed.key, failed=failed, exit_code=failed.exit_code,
                        message=f"{failed.label} wrote a file past --disk-limit {spec.disk_limit_mb} MiB, and the "
                                f"kernel stopped it (signal {signal.SIGXFSZ.value}, exit {failed.exit_code}){others}; "
                                "raise --disk-limit if the job needs it")
    if failed is not None:
        message = f"{failed.label} {describe_exit(failed)}{others}"
        if paused:
            message = (f"{_name(paused[0])} stalled (its container is paused) and {failed.label} "
                       f"{describe_exit(failed)} when the all-reduce timed out{others}")
        return _fail(spec, watch, restarts, replica=failed.key, failed=failed, message=message,
                     exit_code=failed.exit_code, retryable=retryable(failed))
    if not everyone <= present:
        gone = sorted(everyone - present)[0]
        return _fail(spec, watch, restarts, replica=gone, retryable=True,
                     message=f"{_name(gone)} vanished (its container was removed from outside orch){others}")
    if all(s.status == Status.SUCCEEDED for s in obs.states if s.key in expected):
        # Under ps the servers never exit by themselves: the chief's exit ends the job.
        return Decision(Verdict.SUCCEEDED, watch)
    if spec.time_limit and obs.elapsed > spec.time_limit:
        return Decision(Verdict.TIMED_OUT, watch, message=f"the run took longer than its time limit of "
                                                          f"{spec.time_limit:g} s{others}; raise --time-limit")
    if spec.script is not None:
        # A user's script: its exit is its verdict, whatever it reported. It may report nothing at all, so
        # only the replicas that have started reporting are watched for joining and progress.
        expected = {key for key in expected if key in watch.stages}
        if not expected:
            return Decision(Verdict.WAIT, watch)
    elif watch.done >= expected:
        # Every replica wrote its result, and each leaves by itself once all have. One that has not after
        # a moment is stuck in the framework's teardown, which at times idles for half a minute.
        done_at = watch.done_at if watch.done_at is not None else obs.elapsed
        watch = replace(watch, done_at=done_at)
        if obs.elapsed - done_at > FINISH_GRACE:
            return Decision(Verdict.SUCCEEDED, watch)
    joined = {key for key, stage in watch.stages.items() if stage == "training"}
    if joined >= expected:
        joined_at = watch.joined_at if watch.joined_at is not None else obs.now
        watch = replace(watch, joined_at=joined_at)
        last = max([obs.heartbeats.get(key, 0.0) for key in expected] + [joined_at])
        if obs.now - last > spec.stall_timeout:
            culprit = f"{_name(paused[0])}'s container is paused" if paused else STUCK
            return _fail(spec, watch, restarts, replica=paused[0] if paused else None, retryable=True,
                         unexplained="" if paused else STUCK,
                         message=f"training stalled: no worker made progress for {spec.stall_timeout:g} s; "
                                 f"{culprit}{others}")
    elif obs.elapsed > spec.startup_timeout:
        missing = sorted(expected - joined)
        never = [key for key in missing if key not in watch.stages or key in paused]
        names = ", ".join(_name(key) for key in never or missing)
        return Decision(Verdict.TIMED_OUT, watch, replica=(never or missing)[0], unexplained=SLOW,
                        suspects=frozenset(missing),
                        message=f"{names} did not join the cluster within the startup timeout of "
                                f"{spec.startup_timeout:g} s{others}; {SLOW}")
    return Decision(Verdict.WAIT, watch)


def blame_memory(decision: Decision, memory: dict[Key, Memory]) -> Decision:
    """A stall or a late join with no known culprit, blamed on a replica at its memory limit, if one is.

    A starved worker crawls rather than being OOM-killed: importing its framework under too small a limit,
    it re-reads the libraries' pages for minutes and never joins; training, it stops making progress.
    ``memory`` holds each running replica's memory.
    """
    if not decision.stalled:
        return decision
    for key in sorted(memory):
        if decision.suspects is not None and key not in decision.suspects:
            continue  # e.g. a replica that joined: it is not why the others did not
        used = memory[key].starved()
        if used is not None:
            culprit = (f"{_name(key)} is using {used / 2**20:.0f} MiB of its {memory[key].limit / 2**20:.0f} MiB "
                       "memory limit; raise --memory")
            head, _, tail = decision.message.partition(decision.unexplained)
            # Like an out-of-memory kill, a starved worker would starve again after a restart.
            return replace(decision, verdict=Verdict.FAILED, replica=key, message=head + culprit + tail,
                           unexplained="", retryable=False)
    return decision
