"""Tracking, live: a real MLflow tracking server (a subprocess on a loopback port, with a SQLite database), real
jobs and a real quick sweep logged to it and read back with MlflowClient; a server killed mid-run; TensorBoard's
own reader on the event files; and the HTML report rendered by headless Chromium."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_orch, start_orch, wait_for

pytestmark = pytest.mark.docker
ARTIFACTS = Path(os.environ.get("ORCH_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
JOB = ["--dataset", "synthetic", "--samples", "3000", "--epochs", "2", "--steps-per-execution", "10"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`mlflow server` on a loopback port with a SQLite store and a local artifact root."""

    def __init__(self, root: Path) -> None:
        self.root, self.port, self.proc = root, _free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--artifacts-destination", (self.root / "artifacts").as_uri(), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=open(self.root / "server.log", "ab"), start_new_session=True)
        wait_for(self._answers, 120, "the MLflow server to answer")
        return self

    def _answers(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "mlflow").start()
    yield s
    s.stop()


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _ps(run_id, env):
    proc = run_orch(["ps", run_id, "--format", "json"], env)
    return json.loads(proc.stdout)[0]


def test_a_run_and_a_quick_sweep_land_in_mlflow_as_orch_records_them(images, server, orch_env, tmp_path):
    env = {**orch_env, "ORCH_RESULTS_DIR": str(tmp_path / "results")}
    proc = run_orch(["up", "--workers", "2", "--run-id", "tracked", "--track", "mlflow,tensorboard",
                     "--tracking-uri", server.uri, *JOB], env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"tracked: logged to MLflow at {server.uri}" in proc.stderr
    record = _ps("tracked", env)
    client = _client(server.uri)
    [run] = client.search_runs([client.get_experiment_by_name("orch").experiment_id],
                               filter_string="tags.`orch.run_id` = 'tracked'")
    assert run.info.status == "FINISHED" and run.data.tags["orch.complete"] == "yes"
    assert run.data.tags["framework"] == "tensorflow" and run.data.tags["backend"] == "compose"
    params = run.data.params
    assert params["workers"] == "2" and params["batch_size"] == str(record["spec"]["global_batch"])
    assert params["samples"] == "3000" and params["epochs"] == "2" and params["dataset"] == "synthetic"
    assert run.data.metrics["train_seconds"] == pytest.approx(record["train_seconds"])
    assert run.data.metrics["test_accuracy"] == pytest.approx(record["test_accuracy"])
    # Per epoch and per worker, as the results folder's epochs.csv says.
    rows = list(csv.DictReader((tmp_path / "results" / "tracked" / "epochs.csv").open()))
    for worker in ("0", "1"):
        history = client.get_metric_history(run.info.run_id, f"worker-{worker}/loss")
        want = [(int(r["epoch"]), float(r["loss"])) for r in rows if r["worker"] == worker]
        got = sorted((m.step, m.value) for m in history)
        assert [s for s, _ in got] == [s for s, _ in sorted(want)]
        assert [v for _, v in got] == pytest.approx([v for _, v in sorted(want)])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")] == [1, 2]
    cpu = client.get_metric_history(run.info.run_id, "system/worker-1/cpu_percent")
    assert len(cpu) >= 2 and all(m.value >= 0 for m in cpu)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"results", "rendered", "logs"} <= artifacts
    results = {a.path for a in client.list_artifacts(run.info.run_id, "results")}
    assert {"results/summary.json", "results/training.png", "results/report.html"} <= results
    assert {a.path for a in client.list_artifacts(run.info.run_id, "rendered")} == {"rendered/compose.yml"}
    # Tracking again logs nothing twice.
    again = run_orch(["track", "tracked", "--to", "mlflow", "--tracking-uri", server.uri], env)
    assert again.returncode == 0 and "tracked: already in MLflow" in again.stderr

    # A quick sweep: one experiment, a parent run and a child per cell, each child the cell's run.
    exp = tmp_path / "sweep.yaml"
    exp.write_text("name: tracked-sweep\nbase: {dataset: synthetic, epochs: 2, steps_per_execution: 10}\n"
                   "grid: {workers: [1, 2]}\nquick: {samples: 3000}\n")
    sweep = run_orch(["experiment", "run", str(exp), "--quick", "--track", "mlflow", "--tracking-uri", server.uri],
                     env, timeout=900)
    assert sweep.returncode == 0, sweep.stderr
    cells = json.loads((tmp_path / "results" / "tracked-sweep-quick" / "cells.json").read_text())
    experiment = client.get_experiment_by_name("tracked-sweep-quick")
    everything = client.search_runs([experiment.experiment_id])
    [parent] = [r for r in everything if r.data.tags.get("orch.sweep") == "tracked-sweep-quick"]
    children = [r for r in everything if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["orch.run_id"] for r in children) == sorted(c["run_id"] for c in cells.values())
    for child in children:
        [cell] = [c for c in cells.values() if c["run_id"] == child.data.tags["orch.run_id"]]
        assert child.data.metrics["train_seconds"] == pytest.approx(cell["summary"]["train_seconds"])
        assert child.data.params["workers"] == str(cell["fields"]["workers"])
        assert "speedup" in child.data.metrics
    # The HTML report of the sweep, for the browser test to open.
    html = tmp_path / "results" / "tracked-sweep-quick" / "report.html"
    assert html.is_file() and html.stat().st_size < 6_000_000  # plotly.js inlined: about 4.6 MiB of it
    _render_in_chromium(html, set(cells))


