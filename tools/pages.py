"""The pages whose figures are generated, and their cog blocks: found (``split``), run (``run_block``), and traced
to the result files each reads (``sources``). docs_check.py checks or writes them; bench_index.py lists, for each
benchmark, the figures its results feed."""
from __future__ import annotations

import io
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from cogapp import Cog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from figures import core  # noqa: E402

BEGIN, END_SPEC, END = "[[[cog", "]]]", "[[[end]]]"


@dataclass
class Block:
    """One cog block of a page: its first line's number (1-based), its text as committed, and its code."""

    line: int
    text: str
    code: str


def pages() -> list[Path]:
    """The pages whose figures are generated: the README, every page of the manual, and the benchmarks' index."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]


def split(text: str) -> list[str | Block]:
    """The page as plain text and blocks, in order: joined again they are the page."""
    lines = text.splitlines(keepends=True)
    parts: list[str | Block] = []
    plain: list[str] = []
    i = 0
    while i < len(lines):
        if BEGIN not in lines[i]:
            plain.append(lines[i])
            i += 1
            continue
        start = i
        while END_SPEC not in lines[i].split(BEGIN, 1)[-1]:
            i += 1
            if i == len(lines):
                raise SyntaxError(f"line {start + 1}: a cog block whose code never ends (no {END_SPEC})")
        while END not in lines[i]:
            i += 1
            if i == len(lines):
                raise SyntaxError(f"line {start + 1}: a cog block with no {END}")
        if plain:
            parts.append("".join(plain))
            plain = []
        chunk = "".join(lines[start:i + 1])
        code = chunk.split(BEGIN, 1)[1].split(END_SPEC, 1)[0].strip()
        parts.append(Block(start + 1, chunk, code))
        i += 1
    if plain:
        parts.append("".join(plain))
    return parts


def _cog() -> Cog:
    cog = Cog()
    cog.options.print_output = True
    cog.options.prologue = "import figures\nimport bench_index"
    cog.options.verbosity = 0
    return cog


def run_block(block: Block, page: str) -> str:
    """The block with its output as its code gives it now (the code's prints between the markers)."""
    core.READ.clear()
    core.set_page(page)
    quiet = io.StringIO()
    with redirect_stdout(quiet):  # cog's own messages; the block's prints go to its output
        return _cog().process_string(block.text, fname=page)


def heading_above(text: str, line: int) -> str:
    """The title of the section a line of a page is in (its nearest Markdown heading above, outside code)."""
    found, fenced = "", False
    for number, row in enumerate(text.splitlines(), 1):
        if number >= line:
            break
        if row.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and row.startswith("#"):
            found = row.lstrip("#").strip()
    return found


def sources(skip: tuple[str, ...] = ("benchmarks/README.md",)) -> list[tuple[str, str, str, list[str]]]:
    """(page, section, figure, result files it reads) of every figure of every page: the blocks run with their plots
    neither drawn nor checked, only their data read."""
    found = []
    tracing, core.TRACE = core.TRACE, True
    try:
        for path in pages():
            rel = path.relative_to(ROOT).as_posix()
            if rel in skip:
                continue
            text = path.read_text()
            for part in split(text):
                if isinstance(part, Block):
                    try:
                        run_block(part, rel)
                    except Exception:  # noqa: BLE001 - the check names a failing block; here its reads count
                        pass
                    found.append((rel, heading_above(text, part.line), part.code, list(dict.fromkeys(core.READ))))
    finally:
        core.TRACE = tracing
    return found
