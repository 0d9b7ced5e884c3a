"""Containers on the engine: orch's, by run label, with their logs, stats and removal."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from orchestrator.docker.base import EngineBase, stamped_lines
from orchestrator.docker.stats import usage_of
from orchestrator.labels import LABEL_INDEX, LABEL_ROLE, LABEL_RUN
from orchestrator.timestamps import parse_timestamp
from orchestrator.usage import Usage

STATS_SECONDS = 1.0  # how often a running container's use is read
POLL_SECONDS = STATS_SECONDS  # the wait between records read one at a time, where the engine's stream is slower
POLL_FAILURES = 30  # records in a row that fail or hold no figures before such a read gives up (an engine gone)


@dataclass(frozen=True)
class ContainerState:
    """What orch needs to know about one container of a run."""

    id: str
    name: str
    run: str
    role: str
    index: int
    status: str  # created, running, paused, restarting, removing, exited, dead
    exit_code: Optional[int]
    oom_killed: bool = False
    finished_at: Optional[str] = None
    started_at: Optional[str] = None  # RFC 3339, as the engine writes it; None for one it never started


ZERO_TIME = "0001-01-01T"  # the engine's time for what has not happened (a container never started)


def parse_container(attrs: dict[str, Any]) -> ContainerState:
    """Build a ContainerState from the Engine API's container JSON (as `docker inspect` prints it)."""
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    state = attrs.get("State") or {}
    status = state.get("Status", "unknown")
    return ContainerState(
        id=attrs.get("Id", ""),
        name=attrs.get("Name", "").lstrip("/"),
        run=labels.get(LABEL_RUN, ""),
        role=labels.get(LABEL_ROLE, ""),
        index=int(labels.get(LABEL_INDEX, "-1")),
        status=status,
        exit_code=state.get("ExitCode") if status in ("exited", "dead") else None,
        oom_killed=bool(state.get("OOMKilled")),
        finished_at=state.get("FinishedAt") if status in ("exited", "dead") else None,
        started_at=None if state.get("StartedAt", ZERO_TIME).startswith(ZERO_TIME) else state["StartedAt"],
    )



