"""The images' wheelhouse: the lock (every wheel's name, version and sha256), its download and its checks.

`images/requirements.lock` is the whole closure of `requirements.txt` (with dependencies) and
`requirements-nodeps.txt` (without), resolved for the image's interpreter: the host's pip downloads
exactly it with --require-hashes, `orch build` checks every wheel against it before use, and the image
installs exactly it with --require-hashes --no-deps. `make lock` (`python -m orchestrator.images.lock`) regenerates it.

`--torch-index` and `--requirements` lock their wheelhouses at first build: ``resolve`` (pip's dry-run report), a
lock naming each package's one source, then ``download_pins`` from each source alone with --require-hashes. Plain
http needs --allow-insecure-index, and URLs are printed and written only through ``redact``.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional
from urllib.parse import urlsplit

from orchestrator.errors import BuildError, InvalidSpec

LOCK_NAME = "requirements.lock"
REQUIREMENTS = ("requirements.txt", "requirements-nodeps.txt")  # the second without dependencies
REFRESH = "regenerate the lock with `make lock` (python -m orchestrator.images.lock) and review its diff"
# The image's interpreter: Debian bookworm's python3 is CPython 3.11 on glibc 2.36.
IMAGE_PYTHON = "3.11"
IMAGE_GLIBC_MINOR = 36

_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)$")
_INPUTS = re.compile(r"^# inputs: ([0-9a-f]{64})$", re.MULTILINE)
_SOURCE = re.compile(r"\s*((?:index|url) \S+)\s*")  # an entry's comment naming where its wheel comes from
_AUTH = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")  # a URL's user:password@ (or token@)
# What resolve and download_pins keep of the host's pip settings: how it connects, never a second source.
_KEPT = ("index-url", "cert", "client-cert", "proxy", "timeout", "default-timeout", "retries")
_ADDS_SOURCE = {f"PIP_{key}" for key in ("CONFIG_FILE", "INDEX_URL", "EXTRA_INDEX_URL", "FIND_LINKS", "NO_INDEX",
                                         "TRUSTED_HOST")}
_INSECURE_OK: ContextVar[bool] = ContextVar("orch_allow_insecure_index", default=False)

Say = Callable[[str], None]


@dataclass(frozen=True)
class Locked:
    """One package of the lock: its exact version and the sha256 digests its wheel may have."""

    name: str
    version: str
    hashes: frozenset[str]
    source: str = ""  # "index URL" or "url URL" (credentials redacted); "": the host's index (orch's own locks)


@dataclass(frozen=True)
class Lock:
    path: Path
    digest: str  # of the lock file; keys the wheelhouse cache
    inputs: Optional[str]  # the lock_inputs() it was generated from
    packages: dict[str, Locked]  # by canonical name


def canonical(name: str) -> str:
    """A project name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_id(filename: str) -> tuple[str, str]:
    """(canonical name, version) of a wheel file name."""
    parts = filename[:-len(".whl")].split("-") if filename.endswith(".whl") else []
    if len(parts) not in (5, 6):
        raise BuildError(f"{filename} is not a wheel file name")
    return canonical(parts[0]), parts[1]


def platform_args() -> list[str]:
    """pip's target: CPython 3.11 on manylinux x86_64 up to bookworm's glibc, or pure Python."""
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(17, IMAGE_GLIBC_MINOR + 1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "any"]
    return ["--only-binary=:all:", "--python-version", IMAGE_PYTHON, "--implementation", "cp", "--abi", "cp311",
            "--abi", "abi3", "--abi", "none", *[arg for tag in tags for arg in ("--platform", tag)]]


def lock_inputs(images: Path) -> str:
    """Digest of what the lock is generated from: the requirements' lines (comments aside) and pip's target."""
    h = hashlib.sha256(" ".join(platform_args()).encode() + b"\0")
    for name in REQUIREMENTS:
        lines = [line.split("#", 1)[0].strip() for line in (images / name).read_text().splitlines()]
        h.update(name.encode() + b"\0" + "\n".join(line for line in lines if line).encode() + b"\0")
    return h.hexdigest()


def read_lock(path: Path) -> Lock:
    """Parse a lock: `name==version --hash=sha256:...` per package, backslash continuations, # comments."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BuildError(f"{path} is missing; {REFRESH}") from None
    packages: dict[str, Locked] = {}
    for number, line in enumerate(text.replace("\\\n", " ").splitlines(), 1):
        entry, _, note = line.partition("#")
        entry, source = entry.strip(), _SOURCE.fullmatch(note)
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise BuildError(f"{path.name}: entry {number} is not `name==version --hash=sha256:...`: {entry[:60]}")
        name = canonical(match[1])
        if name in packages:
            raise BuildError(f"{path.name}: {name} appears twice")
        packages[name] = Locked(name, match[2], frozenset(_HASH.findall(match[3])), source[1] if source else "")
    if not packages:
        raise BuildError(f"{path} lists no packages; {REFRESH}")
    inputs = _INPUTS.search(text)
    return Lock(path, hashlib.sha256(text.encode()).hexdigest()[:16], inputs and inputs[1], packages)


def check_fresh(lock: Lock, images: Path) -> None:
    """Refuse a lock generated from other requirements (or for another interpreter) than the current ones."""
    if lock.inputs != lock_inputs(images):
        raise BuildError(f"{lock.path.name} is out of date: {' or '.join(REQUIREMENTS)} (or the image's Python) "
                         f"changed since it was generated; {REFRESH}")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def select(folder: Path, lock: Lock) -> list[Path]:
    """The wheels of ``folder`` the lock names at its exact versions, sorted; every locked package needs one.

    Other files are left out of the image's build context, so they cannot be installed.
    """
    chosen, found = [], set()
    for path in sorted(folder.glob("*.whl")):
        name, version = wheel_id(path.name)
        if name in lock.packages and lock.packages[name].version == version:
            chosen.append(path)
            found.add(name)
    missing = sorted(set(lock.packages) - found)
    if missing:
        first = lock.packages[missing[0]]
        raise BuildError(f"the wheelhouse {folder} has no wheel for {first.name}=={first.version} "
                         f"({len(missing)} locked packages missing); delete the folder to download it again")
    return chosen


def verify(folder: Path, lock: Lock) -> list[Path]:
    """Every locked wheel of ``folder``, each checked against the lock's sha256; a mismatch is a one-line error."""
    wheels = select(folder, lock)
    for wheel in wheels:
        digest = sha256(wheel)
        if digest not in lock.packages[wheel_id(wheel.name)[0]].hashes:
            raise BuildError(f"{wheel.name} has sha256 {digest[:16]}…, which {lock.path.name} does not list: "
                             f"the lock and the package index (or the cache {folder}) disagree; if the index's "
                             f"wheel is the one you want, {REFRESH}, else delete {folder} to download again")
    return wheels


