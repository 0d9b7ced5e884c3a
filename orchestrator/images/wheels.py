"""The images' wheelhouse: the lock (every wheel's name, version and sha256), its download and its checks.

`images/requirements.lock` is the whole closure of `requirements.txt` (with dependencies) and
`requirements-nodeps.txt` (without), resolved for the image's interpreter: the host's pip downloads
exactly it with --require-hashes, `orch build` checks every wheel against it before use, and the image
installs exactly it with --require-hashes --no-deps. `make lock` (`python -m orchestrator.images.lock`) regenerates it (pins.generate_lock).

`--torch-index` and `--requirements` lock their wheelhouses at first build (pins.py): ``resolve`` (pip's dry-run
report), a lock naming each package's one source, then ``download_pins`` from each source alone with --require-hashes. Plain
http needs --allow-insecure-index, and URLs are printed and written only through ``redact``.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import re
import subprocess
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional
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
    tail = stderr_tail(proc.stderr)
    if "DO NOT MATCH THE HASHES" in proc.stderr:
        which = re.search(r"^\s+(\S+==\S+) from ", proc.stderr, re.MULTILINE)
        raise BuildError(f"the wheel the package index serves for {which[1] if which else 'a package'} does not "
                         f"match its hash in {LOCK_NAME}: the lock and the package index disagree; {refresh}",
                         details=tail)
    raise BuildError(f"pip could not download the wheels in {redact(what)}; check the host's pip can reach the "
                     "package index", details=tail)


def stderr_tail(stderr: str) -> str:
    """The last lines of pip's stderr, credentials redacted."""
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
