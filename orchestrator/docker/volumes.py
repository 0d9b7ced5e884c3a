"""Named volumes on the engine: inspect, create, remove, and fill one with a folder of an image."""
from __future__ import annotations

from typing import Optional

from orchestrator.docker.base import IMAGE_RUN_TIMEOUT, EngineBase


class VolumeOps(EngineBase):
    """Volume operations of ``Engine``."""

    def volume_labels(self, name: str) -> Optional[dict[str, str]]:
        """Labels of volume ``name``, or None if the engine has no such volume."""
        found = self._call(f"inspect volume {name}", lambda: self.client.api.inspect_volume(name), absent_ok=True)
        return None if found is None else dict(found.get("Labels") or {})

    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        """Create local volume ``name`` with ``labels``."""
        self._call("create volume", lambda: self.client.api.create_volume(name, driver="local", labels=labels))

    def remove_volume(self, name: str) -> None:
        """Remove volume ``name``, ignoring one that is already gone; DockerError naming the cause if a container
        still uses it."""
        self._call(f"remove volume {name}", lambda: self.client.api.remove_volume(name), absent_ok=True)

    def fill_volume(self, name: str, image: str, folder: str, helper: str, labels: dict[str, str]) -> None:
        """Copy ``folder`` of ``image`` into the empty volume ``name``: the engine copies an image's content into a
        new volume when a container that mounts it there is created, so the copy is whole once the create call
        returns. The container, named ``helper`` and labelled ``labels``, never starts and is removed."""
        api, quick = self.client.api, self.client.api.timeout
        api.timeout = IMAGE_RUN_TIMEOUT  # the engine copies gigabytes inside the create call
        try:
            self._call("create", lambda: api.create_container(
                image, name=helper, entrypoint=["true"], command=[], user="0", network_disabled=True, labels=labels,
                host_config=api.create_host_config(binds={name: {"bind": folder, "mode": "rw"}},
                                                   network_mode="none")))
        finally:
            api.timeout = quick
            self.remove_container(helper)
