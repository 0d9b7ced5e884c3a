"""PyTorch DDP in real containers (`--framework torch`): 1 and 2 ranks reach the same model each on its shard, a
killed rank is survived by a whole-group restart from rank 0's checkpoint, a rank that never starts times out
by name, and a user's DDP script meets its peers through orch's environment. Each test removes what it started,
even on failure. The PyTorch image is built once per session (its wheels are downloaded once per machine)."""
import json
import os
import subprocess

import pytest

from orchestrator.plan import cpuset
from tests.conftest import ROOT, once, orch_containers, orch_networks, run_orch, wait_for
from tests.test_runs import _expand
from tests.test_runs_faults import _container, _start, kill_one_and_resume
from tests.test_runs_mpi import _up

pytestmark = pytest.mark.docker

SMALL = ["--framework", "torch", "--dataset", "mnist", "--samples", "3000", "--epochs", "2"]
LONG = ["--framework", "torch", "--workers", "2", "--dataset", "synthetic", "--samples", "30000", "--epochs", "3"]


def test_one_and_two_ranks_reach_the_same_model_each_on_its_shard(torch_image, orch_env, tmp_path, cleanup):
    cleanup.extend(["live-torch-1", "live-torch-2"])
    one = _up([*SMALL, "--workers", "1"], orch_env, "live-torch-1")
    two = _up([*SMALL, "--workers", "2"], orch_env, "live-torch-2")
    # The same global batches, split by DistributedSampler, the same dropout masks: the same updates, so the
    # same test accuracy on every rank, each computed from that rank's own weights.
    assert {w["test_accuracy"] for w in one + two} == {one[0]["test_accuracy"]}
    assert one[0]["test_accuracy"] > 0.15  # chance is 0.1
    assert [w["samples_per_epoch"] for w in one] == [[1920, 1920]]  # 64% of 3,000
    assert [w["samples_per_epoch"] for w in two] == [[960, 960]] * 2  # each rank's shard, measured
    run = tmp_path / "runs" / "live-torch-2"
    for i in range(2):
        result = json.loads((run / f"worker-{i}" / "result.json").read_text())
        assert result["backend"] == "gloo" and result["gloo_interface"] not in (None, "lo")  # the cluster network
        # The rank's own threads on its share of the cores, gloo's on every core the container has.
        assert ",".join(map(str, result["cpus"])) == _expand(cpuset(i, 2, os.cpu_count()))
        assert result["gloo_threads"] >= 1 and result["gloo_threads_cpus"] == sorted(os.sched_getaffinity(0))
        assert result["strategy"] == "ddp" and result["torch"].startswith("2.9.1")
        epoch = result["epochs"][0]
        assert epoch["compute_seconds"] > 0 and epoch["allreduce_in_flight_seconds"] > 0
        assert f"worker {i}/2:" in (run / "logs" / f"worker-{i}.log").read_text()
    serial = json.loads((tmp_path / "runs" / "live-torch-1" / "worker-0" / "result.json").read_text())
    assert serial["strategy"] == "serial" and serial["backend"] is None
    collected = run_orch(["collect", "live-torch-1", "live-torch-2", "--format", "json"], orch_env)
    assert collected.returncode == 0, collected.stderr
    for run_id in ("live-torch-1", "live-torch-2"):
        assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_ddp_over_mpis_shared_memory_reaches_gloos_model_with_identical_ranks(torch_image, orch_env, tmp_path,
                                                                               cleanup):
    """--transport shm: 3 ranks on 2 cores (so they yield while waiting), the gradients through DDP's hook to MPI;
    the serial run's model up to the order of sums, every rank's weights bit for bit the same."""
    cleanup.extend(["live-torch-shm-1", "live-torch-shm-3"])
    one = _up([*SMALL, "--workers", "1", "--transport", "shm"], orch_env, "live-torch-shm-1")
    three = _up([*SMALL, "--workers", "3", "--transport", "shm"], orch_env, "live-torch-shm-3")
    assert abs(one[0]["test_accuracy"] - three[0]["test_accuracy"]) <= 0.005 and one[0]["test_accuracy"] > 0.15
    results = [json.loads((tmp_path / "runs" / "live-torch-shm-3" / f"worker-{i}" / "result.json").read_text())
               for i in range(3)]
    assert [(r["transport"], r["backend"], r["strategy"]) for r in results] == [("shm", "gloo", "ddp")] * 3
    assert len({r["weights_sha256"] for r in results}) == 1 and len({r["test_accuracy"] for r in results}) == 1
    assert all(r["epochs"][0]["allreduce_in_flight_seconds"] > 0 for r in results)  # timed by the MPI hook
    assert "DDP over MPI's shared memory" in (tmp_path / "runs" / "live-torch-shm-3" / "logs" / "worker-0.log").read_text()
    for run_id in ("live-torch-shm-1", "live-torch-shm-3"):
        assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_a_killed_rank_restarts_the_group_from_rank_0s_checkpoint(torch_image, orch_env, tmp_path, cleanup):
    cleanup.append("live-torch-restart")
    kill_one_and_resume(LONG, "live-torch-restart", tmp_path / "runs" / "live-torch-restart", orch_env)


