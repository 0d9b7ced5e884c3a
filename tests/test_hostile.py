"""A hostile worker against the trust boundary: real containers attack every path orch reads or once wrote.

The image is built here from orch's base image and tests/hostile/hostile.py. The run must end in
bounded time with a clear failure; nothing outside the replicas' own folders may change; no container
may run with more privilege than orch rendered; nothing may be left running.

The attacks of the second round (issue 21) run on Compose and on a single-node Swarm, where the records
travel as @orch lines on stdout and orch's copier writes them into the run directory: terminal escapes,
numbers out of range, a heartbeat from the future, a deep and a locked tree in the shared folder, FIFOs
planted as the files orch reads or appends to, and a disk filled without bound. The swarm is this
engine's, made and left as found by tests/test_runs_swarm.py's fixture.
"""
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, orch_containers, orch_networks, run_orch, start_orch
from tests.strictjson import loads as strict_loads
from tests.test_runs_swarm import _gone as _swarm_gone
from tests.test_runs_swarm import stacks, swarm  # noqa: F401 - fixtures: the swarm, and removing the run's stack

pytestmark = pytest.mark.docker

HOSTILE = "orch-hostile:test"
BASE = "orch-base:bookworm"


def _image_id(ref: str):
    got = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", ref], capture_output=True, text=True)
    return got.stdout.strip() if got.returncode == 0 else None


@pytest.fixture(scope="session")
def hostile_image(request, tmp_path_factory):
    """The hostile image: orch's base plus the attack script (kept afterwards as a cache, like every image). Only
    the base is needed: orch's images are built (``images``) only where it is missing, and an image this tag
    replaced is removed, if unused, rather than left untagged."""
    if _image_id(BASE) is None:
        request.getfixturevalue("images")
    previous = _image_id(HOSTILE)
    context = tmp_path_factory.mktemp("hostile")
    (context / "hostile.py").write_bytes((ROOT / "tests" / "hostile" / "hostile.py").read_bytes())
    (context / "Dockerfile").write_text(f'FROM {BASE}\nCOPY hostile.py /hostile.py\n'
                                        'ENTRYPOINT ["python3", "-u", "/hostile.py"]\n')
    subprocess.run(["docker", "build", "-q", "-t", HOSTILE, str(context)], check=True, capture_output=True,
                   env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if previous is not None and previous != _image_id(HOSTILE):
        subprocess.run(["docker", "image", "rm", previous], capture_output=True)
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
    """Inspects the run's containers and orch's memory while the run goes on: with the engine's own CLI, whose
    inspect says what a replica was given (Podman's API answers in Docker's shape, but not with all of it)."""

    def __init__(self, run_id: str, pid: int, engine: str = "docker") -> None:
        super().__init__(daemon=True)
        self.run_id, self.pid, self.engine = run_id, pid, engine
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
                got = subprocess.run([self.engine, "inspect", *ids], capture_output=True, text=True)
                for attrs in json.loads(got.stdout or "[]"):
                    self.seen[attrs["Id"]] = attrs
            time.sleep(0.2)


def _assert_locked_down(attrs: dict, engine: str = "docker") -> None:
    host = attrs["HostConfig"]
    index = attrs["Config"]["Labels"]["orch.index"]
    assert host["Privileged"] is False and not host.get("CapAdd") and host["ReadonlyRootfs"] is True
    if engine == "podman":
        # Podman's inspect names the capabilities the replica has (none: the field is left out) and the ones it
        # dropped (its whole default set); its log file is bounded by size alone (it keeps no rotated files).
        assert not attrs.get("EffectiveCaps") and not attrs.get("BoundingCaps"), attrs.get("EffectiveCaps")
        assert "no-new-privileges" in host["SecurityOpt"]
        assert host["LogConfig"]["Type"] == "json-file" and host["LogConfig"]["Size"] == "10MB"
    else:
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges:true" in host["SecurityOpt"]
        assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "3", "max-size": "10m"}}
    assert host["Memory"] == 2048 * 2**20 and host["PidsLimit"] == 1024
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
    proc = start_orch(["up", *flags, "--max-restarts", "1", "--startup-timeout", "40", "--stall-timeout", "10"],
                      orch_env)
    engine = orch_env.get("ORCH_ENGINE", "docker")
    watcher = _Watcher(run_id, proc.pid, engine)
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
        _assert_locked_down(attrs, engine)
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


# -- the second round, on every backend that runs here --------------------------------------------------------

