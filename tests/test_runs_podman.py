"""Podman for real: its rootful API service, started as a user would (`orch doctor --engine podman --fix`), with
orch's images copied from Docker (`orch push --to-engine podman`). The runs are the small shared ones: a run on
Podman must give exactly the accuracy of the same run on Docker. A killed worker, a user's script and the hostile
image's attacks on what the engine guards run here too, the same tests as on Docker. Whatever happens, the module
stops the service if it started it, takes away the firewall rule if it added it, and leaves no container of its runs
on Podman (the images stay, as Docker's do between sessions)."""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.docker import engines, podman_net
from tests.conftest import ROOT, SMALL, made, orch_environment, run_orch, start_orch
from tests.test_hostile import hostile_image  # noqa: F401 - the fixture: the image, built on Docker
from tests.test_hostile import (  # noqa: F401 - the hostile subset, run here on Podman (see below)
    test_a_worker_that_fills_the_disk_is_stopped, test_fifos_planted_as_events_and_heartbeat_block_nothing,
    test_hostile_workers_change_nothing_outside_their_own_folders, test_terminal_escapes_reach_no_terminal)
from tests.test_runs_scripts import (  # noqa: F401 - a user's script, run here on Podman
    test_a_script_in_a_private_folder_runs_from_its_copy_and_sees_nothing_beside_it)

pytestmark = pytest.mark.docker


def _podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)


def _leftovers(run_id: str) -> list[str]:
    return _podman("ps", "-aq", "--filter", f"label=orch.run={run_id}").stdout.split()