def test_a_rank_that_never_starts_times_out_by_name(torch_image, orch_env, tmp_path, cleanup):
    run_id = "live-torch-startup"
    cleanup.append(run_id)
    proc = _start([*SMALL, "--workers", "2", "--startup-timeout", "20", "--run-id", run_id], orch_env)
    try:
        wait_for(lambda: len(orch_containers(run_id, running=True)) == 2, 120, "the containers")  # started: pausable
        subprocess.run(["docker", "pause", _container(run_id, 1)], check=True, capture_output=True)
        _, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    assert "orch: error: worker-1 did not join the cluster within the startup timeout of 20 s" in stderr
    assert json.loads((tmp_path / "runs" / run_id / "run.json").read_text())["state"] == "timed-out"
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_a_users_ddp_script_meets_its_peers_through_the_environment(torch_image, orch_env, tmp_path, cleanup):
    run_id = "live-torch-script"
    cleanup.append(run_id)
    proc = run_orch(["up", "--framework", "torch", "--workers", "2", "--script", str(ROOT / "examples" / "torch_ddp.py"),
                     "--run-id", run_id, "--format", "json", "--", "--epochs", "2"], orch_env)
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout)["workers"]
    assert [w["samples_per_epoch"] for w in workers] == [[1536, 1536]] * 2  # DistributedSampler's halves
    assert len({w["test_accuracy"] for w in workers}) == 1 and workers[0]["test_accuracy"] > 0.7
    for i in range(2):
        log = (tmp_path / "runs" / run_id / "logs" / f"worker-{i}.log").read_text()
        assert f"rank {i} of 2 via eth" in log  # gloo on the cluster network's interface, not loopback
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_torchvision_comes_through_requirements_onto_the_pytorch_image(torch_image, orch_env, tmp_path, cleanup):
    """The documented one-liner: torchvision, pinned to the image's torch, added as one layer; a script imports it."""
    requirements = tmp_path / "vision.txt"
    requirements.write_text("torchvision==0.24.1\n")
    with once("build"):  # the same tag as test_runs_tutorials' torchvision build
        built = run_orch(["build", "--framework", "torch", "--requirements", str(requirements), "--format", "json"],
                         orch_env, timeout=900)
    assert built.returncode == 0, built.stderr
    assert any(i["tag"].startswith("orch-torch:") and "-user-" in i["tag"] for i in json.loads(built.stdout))
    source = tmp_path / "src"
    source.mkdir()
    (source / "vision.py").write_text("import torch, torchvision\nfrom torchvision import transforms\n"
                                      "print('versions', torch.__version__, torchvision.__version__, flush=True)\n"
                                      "print(transforms.Normalize((0.1307,), (0.3081,)))\n")
    run_id = "live-torchvision"
    cleanup.append(run_id)
    proc = run_orch(["up", "--framework", "torch", "--script", str(source / "vision.py"), "--requirements",
                     str(requirements), "--dataset", "synthetic", "--run-id", run_id], orch_env)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "runs" / run_id / "logs" / "worker-0.log").read_text()
    assert "versions 2.9.1" in log and " 0.24.1" in log and "Normalize(mean=(0.1307,)" in log


def test_the_ddp_scaling_study_runs_in_its_quick_form(torch_image, orch_env, tmp_path):
    proc = run_orch(["experiment", "run", str(ROOT / "experiments" / "ddp-scaling.yaml"), "--quick", "--out",
                     str(tmp_path / "results")], orch_env, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "results" / "ddp-scaling-quick"
    cells = json.loads((out / "cells.json").read_text())
    assert len(cells) == 4 and {c["state"] for c in cells.values()} == {"succeeded"}
    # At one global batch every world size makes the same updates up to floating-point rounding (the ranks'
    # gradients are summed in another order): the first epoch's loss agrees to six digits for serial and 2 (and 4
    # and 8 in the full study); the rounding grows over the steps, so the test accuracies end close, not equal.
    same = [c["summary"] for c in cells.values() if "global_batch" in c["params"]]
    first = [s["loss_curve"][0] for s in same]
    assert len(same) == 2 and max(first) - min(first) < 1e-5 * first[0], first
    accuracy = [s["test_accuracy"] for s in same]
    assert min(accuracy) > 0.7 and max(accuracy) - min(accuracy) < 0.03, accuracy
    per_process = {c["params"]["workers"]: c["summary"]["spec"]["global_batch"] for c in cells.values()
                   if "batch_per_worker" in c["params"]}
    assert per_process == {1: 64, 2: 128}  # the seed's batch grows with N
    text = (out / "report.md").read_text()
    assert "## Scaling" in text and "| 2 | global_batch 64 | 64 |" in text
    assert "| 2 | batch_per_worker 64 | 128 |" in text
    for name in ("loss-curves", "speedup", "efficiency", "training-comparison"):
        assert (out / f"{name}.png").stat().st_size > 10_000
    # The study asks for the floor (report: {floor: true}): every cell has a solo rank beside it, and every cell
    # of several ranks gloo's all-reduce of the CNN's gradients at its rank count.
    floors = {c["params"]["workers"]: c["floor"] for c in cells.values() if "batch_per_worker" in c["params"]}
    assert {n: f["solo_batch"] for n, f in floors.items()} == {1: 64, 2: 64}
    assert all(f["transport"] == "gloo" and f["allreduce_p50_us"] > 0 for n, f in floors.items() if n > 1)
    rows = text.split("## Against this machine's floor")[1].split("\n\n")[1].splitlines()[2:]
    assert len(rows) == 4 and all(float(row.split("|")[8]) > 0 for row in rows), rows  # T(N)/floor in each
    assert all(orch_containers(c["run_id"]) == [] for c in cells.values())
