"""Check, or write, the generated figures of README.md and docs/.

    python tools/docs_check.py            check: exit 1 with one line per figure that is not what its data gives
    python tools/docs_check.py --write    write every figure (and plot) from the committed result files

A figure is a cog block (cogapp) in the Markdown page, whose code calls tools/figures/:

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
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pages  # noqa: E402
import suite  # noqa: E402
from figures import core  # noqa: E402
from pages import run_block, split  # noqa: E402

TYPED = re.compile(r"(?<![\w.\-/])\d+\.\d+\s?(?:s|ms|µs|us|x|×|%|MB|MiB|GB|GiB|KB|KiB|minutes|min)(?![\w/])")
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


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
    core.WRITE = args.write
    problems = []
    for path in pages.pages():
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
                                    "result file through tools/figures/ (a cog block)")
                continue
            try:
                new = run_block(part, rel)
            except Exception as exc:  # noqa: BLE001 - every figure's failure is one line naming it
                problems.append(f"{rel}:{part.line}: {part.code}: {reason(exc)}")
                out.append(part.text)
                continue
            orphans = [f for f in dict.fromkeys(core.READ) if suite.writer_of(f) is None]
            if orphans:
                problems.append(f"{rel}:{part.line}: {part.code} reads {orphans[0]}, which no benchmark of "
                                "benchmarks/suite.py writes: add the benchmark to the suite")
            if new != part.text and not args.write:
                sources = ", ".join(dict.fromkeys(core.READ)) or "its code"
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