def download(target: Path, args: list[str], what: str, env: Optional[dict[str, str]] = None,
             refresh: str = REFRESH) -> None:
    """`pip download` with the host's pip into ``target``, for the image's interpreter."""
    cmd = [sys.executable, "-m", "pip", "download", *platform_args(), "--progress-bar", "off", "-d", str(target),
           *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode == 0:
        return
    tail = _tail(proc.stderr)
    if "DO NOT MATCH THE HASHES" in proc.stderr:
        which = re.search(r"^\s+(\S+==\S+) from ", proc.stderr, re.MULTILINE)
        raise BuildError(f"the wheel the package index serves for {which[1] if which else 'a package'} does not "
                         f"match its hash in {LOCK_NAME}: the lock and the package index disagree; {refresh}",
                         details=tail)
    raise BuildError(f"pip could not download the wheels in {redact(what)}; check the host's pip can reach the "
                     "package index", details=tail)


def _tail(stderr: str) -> str:
    return redact("\n".join(stderr.strip().splitlines()[-8:]))


def redact(text: str, mark: str = "***@") -> str:
    """``text`` with every URL's credentials (``user:password@``, ``token@``) as ``***@``, for printing or writing."""
    return _AUTH.sub(lambda match: match[1] + mark, text)


@contextlib.contextmanager
def insecure_allowed(allow: bool) -> Iterator[None]:
    """Within this block, plain-http indexes and wheel URLs are taken (`--allow-insecure-index`)."""
    token = _INSECURE_OK.set(allow)
    try:
        yield
    finally:
        _INSECURE_OK.reset(token)


def check_secure(url: str, what: str, allow: Optional[bool] = None) -> None:
    """Refuse (one line) a plain-http URL unless allowed (``allow``, else `insecure_allowed`): a wheel in clear
    can be swapped on the way, and the lock would pin the swapped one."""
    allowed = _INSECURE_OK.get() if allow is None else allow
    if re.match(r"(?i)\s*(git\+)?http://", url) and not allowed:
        raise InvalidSpec(f"{what}: {redact(url.strip())[:100]} is plain http, which anyone on the way can change; "
                          "use https, or pass --allow-insecure-index to take it anyway")


def index_args(url: str) -> list[str]:
    """pip's arguments to use ``url`` as the one index (plain http only once allowed: pip wants the host trusted)."""
    host = urlsplit(url).hostname
    return ["--index-url", url, *(["--trusted-host", host] if urlsplit(url).scheme == "http" and host else [])]


def host_index() -> tuple[str, dict[str, str]]:
    """The host's one index (pip's index-url, from PIP_INDEX_URL or its configuration; else PyPI) and an environment
    for pip that keeps how it connects (certificate, proxy, timeouts) but nothing that adds a second source."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    order = (":env:", "download", "install", "global")
    kept: dict[str, dict[int, str]] = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else ():
        section, _, rest = line.partition(".")
        key, _, value = rest.partition("=")
        if section in order and key in _KEPT:
            with contextlib.suppress(ValueError, SyntaxError):
                kept.setdefault(key, {})[order.index(section)] = str(ast.literal_eval(value))
    env = {k: v for k, v in os.environ.items() if k not in _ADDS_SOURCE}
    env.update({f"PIP_{k.upper().replace('-', '_')}": v[min(v)] for k, v in kept.items() if k != "index-url"})
    env["PIP_CONFIG_FILE"] = os.devnull  # the settings above are all it keeps of pip's configuration files
    return (kept["index-url"][min(kept["index-url"])] if "index-url" in kept else "https://pypi.org/simple"), env


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
                             f"only, on {redact(index)}", details=_tail(proc.stderr))
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


def fetch(target: Path, lock: Lock, say: Say) -> list[Path]:
    """The wheelhouse in ``target``: downloaded once with --require-hashes, verified against the lock at every use."""
    if not (target / ".complete").is_file():
        say(f"downloading the {len(lock.packages)} wheels of {lock.path.name} (host pip, for CPython {IMAGE_PYTHON} "
            "manylinux, hashes checked)")
        target.mkdir(parents=True, exist_ok=True)
        download(target, ["--require-hashes", "--no-deps", "-r", str(lock.path)], lock.path.name)
        wheels = verify(target, lock)
        (target / ".complete").write_text("ok\n")
        return wheels
    return verify(target, lock)


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
