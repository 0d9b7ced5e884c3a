"""What a peer's run does to the engine (benchmarks/peers.py): its state before and after (``engine_state``,
``left_behind``, ``clean``), and each container's peak memory while it runs (``PeakSampler``)."""
from __future__ import annotations

import os
import threading
from typing import Any

# -- the engine: its state before and after, each container's peak memory ---------------------------------------
def engine_state(client: Any) -> dict[str, set[str]]:
    return {"containers": {c.id for c in client.containers.list(all=True)},
            "networks": {n.id for n in client.networks.list()},
            "volumes": {v.name for v in client.volumes.list()},
            "images": {i.id for i in client.images.list(all=True)}}


def left_behind(client: Any, before: dict[str, set[str]]) -> dict[str, Any]:
    """What appeared in the engine since ``before``. orch's cache volumes (label orch.cache: each image's Python
    environment, made by a tool's first run of that image and reused by every later one) are counted apart as
    caches, and kept."""
    now = engine_state(client)
    new = {kind: sorted(now[kind] - before[kind]) for kind in now}
    caches = [v for v in new["volumes"] if "orch.cache" in (client.volumes.get(v).attrs.get("Labels") or {})]
    new["volumes"] = [v for v in new["volumes"] if v not in caches]
    running = [c.id for c in client.containers.list() if c.id in new["containers"]]
    return {**{kind: len(ids) for kind, ids in new.items()}, "running": len(running), "caches": len(caches),
            "ids": new}


def clean(client: Any, left: dict[str, Any]) -> None:
    """Remove what a tool left, so the next run starts from the same engine."""
    import docker.errors

    for cid in left["ids"]["containers"]:
        try:
            client.containers.get(cid).remove(force=True)
        except docker.errors.NotFound:
            pass
    for nid in left["ids"]["networks"]:
        try:
            client.networks.get(nid).remove()
        except docker.errors.NotFound:
            pass
    for name in left["ids"]["volumes"]:
        try:
            client.volumes.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass


CGROUP_PEAKS = ("/sys/fs/cgroup/memory/docker/{}/memory.max_usage_in_bytes",  # v1, cgroupfs
                "/sys/fs/cgroup/system.slice/docker-{}.scope/memory.peak",  # v2, systemd
                "/sys/fs/cgroup/docker/{}/memory.peak")  # v2, cgroupfs
CGROUP_DIRS = ("/sys/fs/cgroup/memory/docker", "/sys/fs/cgroup/system.slice", "/sys/fs/cgroup/docker")


class PeakSampler(threading.Thread):
    """Each new container's cgroup memory high-water mark, read every 0.2 s while it exists."""

    def __init__(self, known: set[str]) -> None:
        super().__init__(daemon=True)
        self.known, self.peaks, self.stop = known, {}, threading.Event()

    def _ids(self) -> list[str]:
        found = []
        for folder in CGROUP_DIRS:
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                cid = name.removeprefix("docker-").removesuffix(".scope")
                if len(cid) == 64 and cid not in self.known:
                    found.append(cid)
        return found

    def run(self) -> None:
        while not self.stop.is_set():
            for cid in self._ids():
                for pattern in CGROUP_PEAKS:
                    try:
                        with open(pattern.format(cid)) as f:
                            value = int(f.read())
                    except (OSError, ValueError):
                        continue
                    self.peaks[cid] = max(self.peaks.get(cid, 0), value)
                    break
            self.stop.wait(0.2)

    def finish(self) -> dict[str, int]:
        self.stop.set()
        self.join()
        return dict(self.peaks)
