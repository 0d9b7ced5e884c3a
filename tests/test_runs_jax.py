"""JAX in real containers (`--framework jax`): its image is built alone, 1 and 3 processes reach the same model each
holding its share of every global batch, a killed process is survived by a restart of the group from process 0's
checkpoint, and a user's script meets its peers with a bare ``jax.distributed.initialize()``. Each test removes what it started, even on failure."""
import json

import pytest

from tests.conftest import ROOT, orch_containers, orch_networks, run_orch
from tests.test_runs_faults import kill_one_and_resume
from tests.test_runs_mpi import _up

pytestmark = pytest.mark.docker

SMALL = ["--framework", "jax", "--dataset", "mnist", "--samples", "3000", "--epochs", "2"]


def test_building_jaxs_image_leaves_every_other_image_as_it_was(jax_image):
    built, before, after = jax_image
    assert [b.tag for b in built] == ["orch-jax:0.1.0"]
    others = {tag: image for tag, image in before.items() if not tag.startswith(("orch-jax:", "orch-jax-runtime:"))}
    assert others and {tag: after.get(tag) for tag in others} == others
    assert {"orch-jax:0.1.0", "orch-jax-runtime:0.1.0"} <= set(after)


def test_one_and_three_processes_reach_the_same_model_each_on_its_share(jax_image, orch_env, tmp_path, cleanup):
    cleanup.extend(["live-jax-1", "live-jax-3"])
    one = _up([*SMALL, "--workers", "1"], orch_env, "live-jax-1")
    three = _up([*SMALL, "--workers", "3"], orch_env, "live-jax-3")
    # The same global batches, each sample on one process, the gradients' mean all-reduced: the same updates, up to
    # the order of sums, so the same accuracy within 0.02; the 3 processes apply one update, so they agree exactly.
    assert abs(one[0]["test_accuracy"] - three[0]["test_accuracy"]) <= 0.02
    assert len({w["test_accuracy"] for w in three}) == 1
    assert one[0]["test_accuracy"] > 0.15  # chance is 0.1
    assert [w["samples_per_epoch"] for w in one] == [[1920, 1920]]  # 64% of 3,000
    assert [w["samples_per_epoch"] for w in three] == [[640, 640]] * 3  # each process's share, measured
    results = [json.loads((tmp_path / "runs" / "live-jax-3" / f"worker-{i}" / "result.json").read_text())
               for i in range(3)]
    assert [(r["worker"], r["devices"], r["backend"], r["strategy"]) for r in results] == [
        (i, 3, "gloo", "spmd") for i in range(3)]
    serial = json.loads((tmp_path / "runs" / "live-jax-1" / "worker-0" / "result.json").read_text())
    assert (serial["strategy"], serial["backend"], serial["devices"]) == ("serial", None, 1)
    # --transport shm: the same job with the gradients summed by MPI between the step's halves, no coordinator.
    cleanup.append("live-jax-shm-3")
    shm = _up([*SMALL, "--workers", "3", "--transport", "shm"], orch_env, "live-jax-shm-3")
    assert abs(shm[0]["test_accuracy"] - three[0]["test_accuracy"]) <= 0.005
    over = [json.loads((tmp_path / "runs" / "live-jax-shm-3" / f"worker-{i}" / "result.json").read_text())
            for i in range(3)]
    assert [(r["transport"], r["backend"], r["devices"]) for r in over] == [("shm", None, 1)] * 3
    assert len({r["weights_sha256"] for r in over}) == 1 and len({r["weights_sha256"] for r in results}) == 1
    assert [w["samples_per_epoch"] for w in shm] == [[640, 640]] * 3 and all(r["allreduce_seconds"] > 0 for r in over)
    for run_id in ("live-jax-1", "live-jax-3", "live-jax-shm-3"):
        assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_a_users_script_meets_its_peers_with_a_bare_initialize(jax_image, orch_env, tmp_path, cleanup):
    run_id = "live-jax-script"
    cleanup.append(run_id)
    proc = run_orch(["up", "--framework", "jax", "--workers", "2", "--script",
                     str(ROOT / "examples" / "jax_data_parallel.py"), "--run-id", run_id, "--format", "json", "--",
                     "--epochs", "2"], orch_env)
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout)["workers"]
    assert [w["samples_per_epoch"] for w in workers] == [[1536, 1536]] * 2  # halves of 48 global batches of 64
    assert len({w["test_accuracy"] for w in workers}) == 1 and workers[0]["test_accuracy"] > 0.7
    for i in range(2):
        log = (tmp_path / "runs" / run_id / "logs" / f"worker-{i}.log").read_text()
        assert f"process {i} of 2:" in log
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_a_killed_process_restarts_the_group_from_process_0s_checkpoint(jax_image, orch_env, tmp_path, cleanup):
    cleanup.append("live-jax-restart")
    kill_one_and_resume(["--framework", "jax", "--workers", "2", "--dataset", "synthetic", "--samples", "30000",
                         "--epochs", "3"], "live-jax-restart", tmp_path / "runs" / "live-jax-restart", orch_env)
