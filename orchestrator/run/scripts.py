"""Users' own training scripts (`--script`): where the file is, and whether it is one orch can mount."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from orchestrator.errors import InvalidSpec


def absolute(script: Any, base: Path) -> Any:
    """``script`` made absolute against ``base`` (the working folder, or an experiment file's folder), as a
    normalised path string; anything that is not a string is left for the spec to refuse."""
    if not isinstance(script, str) or not script or "\x00" in script:
        return script
    return os.path.normpath(os.path.join(base, os.path.expanduser(script)))


def check(script: str) -> None:
    """InvalidSpec (one line) unless ``script`` is a readable regular .py file whose folder can be mounted."""
    try:
        info = os.stat(script)
    except OSError as exc:
        raise InvalidSpec(f"script: cannot use {script!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidSpec(f"script: {script!r} is not a regular file")
    if not os.access(script, os.R_OK):
        raise InvalidSpec(f"script: {script!r} is not readable")
    if os.path.dirname(script) == "/":
        raise InvalidSpec(f"script: {script!r} sits in / itself, whose whole tree would be mounted; move it into "
                          "a folder of its own")
