"""Reports read back from a replica's standard output, for engines with no folder shared with orch.

With ORCH_REPORT=stdout the trainer prints each event, heartbeat and result as report lines (see
``contract.STDOUT_PREFIX``); this turns those lines, read through the engine's log API, back into the
records a run directory holds. The lines are untrusted input: only the files a replica may write are
accepted, and a record is bounded in parts.
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator, Optional

from orchestrator import contract

# A function job's record of what its call returned (run/function.py). Its entry script is written by orch on the host
# and travels with the function, not in the images, so the name is the host's alone: in contract.py it would change the
# trainer images' inputs, and rebuild them, for a file their trainer never writes.
FUNCTION_RETURN_FILE = "function-return.json"
# The files a replica reports into; anything else (a path, another file) is ignored.
REPORTED_FILES = (contract.EVENTS_FILE, contract.HEARTBEAT_FILE, contract.RESULT_FILE, FUNCTION_RETURN_FILE)
MAX_PARTS = 256  # a record of at most 256 lines, about 2 MB
_LINE = re.compile(rf"{re.escape(contract.STDOUT_PREFIX)} (\S+) ([0-9]{{1,6}})/([0-9]{{1,6}}) (.*)")


def parse_line(line: str) -> Optional[tuple[str, int, int, str]]:
    """(file, part, parts, text) of a report line, or None for any other output."""
    match = _LINE.fullmatch(line.rstrip("\r\n"))
    if match is None or match.group(1) not in REPORTED_FILES:
        return None
    part, parts = int(match.group(2)), int(match.group(3))
    if not 1 <= part <= parts <= MAX_PARTS:
        return None
    return match.group(1), part, parts, match.group(4)


class Assembler:
    """Whole records from report lines fed one at a time, across reads: a record whose parts do not follow in
    order is dropped."""

    def __init__(self) -> None:
        self.pending: dict[str, list[str]] = {}

    def feed(self, line: str) -> Optional[tuple[str, str]]:
        """(file, text) once ``line`` completes a record; None for any other line or an unfinished record."""
        parsed = parse_line(line)
        if parsed is None:
            return None
        name, part, parts, text = parsed
        if part == 1:
            self.pending[name] = []
        elif len(self.pending.get(name, ())) != part - 1:
            self.pending.pop(name, None)  # a part went missing: the record cannot be trusted whole
            return None
        self.pending[name].append(text)
        if part == parts:
            return name, "".join(self.pending.pop(name))
        return None


def records(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(file, text) of each whole record in ``lines``; a record whose parts do not follow in order is dropped."""
    assembler = Assembler()
    for line in lines:
        record = assembler.feed(line)
        if record is not None:
            yield record
