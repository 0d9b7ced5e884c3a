"""Swarm on the engine: its state, orch's services and tasks, their networks and logs (the Engine API)."""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

from orchestrator.docker.base import EngineBase, first_line, stamped_lines
from orchestrator.errors import DockerError


class SwarmOps(EngineBase):
    """Swarm operations of ``Engine``."""

    def swarm(self) -> dict[str, Any]:
        """This engine's place in a swarm (`docker info`'s Swarm: LocalNodeState, NodeID, ControlAvailable)."""
        return dict(self.info().get("Swarm") or {})

    def _swarm_list(self, what: str, fn: Callable[[], Any]) -> list[dict[str, Any]]:
        """A swarm listing, or [] where the engine is in no swarm (or not a manager): nothing of orch's is there."""
        import docker

        try:
            return list(fn() or [])
        except docker.errors.APIError as exc:
            if exc.status_code == 503 or "not a swarm manager" in str(exc.explanation or exc):
                return []
            raise DockerError(f"{what}: {exc.explanation or first_line(exc)}") from None
        except docker.errors.DockerException:
            raise self.unreachable() from None

    def services(self, label: str) -> list[dict[str, Any]]:
        """The swarm services carrying ``label`` (``key`` or ``key=value``), as the Engine API describes them."""
        return self._swarm_list("list services", lambda: self.client.api.services(filters={"label": label}))

    def tasks(self, service_ids: list[str]) -> list[dict[str, Any]]:
        """Every task of the services ``service_ids``, as the Engine API describes them."""
        if not service_ids:
            return []
        return self._swarm_list("list tasks", lambda: self.client.api.tasks(filters={"service": service_ids}))

    def networks(self, label: str) -> list[str]:
        """Ids of the networks carrying ``label``."""
        listed = self._call("list networks", lambda: self.client.api.networks(filters={"label": label}))
        return [n["Id"] for n in listed or []]

    def remove_network(self, network_id: str) -> None:
        """Remove a network, ignoring one that is already gone (or still in use: the caller waits and retries)."""
        import docker

        try:
            self.client.api.remove_network(network_id)
        except docker.errors.DockerException:
            pass

    def service_logs(self, service_id: str, tail: Optional[int] = None) -> str:
        """A service's stdout and stderr from whichever node runs its task, or "" if it is gone."""
        import docker

        try:
            chunks = self.client.api.service_logs(service_id, stdout=True, stderr=True, tail=tail if tail else "all",
                                                  is_tty=False)
            return b"".join(chunks).decode("utf-8", "replace")
        except docker.errors.DockerException:
            return ""

    def service_log_lines(self, service_id: str, stream: str, follow: bool = False,
                          since: Optional[float] = None) -> Iterator[str]:
        """Lines of one output stream of a service's tasks, each prefixed with the engine's timestamp."""
        import docker

        try:
            yield from stamped_lines(self.client.api.service_logs(
                service_id, stdout=stream == "stdout", stderr=stream == "stderr", timestamps=True, follow=follow,
                since=since or 0, is_tty=False))
        except docker.errors.DockerException:
            return  # the service went away: its stream simply ends
