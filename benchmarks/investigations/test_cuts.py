"""Some live tests at two commits, one commit after the other on a quiet engine: each test's seconds.

Usage: python benchmarks/investigations/test_cuts.py OLD NEW TEST... [--out FILE]

Each commit's tests run from a git worktree of it, in one pytest process (no second test process beside them, so no
test waits for the engine or shares the CPU), with pytest's own durations; a test's seconds are its setup, call and
teardown, its parametrized cases added up. The full suite's wall time on 2 cores moves by minutes from one run to
the next, with the order the two test processes happen to take the files in; this measures what a change to the
tests themselves costs or saves. Prints a markdown table, and writes the figures as json with --out.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DURATION = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+)", re.M)


def seconds(commit: str, tests: list[str]) -> tuple[dict[str, float], str]:
    """Each test's seconds at ``commit`` (parametrized cases added up), and pytest's last line."""
    with tempfile.TemporaryDirectory(prefix="orch-cuts-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), commit], cwd=ROOT, check=True)
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
                                   "-vv", *tests], cwd=tree, capture_output=True, text=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)
    per: dict[str, float] = collections.defaultdict(float)
    for took, test in DURATION.findall(proc.stdout):
        per[test.split("[")[0]] += float(took)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    if proc.returncode:
        raise SystemExit(f"{commit}: pytest failed: {last}")
    return dict(per), last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("tests", nargs="+", help="pytest node ids, the same at both commits")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    got = {}
    for commit in (args.old, args.new):
        print(f"test_cuts.py: the tests at {commit}", file=sys.stderr, flush=True)
        got[commit] = seconds(commit, args.tests)
    old, new = got[args.old][0], got[args.new][0]
    print(f"| test | {args.old}, s | {args.new}, s |\n| --- | ---: | ---: |")
    for test in sorted(set(old) | set(new)):
        print(f"| `{test}` | {old.get(test, 0):.1f} | {new.get(test, 0):.1f} |")
    print(f"| all | {sum(old.values()):.1f} | {sum(new.values()):.1f} |")
    if args.out:
        args.out.write_text(json.dumps({"tests": args.tests, **{c: {"seconds": s, "pytest": last}
                                                                for c, (s, last) in got.items()}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
