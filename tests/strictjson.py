"""A strict JSON parser, as jq, JavaScript or a browser read JSON: NaN, Infinity and -Infinity are refused."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def loads(text: str | bytes) -> Any:
    """The JSON in ``text``; ValueError for anything a strict parser refuses."""
    return json.loads(text, parse_constant=_refuse)


def every_file(folder: Path) -> list[Path]:
    """Every .json file under ``folder``, each parsed strictly (ValueError at the first that is not strict JSON)."""
    files = sorted(folder.rglob("*.json"))
    for path in files:
        try:
            loads(path.read_bytes())
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    return files
