"""Live fault tests: real containers killed, paused, removed and crowded; each test cleans up after itself."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.images.venv_volume import volume_name
from tests.conftest import orch_containers, orch_networks, replica_events, run_orch, start_orch, wait_for

pytestmark = pytest.mark.docker


def _start(args, env) -> subprocess.Popen:
    return start_orch(["up", *args], env)


def _container(run_id: str, index: int, role: str = "worker") -> str:
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=orch.run={run_id}", "--filter",
                          f"label=orch.index={index}", "--filter", f"label=orch.role={role}"],
                         capture_output=True, text=True).stdout.split()
    assert ids, f"no container for worker {index} of {run_id}"
    return ids[0]


def kill_one_and_resume(args: list[str], run_id: str, run_dir: Path, env: dict) -> list[dict]:
    """The 2-worker job of ``args`` under --max-restarts 1, whose worker 1 is killed after its first epoch: the group
    restarts once, resumes from the checkpoint (not from scratch), both workers end with one test accuracy, and
    nothing is left running. Returns the workers' results."""
    proc = _start([*args, "--max-restarts", "1", "--run-id", run_id, "--format", "json"], env)
    try:
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, 1)), 300, "worker 1's first epoch")
        subprocess.run(["docker", "kill", _container(run_id, 1)], check=True, capture_output=True)
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "worker-1 was killed by signal 9" in err and "(restart 1 of 1)" in err
    workers = json.loads(out)["workers"]
    assert len(workers) == 2 and len({w["test_accuracy"] for w in workers}) == 1
    resumed = [e["epoch"] for e in replica_events(run_dir, 0) if e["event"] == "resumed"]
    assert resumed and resumed[0] >= 2  # from the checkpoint, not from scratch
    assert json.loads((run_dir / "run.json").read_text())["restarts"][0]["exit_code"] == 137
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []
    return workers


def _gone(run_id: str) -> bool:
    return orch_containers(run_id) == [] and orch_networks(run_id) == []


JOB = ["--workers", "2", "--dataset", "synthetic", "--samples", "12000", "--steps-per-execution", "1"]


@pytest.mark.parametrize("strategy", ["mwms", "custom"])
def test_killed_worker_restarts_the_group_from_its_checkpoint(images, orch_env, tmp_path, cleanup, strategy):
    run_id = f"fault-restart-{strategy}"
    cleanup.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    # 200 steps per epoch, so epoch 2 lasts a few seconds and the kill lands inside it.
    # The custom loop's run is detached: its supervisor alone restarts it, and `orch attach` follows it to its end.
    detach = strategy == "custom"
    args = [*JOB, "--samples", "30000", "--epochs", "3", "--max-restarts", "1", "--strategy", strategy,
            "--run-id", run_id, *(["--detach"] if detach else [])]
    proc = _start(args, orch_env)
    try:
        if detach:
            assert proc.wait(120) == 0, proc.stderr.read()
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, 1)), 240, "worker 1's first epoch")
        time.sleep(0.5)
        subprocess.run(["docker", "kill", _container(run_id, 1)], check=True, capture_output=True)
        completed = [e["epoch"] for e in replica_events(run_dir, 1) if e["event"] == "epoch"]
        assert completed == [1], f"the kill was meant for epoch 2, but epochs {completed} had ended"
        if detach:
            proc = start_orch(["attach", run_id], orch_env)
        stdout, stderr = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "restarting the whole group from its last checkpoint (restart 1 of 1)" in stderr
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "succeeded"
    (restart,) = record["restarts"]
    assert restart["worker"] == 1 and restart["exit_code"] == 137 and restart["attempt"] == 2
    for w in range(2):
        events = replica_events(run_dir, w)
        epochs = [e["epoch"] for e in events if e["event"] == "epoch"]
        assert epochs == [1, 2, 3], epochs  # epoch 1 was checkpointed and not redone
        assert [e["epoch"] for e in events if e["event"] == "resumed"] == [2]
        result = json.loads((run_dir / f"worker-{w}" / "result.json").read_text())
        assert result["resumed_from_epoch"] == 2
    assert len({json.loads((run_dir / f"worker-{w}" / "result.json").read_text())["test_accuracy"]
                for w in range(2)}) == 1
    assert _gone(run_id)


def _inject(run_id: str, env: dict, run_dir: Path, worker: int, docker_verb: str, *extra: str, detach: bool = False):
    """Start a long 2-worker run, apply `docker <verb>` to one worker after its first epoch, and wait
    for orch. Returns (exit code, stderr, seconds from the fault to orch's exit, clean-up included). With ``detach``
    the run is started with --detach and its supervisor alone watches it; `orch attach` then waits for its end."""
    proc = _start([*JOB, "--epochs", "200", *extra, "--run-id", run_id, *(["--detach"] if detach else [])], env)
    try:
        if detach:
            assert proc.wait(120) == 0, proc.stderr.read()
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, worker)), 240, f"worker {worker}'s epoch")
        command = ["docker", *docker_verb.split(), _container(run_id, worker)]
        subprocess.run(command, check=True, capture_output=True)
        injected = time.monotonic()
        if detach:
            proc = start_orch(["attach", run_id], env)
        _, stderr = proc.communicate(timeout=120)
        return proc.returncode, stderr, time.monotonic() - injected
    finally:
        proc.kill()


