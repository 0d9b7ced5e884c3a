"""`orch up --dry-run` and `orch ps` against the real engine: the dry run checks the images and the engine's CPUs
and starts nothing; ps adds the live state of a run still up."""
import json

import pytest

from tests.conftest import orch_containers, run_orch

pytestmark = pytest.mark.docker


def test_a_dry_run_checks_the_engine_and_its_images_and_starts_nothing(images, orch_env, tmp_path):
    proc = run_orch(["up", "--workers", "2", "--memory", "2g", "--disk-limit", "200M", "--run-id", "live-dry",
                     "--dry-run", "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["run_id"] == "live-dry" and "could not check" not in proc.stderr
    assert orch_containers("live-dry") == [] and not (tmp_path / "runs" / "live-dry").exists()
    missing = run_orch(["up", "--image", "orch-no-such-image:0", "--dry-run"], orch_env)
    assert missing.returncode == 2 and "orch-no-such-image:0" in missing.stderr, missing.stderr
    too_many = run_orch(["up", "--cpus", "512", "--dry-run"], orch_env)
    assert too_many.returncode == 2 and "--cpus: this Docker engine has" in too_many.stderr, too_many.stderr


def test_ps_with_the_engine_up_adds_the_live_state_and_says_nothing_more(images, orch_env, cleanup):
    cleanup.append("live-ps")
    started = run_orch(["up", "--workers", "1", "--dataset", "synthetic", "--samples", "3000", "--epochs", "1",
                        "--run-id", "live-ps", "--detach"], orch_env)
    assert started.returncode == 0, started.stderr
    listed = run_orch(["ps", "live-ps", "--format", "json"], orch_env)
    assert listed.returncode == 0 and "no live state" not in listed.stderr, listed.stderr
    assert json.loads(listed.stdout)[0]["state"] in ("running", "succeeded")
    assert run_orch(["down", "live-ps"], orch_env).returncode == 0
