"""The environment a command runs in (httpie style): its stdout and stderr consoles and whether each is a terminal.

``main`` makes one from the process's streams unless given one, and hands it to every command through
click's context (``ctx.obj``); tests pass consoles that write to StringIO and run the CLI in-process.
Nothing here is created at import time.
"""
from __future__ import annotations

import sys
from typing import IO, Any, Optional

import click
from rich.console import Console
from rich.text import Text

from orchestrator.contract import finite
from orchestrator.safetext import printable

# Off a terminal rich would wrap at 80 columns; a log file or pipe wants whole lines instead.
PIPE_WIDTH = 200


def _isatty(stream: Optional[IO[str]]) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Environment:
    """Where results (stdout) and progress and errors (stderr) go, and whether each is a terminal."""

    def __init__(self, out: Optional[Console] = None, err: Optional[Console] = None,
                 stdout_isatty: Optional[bool] = None, stderr_isatty: Optional[bool] = None,
                 debug: bool = False) -> None:
        if stdout_isatty is None:
            stdout_isatty = out.is_terminal if out is not None else _isatty(sys.stdout)
        if stderr_isatty is None:
            stderr_isatty = err.is_terminal if err is not None else _isatty(sys.stderr)
        self.stdout_isatty = stdout_isatty
        self.stderr_isatty = stderr_isatty
        # Without a file a console writes to whatever sys.stdout / sys.stderr is when it prints.
        self.out = out or Console(highlight=False, width=None if stdout_isatty else PIPE_WIDTH)
        self.err = err or Console(stderr=True, highlight=False, width=None if stderr_isatty else PIPE_WIDTH)
        self.debug = debug

    @classmethod
    def from_streams(cls, stdout: IO[str], stderr: IO[str], isatty: bool = False) -> "Environment":
        """Consoles writing to ``stdout`` and ``stderr`` (e.g. StringIO), terminals or not as ``isatty`` says."""
        width = None if isatty else PIPE_WIDTH

        def console(stream: IO[str]) -> Console:
            return Console(file=stream, highlight=False, width=width, force_terminal=isatty, color_system=None)

        return cls(console(stdout), console(stderr), stdout_isatty=isatty, stderr_isatty=isatty)

    @property
    def stdout(self) -> IO[str]:
        """The raw stdout stream, for text that must reach it byte for byte (a Compose file)."""
        return self.out.file

    @property
    def stderr(self) -> IO[str]:
        return self.err.file

    def say(self, text: str) -> None:
        """A progress line on stderr, ``orch: text``; ``text`` is plain (brackets in it are not markup), and a
        container's part of it is shown safely (``printable``)."""
        self.err.print(Text.assemble(("orch:", "dim"), " ", printable(text)), soft_wrap=True)

    def error(self, text: str) -> None:
        """A one-line error on stderr, plain and ``printable``."""
        self.err.print(printable(text), markup=False, highlight=False, emoji=False, soft_wrap=True)

    def json(self, payload: Any) -> None:
        """``payload`` as strict JSON on stdout (a number that is not finite is null, its reason beside it:
        ``contract.finite``), every character beyond ASCII escaped: the data whole, nothing a terminal reads."""
        self.out.print_json(data=finite(payload), ensure_ascii=True, allow_nan=False, default=str)


# `@pass_env` hands a command the context's Environment (a default one if the CLI was run without main).
pass_env = click.make_pass_decorator(Environment, ensure=True)