def _service_pids() -> set[int]:
    out = subprocess.run(["pgrep", "-f", "podman system service"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


@pytest.fixture(scope="module")
def podman(images, tmp_path_factory):
    """Podman's service started and its network opened as a user would (`orch doctor --fix`), orch's TensorFlow
    images copied from Docker (`orch push --to-engine podman`): {"env", "doctor", "pushed"}, the last two the
    commands' CompletedProcess for the first test to check."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (`make test-deps` installs it)")
    if os.getuid() != 0:
        pytest.skip("the live Podman tests run its rootful service, as root")
    root = tmp_path_factory.mktemp("podman")
    env = dict(orch_environment(root), ORCH_ENGINE="podman")
    env.pop("CONTAINER_HOST", None)
    before, ruled = _service_pids(), podman_net.blocked() is None
    try:
        doctor = run_orch(["doctor", "--fix"], env, timeout=300)
        pushed = run_orch(["push", "--to-engine", "podman", "--framework", "tensorflow", "--format", "json"],
                          {**env, "ORCH_ENGINE": "docker"}, timeout=1200)
        yield {"env": env, "doctor": doctor, "pushed": pushed}
    finally:
        ids = _podman("ps", "-aq", "--filter", "label=orch.run").stdout.split()
        if ids:  # this module's runs' (it and the hostile subset start the only ones on this Podman)
            _podman("rm", "-f", *ids)
        with contextlib.suppress(OSError):
            for pid in _service_pids() - before:
                os.kill(pid, signal.SIGTERM)
        if not ruled:
            podman_net.remove()


@pytest.fixture
def podman_env(podman):
    return podman["env"]


def test_doctor_push_and_a_run_on_podman_give_dockers_result(podman, podman_env, small_runs):
    """doctor --fix starts the service and opens the network; push copies the images by id; the 3-worker run of the
    shared small job gives the Docker run's accuracy on every worker; ps, logs and down see it on its engine."""
    doctor, pushed = podman["doctor"], podman["pushed"]
    assert "Podman service" in doctor.stdout and "podman network" in doctor.stdout, doctor.stdout
    assert podman_net.blocked() is None
    assert pushed.returncode == 0, pushed.stderr
    assert {p["image"] for p in json.loads(pushed.stdout)} >= {"orch-trainer:0.1.0-multi", "orch-base:bookworm"}
    docker_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", "orch-trainer:0.1.0-multi"],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert _podman("image", "inspect", "-f", "{{.Id}}", "orch-trainer:0.1.0-multi").stdout.strip() in docker_id

    expected = {w["test_accuracy"] for w in made(small_runs, "live-w3")["info"]["workers"]}
    proc = run_orch(["up", "--workers", "3", *SMALL, "--run-id", "podman-w3", "--format", "json"], podman_env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert {w["test_accuracy"] for w in info["workers"]} == expected and len(expected) == 1, (info, expected)
    assert info["spec"]["backend_options"]["engine"] == "podman"
    assert _leftovers("podman-w3") == []
    # A run's verbs follow its engine, whatever the default is now.
    docker_default = {**podman_env, "ORCH_ENGINE": "docker"}
    ps = run_orch(["ps", "--format", "json"], docker_default)
    assert [r["state"] for r in json.loads(ps.stdout) if r["run_id"] == "podman-w3"] == ["succeeded"], ps.stdout
    logs = run_orch(["logs", "podman-w3", "--worker", "1"], docker_default)
    assert logs.returncode == 0 and "worker 1 done" in logs.stdout, logs.stderr


def test_mpi_ranks_share_memory_and_a_killed_worker_fails_the_run_on_podman(podman_env):
    """MPI's ranks in one IPC and PID namespace (only the first has an init on Podman) train to the end; a worker
    killed mid-run fails the run, named, and nothing of it is left."""
    proc = run_orch(["up", "--framework", "mpi", "--workers", "3", "--dataset", "synthetic", "--samples", "3000",
                     "--epochs", "1", "--run-id", "podman-mpi", "--format", "json"], podman_env)
    assert proc.returncode == 0, proc.stderr
    accuracies = {w["test_accuracy"] for w in json.loads(proc.stdout)["workers"]}
    assert len(accuracies) == 1 and _leftovers("podman-mpi") == []

    up = start_orch(["up", "--workers", "2", "--dataset", "synthetic", "--samples", "3000", "--epochs", "200",
                     "--steps-per-execution", "1", "--run-id", "podman-kill"], podman_env)
    try:
        events = Path(podman_env["ORCH_RUNS_DIR"]) / "podman-kill" / "worker-1" / "events.jsonl"
        deadline = time.monotonic() + 180
        while not (events.exists() and '"event": "epoch"' in events.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        # While it trains: `orch stats` gives each replica's CPU over the last second (Podman's one-off records
        # carry no earlier sample to measure against: orch reads a second one).
        stats = run_orch(["stats", "podman-kill", "--format", "json"], podman_env)
        assert stats.returncode == 0, stats.stderr
        busy = {row["worker"]: row["cpu_percent"] for row in json.loads(stats.stdout)}
        assert sorted(busy) == [0, 1] and min(busy.values()) > 5, busy
        victim = _podman("ps", "-q", "--filter", "label=orch.run=podman-kill", "--filter", "label=orch.index=1")
        assert victim.stdout.split(), "worker-1 never trained an epoch"
        _podman("kill", *victim.stdout.split())
        _, stderr = up.communicate(timeout=120)
    finally:
        up.kill()
    assert up.returncode == 1 and "worker-1 was killed by signal 9 (exit 137)" in stderr, stderr
    assert _leftovers("podman-kill") == [] and engines.get("podman").name == "podman"


# -- the hostile subset, and a user's script ------------------------------------------------------------------------
# tests/test_hostile.py's attacks whose defence lies with the engine, run here on Podman: the locked-down replicas of
# both attempts and the trust boundary of the run folder (the first attack), the logs the engine stores and gives
# back (terminal escapes), the limit on a replica's files (a filled disk) and the host's folders it writes into
# (FIFOs planted as the files orch reads). The rest (flooded events, numbers out of range, a heartbeat from the
# future, a deep tree) are orch's reading of what the replicas wrote, the same whatever engine started them. A user's
# script from a private folder: its copy mounted into the replica, and nothing beside it.

@pytest.fixture(scope="module")
def podman_hostile(hostile_image, podman):  # noqa: F811 - the fixture imported above
    """The hostile image, copied from Docker to Podman."""
    save = subprocess.Popen(["docker", "save", hostile_image], stdout=subprocess.PIPE)
    load = subprocess.run(["podman", "load", "-q"], stdin=save.stdout, capture_output=True, text=True, timeout=300)
    save.wait(timeout=60)
    assert save.returncode == 0 and load.returncode == 0, load.stderr
    return hostile_image


@pytest.fixture
def backend(podman, monkeypatch):
    """Compose on Podman; the docker CLI of the hostile tests' checks and clean-up talks to Podman's service."""
    monkeypatch.setenv("DOCKER_HOST", engines.PODMAN.address())
    return "podman"


@pytest.fixture
def orch_env(podman_hostile, backend, tmp_path):
    return dict(orch_environment(tmp_path), ORCH_ENGINE="podman")


@pytest.fixture
def leftovers(backend, cleanup):
    return cleanup


# -- rootless Podman ------------------------------------------------------------------------------------------------
# A user with subordinate uids, made for the test and removed after with everything it owns, runs this checkout's
# orch against its own Podman service: the module's images loaded into its store, the shared small job on 3 workers.

ROOTLESS = "orch-rootless"


def _python_for_everyone() -> str:
    """An interpreter of this one's version that any user may run (the venv's may live in root's home)."""
    for folder in ("/usr/bin", "/usr/local/bin"):
        path = Path(folder) / f"python3.{sys.version_info.minor}"
        if path.exists() and os.stat(path).st_mode & 0o001:
            return str(path)
    pytest.skip(f"no python3.{sys.version_info.minor} that other users may run")


@dataclass
class RootlessUser:
    """A user who runs Podman rootless, and how to run orch and podman as it."""

    uid: int
    home: Path
    prefix: list[str]  # runuser and the user's environment
    python: str

    def orch(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, self.python, "-m", "orchestrator", *args], cwd=self.home,
                              capture_output=True, text=True, timeout=600)

    def podman(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, "podman", *args], capture_output=True, text=True, timeout=120)

    def service_log(self) -> str:
        """The end of the log of the service orch started for the user (beside its socket), for a failure's message."""
        log = Path(f"/run/user/{self.uid}/podman/orch-podman-service.log")
        return "\nthe service's log ends:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:]) \
            if log.exists() else "\nno service log"


@pytest.fixture(scope="module")
def rootless(podman):
    """A rootless Podman user, made for the module: orch and podman run as it, with the environment such a user has
    ($XDG_RUNTIME_DIR), the multi-worker trainer image in its own store."""
    for device in ("/dev/fuse", "/dev/net/tun"):
        if not os.path.exists(device) or os.stat(device).st_mode & 0o006 != 0o006:
            pytest.skip(f"{device} is root's alone here, so rootless Podman cannot run (docs/backends/podman.md)")
    python = _python_for_everyone()
    subprocess.run(["userdel", "-r", ROOTLESS], capture_output=True)  # a run cut short left it
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", ROOTLESS], check=True, capture_output=True)
    user = pwd.getpwnam(ROOTLESS)
    runtime = Path(f"/run/user/{user.pw_uid}")
    try:
        if ROOTLESS not in Path("/etc/subuid").read_text():
            subprocess.run(["usermod", "--add-subuids", "300000-365535", "--add-subgids", "300000-365535",
                            ROOTLESS], check=True, capture_output=True)
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(runtime, user.pw_uid, user.pw_gid)
        env = {"HOME": user.pw_dir, "XDG_RUNTIME_DIR": str(runtime), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
               "COLUMNS": "200", "PYTHONPATH": f"{sysconfig.get_paths()['purelib']}:{ROOT}",
               "ORCH_RUNS_DIR": f"{user.pw_dir}/runs"}
        as_user = ["runuser", "-u", ROOTLESS, "--", "env", *(f"{k}={v}" for k, v in env.items())]
        save = subprocess.Popen(["podman", "save", "orch-trainer:0.1.0-multi"], stdout=subprocess.PIPE)
        load = subprocess.run([*as_user, "podman", "load", "-q"], stdin=save.stdout, capture_output=True, text=True,
                              timeout=300)
        save.wait(timeout=60)
        assert save.returncode == 0 and load.returncode == 0, load.stderr

        yield RootlessUser(user.pw_uid, Path(user.pw_dir), as_user, python)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", ROOTLESS], capture_output=True)  # its service, its conmons
        time.sleep(1)
        subprocess.run(["userdel", "-r", ROOTLESS], capture_output=True)
        shutil.rmtree(user.pw_dir, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


def test_rootless_podman_runs_the_job_as_its_user_with_dockers_result(rootless, small_runs):
    """doctor --fix starts the user's own service at $XDG_RUNTIME_DIR; the replicas run under keep-id as the user,
    so every file of the run is the user's; every worker's accuracy is the Docker run's; nothing is left."""
    doctor = rootless.orch("doctor", "--engine", "podman", "--fix")
    assert "Podman service" in doctor.stdout and "answers" in doctor.stdout, doctor.stdout + doctor.stderr
    up = ["up", "--engine", "podman", "--workers", "3", *SMALL, "--format", "json"]
    run_id = "rootless-w3"
    proc = rootless.orch(*up, "--run-id", run_id)
    assert proc.returncode == 0, proc.stderr + rootless.service_log()
    expected = {w["test_accuracy"] for w in made(small_runs, "live-w3")["info"]["workers"]}
    assert {w["test_accuracy"] for w in json.loads(proc.stdout)["workers"]} == expected
    run = rootless.home / "runs" / run_id
    assert {p.stat().st_uid for p in run.rglob("*")} == {rootless.uid}
    assert rootless.podman("ps", "-aq", "--filter", f"label=orch.run={run_id}").stdout.split() == []