BOUND = 120  # seconds any of these runs may take, start-up and clean-up included
SMALL = ["--dataset", "synthetic", "--samples", "3000"]
CONTROLS = {"\x1b": "ESC", "\x9b": "C1 CSI", "\x07": "BEL", "\r": "CR", "\udc9b": "a raw 0x9b byte"}
SCRIPT = ROOT / "tests" / "hostile" / "hostile.py"


def test_a_worker_that_floods_its_events_is_read_to_the_limit_marked_and_collected_in_bounds(
        hostile_image, orch_env, tmp_path, cleanup):
    """72 MiB of distinct epoch records from worker 0: orch reads 64 MiB of them and no more, says so once, marks the
    worker in run.json, and collects the run within 30 s and 600 MB, its figures intact."""
    run_id = "hostile-flood-compose"
    cleanup.append(run_id)
    code, _, err, took = _up("compose", run_id, orch_env, "--workers", "2")
    assert code == 0, err
    assert took < BOUND
    assert err.count("worker-0: its events.jsonl passed orch's limit of 64 MiB") == 1
    workers = _record(tmp_path, run_id)["workers"]
    assert workers[0]["records_capped"].startswith("its events.jsonl passed orch's limit of 64 MiB")
    assert "records_capped" not in workers[1] and workers[0]["test_accuracy"] == 0.5
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "collect", run_id, "--out",
                             str(tmp_path / "collected"), "--format", "json"], env=orch_env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    streams: dict = {}
    readers = [threading.Thread(target=lambda name=name: streams.update({name: getattr(proc, name).read()}))
               for name in ("stdout", "stderr")]
    for reader in readers:
        reader.start()
    _, status, usage = os.wait4(proc.pid, 0)  # the collect's own peak memory, not this process's other children'
    took = time.monotonic() - started
    for reader in readers:
        reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, streams["stderr"]
    assert took < 30 and usage.ru_maxrss < 600 * 1024, (took, usage.ru_maxrss)
    summary = strict_loads(streams["stdout"])
    assert not summary["partial"] and summary["train_seconds"] == 3.0
    assert summary["workers"][0]["records_unread_bytes"] > 0
    [dropped] = [w for w in summary["warnings"] if w.startswith("worker-0: ")]
    assert "record(s) past the job's 5 epoch(s) dropped; its events.jsonl passed orch's limit of 64 MiB" in dropped


@pytest.fixture(scope="module", params=["compose", "swarm"])
def backend(request):
    """The backend a test runs on; for Swarm, this engine's swarm (made if there is none, left as found). Of the
    module's scope, so that pytest runs every Compose case first, beside the other test process, and then the Swarm
    cases, which hold the engine alone from the first of them to the module's end."""
    if request.param == "swarm":
        request.getfixturevalue("swarm")
    return request.param


@pytest.fixture
def leftovers(backend, request):
    """Run ids whose containers and networks (on Swarm: stack, services too) are removed even when the test fails."""
    return request.getfixturevalue("stacks" if backend == "swarm" else "cleanup")


def _gone(backend: str, run_id: str) -> bool:
    """Nothing of the run left: on Podman, the docker CLI of these checks talks to its service (DOCKER_HOST)."""
    if backend == "swarm":
        return _swarm_gone(run_id)
    return orch_containers(run_id) == [] and orch_networks(run_id) == []


def _orch(args: list[str], env: dict[str, str], timeout: float = BOUND) -> tuple[int, str, str, float]:
    """Run orch; its exit code, stdout and stderr as bytes decoded whole (a raw \\r or 0x9b byte kept, which
    text mode would translate or refuse), and the seconds it took. A run that outlives ``timeout`` fails the test."""
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], env=env, cwd=ROOT, capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"").decode("utf-8", "backslashreplace")[-2000:]
        pytest.fail(f"orch {args[0]} did not end within {timeout} s; its stderr so far:\n{tail}")
    return (proc.returncode, proc.stdout.decode("utf-8", "surrogateescape"),
            proc.stderr.decode("utf-8", "surrogateescape"), time.monotonic() - started)


def _up(backend: str, run_id: str, env: dict[str, str], *flags: str) -> tuple[int, str, str, float]:
    small = SMALL if "--script" not in flags else SMALL[:2]  # a script reads no --samples, and orch refuses it
    on = "compose" if backend == "podman" else backend  # Podman runs Compose's files (tests/test_runs_podman.py)
    code, out, err, took = _orch(["up", "--backend", on, "--image", HOSTILE, *small, "--run-id", run_id,
                                  "--startup-timeout", "60", *flags], env)
    _assert_no_internal_error(err)
    return code, out, err, took


