"""Mutation testing of orch's pure core: can its tests fail? mutmut changes one thing at a time in a module (a ``<``
for a ``<=``, a constant, a dropped call) and runs the tests that exercise that module; a change no test notices
survived, and is either a test missing or a change that makes no difference (equivalent: explained, one line each, in
benchmarks/mutation_equivalent.json).

Usage: python benchmarks/mutation.py [--modules NAME ...] [--fresh]

Each module is mutated alone, against its own test files (MODULES below), with its own mutmut cache
(``.mutmut/<name>.sqlite``): a second run tests only the mutants the first left alive, and the killed stay killed.
``--fresh`` drops the caches of the modules run. Writes benchmarks/results/mutation.json (every module's figures, the
modules not run this time kept as they were). mutmut changes the module's file in place while it runs, and restores
it after: run it in a clean work tree, and let it finish (Ctrl-C restores the file too).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "mutation.json"
EQUIVALENT = ROOT / "benchmarks" / "mutation_equivalent.json"
CACHES = ROOT / ".mutmut"  # one mutmut cache per module (git-ignored)
HOOK = Path(__file__).resolve().parent / "mutation_hook"  # mutmut_config.py: mutate only the functions named
MUTMUT = (sys.executable, "-m", "mutmut")
# mutmut 2 takes only exit status 1 for failed tests: a mutant that breaks the module's import (pytest's exit 2, a
# collection error) would count as survived. Every failure exits 1 here.
PYTEST = ("python -c 'import sys, pytest; sys.exit(1 if pytest.main(sys.argv[1:]) else 0)' "
          "-x -q -p no:randomly -p no:cacheprovider -m 'not docker and not network'")


@dataclass(frozen=True)
class Module:
    """A module of the pure core, the tests that exercise it, and (for a large one) the functions mutated."""

    name: str
    path: str
    tests: tuple[str, ...]  # pytest arguments: files, and --deselect of slow tests that read the module too
    functions: tuple[str, ...] = ()  # empty: the whole module
    why: str = ""  # why only these functions, where there are some


MODULES: tuple[Module, ...] = (
    Module("rendezvous", "orchestrator/rendezvous.py",
           ("tests/test_rendezvous.py", "tests/test_plan.py", "tests/test_frameworks_tensorflow.py",
            "tests/test_frameworks_torch.py", "tests/test_backends_k8s.py")),
    Module("safetext", "orchestrator/safetext.py", ("tests/test_terminal.py", "tests/test_safetext.py")),
    Module("sizes", "orchestrator/sizes.py", ("tests/test_sizes.py",)),
    Module("metrics", "orchestrator/analysis/metrics.py",
           ("tests/test_aggregate.py", "tests/test_metrics.py", "--deselect",
            "tests/test_metrics.py::test_a_scaling_report_has_its_table_the_split_and_four_plots",
            "tests/test_floor.py::test_aggregate_puts_each_row_against_its_floor_and_draws_t1_over_the_floor",
            "tests/test_floor.py::test_the_sweep_gives_report_html_each_cells_n_and_baseline_from_report_mds_rows"),
           ("time_ratio", "speedup", "efficiency", "cpu_bound", "machine_bound", "scaling", "baselines", "run_key",
            "run_workers", "run_baselines", "run_baseline", "point_id", "point_key", "point_scale", "point_baselines",
            "point_baseline", "median_range", "speedup_range", "step_seconds", "sync_cost", "is_seconds",
            "named_baseline", "cells_cores", "aggregate"),
           "the scaling figures, the baselines and aggregate's rows of an experiment; left out are only _point, the "
           "empty row aggregate fills, and Scaling.to_dict, both read through aggregate's rows"),
    Module("collect", "orchestrator/analysis/collect.py",
           ("tests/test_summarize.py", "tests/test_collect_figures.py", "tests/test_collect.py", "--deselect",
            "tests/test_collect.py::test_a_crash_at_each_write_of_collect_leaves_every_earlier_file_whole"),
           ("_container_figures", "_epochs_of", "_samples", "_rate", "_dropped_line", "compare", "summarize"),
           "collect's arithmetic: each container's figures, a worker's rate and epochs, a run's summary, the "
           "comparison; the writing of files and plots and the reading of predictions are left for a later run"),
    Module("fields", "orchestrator/jobspec/fields.py", ("tests/test_spec_fields.py", "tests/test_spec.py"),
           ("flag_aliases", "example", "metadata", "default", "unused", "_nest", "_nest_backend"),
           "the spec checks: flat fields nested, aliases, defaults and the fields a job would ignore; the field "
           "declarations and CLI metadata are data, checked by the spec's and the CLI's own tests"),
    Module("messages", "orchestrator/jobspec/messages.py",
           ("tests/test_messages.py", "tests/test_spec.py", "tests/test_bad_inputs.py")),
    Module("plan", "orchestrator/plan/__init__.py", ("tests/test_plan.py", "tests/test_frameworks_mpi.py",
           "tests/test_backends_swarm.py", "tests/test_backends_parity.py", "tests/test_scripts.py", "--deselect",
           "tests/test_scripts.py::test_a_real_race_swapping_a_folder_and_a_link_never_copies_what_the_link_names")),
    Module("plan-model", "orchestrator/plan/model.py", ("tests/test_plan.py",)),
    Module("scripts", "orchestrator/run/scripts.py",
           ("tests/test_scripts_messages.py", "tests/test_scripts.py", "--deselect",
            "tests/test_scripts.py::test_a_real_race_swapping_a_folder_and_a_link_never_copies_what_the_link_names"),
           ("absolute", "limit_bytes", "_within", "check", "_listing"),
           "the checks: what may be copied and the listing's limits; the walkers' fd bookkeeping is left for a later "
           "run"),
    Module("snapshot", "orchestrator/run/snapshot.py",
           ("tests/test_scripts.py", "--deselect",
            "tests/test_scripts.py::test_a_real_race_swapping_a_folder_and_a_link_never_copies_what_the_link_names"),
           ("hash_line", "snapshot", "_copy", "_chunks"),
           "the copy: each file copied exactly and its hash line"),
)


def spans(path: Path, functions: tuple[str, ...]) -> str:
    """The lines (1-based, ``a-b,c-d``) of the named functions (or methods) of ``path``; "" for the whole file."""
    if not functions:
        return ""
    tree = ast.parse(path.read_text())
    found = {node.name: (node.lineno, node.end_lineno) for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = [f for f in functions if f not in found]
    if missing:
        raise SystemExit(f"mutation.py: {path} has no function {missing[0]!r}")
    return ",".join(f"{found[f][0]}-{found[f][1]}" for f in functions)


def diff_lines(diff: str) -> tuple[str, str]:
    """The mutated line as it was and as the mutant has it, stripped, from a unified diff of one line."""
    old = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    new = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return (old[0] if old else ""), (new[0] if new else "")


def explained(module: str, line: str, mutant: str, known: list[dict[str, str]]) -> Optional[str]:
    """The one-line explanation of an equivalent mutant, matched by module, the line's text and the mutation."""
    return next((e["why"] for e in known
                 if e["module"] == module and e["line"].strip() == line and e["mutant"].strip() == mutant), None)


