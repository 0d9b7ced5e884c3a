"""A stand-in for the docker CLI: an executable named `docker` that a test puts first on PATH.

It records each command line it is given (without the leading `docker`) and its parent's, and answers as the
test told it, one answer a call in order, the last one again once they run out: an exit status, stdout, stderr,
and seconds to hang first. orch reaches it as it reaches the real CLI: through python-on-whales, under `timeout`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SCRIPT = """\
import json, os, sys, time
from pathlib import Path

here = Path(__file__).parent
try:
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\\0")[:-1]
except OSError:
    parent = []
with open(here / "calls.jsonl", "a") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "parent": parent}) + "\\n")
answers = json.loads((here / "answers.json").read_text())
calls = len((here / "calls.jsonl").read_text().splitlines())
answer = answers[min(calls, len(answers)) - 1]
time.sleep(answer["hang"])
sys.stdout.write(answer["stdout"])
sys.stderr.write(answer["stderr"])
sys.exit(answer["code"])
"""


class FakeDocker:
    """The fake CLI in ``folder`` (which the test puts first on PATH); ``answer`` sets what it does."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "fake_docker.py").write_text(SCRIPT)
        docker = folder / "docker"
        docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{folder / "fake_docker.py"}" "$@"\n')
        docker.chmod(0o755)
        self.answer((0,))

    def answer(self, *answers: tuple) -> "FakeDocker":
        """One ``(code, stdout="", stderr="", hang=0)`` a call, in order; forgets the calls so far."""
        rows = [dict(zip(("code", "stdout", "stderr", "hang"), (*a, *(0, "", "", 0)[len(a):]))) for a in answers]
        (self.folder / "answers.json").write_text(json.dumps(rows))
        (self.folder / "calls.jsonl").write_text("")
        return self

    def _log(self, key: str) -> list[list[str]]:
        return [json.loads(line)[key] for line in (self.folder / "calls.jsonl").read_text().splitlines()]

    @property
    def calls(self) -> list[list[str]]:
        """Each command line the fake was given, without `docker`."""
        return self._log("argv")

    @property
    def parents(self) -> list[list[str]]:
        """The command line of each call's parent process (Linux's /proc): the `timeout` that ran it."""
        return self._log("parent")
