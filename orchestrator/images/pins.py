"""Pinning a wheelhouse: resolving requirements for the image's interpreter (pip's dry-run report, ``resolve``), the
pins written as a lock (``render_pins``, ``write_lock``), their download from each one's own source
(``download_pins``), and the images' own lock made anew (``generate_lock``, `make lock`)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from orchestrator.errors import BuildError
from orchestrator.images.wheels import (IMAGE_GLIBC_MINOR, IMAGE_PYTHON, LOCK_NAME, REQUIREMENTS, Lock, Locked, Say,
                                        stderr_tail, canonical, check_secure, download, index_args, lock_inputs,
                                        platform_args, read_lock, redact, sha256, verify, wheel_id)

@dataclass(frozen=True)
class Resolution:
    """What pip would install, and why: each package's own requirements on the image's interpreter (markers
    evaluated there), and the packages the file asked for by name."""

    pins: list[Locked]
    requires: dict[str, dict[str, frozenset[str]]]  # name -> {required name: the extras it asks of it}
    requested: dict[str, frozenset[str]]  # name -> the extras asked of it

    def reached(self, through_not: set[str], start: Optional[dict[str, frozenset[str]]] = None) -> list[str]:
        """The packages the file's requests (or ``start``) need, in the order found, never looking into the
        requirements of those in ``through_not``: packages an image already has bring what that image chose to carry
        of theirs."""
        wanted: dict[str, set[str]] = {}
        queue = [(name, set(extras)) for name, extras in (self.requested if start is None else start).items()]
        while queue:
            name, extras = queue.pop(0)
            seen = wanted.get(name)
            if seen is not None and extras <= seen:
                continue
            wanted[name] = (seen or set()) | extras
            if name in through_not:
                continue
            for key in ("", *sorted(wanted[name])):
                for needed, its_extras in self.requires.get(f"{name}[{key}]" if key else name, {}).items():
                    queue.append((needed, set(its_extras)))
        return list(wanted)


def _image_environment(extra: str = "") -> dict[str, str]:
    """The environment markers of the images' interpreter: CPython 3.11 on Linux x86_64."""
    return {"python_version": IMAGE_PYTHON, "python_full_version": f"{IMAGE_PYTHON}.2", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "platform_python_implementation": "CPython", "implementation_name": "cpython", "extra": extra}


def _requires(meta: dict[str, Any]) -> dict[str, dict[str, frozenset[str]]]:
    """A package's requirements on the image, by the extra that brings them ("" for its own): {"name" or
    "name[extra]": {required: its extras}}."""
    from packaging.requirements import InvalidRequirement, Requirement

    name = canonical(str(meta.get("name", "")))
    extras = [str(e) for e in meta.get("provides_extra") or []]
    out: dict[str, dict[str, frozenset[str]]] = {}
    for line in meta.get("requires_dist") or []:
        try:
            req = Requirement(str(line))
        except InvalidRequirement:
            continue
        for extra in ("", *extras):
            if req.marker is None and extra:
                continue  # an unconditional requirement is the package's own, listed once
            if req.marker is None or req.marker.evaluate(_image_environment(extra)):
                key = f"{name}[{extra}]" if extra else name
                out.setdefault(key, {})[canonical(req.name)] = frozenset(req.extras)
    return out


def resolve(args: list[str], index: str, env: dict[str, str], what: str) -> list[Locked]:
    """What pip would install for ``args`` (with their index) on the image's interpreter, wheels only: a dry run whose
    report gives each wheel's version, URL and sha256. ``index`` is the source of what has no URL of its own."""
    return resolve_graph(args, index, env, what).pins