def test_a_tracking_server_that_dies_mid_run_costs_one_line_and_orch_track_logs_it_once(images, server, orch_env,
                                                                                        tmp_path):
    env = {**orch_env, "ORCH_RESULTS_DIR": str(tmp_path / "results")}
    job = start_orch(["up", "--workers", "2", "--run-id", "orphan", "--track", "mlflow", "--tracking-uri", server.uri,
                      *JOB], env)
    wait_for(lambda: (Path(env["ORCH_RUNS_DIR"]) / "orphan" / "run.json").is_file(), 120, "the run to start")
    server.stop()  # the tracking server dies while the job trains
    out, err = job.communicate(timeout=600)
    assert job.returncode == 0, err  # the job succeeds all the same
    failures = [line for line in err.splitlines() if "tracking orphan in MLflow failed" in line]
    assert len(failures) == 1 and "`orch track orphan`" in failures[0], err
    assert _ps("orphan", env)["state"] == "succeeded"
    server.start()  # back, with the same database
    for attempt in range(2):
        proc = run_orch(["track", "orphan", "--to", "mlflow", "--tracking-uri", server.uri], env)
        assert proc.returncode == 0, proc.stderr
        assert ("logged to MLflow" if attempt == 0 else "already in MLflow") in proc.stderr
    client = _client(server.uri)
    found = client.search_runs([client.get_experiment_by_name("orch").experiment_id],
                               filter_string="tags.`orch.run_id` = 'orphan'")
    assert len(found) == 1 and found[0].data.metrics["train_seconds"] == pytest.approx(_ps("orphan", env)["train_seconds"])


def test_tensorboard_reads_back_what_collect_wrote(observed_runs, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    env = {**observed_runs["env"], "ORCH_RESULTS_DIR": str(tmp_path / "results")}  # the 3-worker run, shared
    proc = run_orch(["collect", "observed-w3"], env)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "results" / "observed-w3"
    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    rows = list(csv.DictReader((folder / "epochs.csv").open()))
    for worker in ("0", "1"):
        for name in ("loss", "accuracy", "val_accuracy"):
            got = [(e.step, e.value) for e in events.Scalars(f"epoch/worker-{worker}/{name}")]
            want = [(int(r["epoch"]), float(r[name])) for r in rows if r["worker"] == worker]
            assert [s for s, _ in got] == [s for s, _ in want], (worker, name)
            assert [v for _, v in got] == pytest.approx([v for _, v in want]), (worker, name)
    summary = json.loads((folder / "summary.json").read_text())
    assert events.Scalars("run/train_seconds")[0].value == pytest.approx(summary["train_seconds"])
    assert len(events.Scalars("system/worker-1/cpu_percent")) >= 2


def _render_in_chromium(html: Path, cell_keys: set) -> None:
    """Open ``html`` from a file URL in Debian's headless Chromium: it renders with no script error, its Plotly
    charts have a series per cell and the bounds, every cell can be chosen for its per-container charts, and a
    screenshot is kept in the test artifacts."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "headless Chromium is needed: `make test` installs Debian's chromium package"
    flags = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--window-size=1400,2400", f"--user-data-dir={html.parent / '.chromium'}"]
    dom = subprocess.run([*flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert 'data-rendered="yes"' in dom, dom[:2000]
    assert "data-errors" not in dom, dom[:2000]
    legend = set(re.findall(r'class="legendtext"[^>]*>([^<]*)<', dom))
    for series in [*cell_keys, "measured", "core limit: min(N, ", "bound (cores)"]:
        assert any(name.startswith(series) for name in legend), (series, legend)
    options = set(re.findall(r"<option [^>]*>([^<]*)<", dom))
    assert options == cell_keys, options
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-quick-sweep.png"
    subprocess.run([*flags, f"--screenshot={shot}", html.as_uri()], capture_output=True, timeout=120)
    assert shot.stat().st_size > 20_000
