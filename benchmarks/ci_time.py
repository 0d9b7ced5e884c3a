"""How long the tests take: `make test-fast`, and `bash .ci/run` from a clean clone, as CI runs them.

Usage: python benchmarks/ci_time.py [--cold] [--skip-ci] [--out benchmarks/results/ci.json] [--log FILE]

Clones this repository's HEAD into a temporary folder, as CI does, and times there:
- `make test-fast` with DOCKER_HOST pointing nowhere, twice: the first run with no mypy cache (a clean clone's), the
  second with the cache the first left (a contributor's next run);
- `bash .ci/run` (unless --skip-ci, which keeps the last one measured, with its commit), which makes the venv, builds the images and runs every tier. With --cold it
  first removes what a fresh machine would not have: orch's images, its wheelhouse and prepared data, and pip's cache
  (the engine's base images too, so debootstrap runs again). It needs root (debootstrap) and takes as long as CI.
Each run's ten slowest tests come from pytest's own durations. Writes the json and a .md beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.analysis import machine  # noqa: E402

DURATION = re.compile(r"^([0-9.]+)s (call|setup|teardown)\s+(\S+)")
SUMMARY = re.compile(r"=+ (.*?) in ([0-9.]+)s")


def run(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, int, str]:
    """Seconds, exit code and output of ``argv``, its output also kept in ``log``."""
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return time.monotonic() - started, proc.returncode, log.read_text(errors="replace")


def slowest(output: str, count: int = 10) -> list[dict]:
    """The ``count`` slowest test phases pytest printed (its --durations table), slowest first."""
    rows = [{"seconds": float(m[1]), "phase": m[2], "test": m[3]} for m in map(DURATION.match, output.splitlines())
            if m]
    return sorted(rows, key=lambda r: -r["seconds"])[:count]


def summary(output: str) -> str:
    """pytest's last line (counts and seconds), per session in the output."""
    return "; ".join(f"{m[1]} in {float(m[2]):.0f} s" for m in SUMMARY.finditer(output))


def cold(say) -> None:
    """What a fresh machine has not: orch's images and caches, pip's cache."""
    images = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True).stdout.split()
    orch = [i for i in images if i.split(":")[0].startswith("orch")]
    if orch:
        subprocess.run(["docker", "rmi", "-f", *orch], capture_output=True)
    subprocess.run(["docker", "volume", "prune", "-f", "--filter", "label=orch.venv"], capture_output=True)
    cache = Path(os.environ.get("ORCH_CACHE_DIR", Path.home() / ".cache" / "orch"))
    shutil.rmtree(cache, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "cache", "purge"], capture_output=True)
    say(f"removed {len(orch)} images, {cache} and pip's cache")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="first remove what a fresh machine would not have")
    parser.add_argument("--skip-ci", action="store_true", help="time make test-fast only")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ci.json")
    parser.add_argument("--log", type=Path, help="keep .ci/run's whole output in this file (it is in a temporary "
                        "folder otherwise, and only its last lines are printed on failure)")
    args = parser.parse_args()

    def say(text: str) -> None:
        print(f"ci_time.py: {text}", file=sys.stderr, flush=True)

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    result: dict = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": head,
                    "machine": machine.identity()}
    with tempfile.TemporaryDirectory(prefix="orch-ci-") as tmp:
        clone = Path(tmp) / "orch"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "VIRTUAL_ENV", "PYTHON"))}
        if not args.skip_ci:
            if args.cold:
                cold(say)
            say(f"bash .ci/run in a clean clone of {head} (as CI runs it)")
            seconds, code, output = run(["bash", ".ci/run"], clone, env, Path(tmp) / "ci.log")
            result["ci"] = {"commit": head, "machine": result["machine"], "seconds": seconds, "exit_code": code,
                            "cold": args.cold,
                            "pytest": summary(output),
                            "slowest": slowest(output), "stages": [
                                {"stage": m[1], "seconds": float(m[2])} for m in
                                re.finditer(r"test\.sh: (the fast tier took|the images were ready) ([0-9]+) s", output)]}
            busy = re.search(r"test\.sh: the live tier kept ([0-9.]+) of ([0-9]+) cores busy \(([0-9]+) CPU-seconds in "
                             r"([0-9]+) s\)", output)
            if busy:  # how CPU-bound the live tier was: its CPU-seconds over the machine's cores are its floor
                result["ci"]["live_cpu"] = {"cores_busy": float(busy[1]), "cores": int(busy[2]),
                                            "cpu_seconds": int(busy[3]), "seconds": int(busy[4])}
            if args.log:
                shutil.copyfile(Path(tmp) / "ci.log", args.log)
            say(f".ci/run: exit {code} in {seconds / 60:.1f} min")
            if code != 0:
                say("its last lines: " + " | ".join(output.strip().splitlines()[-5:]))
        else:
            if args.out.is_file():  # the last .ci/run measured stays, named by its own commit
                earlier = json.loads(args.out.read_text())
                if "ci" in earlier:  # with the machine it was measured on, which may not be this one
                    result["ci"] = {"commit": earlier["commit"], "machine": earlier["machine"], **earlier["ci"]}
            seconds, code, _ = run(["make", ".venv/bin/orch"], clone, env, Path(tmp) / "venv.log")
            say(f"the venv took {seconds:.0f} s")
        fast = []
        shutil.rmtree(clone / ".mypy_cache", ignore_errors=True)  # .ci/run's fast tier left one
        for label in ("a clean clone (no mypy cache)", "the next run (mypy's cache warm)"):
            seconds, code, output = run(["make", "test-fast"], clone, {**env, "DOCKER_HOST": "unix:///nonexistent"},
                                        Path(tmp) / "fast.log")
            fast.append({"run": label, "seconds": seconds, "exit_code": code, "pytest": summary(output),
                         "slowest": slowest(output)})
            say(f"make test-fast, {label}: exit {code} in {seconds:.0f} s")
        result["fast"] = fast
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    lines = ["# How long the tests take", "", f"Commit {head}, {result['when']}.", ""]
    if "ci" in result:
        lines += [f"- `bash .ci/run` from a clean clone{' (cold)' if result['ci'].get('cold') else ''}, commit "
                  f"{result['ci']['commit']}: {result['ci']['seconds'] / 60:.1f} min, exit {result['ci']['exit_code']}"]
    lines += [f"- `make test-fast`, {f['run']}: {f['seconds']:.0f} s, exit {f['exit_code']}" for f in fast]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    say(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
