"""Check, or write, the generated figures of README.md and docs/.

    python tools/docs_check.py            check: exit 1 with one line per figure that is not what its data gives
    python tools/docs_check.py --write    write every figure (and plot) from the committed result files

A figure is a cog block (cogapp) in the Markdown page, whose code calls tools/figures.py:

    <!-- [[[cog figures.headline_table() ]]] -->
    | ... the generated table ... |
    <!-- [[[end]]] -->

cog runs each block's code and puts what it prints between the markers. The check runs every block again and compares
its output with the committed text, block by block, so that a failure names the page, the line, the figure and the
result file it comes from. It also refuses a measured-looking number (a decimal with a unit: ``2.59 s``, ``6.52x``,
``4.73 GB``) typed into a page outside a generated block and outside code: figures come from data.
"""
from __future__ import annotations

import argparse
import io
import re
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from cogapp import Cog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures  # noqa: E402
import suite  # noqa: E402

BEGIN, END_SPEC, END = "[[[cog", "]]]", "[[[end]]]"
TYPED = re.compile(r"(?<![\w.\-/])\d+\.\d+\s?(?:s|ms|µs|us|x|×|%|MB|MiB|GB|GiB|KB|KiB|minutes|min)(?![\w/])")
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


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
    cog.options.prologue = "import figures"
    cog.options.verbosity = 0
    return cog


def run_block(block: Block, page: str) -> str:
    """The block with its output as its code gives it now (the code's prints between the markers)."""
    figures.READ.clear()
    figures.set_page(page)
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
    tracing, figures.TRACE = figures.TRACE, True
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
                    found.append((rel, heading_above(text, part.line), part.code, list(dict.fromkeys(figures.READ))))
    finally:
        figures.TRACE = tracing
    return found


def typed_figures(text: str) -> list[tuple[int, str]]:
    """(line, number) of every measured-looking number typed outside generated blocks and code."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced:
            continue
        prose = LINK_TARGET.sub("](", CODE_SPAN.sub("", line))
        found += [(number, m.group(0)) for m in TYPED.finditer(prose)]
    return found


def reason(exc: Exception) -> str:
    """Why a block failed, in one line: cog reports the code's exception as a traceback's text, whose last line
    is the exception itself; a FigureError's message is the whole reason."""
    last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1].strip()
    return last.removeprefix("FigureError: ")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write every figure and plot from the data")
    args = parser.parse_args(argv)
    figures.WRITE = args.write
    problems = []
    for path in pages():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        try:
            parts = split(text)
        except SyntaxError as exc:
            problems.append(f"{rel}: {exc}")
            continue
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                for line, number in typed_figures(part):
                    first = text[:text.index(part)].count("\n")
                    problems.append(f"{rel}:{first + line}: {number} is typed by hand; a figure comes from a "
                                    "result file through tools/figures.py (a cog block)")
                continue
            try:
                new = run_block(part, rel)
            except Exception as exc:  # noqa: BLE001 - every figure's failure is one line naming it
                problems.append(f"{rel}:{part.line}: {part.code}: {reason(exc)}")
                out.append(part.text)
                continue
            orphans = [f for f in dict.fromkeys(figures.READ) if suite.writer_of(f) is None]
            if orphans:
                problems.append(f"{rel}:{part.line}: {part.code} reads {orphans[0]}, which no benchmark of "
                                "benchmarks/suite.py writes: add the benchmark to the suite")
            if new != part.text and not args.write:
                sources = ", ".join(dict.fromkeys(figures.READ)) or "its code"
                problems.append(f"{rel}:{part.line}: {part.code} is not what {sources} gives; run `make figures` and "
                                "commit the pages")
            out.append(new)
        if args.write and "".join(out) != text:
            path.write_text("".join(out))
            print(f"wrote the figures of {rel}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
