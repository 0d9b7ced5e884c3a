"""The package's layering (pyproject.toml's [tool.importlinter], docs/architecture.md): import-linter finds every
contract kept, and an import against it, made in a copy of the package, breaks the check."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"]


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*LINT, "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=120)


def test_every_layering_contract_is_kept():
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_an_import_against_the_layering_breaks_the_check(tmp_path):
    """The run directory's handle importing the module that starts runs: a lower room of run/ reaching a higher one."""
    shutil.copytree(ROOT / "orchestrator", tmp_path / "orchestrator", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    rundir = tmp_path / "orchestrator" / "run" / "rundir.py"
    rundir.write_text(rundir.read_text().replace("from orchestrator import contract\n",
                                                 "from orchestrator import contract\nfrom orchestrator.run import start\n"))
    proc = _lint(tmp_path)
    assert proc.returncode != 0
    assert "orchestrator.run.rundir is not allowed to import orchestrator.run.start" in proc.stdout, proc.stdout


MAX_LINES = 350


def test_no_module_of_orch_its_tools_or_its_benchmarks_is_over_350_lines():
    """One concern a module: a longer one is split by concern (an investigation's script aside: it is a notebook)."""
    long = [f"{path.relative_to(ROOT)}: {n}" for folder in ("orchestrator", "tools", "benchmarks")
            for path in sorted((ROOT / folder).rglob("*.py"))
            if "investigations" not in path.parts and (n := len(path.read_text().splitlines())) > MAX_LINES]
    assert long == []
