"""A hostile worker against the trust boundary: real containers attack every path orch reads or once wrote.

The image is built here from orch's base image and tests/hostile/hostile.py. The run must end in
bounded time with a clear failure; nothing outside the replicas' own folders may change; no container
may run with more privilege than orch rendered; nothing may be left running.
"""
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, orch_containers, orch_networks, run_orch

pytestmark = pytest.mark.docker

HOSTILE = "orch-hostile:test"


@pytest.fixture(scope="session")
def hostile_image(images, tmp_path_factory):
    """The hostile image: orch's base plus the attack script (kept afterwards as a cache, like every image)."""
    context = tmp_path_factory.mktemp("hostile")
    (context / "hostile.py").write_bytes((ROOT / "tests" / "hostile" / "hostile.py").read_bytes())
    (context / "Dockerfile").write_text('FROM orch-base:bookworm\nCOPY hostile.py /hostile.py\n'
                                        'ENTRYPOINT ["python3", "-u", "/hostile.py"]\n')
    subprocess.run(["docker", "build", "-q", "-t", HOSTILE, str(context)], check=True, capture_output=True,
                   env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return HOSTILE


def _snapshot(root: Path, skip: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` but those under ``skip``; links and their targets by name."""
    out = {}
    for folder, dirs, files in os.walk(root):
        if Path(folder).is_relative_to(skip):
            continue
        for name in files:
            path = Path(folder, name)
            out[str(path.relative_to(root))] = (os.readlink(path) if path.is_symlink()
                                               else hashlib.sha256(path.read_bytes()).hexdigest())
    return out


class _Watcher(threading.Thread):
    """Inspects the run's containers and orch's memory while the run goes on."""

    def __init__(self, run_id: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.run_id, self.pid = run_id, pid
        self.seen: dict[str, dict] = {}
        self.max_rss = 0
        self.stop = threading.Event()

    def run(self) -> None:
        proc = psutil.Process(self.pid)
        while not self.stop.is_set():
            try:
                self.max_rss = max(self.max_rss, proc.memory_info().rss)
            except psutil.Error:
                pass
            ids = [i for i in orch_containers(self.run_id) if i not in self.seen]
            if ids:
                got = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True)
                for attrs in json.loads(got.stdout or "[]"):
                    self.seen[attrs["Id"]] = attrs
            time.sleep(0.2)


def _assert_locked_down(attrs: dict) -> None:
    host = attrs["HostConfig"]
    index = attrs["Config"]["Labels"]["orch.index"]
    assert host["Privileged"] is False and host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert host["ReadonlyRootfs"] is True and "no-new-privileges:true" in host["SecurityOpt"]
    assert host["Memory"] == 2048 * 2**20 and host["PidsLimit"] == 1024
    assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "3", "max-size": "10m"}}
    assert attrs["Config"]["User"] and attrs["Config"]["User"].split(":")[0] not in ("0", "root")
    mounts = {m["Destination"]: m["RW"] for m in attrs["Mounts"]}
    assert mounts == {"/orch/data": False, "/orch/run/shared": True, f"/orch/run/worker-{index}": True}


def test_hostile_workers_change_nothing_outside_their_own_folders(hostile_image, orch_env, tmp_path, cleanup):
    run_id = "hostile-attack"
    cleanup.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    (tmp_path / "canary.txt").write_text("untouched\n")
    before = _snapshot(tmp_path, run_dir)
    flags = ["--image", HOSTILE, "--workers", "3", "--dataset", "synthetic", "--samples", "3000", "--run-id", run_id]
    rendered = run_orch(["render", *flags], orch_env).stdout
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "up", *flags, "--max-restarts", "1",
                             "--startup-timeout", "40", "--stall-timeout", "10"], env=orch_env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = _Watcher(run_id, proc.pid)
    watcher.start()
    try:
        _, stderr = proc.communicate(timeout=240)
    finally:
        proc.kill()
        watcher.stop.set()
        watcher.join()
    elapsed = time.monotonic() - started

    # A clear failure, in bounded time, after orch restarted the group once and met every attack again.
    assert proc.returncode == 1, stderr
    assert elapsed < 200
    assert "restarting the whole group from its last checkpoint (restart 1 of 1)" in stderr
    assert "was killed by signal 9 (exit 137)" in stderr.strip().splitlines()[-1] or "exit 137" in stderr
    record = json.loads((run_dir / "run.json").read_text())
    assert record["run_id"] == run_id and record["state"] == "failed" and "(after 1 restarts)" in record["error"]
    # The forged result (it claims to be worker 0's, in worker-2's folder) and the device link are not results.
    assert [w["test_accuracy"] for w in record["workers"]] == [None, None, None]

    # Nothing outside the run changed, and orch's own files in it are exactly what orch wrote.
    assert _snapshot(tmp_path, run_dir) == before
    assert (run_dir / "compose.yml").read_text() == rendered and "privileged" not in rendered
    assert json.loads((run_dir / "plan.json").read_text())["run_id"] == run_id
    for name in ("compose.yml", "plan.json", "run.json", "stats.csv"):
        assert not (run_dir / name).is_symlink()
    for i in range(3):
        log = (run_dir / "logs" / f"worker-{i}.log").read_text()
        assert f"[hostile {i}] sees ['shared', 'worker-{i}']" in log
        assert f"[hostile {i}] write /orch/run/compose.yml: refused" in log
    assert (run_dir / "worker-0" / "container.log").is_symlink()  # planted, never written through

    # Every container of both attempts ran exactly as rendered; orch held no line of 96 MiB in memory.
    assert len(watcher.seen) == 6, sorted(a["Name"] for a in watcher.seen.values())
    for attrs in watcher.seen.values():
        _assert_locked_down(attrs)
    assert watcher.max_rss < 300 * 2**20, watcher.max_rss
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_a_worker_that_turns_every_file_into_a_fifo_times_out(hostile_image, orch_env, tmp_path, cleanup):
    run_id = "hostile-hang"
    cleanup.append(run_id)
    started = time.monotonic()
    proc = run_orch(["up", "--image", HOSTILE, "--dataset", "synthetic", "--samples", "3000", "--run-id", run_id,
                     "--startup-timeout", "8"], orch_env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert time.monotonic() - started < 60
    assert "worker-0 did not join the cluster within the startup timeout of 8 s" in proc.stderr
    record = json.loads((tmp_path / "runs" / run_id / "run.json").read_text())
    assert record["state"] == "timed-out"
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []
