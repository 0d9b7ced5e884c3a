"""MPI in real containers (`--framework mpi`): 1 and 3 ranks agree, a killed rank fails the job or restarts the
group, a user's mpi4py script runs across containers, and TCP gives the same model. Each test removes what it
started, even on failure."""
import json
import subprocess

import pytest

from tests.conftest import ROOT, orch_containers, orch_networks, replica_events, run_orch, wait_for
from tests.test_runs_faults import _container, _start

pytestmark = pytest.mark.docker

SMALL = ["--framework", "mpi", "--dataset", "synthetic", "--samples", "3000", "--epochs", "2"]
LONG = ["--framework", "mpi", "--workers", "3", "--dataset", "synthetic", "--samples", "60000", "--epochs", "60"]


def _up(args, orch_env, run_id):
    proc = run_orch(["up", *args, "--run-id", run_id, "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["workers"]


def test_one_and_three_ranks_reach_the_same_model_each_on_its_share(images, orch_env, tmp_path, cleanup):
    cleanup.extend(["live-mpi-1", "live-mpi-3", "live-mpi-3-tcp"])
    one = _up([*SMALL, "--workers", "1"], orch_env, "live-mpi-1")
    three = _up([*SMALL, "--workers", "3"], orch_env, "live-mpi-3")
    tcp = _up([*SMALL, "--workers", "3", "--transport", "tcp"], orch_env, "live-mpi-3-tcp")
    # The same global batches, split among the ranks: the same updates, so the same test accuracy on every rank.
    assert {w["test_accuracy"] for w in one + three + tcp} == {one[0]["test_accuracy"]}
    assert one[0]["test_accuracy"] > 0.15  # chance is 0.1
    assert [w["samples_per_epoch"] for w in one] == [[1920, 1920]]  # 64% of 3,000
    assert [w["samples_per_epoch"] for w in three] == [[640, 640]] * 3  # each rank's share, measured
    run = tmp_path / "runs" / "live-mpi-3"
    for i in range(3):  # each rank's output is in its own container's log, not all in rank 0's
        assert f"worker {i}/3:" in (run / "logs" / f"worker-{i}.log").read_text()
        # Each rank measures its steps: the time in the all-reduce (blocking, so all of it a wait) and the rest.
        for epoch in json.loads((run / f"worker-{i}" / "result.json").read_text())["epochs"]:
            assert epoch["compute_seconds"] > 0 and epoch["allreduce_wait_seconds"] > 0
            assert epoch["allreduce_in_flight_seconds"] == epoch["allreduce_wait_seconds"]
            assert epoch["compute_seconds"] + epoch["allreduce_wait_seconds"] <= epoch["seconds"]
    serial = json.loads((tmp_path / "runs" / "live-mpi-1" / "worker-0" / "result.json").read_text())
    assert all(e["allreduce_wait_seconds"] == 0 and e["compute_seconds"] > 0 for e in serial["epochs"])
    compose = (run / "compose.yml").read_text()
    assert 'ipc: "service:worker-0"' in compose and 'pid: "service:worker-0"' in compose
    for run_id in ("live-mpi-1", "live-mpi-3", "live-mpi-3-tcp"):
        assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def _kill_during_training(run_id, args, orch_env, tmp_path, index=1):
    run_dir = tmp_path / "runs" / run_id
    proc = _start([*args, "--run-id", run_id, "--format", "json"], orch_env)
    try:
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, index)), 240,
                 f"worker {index}'s first epoch")
        subprocess.run(["docker", "kill", _container(run_id, index)], check=True, capture_output=True)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return proc.returncode, out, err, run_dir


def test_a_killed_rank_fails_the_job_and_leaves_nothing(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-mpi-kill")
    code, _, err, run_dir = _kill_during_training("live-mpi-kill", [*LONG, "--stall-timeout", "30"], orch_env,
                                                  tmp_path)
    assert code == 1, err
    assert "worker-1 was killed by signal 9 (exit 137)" in err
    assert json.loads((run_dir / "run.json").read_text())["state"] == "failed"
    assert orch_containers("live-mpi-kill") == [] and orch_networks("live-mpi-kill") == []


def test_a_killed_rank_restarts_the_group_from_rank_0s_checkpoint(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-mpi-restart")
    code, out, err, run_dir = _kill_during_training(
        "live-mpi-restart", [*LONG[:-1], "3", "--max-restarts", "1"], orch_env, tmp_path, index=2)
    assert code == 0, err
    assert "worker-2 was killed by signal 9" in err and "(restart 1 of 1)" in err
    workers = json.loads(out)["workers"]
    assert len({w["test_accuracy"] for w in workers}) == 1
    resumed = [e["epoch"] for e in replica_events(run_dir, 0) if e["event"] == "resumed"]
    assert resumed and resumed[0] >= 2  # from the checkpoint, not from scratch
    assert json.loads((run_dir / "run.json").read_text())["restarts"][0]["exit_code"] == 137
    assert orch_containers("live-mpi-restart") == []


def test_a_users_mpi4py_script_runs_one_rank_per_container(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-mpi-script")
    proc = run_orch(["up", "--framework", "mpi", "--workers", "3", "--script", str(ROOT / "examples" / "mpi_sum.py"),
                     "--run-id", "live-mpi-script", "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "runs" / "live-mpi-script"
    for i in range(3):  # each rank in its own container, its own folder and log; 1 + 2 + 3 = 6
        assert (run / f"worker-{i}" / "sum.txt").read_text() == f"rank {i} of 3 on worker-0-host: sum 6\n"
        assert f"rank {i} of 3" in (run / "logs" / f"worker-{i}.log").read_text()
    assert [w["exit_code"] for w in json.loads(proc.stdout)["workers"]] == [0, 0, 0]
    # One container: the script runs under mpiexec too, with the rank variables its launcher sets.
    cleanup.append("live-mpi-script-1")
    (tmp_path / "src").mkdir()
    script = tmp_path / "src" / "ranks.py"
    script.write_text("import os\nfrom mpi4py import MPI\n"
                      "print('pmi', os.environ['PMI_RANK'], os.environ['PMI_SIZE'], 'mpi', MPI.COMM_WORLD.rank, "
                      "MPI.COMM_WORLD.size, flush=True)\n")
    one = run_orch(["up", "--framework", "mpi", "--workers", "1", "--script", str(script), "--run-id",
                    "live-mpi-script-1"], orch_env)
    assert one.returncode == 0, one.stderr
    assert "pmi 0 1 mpi 0 1" in (tmp_path / "runs" / "live-mpi-script-1" / "logs" / "worker-0.log").read_text()