def run_module(module: Module, fresh: bool, known: list[dict[str, str]]) -> dict[str, Any]:
    cache = CACHES / f"{module.name}.sqlite"
    work = ROOT / ".mutmut-cache"
    CACHES.mkdir(exist_ok=True)
    if fresh and cache.exists():
        cache.unlink()
    if work.exists():
        work.unlink()
    if cache.exists():
        shutil.copy(cache, work)
    runner = f"{PYTEST} {shlex.join(module.tests)}"
    # No bytecode written: a mutant's .pyc must never stand in for the next mutant's source.
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent", "PYTHONDONTWRITEBYTECODE": "1",
           "ORCH_MUTATE_LINES": spans(ROOT / module.path, module.functions),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH", "")]))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # this venv's python
    started = time.monotonic()
    print(f"mutation.py: {module.name}: mutmut over {module.path} against {shlex.join(module.tests)}", file=sys.stderr)
    code = subprocess.run([*MUTMUT, "run", "--paths-to-mutate", module.path, "--tests-dir", "tests", "--runner",
                           runner, "--simple-output", "--no-progress"], cwd=ROOT, env=env,
                          stdin=subprocess.DEVNULL).returncode  # a test that reads stdin must not stop in the background
    seconds = time.monotonic() - started
    if code & 1:
        raise SystemExit(f"mutation.py: mutmut failed on {module.name} (exit {code}); see its output above")
    shutil.copy(work, cache)
    with sqlite3.connect(work) as db:  # mutmut 2's cache: one row per mutant, with its status
        rows = db.execute("SELECT Mutant.id, Mutant.status FROM Mutant JOIN Line ON Mutant.line = Line.id "
                          "JOIN SourceFile ON Line.sourcefile = SourceFile.id WHERE SourceFile.filename = ? "
                          "ORDER BY Mutant.id", (module.path,)).fetchall()
    work.unlink()
    counts: dict[str, int] = {}
    for _id, status in rows:
        counts[status] = counts.get(status, 0) + 1
    survivors = []
    for mutant_id, status in rows:
        if status not in ("bad_survived", "bad_timeout"):  # ok_suspicious: killed, but slowly
            continue
        shutil.copy(cache, work)
        diff = subprocess.run([*MUTMUT, "show", str(mutant_id)], cwd=ROOT, env=env, capture_output=True,
                              text=True).stdout.strip()
        work.unlink()
        line, mutant = diff_lines(diff)
        survivors.append({"id": mutant_id, "status": status.split("_", 1)[1], "line": line, "mutant": mutant,
                          "diff": diff, "equivalent": explained(module.name, line, mutant, known)})
    return {
        "module": module.name, "path": module.path, "tests": list(module.tests),
        "functions": list(module.functions), "why_functions": module.why,
        "mutants": sum(n for s, n in counts.items() if s not in ("skipped", "untested")),
        "killed": counts.get("ok_killed", 0) + counts.get("ok_suspicious", 0),
        "survived": counts.get("bad_survived", 0),
        "timeout": counts.get("bad_timeout", 0),
        "suspicious": counts.get("ok_suspicious", 0),  # killed, but the tests took long to fail: among the killed
        "skipped": counts.get("skipped", 0),
        "equivalent": sum(1 for s in survivors if s["equivalent"]),
        "unexplained": sum(1 for s in survivors if s["status"] == "survived" and not s["equivalent"]),
        "survivors": survivors, "seconds": round(seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", nargs="+", metavar="NAME", help="modules to run (default: all): "
                        + ", ".join(m.name for m in MODULES))
    parser.add_argument("--fresh", action="store_true", help="drop mutmut's cache of each module run first")
    args = parser.parse_args()
    known_modules = {m.name: m for m in MODULES}
    unknown = [n for n in args.modules or () if n not in known_modules]
    if unknown:
        print(f"mutation.py: no module {unknown[0]!r}; the modules are {', '.join(known_modules)}", file=sys.stderr)
        return 2
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "orchestrator"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    if dirty:
        print("mutation.py: orchestrator/ has uncommitted changes, and mutmut rewrites its files in place; commit "
              "or stash them first", file=sys.stderr)
        return 2
    known = json.loads(EQUIVALENT.read_text())["equivalent"] if EQUIVALENT.exists() else []
    previous = json.loads(OUT.read_text()) if OUT.exists() else {}
    results = {r["module"]: r for r in previous.get("modules", [])}
    order = [m.name for m in MODULES]
    tool = subprocess.run([*MUTMUT, "version"], capture_output=True, text=True).stdout.strip()
    for module in [known_modules[n] for n in args.modules] if args.modules else MODULES:
        results[module.name] = r = run_module(module, args.fresh, known)
        print(f"mutation.py: {module.name}: {r['mutants']} mutants, {r['killed']} killed, {r['survived']} survived "
              f"({r['equivalent']} explained as equivalent), {r['timeout']} timed out, {r['seconds']:.0f} s",
              file=sys.stderr)
        OUT.parent.mkdir(parents=True, exist_ok=True)  # after each module: a run stopped later keeps what it found
        OUT.write_text(json.dumps({
            "tool": tool, "command": "python benchmarks/mutation.py",
            "modules": sorted(results.values(), key=lambda r: order.index(r["module"]) if r["module"] in order else 99),
            "not_run": [m.path for m in MODULES if m.name not in results],  # modules of the mapping never run yet
        }, indent=1) + "\n")
    print(f"mutation.py: wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
