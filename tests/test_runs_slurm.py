"""Slurm for real: a two-node cluster on this machine (benchmarks/slurm_cluster.py: munge, slurmctld, and two slurmds,
the second in a network namespace with a host name of its own), with orch's jobs in containers on its nodes. The
runs are small (3,000 MNIST images, one epoch): each test shows one behaviour. The cluster stops, and its namespace
and folder go, when the module ends, whatever happened; every test leaves Slurm's queue empty."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, load_file, made, orch_containers, run_orch
from tests.conftest import SMALL as COMPOSE_TWIN

pytestmark = pytest.mark.docker

SMALL = ["--samples", "3000", "--epochs", "1"]


slurm_cluster = load_file("slurm_cluster", ROOT / "benchmarks" / "slurm_cluster.py")


@pytest.fixture(scope="module")
def cluster():
    why = slurm_cluster.Cluster.available()
    if why:
        pytest.skip(why)
    with slurm_cluster.Cluster(nodes=2) as made:
        yield made


@pytest.fixture
def slurm_env(orch_env, cluster):
    return {**orch_env, **cluster.env}


def _queue(env) -> list[str]:
    return subprocess.run(["squeue", "--noheader", "--format=%i %T"], env=env, capture_output=True, text=True,
                          check=True).stdout.split("\n")[:-1]


def _up(env, run_id, *args, timeout=600):
    proc = run_orch(["up", "--backend", "slurm", "--run-id", run_id, "--format", "json", *args], env, timeout=timeout)
    return proc, (json.loads(proc.stdout) if proc.returncode == 0 else None)


def _nodes(env, run_id) -> set[int]:
    """The nodes the run's tasks ran on, as their tasks recorded them (0: the allocation's first)."""
    folder = Path(env["ORCH_RUNS_DIR"]) / run_id / "slurm"
    return {int(p.read_text().split()[1]) for p in folder.glob("*.started")}


def test_the_rendered_batch_script_is_one_sbatch_accepts(slurm_env):
    rendered = run_orch(["render", "--backend", "slurm", "--workers", "3", "--slurm-nodes", "2", "--slurm-time", "10"],
                        slurm_env)
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.startswith("#!/bin/bash\n") and "#SBATCH --ntasks=3" in rendered.stdout
    test = subprocess.run(["sbatch", "--test-only"], input=rendered.stdout, env=slurm_env, capture_output=True,
                          text=True)
    assert test.returncode == 0 and "to start at" in test.stderr, test.stderr
    assert _queue(slurm_env) == []


def test_tensorflow_pytorch_mpi_and_jax_train_across_both_nodes_as_on_compose(small_runs, torch_image, jax_image,
                                                                              slurm_env, tmp_path):
    """3 workers over 2 nodes with orch's TensorFlow job (the same accuracy on every worker as the shared Compose
    run of the same job), 2 with PyTorch DDP (identical weights), 3 with MPI, 2 with JAX; then `orch collect` of the
    first."""
    expected = {w["test_accuracy"] for w in made(small_runs, "live-w3")["info"]["workers"]}
    proc, info = _up(slurm_env, "slurm-tf-3", "--workers", "3", "--slurm-nodes", "2", *COMPOSE_TWIN)
    assert proc.returncode == 0, proc.stderr
    assert {w["test_accuracy"] for w in info["workers"]} == expected and len(expected) == 1, (info, expected)
    assert _nodes(slurm_env, "slurm-tf-3") == {0, 1}

    proc, info = _up(slurm_env, "slurm-torch-2", "--framework", "torch", "--workers", "2", "--slurm-nodes", "2",
                     *SMALL, timeout=900)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads((tmp_path / "runs" / "slurm-torch-2" / f"worker-{i}" / "result.json").read_text())
               for i in range(2)]
    assert len({r["weights_sha256"] for r in results}) == 1 and results[0]["test_accuracy"] > 0.1
    assert _nodes(slurm_env, "slurm-torch-2") == {0, 1}

    proc, info = _up(slurm_env, "slurm-mpi-3", "--framework", "mpi", "--workers", "3", "--slurm-nodes", "2", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert len({w["test_accuracy"] for w in info["workers"]}) == 1
    assert _nodes(slurm_env, "slurm-mpi-3") == {0, 1}

    proc, info = _up(slurm_env, "slurm-jax-2", "--framework", "jax", "--workers", "2", "--slurm-nodes", "2", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert len({w["test_accuracy"] for w in info["workers"]}) == 1 and _nodes(slurm_env, "slurm-jax-2") == {0, 1}

    out = tmp_path / "collected"
    collected = run_orch(["collect", "slurm-tf-3", "--out", str(out)], slurm_env)
    assert collected.returncode == 0, collected.stderr
    assert all((out / "slurm-tf-3" / name).is_file() for name in ("report.html", "summary.json", "training.png"))
    assert _queue(slurm_env) == []


def _trainers(run_id: str) -> dict[int, int]:
    """The host PID of each running trainer process of ``run_id`` (on either node: both are this machine), by worker."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        index = [e.split(b"=", 1)[1] for e in environ if e.startswith(b"ORCH_WORKER_INDEX=")]
        if b"orch_trainer" in cmdline and f"ORCH_RUN_ID={run_id}".encode() in environ and index:
            found[int(index[0])] = int(entry)
    return found


