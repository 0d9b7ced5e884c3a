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
        previous = self._stats_record(container_id)
        while previous is not None:
            time.sleep(POLL_SECONDS)
            raw = self._stats_record(container_id, previous)
            usage = usage_of(raw) if raw is not None else None
            if usage is None:
                return  # stopped, or gone
            yield usage
            previous = raw

    def stats_once(self, container_id: str) -> Optional[Usage]:
        """A running container's use now, its CPU over about the last second, or None if it has none to give.
        Docker's one-off record carries the sample a second before it; a record that carries none (Podman's) is
        measured against a second one, a second later."""
        raw = self._stats_record(container_id)
        if raw is not None and (raw.get("precpu_stats") or {}).get("system_cpu_usage") is None:
            time.sleep(POLL_SECONDS)
            raw = self._stats_record(container_id, raw)
        return usage_of(raw) if raw is not None else None

    def _stats_record(self, container_id: str, previous: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
        """One stats record of the engine's, or None for a container that stopped or went away; with ``previous``,
        its CPU is measured from that record's."""
        import docker

        try:
            raw = self.client.api.stats(container_id, stream=False)
        except (docker.errors.DockerException, ValueError, OSError):
            return None
        if not isinstance(raw, dict):
            return None
        if previous is not None:
            raw["precpu_stats"] = previous.get("cpu_stats") or {}
        return raw

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