def test_killed_parameter_server_restarts_the_group_and_the_chief_resumes(images, orch_env, tmp_path, cleanup):
    run_id = "fault-restart-ps"
    cleanup.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    args = [*JOB, "--samples", "30000", "--epochs", "3", "--max-restarts", "1", "--strategy", "ps",
            "--run-id", run_id]
    proc = _start(args, orch_env)
    try:
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, 0, "chief")), 240, "the chief's first epoch")
        time.sleep(0.3)
        subprocess.run(["docker", "kill", _container(run_id, 0, "ps")], check=True, capture_output=True)
        stdout, stderr = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "ps-0 was killed by signal 9" in stderr and "(restart 1 of 1)" in stderr
    record = json.loads((run_dir / "run.json").read_text())
    (restart,) = record["restarts"]
    assert record["state"] == "succeeded" and (restart["role"], restart["worker"], restart["exit_code"]) == ("ps", 0, 137)
    events = replica_events(run_dir, 0, "chief")
    resumed = [e["epoch"] for e in events if e["event"] == "resumed"]
    assert len(resumed) == 1 and resumed[0] >= 2  # the epochs before the kill were checkpointed, not redone
    assert sorted({e["epoch"] for e in events if e["event"] == "epoch"}) == [1, 2, 3]
    result = json.loads((run_dir / "chief-0" / "result.json").read_text())
    assert result["resumed_from_epoch"] == resumed[0] and result["test_accuracy"] > 0.1
    assert _gone(run_id)

@pytest.mark.engine_alone  # it bounds the seconds from the pause to orch's exit
def test_paused_worker_fails_the_run_within_the_stall_timeout(images, orch_env, tmp_path, cleanup):
    """Detached: no client watches it, its supervisor's stall timeout ends it."""
    run_id = "fault-pause"
    cleanup.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    code, stderr, seconds = _inject(run_id, orch_env, run_dir, 1, "pause", "--stall-timeout", "10", detach=True)
    assert code == 1, stderr
    error = [line for line in stderr.splitlines() if line.startswith("orch: error:")][0]
    assert "worker-1" in error and "paused" in error, error
    assert seconds < 10 + 10, seconds  # the timeout plus a small margin
    print(f"stalled worker: the run failed and was cleaned up {seconds:.1f} s after the pause (stall timeout 10 s)")
    assert json.loads((run_dir / "run.json").read_text())["state"] == "failed"
    assert _gone(run_id)


def test_worker_starved_of_memory_is_named_as_such(images, orch_env, tmp_path, cleanup):
    """TensorFlow alone fits in 256 MiB, barely. Whether the worker then crawls at its limit (importing, so that it
    never joins, or training, so that it stalls) or is OOM-killed depends on how much of the page cache the kernel
    charges to it, which differs between runs and machines; either way the one error line names the worker, its
    memory limit and the flag to raise."""
    cleanup.append("fault-starved")
    proc = run_orch(["up", "--dataset", "synthetic", "--samples", "6000", "--epochs", "2", "--memory", "256",
                     "--stall-timeout", "15", "--startup-timeout", "90", "--run-id", "fault-starved"], orch_env)
    assert proc.returncode == 1
    error = [line for line in proc.stderr.splitlines() if line.startswith("orch: error:")]
    assert len(error) == 1, proc.stderr
    crawled = "worker-0 is using" in error[0] and "MiB memory limit; raise --memory" in error[0]
    killed = "worker-0 was killed for exceeding its memory limit (exit 137); raise --memory" in error[0]
    assert crawled or killed, proc.stderr
    assert _gone("fault-starved")


def test_removed_worker_is_named_and_the_rest_stopped(images, orch_env, tmp_path, cleanup):
    run_id = "fault-rm"
    cleanup.append(run_id)
    code, stderr, seconds = _inject(run_id, orch_env, tmp_path / "runs" / run_id, 1, "rm -f")
    assert code == 1, stderr
    assert "orch: error: worker-1 vanished (its container was removed from outside orch)" in stderr
    print(f"removed worker: the run failed and was cleaned up {seconds:.1f} s after `docker rm -f`")
    assert _gone(run_id)


