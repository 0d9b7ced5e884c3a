"""Write the files generated from orch's own models: the API's typed keywords (orchestrator/jobspec/keywords.py)
and the table of which flags apply to which job (docs/cli.md). tests/test_typing.py fails when a committed file
differs from what this writes. Run from the checkout: `python tools/generate.py`."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from orchestrator.cli import reference
    from orchestrator.jobspec import signature

    signature.KEYWORDS_FILE.write_text(signature.keywords_source())
    print(f"wrote {signature.KEYWORDS_FILE.relative_to(ROOT)}")
    page = ROOT / "docs" / "cli.md"
    page.write_text(reference.with_flags_table(page.read_text()))
    print(f"wrote the flags table in {page.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
