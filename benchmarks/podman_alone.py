"""The main job on a host where only Podman answers: Docker's daemon stopped, the images built on Podman itself.

With Docker's daemon stopped (and started again afterwards, whatever happens), the script runs what a user of a
Podman-only host runs, and times each step:

    orch doctor --engine podman --fix                (starts Podman's service; the images are missing yet)
    orch build --engine podman --bootstrap-base      (after removing orch's images from Podman, unless --keep-images)
    orch doctor --engine podman                      (every check must pass now)
    orch up --engine podman --workers 1              (the main job: full MNIST, 5 epochs, a global batch of 96)
    orch up --engine podman --workers 3
    orch collect W1 W3

and checks that no container of the runs is left on Podman. Then, with Docker's daemon back, it copies the images
built on Podman to Docker (`orch push --engine podman --to-engine docker`) and runs the same two jobs on Docker, so
that each worker's test accuracy on the two engines is compared within one run.

    sudo python benchmarks/podman_alone.py [--keep-images] [--samples 60000] [--epochs 5]

Writes benchmarks/results/podman_alone.json and podman_alone.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from wall_train import up, write  # noqa: E402

WORKERS = (1, 3)


def docker_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


def _dockerd() -> tuple[int, list[str]] | None:
    """The running Docker daemon's pid and command line, if one runs."""
    for pid in subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True).stdout.split():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:
            continue  # it ended between the two looks
        return int(pid), [a.decode() for a in argv]
    return None


def _wait(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} after {seconds:.0f} s")
        time.sleep(0.5)