class ContainerOps(EngineBase):
    """Container operations of ``Engine``."""

    def containers(self, run: Optional[str] = None) -> list[ContainerState]:
        """Every orch container, or those of ``run``, running or not."""
        label = LABEL_RUN if run is None else f"{LABEL_RUN}={run}"
        listed = self._call(
            "list containers", lambda: self.client.api.containers(all=True, filters={"label": label})
        )
        states = []
        for entry in listed:
            try:
                attrs = self.client.api.inspect_container(entry["Id"])
            except Exception:  # noqa: BLE001 - removed between list and inspect
                continue
            states.append(parse_container(attrs))
        return sorted(states, key=lambda c: (c.run, c.index))

    def logs(self, container_id: str, tail: Optional[int] = None) -> str:
        """A container's stdout and stderr, or an empty string if it is gone."""
        import docker

        try:
            raw = self.client.api.logs(container_id, stdout=True, stderr=True, tail=tail if tail else "all")
        except docker.errors.DockerException:
            return ""
        return bytes(raw).decode("utf-8", "replace")

    def log_lines(self, container_id: str, stream: str, follow: bool = False,
                  since: Optional[float] = None) -> Iterator[str]:
        """Lines of one output stream of a container, each prefixed with the engine's timestamp. A follow that
        the client's read timeout ends (a replica silent for two minutes) follows again from its last line's time,
        without the lines of that time it gave already."""
        import docker
        import requests

        kwargs: dict[str, Any] = {"stdout": stream == "stdout", "stderr": stream == "stderr", "timestamps": True,
                                  "stream": True, "follow": follow}
        last, seen = "", 0  # the last line's timestamp, and how many lines of that time were given
        while True:
            if since:  # the SDK rejects 0 rather than treating it as "from the start"
                kwargs["since"] = since
            skip = seen
            try:
                for line in stamped_lines(self.client.api.logs(container_id, **kwargs)):
                    stamp = line.partition(" ")[0]
                    if stamp == last and skip:
                        skip -= 1
                        continue
                    last, seen = (stamp, seen + 1) if stamp == last else (stamp, 1)
                    yield line
                return
            except docker.errors.DockerException:
                return  # the container went away: its stream simply ends
            except requests.exceptions.RequestException:
                if not follow or not self._answers():
                    return  # the engine went away: the run's own watch says so
                try:
                    since = parse_timestamp(last) if last else since
                except ValueError:
                    return

    def _answers(self) -> bool:
        """Whether the engine answers a ping now."""
        try:
            return bool(self.client.api.ping())
        except Exception:  # noqa: BLE001 - any failure to answer is a no
            return False

    def stats_stream(self, container_id: str) -> Iterator[Usage]:
        """A container's use, one record a second, until it stops or goes away: the engine's own stream where it
        sends one a second (Docker), else one-off records a second apart, each measured against the one before."""
        import docker

        if self.kind.stats_period > STATS_SECONDS:
            yield from self._stats_polled(container_id)
            return
        try:
            for raw in self.client.api.stats(container_id, decode=True, stream=True):
                usage = usage_of(raw)
                if usage is not None:
                    yield usage
        except (docker.errors.DockerException, ValueError, OSError):
            return

    def _stats_polled(self, container_id: str) -> Iterator[Usage]:
        previous: Optional[dict[str, Any]] = None
        failures = 0
        while failures < POLL_FAILURES:
            raw, gone = self._stats_record(container_id)
            if gone:
                return
            usage = usage_of(self._since(raw, previous)) if raw is not None and previous is not None else None
            if raw is None or (previous is not None and usage is None):
                failures += 1  # a passing failure, or a record with no figures yet: the next one counts
            else:
                previous, failures = raw, 0
                if usage is not None:
                    yield usage
            time.sleep(POLL_SECONDS)

    def stats_once(self, container_id: str) -> Optional[Usage]:
        """A running container's use now, its CPU over about the last second, or None if it has none to give.
        Docker's one-off record carries the sample a second before it; a record that carries none (Podman's) is
        measured against a second one, a second later (or, where that fails, given as it is)."""
        first, _ = self._stats_record(container_id)
        if first is None:
            return None
        if (first.get("precpu_stats") or {}).get("system_cpu_usage") is None:
            time.sleep(POLL_SECONDS)
            second, _ = self._stats_record(container_id)
            if second is not None:
                return usage_of(self._since(second, first)) or usage_of(first)
        return usage_of(first)

    def _stats_record(self, container_id: str) -> tuple[Optional[dict[str, Any]], bool]:
        """One stats record of the engine's (None where it gave none), and whether the container is gone or
        stopped: removed (not found), or Podman's answer for a stopped container, which is no JSON."""
        import docker

        try:
            raw = self.client.api.stats(container_id, stream=False)
        except (docker.errors.NotFound, ValueError):
            return None, True
        except (docker.errors.DockerException, OSError):
            return None, False
        return (raw, False) if isinstance(raw, dict) else (None, False)

    @staticmethod
    def _since(raw: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
        """``raw`` with its CPU counted from ``previous``'s (what Docker's stream gives as precpu_stats)."""
        return {**raw, "precpu_stats": previous.get("cpu_stats") or {}}

    def host_pids(self, run: str) -> dict[str, int]:
        """The host PID of each running container of ``run``, by container id: what the disk guard signals to stop a
        writer at once, without a round trip to the engine when it matters."""
        listed = self._call("list containers", lambda: self.client.api.containers(
            filters={"label": f"{LABEL_RUN}={run}", "status": "running"}))
        pids = {}
        for entry in listed:
            try:
                pid = int((self.client.api.inspect_container(entry["Id"]).get("State") or {}).get("Pid") or 0)
            except Exception:  # noqa: BLE001 - gone between list and inspect: nothing to stop
                continue
            if pid > 0:
                pids[str(entry["Id"])] = pid
        return pids

    def oom_killed(self, container_id: str) -> bool:
        """Whether a local container was killed for exceeding its memory limit (False if it is not here)."""
        import docker

        try:
            return bool((self.client.api.inspect_container(container_id).get("State") or {}).get("OOMKilled"))
        except docker.errors.DockerException:
            return False
