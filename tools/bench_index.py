"""The benchmarks' index (benchmarks/README.md): every entry of benchmarks/suite.py with the question it answers, its
command, its result files, and the figures of README.md and docs/ drawn from them, found by running every figure's
block and noting what it reads (pages.sources)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pages  # noqa: E402
import suite  # noqa: E402
from figures import core  # noqa: E402
from figures.core import emit, link  # noqa: E402


def bench_index() -> None:
    """Every entry of benchmarks/suite.py: the question it answers, its command, its result files, and the figures of
    README.md and docs/ drawn from them (found by running every figure's block and noting what it reads)."""
    fed: dict[str, list[str]] = {}
    here, read = core.PAGE, list(core.READ)
    found = pages.sources()
    core.set_page(here)
    core.READ[:] = read
    for page_rel, section, code, files in found:
        for rel in files:
            bench = suite.writer_of(rel)
            if bench is not None:
                anchor = f"[{page_rel}]({link(page_rel)})" + (f" § {section}" if section else "")
                entry = f"{anchor}: `{code.removeprefix('figures.')}`"
                if entry not in fed.setdefault(bench.name, []):
                    fed[bench.name].append(entry)
    for b in suite.SUITE:
        emit(f"### {b.name}\n")
        emit(f"{b.question}\n")
        emit(f"- **Command:** `{b.shown()}` (about {b.minutes} min on 2 cores{'; needs root' if b.root else ''})")
        emit("- **Writes:** " + ", ".join(f"[{w}]({link(w.rstrip('/'))})" for w in b.writes))
        figures_fed = fed.get(b.name, [])
        emit("- **Feeds:**" + (" none of the docs' figures (a reference result)" if not figures_fed else ""))
        for entry in figures_fed:
            emit(f"  - {entry}")
        emit("")