@pytest.mark.engine_alone  # it bounds the seconds from the kill to orch's exit
def test_dead_worker_is_detected_quickly(images, orch_env, tmp_path, cleanup):
    run_id = "fault-dead"
    cleanup.append(run_id)
    code, stderr, seconds = _inject(run_id, orch_env, tmp_path / "runs" / run_id, 1, "kill")
    assert code == 1 and "worker-1 was killed by signal 9" in stderr, stderr
    print(f"dead worker: the run failed and was cleaned up {seconds:.1f} s after `docker kill`")
    assert seconds < 20, seconds
    assert _gone(run_id)


def _pause(container: str, proc: subprocess.Popen) -> None:
    """Freeze ``container``. The runtime can fail to freeze a cgroup whose processes are busy forking (a framework's
    import starting its threads) and says so; it is asked again while the container runs and orch has not ended."""
    for _ in range(10):
        paused = subprocess.run(["docker", "pause", container], capture_output=True, text=True)
        if paused.returncode == 0 or proc.poll() is not None:
            break
        time.sleep(0.5)
    if paused.returncode != 0:
        _, stderr = proc.communicate(timeout=120) if proc.poll() is None else ("", proc.stderr.read())
        raise AssertionError(f"docker pause: {paused.stderr.strip()}; orch: {stderr[-2000:]}")


def test_startup_timeout_names_the_worker_that_never_joined(images, orch_env, tmp_path, cleanup):
    run_id = "fault-startup"
    cleanup.append(run_id)
    proc = _start([*JOB, "--epochs", "2", "--startup-timeout", "20", "--run-id", run_id], orch_env)
    try:
        # running, not just created: a container that has not started cannot be paused
        wait_for(lambda: len(orch_containers(run_id, running=True)) == 2, 120, "the containers")
        _pause(_container(run_id, 1), proc)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    assert "orch: error: worker-1 did not join the cluster within the startup timeout of 20 s" in stderr
    assert json.loads((tmp_path / "runs" / run_id / "run.json").read_text())["state"] == "timed-out"
    assert _gone(run_id)


def test_two_runs_at_once_do_not_see_each_other(images, orch_env, tmp_path, cleanup):
    cleanup.extend(["pair-a", "pair-b"])
    small = ["--workers", "2", "--dataset", "synthetic", "--samples", "6000", "--epochs", "2", "--format", "json"]
    a = _start([*small, "--run-id", "pair-a"], orch_env)
    b = _start([*small, "--run-id", "pair-b", "--seed", "7"], orch_env)
    out_a, err_a = a.communicate(timeout=400)
    out_b, err_b = b.communicate(timeout=400)
    assert a.returncode == 0 and b.returncode == 0, err_a + err_b
    info_a, info_b = json.loads(out_a), json.loads(out_b)
    assert [w["worker"] for w in info_a["workers"]] == [0, 1] == [w["worker"] for w in info_b["workers"]]
    for run_id in ("pair-a", "pair-b"):
        compose = (tmp_path / "runs" / run_id / "compose.yml").read_text()
        assert f'name: "orch-{run_id}"' in compose
        for w in range(2):
            result = json.loads((tmp_path / "runs" / run_id / f"worker-{w}" / "result.json").read_text())
            assert result["replicas"] == 2  # each cluster holds only its own two workers
    assert info_a["test_accuracy"] != info_b["test_accuracy"] or info_a["spec"]["seed"] != info_b["spec"]["seed"]
    assert _gone("pair-a") and _gone("pair-b")


def _signal(run_id: str, env: dict, run_dir: Path, *signals: int) -> tuple[int, str]:
    """Start a long 2-worker run and, after worker 0's first epoch, send `orch up` these signals 0.5 s apart."""
    proc = _start([*JOB, "--epochs", "200", "--run-id", run_id], env)
    try:
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, 0)), 240, "worker 0's first epoch")
        for i, sig in enumerate(signals):
            if i:
                time.sleep(0.5)
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
        return proc.returncode, stderr
    finally:
        proc.kill()


def test_second_interrupt_forces_the_clean_up(images, orch_env, tmp_path, cleanup):
    run_id = "fault-sigint2"
    cleanup.append(run_id)
    code, stderr = _signal(run_id, orch_env, tmp_path / "runs" / run_id, signal.SIGINT, signal.SIGINT)
    assert code == 130, stderr
    assert _gone(run_id)


def test_sigterm_of_orch_up_leaves_the_run_to_its_supervisor_and_down_stops_it(images, orch_env, tmp_path, cleanup):
    """SIGTERM (or a closed terminal's SIGHUP) ends `orch up`, not the run: its supervisor carries it on; `orch down`
    then asks the supervisor to stop it, which keeps its results and removes the rest."""
    run_id = "fault-sigterm"
    cleanup.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    code, stderr = _signal(run_id, orch_env, run_dir, signal.SIGTERM)
    assert code == 143 and f"`orch attach {run_id}` follows it again" in stderr, stderr
    assert json.loads((run_dir / "run.json").read_text())["state"] == "running" and orch_containers(run_id)
    assert run_orch(["down", run_id], orch_env).returncode == 0
    assert json.loads((run_dir / "run.json").read_text())["state"] == "stopped"
    assert (run_dir / "logs" / "worker-0.log").stat().st_size > 0 and replica_events(run_dir, 0)
    assert _gone(run_id)