def _trainer_pid(run_id: str, index: int, timeout: float = 300) -> int:
    """The host PID of the trainer of worker ``index`` of ``run_id``, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if index in (found := _trainers(run_id)):
            return found[index]
        time.sleep(0.5)
    raise AssertionError(f"worker {index} of {run_id} never started")


def test_a_killed_task_and_one_over_its_memory_end_the_job_naming_the_worker(images, slurm_env):
    run_id = "slurm-killed"
    up = subprocess.Popen([sys.executable, "-m", "orchestrator", "up", "--backend", "slurm",
                           "--workers", "2", "--slurm-nodes", "2", "--samples", "20000", "--epochs", "3", "--run-id",
                           run_id], env=slurm_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        os.kill(_trainer_pid(run_id, 1), signal.SIGKILL)
        _out, err = up.communicate(timeout=300)
    finally:
        if up.poll() is None:
            up.kill()
    errors = [line for line in err.splitlines() if line.startswith("orch: error:")]
    assert up.returncode == 1 and len(errors) == 1 and "worker-1" in errors[0], err
    assert _queue(slurm_env) == [] and _trainers(run_id) == {}  # nothing left in the queue or on the nodes

    proc, _info = _up(slurm_env, "slurm-memory", "--workers", "2", "--memory", "300", *SMALL)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("orch: error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    assert "was killed for exceeding its memory limit (exit 137); raise --memory" in errors[0], errors
    assert _queue(slurm_env) == [] and _trainers("slurm-memory") == {}


def test_orch_down_cancels_a_detached_job_and_the_docker_runtime_runs_a_job(images, slurm_env):
    run_id = "slurm-detached"
    started = run_orch(["up", "-d", "--backend", "slurm", "--workers", "2", "--samples", "20000", "--epochs", "5",
                        "--run-id", run_id], slurm_env)
    assert started.returncode == 0, started.stderr
    _trainer_pid(run_id, 0)
    down = run_orch(["down", run_id], slurm_env)
    assert down.returncode == 0, down.stderr
    assert _queue(slurm_env) == [] and _trainers(run_id) == {}
    ps = run_orch(["ps", run_id, "--format", "json"], slurm_env)
    assert json.loads(ps.stdout)[0]["state"] == "stopped", ps.stdout

    # Docker on the head node alone: its containers use the engine's network, which is that node's.
    proc, info = _up(slurm_env, "slurm-docker", "--workers", "2", "--slurm-runtime", "docker", "--slurm-partition",
                     "head", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert len({w["test_accuracy"] for w in info["workers"]}) == 1
    assert orch_containers("slurm-docker") == [] and _queue(slurm_env) == []


def test_the_keras_and_torchrun_tutorials_run_unchanged_across_both_nodes(images, vision, slurm_env, tmp_path):
    """The tutorial scripts that run unchanged on Compose: TF_CONFIG for Keras' MultiWorkerMirrored, torchrun's
    variables (two ranks in each of two containers) for DDP, each container on a node of its own."""
    tutorials = ROOT / "examples" / "tutorials"
    proc, info = _up(slurm_env, "slurm-keras-tutorial", "--script", str(tutorials / "keras_mwms" / "main.py"),
                     "--workers", "2", "--slurm-nodes", "2", timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert [w["exit_code"] for w in info["workers"]] == [0, 0] and _nodes(slurm_env, "slurm-keras-tutorial") == {0, 1}
    logs = tmp_path / "runs" / "slurm-keras-tutorial" / "logs"
    for i in range(2):
        log = (logs / f"worker-{i}.log").read_text()
        assert "Keras' mnist.npz served from orch's copy of MNIST" in log and "Epoch 3/3" in log, log[-2000:]

    proc, info = _up(slurm_env, "slurm-ddp-tutorial", "--framework", "torch", "--script",
                     str(tutorials / "torch_ddp" / "main.py"), "--requirements", str(vision), "-j", "2x2",
                     "--slurm-nodes", "2", "--", "--batch-size", "128", timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert [w["exit_code"] for w in info["workers"]] == [0, 0] and _nodes(slurm_env, "slurm-ddp-tutorial") == {0, 1}
    logs = tmp_path / "runs" / "slurm-ddp-tutorial" / "logs"
    for node in range(2):
        log = (logs / f"worker-{node}.log").read_text()
        for local in range(2):
            rank = 2 * node + local
            assert f"[rank{rank}]:rank {rank} of 4 (local rank {local}), master orch-task-0" in log, log[-2000:]
            assert f"[rank{rank}]:epoch 1: 15000 samples on this rank" in log
    assert _queue(slurm_env) == []