def _assert_no_internal_error(text: str) -> None:
    """orch's own lines hold no internal error; the replica's lines (``worker-0 | ...`` as they were printed, and the
    indented last lines of its log under a failure) are its own, and a hostile one may print anything."""
    own = "\n".join(line for line in text.splitlines() if not re.match(r"(\w+-\d+ \| |\s)", line))
    for word in ("Traceback", "internal error", "OverflowError", "RecursionError"):
        assert word not in own, text[-3000:]


def _assert_inert(text: str, where: str) -> None:
    """No control character a terminal would act on, in what orch printed."""
    found = sorted(name for char, name in CONTROLS.items() if char in text)
    assert not found, f"{where} holds raw {', '.join(found)}: {text[-2000:]!r}"


def _record(tmp_path: Path, run_id: str) -> dict:
    return json.loads((tmp_path / "runs" / run_id / "run.json").read_text())


def test_terminal_escapes_reach_no_terminal(hostile_image, backend, leftovers, orch_env, tmp_path):
    run_id = f"hostile-escapes-{backend}"
    leftovers.append(run_id)
    code, out, err, took = _up(backend, run_id, orch_env)

    assert code == 1, err
    assert took < BOUND
    assert "orch: error: worker-0 exited with code 3" in err
    _assert_inert(out, "orch up's stdout")
    _assert_inert(err, "orch up's stderr")
    # Shown visibly: the error event as orch read it, and the worker's last lines below the failure.
    assert "worker-0 error: hostile error \\x1b[2J\\x1b[H\\x1b]0;hostile-title\\x07\\x1b]52;c;" in err
    assert "\\x9b31mC1-CSI and a\\x0dcarriage return" in err
    assert "last words \\x1b[2J" in err

    code, logs, logs_err, _ = _orch(["logs", run_id], orch_env)
    assert code == 0, logs_err
    _assert_inert(logs, "orch logs")
    _assert_inert(logs_err, "orch logs' stderr")
    for stream in ("stdout", "stderr"):
        assert (f"worker-0 | [hostile 0] {stream} \\x1b[2J\\x1b[H\\x1b]0;hostile-title\\x07\\x1b]52;c;"
                in logs), logs
    assert "\\x9b31mC1-CSI end" in logs
    # The \r stays inside its line: no record of the time and stream the worker chose.
    assert "worker-0 | [hostile 0] innocent\\x0d2020-01-01T00:00:00.000000000Z stderr FORGED-BY-CR" in logs
    assert not any(line.startswith("worker-0 | FORGED") or line.startswith("FORGED") for line in logs.split("\n"))

    # The bytes were stored as the worker wrote them: --raw, to a pipe, gives them back.
    code, raw, _, _ = _orch(["logs", run_id, "--raw"], orch_env)
    assert code == 0 and "\x1b]52;c;" in raw and "innocent\r2020-01-01" in raw

    # Neither forgery behind a \r is a record: no result (the worker claimed 0.99), no second line.
    record = _record(tmp_path, run_id)
    assert record["state"] == "failed" and record["workers"][0]["test_accuracy"] is None
    assert not (tmp_path / "runs" / run_id / "worker-0" / "result.json").exists()
    assert _gone(backend, run_id)


def test_numbers_out_of_range_end_the_run_and_collect_cleanly(hostile_image, backend, leftovers, orch_env, tmp_path):
    run_id = f"hostile-numbers-{backend}"
    leftovers.append(run_id)
    code, out, err, took = _up(backend, run_id, orch_env)

    assert code in (0, 1), err
    assert took < BOUND
    record = _record(tmp_path, run_id)
    assert record["state"] in ("succeeded", "failed"), record
    # The result is refused whole (train seconds of 10**400): nothing of it reaches the record.
    assert record["workers"][0]["train_seconds"] is None and record["workers"][0]["test_accuracy"] is None
    assert _gone(backend, run_id)

    for args in (["ps", run_id], ["ps", run_id, "--format", "json"], ["logs", run_id]):
        code, _, stderr, _ = _orch(args, orch_env)
        assert code == 0, stderr
        _assert_no_internal_error(stderr)
    code, out, err, _ = _orch(["collect", run_id, "--out", str(tmp_path / "collected"), "--format", "json"], orch_env)
    _assert_no_internal_error(err)
    if code != 0:  # a clear refusal is allowed: one line, no traceback
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        return
    summary = strict_loads(out)
    # The worker's first bad record (a steps_per_epoch of 10**400) makes all of its figures invalid, in one line.
    invalid = summary["workers"][0]["invalid"]
    assert summary["partial"] and "worker-0's events.jsonl is refused" in invalid and "\n" not in invalid
    assert f"worker-0: its figures are invalid: {invalid}" in summary["warnings"]
    epochs = (tmp_path / "collected" / run_id / "epochs.csv").read_text().splitlines()
    assert len(epochs) == 1, epochs  # the header: an invalid worker's epochs are none of its figures


