"""Golden files: a rendered artifact pinned in tests/golden/, written anew with ORCH_UPDATE_GOLDEN=1 (review the diff)."""
import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str, text: str) -> str:
    """The committed golden file ``name``; with ORCH_UPDATE_GOLDEN set, ``text`` written there first."""
    path = GOLDEN / name
    if os.environ.get("ORCH_UPDATE_GOLDEN"):
        path.write_text(text)
    return path.read_text()
