"""Live: a run belongs to its supervisor, not to the command that started it. `orch up` killed mid-run, a detached
writer past its disk limit with no orch process left, a supervisor killed and adopted, `orch attach` to the end."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.run.lease import holder
from tests.conftest import (SMALL, made, orch_containers, orch_networks, replica_events, run_mounts, run_orch,
                            start_orch, supervisors, wait_for)

pytestmark = pytest.mark.docker


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def _gone(run_id: str) -> bool:
    return orch_containers(run_id) == [] and orch_networks(run_id) == [] and supervisors(run_id) == [] and \
        run_mounts(run_id) == []


def test_orch_up_killed_after_its_first_epoch_leaves_a_run_that_ends_as_if_nothing_happened(
        small_runs, orch_env, tmp_path, cleanup):
    """The 2-worker job of the shared run live-mwms-2, its `orch up` killed with SIGKILL once worker 0 has ended an
    epoch: the supervisor carries it on; `orch ps` says it is supervised, `orch attach` follows it to its end with the
    run's exit code, and the run ends succeeded with every worker's figures, its collect giving the undisturbed
    run's accuracies; nothing is left, no supervisor either."""
    run_id = "live-sup-kill9"
    cleanup.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    proc = start_orch(["up", "--workers", "2", "--strategy", "mwms", *SMALL, "--log-reduction", "epoch",
                       "--run-id", run_id], orch_env)
    try:
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, 0)), 240, "worker 0's first epoch")
        proc.kill()
        proc.wait(10)
    finally:
        proc.kill()
    listed = json.loads(run_orch(["ps", run_id, "--format", "json"], orch_env).stdout)[0]
    assert listed["state"] == "succeeded" or listed["supervised"] is True, listed
    attached = run_orch(["attach", run_id, "--format", "json"], orch_env, timeout=300)
    assert attached.returncode == 0, attached.stderr
    assert "epoch 2/2" in attached.stderr and json.loads(attached.stdout)["state"] == "succeeded"
    record = _record(run_dir)
    assert record["state"] == "succeeded" and record["supervisor_pid"] is None
    assert [w["exit_code"] for w in record["workers"]] == [0, 0]
    assert all(w["train_seconds"] and w["test_accuracy"] is not None for w in record["workers"])
    collected = run_orch(["collect", run_id, "--format", "json"], orch_env)
    assert collected.returncode == 0, collected.stderr
    undisturbed = made(small_runs, "live-mwms-2")["info"]
    assert [w["test_accuracy"] for w in record["workers"]] == [w["test_accuracy"] for w in undisturbed["workers"]]
    assert holder(run_dir) is None and _gone(run_id)


FILL = ("import os\nblock = os.urandom(1 << 20)\nn = 0\nwhile True:\n"
        "    with open(f'junk-{n}.bin', 'wb') as out:\n        out.write(block)\n    n += 1\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="a file system of the limit's size is mounted by root only")
def test_a_detached_writer_is_held_at_its_disk_limit_by_the_kernel_with_no_orch_process_left(
        images, orch_env, tmp_path, cleanup):
    """`orch up --detach` of a replica writing file after file at full speed, its supervisor killed with SIGKILL at
    once: no orch process is left, and the kernel stops the writer within a quarter past --disk-limit 200 (its folder
    sits on a file system of that size). `orch ps` finds the run without a supervisor and adopts it; the adopter
    records it failed over its disk limit, brings the files home and unmounts the file system."""
    run_id = "live-sup-disk"
    cleanup.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    (tmp_path / "fill").mkdir()
    (tmp_path / "fill" / "fill.py").write_text(FILL)
    proc = run_orch(["up", "--detach", "--script", str(tmp_path / "fill" / "fill.py"), "--workers", "1",
                     "--disk-limit", "200", "--run-id", run_id], orch_env)
    assert proc.returncode == 0, proc.stderr
    pid = holder(run_dir)
    assert pid and os.path.ismount(run_dir / "worker-0") and _record(run_dir)["disk_bound"] == "kernel"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: holder(run_dir) is None, 10, "the supervisor's end")
    wait_for(lambda: not orch_containers(run_id, running=True), 120, "the writer's end")
    written = sum(f.stat().st_blocks * 512 for f in (run_dir / "worker-0").glob("junk-*.bin"))
    print(f"a writer with no orch process left: stopped at {written / 2**20:.0f} MiB under --disk-limit 200")
    assert 150 << 20 <= written <= 250 << 20, f"{written / 2**20:.0f} MiB written"
    listed = run_orch(["ps", run_id, "--format", "json"], orch_env)
    assert "had lost its supervisor; adopted by a new one" in listed.stderr, listed.stderr
    wait_for(lambda: _record(run_dir)["state"] != "running", 60, "the adopter's finish")
    record = _record(run_dir)
    assert record["state"] == "failed" and "--disk-limit 200" in record["error"], record
    assert sum(1 for _ in (run_dir / "worker-0").glob("junk-*.bin")) >= 150  # home, off the unmounted file system
    assert not (run_dir / ".disk").exists()
    wait_for(lambda: _gone(run_id), 30, "the adopter's exit, and nothing left")


def test_a_detached_run_whose_supervisor_dies_is_adopted_and_down_stops_it(images, orch_env, tmp_path, cleanup):
    """A supervisor killed mid-run: `orch attach` finds no supervisor and starts a new one, which watches the replicas
    where they are; SIGTERM of the attached client leaves the run to it (exit 143); `orch down` asks it to stop the
    run, which is recorded stopped, its results kept, nothing left."""
    run_id = "live-sup-adopt"
    cleanup.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    proc = run_orch(["up", "--detach", "--workers", "2", "--dataset", "synthetic", "--samples", "6000", "--epochs",
                     "200", "--steps-per-execution", "10", "--run-id", run_id], orch_env)
    assert proc.returncode == 0, proc.stderr
    first = holder(run_dir)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: holder(run_dir) is None, 10, "the supervisor's end")
    client = start_orch(["attach", run_id], orch_env)
    try:
        wait_for(lambda: holder(run_dir) not in (None, first), 60, "the adopter")
        wait_for(lambda: len(replica_events(run_dir, 0)) >= 3, 240, "worker 0's epochs")
        client.send_signal(signal.SIGTERM)
        _, err = client.communicate(timeout=30)
    finally:
        client.kill()
    assert client.returncode == 143, err
    assert "adopted by a new one" in err and f"`orch attach {run_id}` follows it again" in err
    assert holder(run_dir) is not None and _record(run_dir)["state"] == "running"
    started = time.monotonic()
    down = run_orch(["down", run_id], orch_env)
    assert down.returncode == 0, down.stderr
    print(f"orch down of a supervised run: {time.monotonic() - started:.1f} s")
    record = _record(run_dir)
    assert record["state"] == "stopped" and (run_dir / "logs" / "worker-0.log").stat().st_size > 0
    assert _gone(run_id)