def resolve_graph(args: list[str], index: str, env: dict[str, str], what: str) -> Resolution:
    """``resolve``, with each package's requirements and what was asked for by name (``Resolution``)."""
    with tempfile.TemporaryDirectory(prefix="orch-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--target", f"{tmp}/t",
               "--report", str(report), "--quiet", "--disable-pip-version-check", *platform_args(), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0 or not report.is_file():
            raise BuildError(f"pip could not resolve {redact(what)} for CPython {IMAGE_PYTHON} manylinux, wheels "
                             f"only, on {redact(index)}", details=stderr_tail(proc.stderr))
        items = json.loads(report.read_text()).get("install", [])
    pins, requires, requested = [], {}, {}
    for item in items:
        info, meta = item.get("download_info") or {}, item.get("metadata") or {}
        url, name = str(info.get("url", "")), f"{meta.get('name')}=={meta.get('version')}"
        sha = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256")
        check_secure(url, f"{redact(what)}: {name}'s wheel")
        if not sha:
            raise BuildError(f"{redact(what)}: the index gives no sha256 for {name}'s wheel, and orch locks only "
                             "what it can hash; use an index that lists sha256 digests (as PyPI does)")
        source = f"url {redact(url)}" if item.get("is_direct") else f"index {redact(index)}"
        pins.append(Locked(canonical(meta["name"]), str(meta["version"]), frozenset({sha}), source))
        requires.update(_requires(meta))
        if item.get("requested"):
            requested[canonical(meta["name"])] = frozenset(map(str, item.get("requested_extras") or []))
    return Resolution(pins, requires, requested)


def render_pins(pins: list[Locked], header: list[str]) -> str:
    """A lock of ``pins``, sorted, each with its sha256 and, as a comment (`read_lock` keeps it), its source."""
    names = [pin.name for pin in pins]
    if len(set(names)) != len(names):
        raise BuildError(f"two wheels for {max(names, key=names.count)}: the lock takes one version of a package")
    lines = [redact(f"# {line}") for line in header]
    lines += [f"{p.name}=={p.version} \\\n    " + " \\\n    ".join(f"--hash=sha256:{h}" for h in sorted(p.hashes))
              + (p.source and f"  # {p.source}") for p in sorted(pins, key=lambda p: p.name)]
    return "\n".join(lines) + "\n"


def write_lock(path: Path, text: str) -> Lock:
    """Write a lock's text in place of ``path`` at once, and read it back."""
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(text)
    os.replace(partial, path)
    return read_lock(path)


def download_pins(target: Path, pins: list[Locked], sources: list[str], env: dict[str, str], what: str) -> None:
    """Download exactly ``pins``, each source's from it alone (its one --index-url; a URL's wheel with no index), with
    --require-hashes --no-deps. ``sources``: the URLs as given, credentials and all, which pins name redacted."""
    real = {redact(url.split("#", 1)[0], ""): url for url in sources}
    groups: dict[str, list[Locked]] = {}
    for pin in pins:
        groups.setdefault(pin.source, []).append(pin)
    refresh = f"delete {target} and build again to resolve anew"
    with tempfile.TemporaryDirectory(prefix="orch-pins-") as tmp:
        for number, (source, group) in enumerate(sorted(groups.items())):
            kind, _, shown = source.partition(" ")
            url = real.get(redact(shown, ""), shown)
            pinned = (f"{p.name} @ {url}" if kind == "url" else f"{p.name}=={p.version}" for p in group)
            listed = Path(tmp) / f"group-{number}.txt"
            listed.write_text("".join(f"{line} {' '.join(f'--hash=sha256:{h}' for h in p.hashes)}\n"
                                      for line, p in zip(pinned, group)))
            where = ["--no-index"] if kind == "url" else index_args(url)
            download(target, ["--disable-pip-version-check", *where, "--require-hashes", "--no-deps", "-r",
                              str(listed)], f"{what} from {shown}", env, refresh)


def render_lock(wheels: list[Path], inputs: str) -> str:
    """The lock file's text for these downloaded wheels: one entry per package, sorted, with its sha256."""
    return render_pins([Locked(*wheel_id(wheel.name), frozenset({sha256(wheel)})) for wheel in wheels], [
        "The trainer images' whole wheelhouse: every package, its exact version and the sha256 of its wheel",
        f"for CPython {IMAGE_PYTHON} on manylinux x86_64 (glibc up to 2.{IMAGE_GLIBC_MINOR}), generated from",
        "requirements.txt and requirements-nodeps.txt by `make lock` (python -m orchestrator.images.lock). Do not edit.",
        f"inputs: {inputs}"])


def generate_lock(images: Path, cache: Optional[Path], say: Say) -> Lock:
    """Resolve and download the requirements for the image's interpreter, hash every wheel, write the lock.

    The downloaded wheels then seed the wheelhouse cache under the new lock's digest (in ``cache``), so the
    next `orch build` does not download them again; it still verifies them first.
    """
    with tempfile.TemporaryDirectory(prefix="orch-lock-") as tmp:
        folder = Path(tmp)
        for name, extra in zip(REQUIREMENTS, ([], ["--no-deps"])):
            say(f"resolving and downloading {name} (host pip, for CPython {IMAGE_PYTHON} manylinux)")
            download(folder, [*extra, "-r", str(images / name)], name)
        lock = write_lock(images / LOCK_NAME, render_lock(sorted(folder.glob("*.whl")), lock_inputs(images)))
        if cache is not None and not (cache / lock.digest / ".complete").is_file():
            target = cache / lock.digest
            target.mkdir(parents=True, exist_ok=True)
            for wheel in folder.glob("*.whl"):
                shutil.move(wheel, target / wheel.name)
            verify(target, lock)
            (target / ".complete").write_text("ok\n")
    return lock