def test_a_heartbeat_from_the_future_does_not_hide_a_stall(hostile_image, backend, leftovers, orch_env, tmp_path):
    run_id = f"hostile-future-{backend}"
    leftovers.append(run_id)
    code, _, err, took = _up(backend, run_id, orch_env, "--stall-timeout", "5", "--max-restarts", "0")

    assert code == 1, err
    assert took < BOUND
    assert "orch: error: training stalled: no worker made progress for 5 s" in err
    record = _record(tmp_path, run_id)
    assert record["state"] == "failed" and "training stalled" in record["error"]
    assert _gone(backend, run_id)


def test_a_deep_and_a_locked_tree_in_shared_do_not_break_the_finish(hostile_image, backend, leftovers, orch_env,
                                                                     tmp_path):
    run_id = f"hostile-deep-{backend}"
    leftovers.append(run_id)
    shared = tmp_path / "runs" / run_id / "shared"
    try:
        # --max-restarts: on Swarm the shared folder is this host's only then (else it stays in the container).
        code, _, err, took = _up(backend, run_id, orch_env, "--max-restarts", "1")

        assert code == 0, err
        assert took < BOUND
        record = _record(tmp_path, run_id)
        assert record["state"] == "succeeded" and record["supervisor_pid"] is None, record
        assert not os.path.lexists(shared), sorted(os.listdir(shared))
        assert _gone(backend, run_id)
    finally:
        # Whatever orch left: pytest's own clean-up of old temporary folders (shutil.rmtree) fails on such a tree,
        # in every later session. coreutils copes with any depth.
        if os.path.lexists(shared):
            subprocess.run(["chmod", "-R", "u+rwx", str(shared)], capture_output=True)
            subprocess.run(["rm", "-rf", "--one-file-system", str(shared)], capture_output=True)


def test_fifos_planted_as_events_and_heartbeat_block_nothing(hostile_image, backend, leftovers, orch_env, tmp_path):
    """With --script the replica's own folder is this host's on Swarm too, where orch's copier appends the events
    the worker prints on stdout to events.jsonl. The worker makes it a FIFO and goes on printing events: first with
    no reader (a plain open for writing would wait for one), then holding it open for reading, unread, while it
    prints more than a pipe holds (a plain write would wait). The run must still fail on the stall timeout."""
    run_id = f"hostile-fifo-{backend}"
    leftovers.append(run_id)
    code, _, err, took = _up(backend, run_id, orch_env, "--script", str(SCRIPT), "--stall-timeout", "5",
                             "--time-limit", "90", "--", "fifo")

    assert code == 1, err
    assert took < BOUND
    assert "orch: error: training stalled: no worker made progress for 5 s" in err
    folder = tmp_path / "runs" / run_id / "worker-0"
    for name in ("events.jsonl", "heartbeat"):
        assert stat.S_ISFIFO(os.lstat(folder / name).st_mode), name  # neither written through nor replaced
    assert _record(tmp_path, run_id)["state"] == "failed"
    assert _gone(backend, run_id)


def test_a_worker_that_fills_the_disk_is_stopped(hostile_image, backend, leftovers, orch_env, tmp_path):
    """On Compose the worker writes into its own folder; on Swarm, where that folder is the container's, into the
    shared folder, this host's with --max-restarts (a disk verdict is never retried)."""
    run_id = f"hostile-disk-{backend}"
    leftovers.append(run_id)
    folder = "shared" if backend == "swarm" else "worker-0"
    try:
        code, _, err, took = _up(backend, run_id, orch_env, "--disk-limit", "32", "--max-restarts", "1")
        assert code == 1, err
        assert took < BOUND
        assert "over --disk-limit 32 MiB" in err and f"(most in {folder}/" in err
        assert "restarting" not in err
        record = _record(tmp_path, run_id)
        assert record["state"] == "failed" and "over --disk-limit 32 MiB" in record["error"] and not record["restarts"]
        assert _gone(backend, run_id)
    finally:
        filler = tmp_path / "runs" / run_id / folder / "filler.bin"
        if filler.is_file():
            filler.unlink()