def _ended(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


@contextlib.contextmanager
def docker_stopped() -> Iterator[None]:
    """Docker's daemon stopped for the block, and started again after it (with the same command line, or by systemd
    where systemd runs it), whatever happens in the block or while stopping it: SIGTERM and SIGHUP end the block as
    an error does."""
    systemd = (os.path.isdir("/run/systemd/system")
               and subprocess.run(["systemctl", "is-active", "--quiet", "docker"]).returncode == 0)
    found = _dockerd()
    if found is None:
        raise SystemExit("no Docker daemon runs here: start it first, so that the comparison can run on it afterwards")
    pid, argv = found

    def interrupted(signum: int, _frame: object) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    handlers = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        if systemd:
            subprocess.run(["systemctl", "stop", "docker.socket"], capture_output=True)  # where there is one
            subprocess.run(["systemctl", "stop", "docker"], check=True)
        else:
            os.kill(pid, signal.SIGTERM)
        _wait(lambda: _ended(pid), 60, "Docker's daemon did not stop")
        yield
    finally:
        if systemd:
            subprocess.run(["systemctl", "start", "docker"], check=True)
        elif _dockerd() is None:
            with open(Path(tempfile.gettempdir()) / "podman-alone-dockerd.log", "ab") as log:
                subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        _wait(docker_answers, 120, "Docker's daemon did not answer again")
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def orch(env: dict[str, str], *args: str, timeout: float = 3600) -> dict:
    """One orch command, timed, its output kept (the last lines of it where it failed)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    step = {"command": "orch " + shlex.join(args), "exit": proc.returncode,
            "seconds": round(time.monotonic() - started, 1)}
    print(f"{step['command']}: exit {step['exit']} in {step['seconds']} s", file=sys.stderr)
    if proc.returncode != 0:
        step["error"] = (proc.stderr or proc.stdout)[-1500:]
        print(step["error"], file=sys.stderr)
    return step


def must(step: dict) -> dict:
    """``step``, which must have succeeded: a failed one ends the script (Docker's daemon is started again)."""
    if step["exit"] != 0:
        raise SystemExit(f"{step['command']} failed (exit {step['exit']}): {step['error'][-600:]}")
    return step


def podman_leftovers(run_ids: list[str]) -> list[str]:
    """Containers of these runs that Podman still has."""
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    return [name for name in out.split() if any(run_id in name for run_id in run_ids)]


def orch_images_on_podman() -> list[str]:
    out = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                         text=True).stdout.split()
    return [ref for ref in out if ref.split("/")[-1].startswith("orch-")]


def remove_podman_images() -> list[str]:
    """orch's images on Podman, removed so that the build is a build (the wheels that orch's cache on this host
    holds stay: they are orch's cache, not the engine's)."""
    mine = orch_images_on_podman()
    if mine:
        subprocess.run(["podman", "rmi", "-f", *mine], capture_output=True, check=False)
    return mine


def markdown(report: dict) -> str:
    w = report["workload"]
    lines = ["# The main job on a host where only Podman answers", "",
             f"`python benchmarks/podman_alone.py`, {report['when']}, {w['samples']} samples, {w['epochs']} epochs; "
             f"Docker's daemon answering during the Podman steps: {report['docker_answered_while_stopped']}.", "",
             "| step | exit | seconds |", "| --- | ---: | ---: |"]
    lines += [f"| `{s['command']}` | {s['exit']} | {s['seconds']:.0f} |" for s in report["steps"]]
    lines += ["", "| engine | workers | test accuracy of each worker | train s | wall s |",
              "| --- | ---: | --- | ---: | ---: |"]
    for key, r in report["runs"].items():
        engine, workers = key.rsplit("-", 1)
        lines.append(f"| {engine} | {workers} | {', '.join(f'{a:.4f}' for a in r['test_accuracy'])} | "
                     f"{r['train_seconds']:.1f} | {r['wall_seconds']:.1f} |")
    lines += ["", f"Same accuracy on both engines, worker by worker: {report['same_accuracy']}. Containers of the "
              f"runs left on Podman: {report['left_on_podman'] or 'none'}.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-images", action="store_true",
                        help="keep orch's images on Podman (the build then finds them up to date)")
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    job = ["--samples", str(args.samples), "--epochs", str(args.epochs)]
    sys.path.insert(0, str(ROOT))
    from orchestrator.docker import podman_net
    from orchestrator.paths import default_paths

    services = set(subprocess.run(["pgrep", "-f", "podman system service"], capture_output=True,
                                  text=True).stdout.split())
    ruled = podman_net.blocked() is None
    steps: list[dict] = []
    runs: dict[str, dict] = {}
    removed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="orch-bench-podman-alone-") as tmp:
        env = {**os.environ, "ORCH_RUNS_DIR": str(Path(tmp) / "runs"), "ORCH_RESULTS_DIR": str(Path(tmp) / "res")}
        env.pop("ORCH_ENGINE", None)
        ids = {f"{e}-{n}": f"alone-{e}-w{n}" for e in ("podman", "docker") for n in WORKERS}
        try:
            with docker_stopped():
                stopped_answers = docker_answers()
                # Its fixes are what the build needs; where orch's images are missing yet, it says so (exit 2).
                fixed = orch(env, "doctor", "--engine", "podman", "--fix")
                if fixed["exit"] not in (0, 2):
                    must(fixed)
                fixed["expected"] = "0, or 2 naming the missing images"
                steps.append(fixed)
                if not args.keep_images:
                    removed = remove_podman_images()
                before = orch_images_on_podman()
                wheels = default_paths().wheelhouse
                cached_wheels = wheels.is_dir() and any(wheels.rglob("*.whl"))
                steps.append(must(orch(env, "build", "--engine", "podman", "--bootstrap-base")))
                steps.append(must(orch(env, "doctor", "--engine", "podman")))
                for n in WORKERS:
                    started = time.monotonic()
                    runs[f"podman-{n}"] = up(env, ids[f"podman-{n}"], ["--engine", "podman", "--workers", str(n), *job])
                    steps.append({"command": f"orch up --engine podman --workers {n} {shlex.join(job)}", "exit": 0,
                                  "seconds": round(time.monotonic() - started, 1)})
                steps.append(must(orch(env, "collect", ids["podman-1"], ids["podman-3"], "--format", "json")))
                left = podman_leftovers(list(ids.values()))
            steps.append(must(orch(env, "push", "--engine", "podman", "--to-engine", "docker")))
            for n in WORKERS:
                runs[f"docker-{n}"] = up(env, ids[f"docker-{n}"], ["--workers", str(n), *job])
        finally:
            for pid in set(subprocess.run(["pgrep", "-f", "podman system service"], capture_output=True,
                                          text=True).stdout.split()) - services:
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGTERM)
            if not ruled:
                podman_net.remove()
    same = all(runs[f"podman-{n}"]["test_accuracy"] == runs[f"docker-{n}"]["test_accuracy"] for n in WORKERS)
    report = {"workload": {"samples": args.samples, "epochs": args.epochs}, "cores": os.cpu_count(),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "docker_answered_while_stopped": stopped_answers, "removed_first": removed,
              "images_before_build": before, "wheels_cached_before_build": cached_wheels, "steps": steps,
              "runs": runs, "same_accuracy": same, "left_on_podman": left}
    write("podman_alone", report, markdown(report))
    failed = [s for s in steps if s["exit"] != 0 and "expected" not in s]
    return 1 if failed or not same or left or stopped_answers else 0


if __name__ == "__main__":
    sys.exit(main())
