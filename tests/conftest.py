"""Shared fixtures. Live tests (marked `docker`) use the real engine and remove what they create."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def images():
    """Build (or find up to date) the trainer images once per test session."""
    from orchestrator import frameworks

    return frameworks.get("tensorflow").build(frameworks.BuildOptions(bootstrap=True), None, None,
                                              lambda msg: print(f"[build] {msg}", file=sys.stderr))


@pytest.fixture(scope="session")
def torch_image(images):
    """orch's PyTorch image, built (or found up to date) once per test session, after the base image. Its
    wheels (3.2 GB) are downloaded once per machine."""
    from orchestrator.frameworks.torch.build import build

    return build(say=lambda msg: print(f"[build] {msg}", file=sys.stderr))


@pytest.fixture
def orch_env(tmp_path):
    """Environment for an `orch` subprocess whose runs go to a fresh folder."""
    env = dict(os.environ)
    env["ORCH_RUNS_DIR"] = str(tmp_path / "runs")
    env["COLUMNS"] = "200"
    return env


def run_orch(args, env, timeout=600, **kwargs):
    """Run the `orch` command as a user would; return the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kwargs)


def start_orch(args, env, cwd=ROOT) -> subprocess.Popen:
    """Start the `orch` command in the background, as from a terminal: SIGINT at its default, so that a Ctrl-C
    (``send_signal(SIGINT)``) reaches it even when the tests themselves run with SIGINT ignored, as every command
    started with ``&`` from a non-interactive shell does, and Python then never installs its handler."""
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def replica_events(run_dir: Path, index: int, role: str = "worker") -> list[dict]:
    """The events replica ``role``-``index`` of a run has written so far ([] before its first)."""
    path = run_dir / f"{role}-{index}" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def orch_containers(run_id: str) -> list[str]:
    """Ids of every container, in any state, labelled with ``run_id``."""
    proc = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=orch.run={run_id}"], capture_output=True,
                          text=True, check=True)
    return proc.stdout.split()


def orch_networks(run_id: str) -> list[str]:
    """Networks labelled with ``run_id``."""
    proc = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=orch.run={run_id}"],
                          capture_output=True, text=True, check=True)
    return proc.stdout.split()


@pytest.fixture
def cleanup():
    """Collects run ids; removes their containers and networks even when the test fails."""
    run_ids: list[str] = []
    yield run_ids
    for run_id in run_ids:
        ids = orch_containers(run_id)
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
        nets = orch_networks(run_id)
        if nets:
            subprocess.run(["docker", "network", "rm", *nets], capture_output=True)


@pytest.fixture(scope="session")
def observed_runs(images, tmp_path_factory):
    """A 1-worker and a 3-worker run with stats, shared by the logs, stats and collect tests."""
    root = tmp_path_factory.mktemp("observed")
    env = dict(os.environ, ORCH_RUNS_DIR=str(root / "runs"), COLUMNS="200")
    run_ids = {"w1": "observed-w1", "w3": "observed-w3"}
    try:
        for key, run_id in run_ids.items():
            workers = key[1:]
            proc = run_orch(["up", "--workers", workers, "--dataset", "synthetic", "--samples", "12000", "--epochs", "3",
                             "--steps-per-execution", "1", "--run-id", run_id], env)
            assert proc.returncode == 0, proc.stderr
    finally:
        for run_id in run_ids.values():
            ids = orch_containers(run_id)
            if ids:
                subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    return {"env": env, "root": root, **{key: root / "runs" / run_id for key, run_id in run_ids.items()}}
