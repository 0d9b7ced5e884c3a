"""`orch collect`: comparison arithmetic (pure), and files, plots and JSON from real runs."""
import csv
import json
from pathlib import Path

import jsonschema
import pytest

from orchestrator.collect import compare

from .conftest import run_orch

SCHEMA = json.loads((Path(__file__).parent.parent / "orchestrator/schemas/summary.schema.json").read_text())
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _summary(run_id, workers, seconds, failed=False, samples=60000):
    return {"run_id": run_id, "state": "failed" if failed else "succeeded", "failed": failed,
            "spec": {"workers": workers, "dataset": "mnist", "samples": samples, "epochs": 5, "global_batch": 96},
            "train_seconds": seconds, "test_accuracy": 0.9, "cpu_mean_percent": 50.0, "net_bytes": 2_000_000}


def test_ratio_speedup_and_efficiency_against_the_matching_baseline():
    rows = compare([_summary("a", 1, 10.0), _summary("b", 2, 8.0), _summary("c", 3, 40.0),
                    _summary("d", 3, 5.0, samples=5000)])
    by_id = {r["run_id"]: r for r in rows}
    assert by_id["a"]["time_ratio"] == 1.0 and by_id["a"]["efficiency"] == 1.0
    assert by_id["b"]["speedup"] == pytest.approx(1.25) and by_id["b"]["efficiency"] == pytest.approx(0.625)
    assert by_id["c"]["time_ratio"] == pytest.approx(4.0)
    assert by_id["d"]["time_ratio"] is None  # no 1-worker run on 5,000 samples to compare with
    assert by_id["c"]["net_mb"] == 2.0


def test_failed_baseline_is_not_used():
    rows = compare([_summary("a", 1, 10.0, failed=True), _summary("b", 3, 30.0)])
    assert rows[1]["time_ratio"] is None


@pytest.mark.docker
def test_collect_writes_files_plots_and_schema_valid_json(observed_runs, tmp_path):
    env = observed_runs["env"]
    proc = run_orch(["collect", "observed-w3", "--out", str(tmp_path), "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    jsonschema.validate(summary, SCHEMA)
    assert summary["state"] == "succeeded" and len(summary["workers"]) == 3
    out = tmp_path / "observed-w3"
    for name in ("summary.json", "stats.csv", "host.csv", "epochs.csv"):
        assert name in summary["files"] and (out / name).stat().st_size > 0
    with open(out / "epochs.csv", newline="") as f:
        epochs = list(csv.DictReader(f))
    assert len(epochs) == 9 and {e["worker"] for e in epochs} == {"0", "1", "2"}
    for name in ("cpu.png", "network.png", "training.png", "predictions-worker-0.png", "predictions-worker-2.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
    for w in summary["workers"]:
        assert w["stats_samples"] >= 2 and w["net_rx_bytes"] > 0 and w["cpu_max_percent"] > 0


@pytest.mark.docker
def test_comparison_table_of_two_runs(observed_runs, tmp_path):
    proc = run_orch(["collect", "observed-w1", "observed-w3", "--out", str(tmp_path), "--format", "json"],
                    observed_runs["env"])
    assert proc.returncode == 0, proc.stderr
    rows = {r["workers"]: r for r in json.loads(proc.stdout)["comparison"]}
    assert rows[1]["time_ratio"] == 1.0
    assert rows[3]["time_ratio"] > 0 and rows[3]["efficiency"] == pytest.approx(1 / rows[3]["time_ratio"] / 3)
    table = run_orch(["collect", "observed-w1", "observed-w3", "--out", str(tmp_path)], observed_runs["env"])
    assert "T(N)/T(1)" in table.stdout and "observed-w3" in table.stdout


@pytest.mark.docker
def test_failed_run_is_collected_as_failed(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-fail")
    # TensorFlow and 60,000 samples as float32 (188 MB) do not fit in 256 MiB: OOM-killed.
    proc = run_orch(["up", "--dataset", "synthetic", "--samples", "60000", "--epochs", "2", "--memory", "256",
                     "--run-id", "live-fail"], orch_env)
    assert proc.returncode == 1 and "exceeding its memory limit" in proc.stderr
    collected = run_orch(["collect", "live-fail", "--out", str(tmp_path), "--format", "json"], orch_env)
    assert collected.returncode == 0, collected.stderr
    summary = json.loads(collected.stdout)
    jsonschema.validate(summary, SCHEMA)
    assert summary["failed"] and summary["state"] == "failed" and "worker-0" in summary["error"]
    assert summary["workers"][0]["exit_code"] == 137
