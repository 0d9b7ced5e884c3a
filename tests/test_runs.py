"""Live runs with real containers on small data. Each test removes what it started, even on failure."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.plan import cpuset
from tests.conftest import SMALL, made, orch_containers, orch_networks, run_orch, start_orch

pytestmark = pytest.mark.docker


def _run_json(tmp_path: Path, run_id: str) -> dict:
    return json.loads((tmp_path / "runs" / run_id / "run.json").read_text())


def test_one_worker_baseline_finishes(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-w1")
    proc = run_orch(["up", "--workers", "1", *SMALL, "--run-id", "live-w1", "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["state"] == "succeeded"
    (worker,) = info["workers"]
    assert worker["exit_code"] == 0 and worker["replicas"] == 1
    assert worker["samples_per_epoch"] == [3840, 3840]  # 64% of 6,000, all on the one worker
    assert 0.3 < worker["test_accuracy"] <= 1.0
    assert orch_containers("live-w1") == [] and orch_networks("live-w1") == []
    assert "TF_CONFIG" not in (tmp_path / "runs" / "live-w1" / "compose.yml").read_text()


def test_three_workers_shard_once_and_agree(small_runs):
    run = made(small_runs, "live-w3")  # 3 workers of SMALL
    info, run_dir = run["info"], run["dir"]
    workers = info["workers"]
    # Each worker leaves by itself once all have written their results: none is stopped by orch.
    assert [w["exit_code"] for w in workers] == [0, 0, 0]
    assert not (run_dir / "shared").exists()  # nothing left to resume
    assert {w["replicas"] for w in workers} == {3}
    # The same model on every worker: the same test accuracy, computed locally by each.
    assert len({w["test_accuracy"] for w in workers}) == 1
    train, per_worker_batch = 3840, 96 // 3
    for w in workers:
        for seen in w["samples_per_epoch"]:
            assert abs(seen - train / 3) < per_worker_batch
    results = [json.loads((run_dir / f"worker-{i}" / "result.json").read_text())
               for i in range(3)]
    assert [r["worker"] for r in results] == [0, 1, 2]
    # Each worker pinned itself to its share of the host's cores once TensorFlow was imported.
    shares = [cpuset(i, 3, os.cpu_count()) for i in range(3)]
    assert [",".join(map(str, r["cpus"])) for r in results] == [_expand(c) for c in shares]
    assert all(len(r["epochs"]) == 2 and "val_accuracy" in r["epochs"][0] for r in results)
    assert (run_dir / "logs" / "worker-1.log").read_text()
    assert run["left"] == []  # orch removed its containers and network


def _expand(cpus: str) -> str:
    first, _, last = cpus.partition("-")
    return ",".join(str(c) for c in range(int(first), int(last or first) + 1))


def test_mnist_small_sample_learns(images, orch_env, cleanup):
    cleanup.append("live-mnist")
    proc = run_orch(["up", "--dataset", "mnist", "--samples", "3000", "--epochs", "5", "--run-id", "live-mnist",
                     "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["test_accuracy"] > 0.5  # chance is 0.1


def _start_up(args, env) -> subprocess.Popen:
    return start_orch(["up", *args], env)


def _wait_for_epoch(run_dir: Path, worker: int, timeout: float = 180) -> None:
    events = run_dir / f"worker-{worker}" / "events.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if events.exists() and '"event": "epoch"' in events.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"worker {worker} finished no epoch in {timeout} s")


LONG = ["--workers", "2", "--dataset", "synthetic", "--samples", "6000", "--epochs", "200",
        "--steps-per-execution", "1"]


def test_killed_worker_fails_the_run_and_leaves_nothing(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-kill")
    proc = _start_up([*LONG, "--run-id", "live-kill"], orch_env)
    try:
        _wait_for_epoch(tmp_path / "runs" / "live-kill", 1)
        victim = subprocess.run(["docker", "ps", "-q", "--filter", "label=orch.run=live-kill",
                                 "--filter", "label=orch.index=1"], capture_output=True, text=True).stdout.split()
        subprocess.run(["docker", "kill", *victim], check=True, capture_output=True)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    assert "orch: error: worker-1 was killed by signal 9 (exit 137)" in stderr
    assert orch_containers("live-kill") == [] and orch_networks("live-kill") == []
    record = _run_json(tmp_path, "live-kill")
    assert record["state"] == "failed" and "worker-1" in record["error"]
    assert (tmp_path / "runs" / "live-kill" / "worker-0" / "events.jsonl").stat().st_size > 0


def test_ctrl_c_stops_and_removes_the_run(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-sigint")
    proc = _start_up([*LONG, "--run-id", "live-sigint"], orch_env)
    try:
        _wait_for_epoch(tmp_path / "runs" / "live-sigint", 0)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert orch_containers("live-sigint") == [] and orch_networks("live-sigint") == []
    assert _run_json(tmp_path, "live-sigint")["state"] == "interrupted"
    assert (tmp_path / "runs" / "live-sigint" / "worker-0" / "events.jsonl").stat().st_size > 0


def test_detach_ps_and_down(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-detach")
    proc = run_orch(["up", *LONG, "--run-id", "live-detach", "--detach"], orch_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "live-detach"
    listed = json.loads(run_orch(["ps", "live-detach", "--format", "json"], orch_env).stdout)
    assert listed[0]["state"] == "running"
    assert len(orch_containers("live-detach")) == 2
    assert run_orch(["down", "live-detach"], orch_env).returncode == 0
    assert orch_containers("live-detach") == [] and orch_networks("live-detach") == []
    assert _run_json(tmp_path, "live-detach")["state"] == "stopped"
    assert (tmp_path / "runs" / "live-detach" / "compose.yml").is_file()


def test_epoch_metrics_match_keras_own_steps(small_runs, orch_env, tmp_path, cleanup):
    """orch's steps read the metrics across workers once per epoch; Keras' read them every step.
    The training is the same, and so must every epoch figure be."""
    cleanup.append("live-metrics-first")
    proc = run_orch(["up", "--workers", "2", *SMALL, "--log-reduction", "first", "--run-id", "live-metrics-first"],
                    orch_env)
    assert proc.returncode == 0, proc.stderr
    epochs = {"epoch": json.loads((made(small_runs, "live-mwms-2")["dir"] / "worker-1" / "result.json").read_text())
              ["epochs"],
              "first": json.loads((tmp_path / "runs" / "live-metrics-first" / "worker-1" / "result.json")
                                  .read_text())["epochs"]}
    for ours, keras in zip(epochs["epoch"], epochs["first"]):
        for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
            assert abs(ours[key] - keras[key]) < 1e-4, (key, ours, keras)


def test_the_cnn_trains_on_two_workers_and_each_tests_its_own_weights(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-cnn")
    proc = run_orch(["up", "--workers", "2", "--model", "cnn", "--dataset", "fashion-mnist", "--samples", "3000",
                     "--epochs", "2", "--steps-per-execution", "5", "--run-id", "live-cnn", "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout)["workers"]
    assert [w["samples_per_epoch"] for w in workers] == [[960, 960], [960, 960]]  # 64% of 3,000, halved
    accuracies = {w["test_accuracy"] for w in workers}
    assert len(accuracies) == 1 and accuracies.pop() > 0.3  # ten classes of clothing; chance is 0.1
    result = json.loads((tmp_path / "runs" / "live-cnn" / "worker-1" / "result.json").read_text())
    assert result["model"] == "cnn"


def test_mirrored_runs_two_replicas_in_one_container(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-mirrored")
    proc = run_orch(["up", "--strategy", "mirrored", "--replicas", "2", *SMALL, "--run-id", "live-mirrored",
                     "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    (worker,) = json.loads(proc.stdout)["workers"]
    assert worker["replicas"] == 2 and worker["exit_code"] == 0
    assert worker["samples_per_epoch"] == [3840, 3840]  # the whole training set, split over the two replicas
    assert 0.3 < worker["test_accuracy"] <= 1.0
    assert "TF_CONFIG" not in (tmp_path / "runs" / "live-mirrored" / "compose.yml").read_text()


def test_the_text_model_learns_review_sentiment_on_two_workers(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-text")
    proc = run_orch(["up", "--workers", "2", "--model", "text", "--dataset", "vader-reviews", "--samples", "6000",
                     "--epochs", "3", "--batch-size", "64", "--run-id", "live-text", "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout)["workers"]
    assert [w["samples_per_epoch"] for w in workers] == [[1920] * 3] * 2  # 64% of 6,000, halved, batch 32 each
    accuracies = {w["test_accuracy"] for w in workers}
    assert len(accuracies) == 1 and accuracies.pop() > 0.6  # two balanced classes: chance is about 0.5
    assert not (tmp_path / "runs" / "live-text" / "worker-0" / "predictions.npz").exists()  # no images to show


def test_parameter_servers_train_asynchronously_and_count_each_workers_samples(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-ps")
    proc = run_orch(["up", "--strategy", "ps", "--workers", "2", "--parameter-servers", "2", *SMALL, "--epochs", "3",
                     "--run-id", "live-ps", "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    (chief,) = info["workers"]  # only the chief trains and reports; the servers and workers serve it
    assert (chief["role"], chief["exit_code"], chief["samples_per_epoch"]) == ("chief", 0, [3840] * 3)
    result = json.loads((tmp_path / "runs" / "live-ps" / "chief-0" / "result.json").read_text())
    assert (result["workers"], result["parameter_servers"], result["per_worker_batch"]) == (2, 2, 96)
    for epoch in result["epochs"]:  # measured per worker: what each ran adds up to the epoch
        assert epoch["samples_worker_0"] + epoch["samples_worker_1"] == epoch["samples"] == 3840
    assert sum(e["samples_worker_1"] for e in result["epochs"]) > 0 and 0.1 < chief["test_accuracy"] <= 1.0
    compose = (tmp_path / "runs" / "live-ps" / "compose.yml").read_text()
    for name in ("chief-0", "ps-0", "ps-1", "worker-0", "worker-1"):
        assert f"{name}:" in compose
    assert orch_containers("live-ps") == [] and orch_networks("live-ps") == []


def test_the_custom_loop_shards_once_and_agrees_with_itself(images, small_runs, orch_env, tmp_path, cleanup):
    cleanup.append("live-custom")
    proc = run_orch(["up", "--workers", "2", "--strategy", "custom", *SMALL, "--run-id", "live-custom",
                     "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout)["workers"]
    assert [w["samples_per_epoch"] for w in workers] == [[1920, 1920], [1920, 1920]]  # 64% of 6,000, halved
    accuracies = {w["test_accuracy"] for w in workers}
    assert len(accuracies) == 1
    # The same job under Keras' fit(): the same data, shards and updates, so the same model, near enough.
    assert abs(made(small_runs, "live-mwms-2")["info"]["test_accuracy"] - accuracies.pop()) < 0.02
    result = json.loads((tmp_path / "runs" / "live-custom" / "worker-0" / "result.json").read_text())
    assert result["strategy"] == "custom" and result["replicas"] == 2
    assert [e["epoch"] for e in result["epochs"]] == [1, 2] and result["epochs"][1]["val_accuracy"] > 0