def test_workers_run_locked_down(images, orch_env, tmp_path, cleanup):
    run_id = "lockdown"
    cleanup.append(run_id)
    proc = run_orch(["up", *JOB, "--epochs", "200", "--run-id", run_id, "--detach"], orch_env)
    assert proc.returncode == 0, proc.stderr
    try:
        cid = _container(run_id, 0)
        info = json.loads(subprocess.run(["docker", "inspect", cid], capture_output=True, text=True,
                                         check=True).stdout)[0]
        host = info["HostConfig"]
        assert info["Config"]["User"] == "1000:1000" or not info["Config"]["User"].startswith("0")
        assert host["ReadonlyRootfs"] is True and "/tmp" in host["Tmpfs"]
        assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
        assert "no-new-privileges:true" in host["SecurityOpt"] and host["Privileged"] is False
        assert not host.get("PortBindings") and not info["NetworkSettings"]["Ports"]
        assert host["Memory"] == 2048 * 2**20 and host["PidsLimit"] == 1024
        mounts = {m["Destination"]: m for m in info["Mounts"]}
        # The trust boundary: the image's Python environment (the engine's copy of it) and the data, read-only,
        # the shared folder and this worker's own; no more of the run.
        assert set(mounts) == {"/opt/venv", "/orch/data", "/orch/run/shared", "/orch/run/worker-0"}
        assert mounts["/orch/data"]["RW"] is False and mounts["/opt/venv"]["RW"] is False
        assert mounts["/opt/venv"]["Type"] == "volume"
        assert mounts["/opt/venv"]["Name"] == volume_name(info["Config"]["Image"])
        assert mounts["/orch/run/shared"]["Source"] == str(tmp_path / "runs" / run_id / "shared")
        assert mounts["/orch/run/worker-0"]["Source"] == str(tmp_path / "runs" / run_id / "worker-0")
        assert mounts["/orch/run/shared"]["RW"] is True and mounts["/orch/run/worker-0"]["RW"] is True
        if os.geteuid() == 0:  # the folders it writes sit on a file system of --disk-limit's size (run/volume.py)
            folder = tmp_path / "runs" / run_id / "worker-0"
            assert os.path.ismount(folder) and os.statvfs(folder).f_blocks * os.statvfs(folder).f_frsize < 12 << 30
        assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "3", "max-size": "10m"}}
        assert not any("docker.sock" in m["Source"] for m in info["Mounts"])
        (network,) = info["NetworkSettings"]["Networks"]
        net = json.loads(subprocess.run(["docker", "network", "inspect", network], capture_output=True, text=True,
                                        check=True).stdout)[0]
        assert net["Internal"] is True
        uid = subprocess.run(["docker", "exec", cid, "id", "-u"], capture_output=True, text=True).stdout.strip()
        assert uid != "0" and uid
        for path in ("/opt/x", "/opt/venv/x"):
            write = subprocess.run(["docker", "exec", cid, "touch", path], capture_output=True, text=True)
            assert write.returncode != 0 and "Read-only file system" in write.stderr
        rendered = run_orch(["render", "-n", "2", "--run-id", "shown"], orch_env).stdout
        for needle in ("read_only: true", "cap_drop:", "- ALL", "no-new-privileges:true", "internal: true",
                       "mem_limit:", "pids_limit:"):
            assert needle in rendered
    finally:
        run_orch(["down", run_id], orch_env)
    assert _gone(run_id)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tiny tmpfs to fill needs root")
def test_full_disk_in_the_runs_folder(images, orch_env, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={full}/filler", "bs=4k", "count=64"], capture_output=True)
        orch_env["ORCH_RUNS_DIR"] = str(full / "runs")
        up = ["up", "--dataset", "synthetic", "--samples", "6000", "--run-id", "diskfull"]
        # Below orch's free-space floor, nothing starts; with no floor, the first write that finds no space says so.
        for floor, said in ((None, "orch: error: the disk that holds the runs has 0 MiB free, below orch's floor"),
                            ("0", "orch: error: no space left in")):
            env = orch_env if floor is None else {**orch_env, "ORCH_DISK_FLOOR_MB": floor}
            proc = run_orch(up, env)
            assert proc.returncode == 2, proc.stderr
            assert proc.stderr.strip().splitlines()[-1].startswith(said), proc.stderr
            assert not (full / "runs" / "diskfull").exists() and orch_containers("diskfull") == []
    finally:
        subprocess.run(["umount", str(full)], check=True)
