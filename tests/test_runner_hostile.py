"""The runner against what hostile replicas leave behind: a heartbeat from the future, a shared folder that
shutil.rmtree cannot remove, a clean-up that fails, a FIFO where the Swarm copier appends events. A scripted
fake backend and a fake clock: no Docker."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator import contract
from orchestrator.analysis.collect import collect
from orchestrator.errors import DiskFull, WorkerFailed
from orchestrator.jobspec import make_spec
from orchestrator.run import copier, rundir
from orchestrator.run.rundir import RunDir, RunState
from tests.fakes import START, FakeBackend, heartbeat, raw_event, trainer
from tests.test_log_reports import copier_for, say
from tests.test_runner import Harness, stopped_within, stuck_at
from tests.test_safeio import assert_outside_untouched, outside, plant_tree  # noqa: F401 - a fixture


@pytest.fixture
def h(tmp_path) -> Harness:
    return Harness(tmp_path)


# -- heartbeats ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("on_stdout", [False, True], ids=["compose", "stdout"])
def test_a_heartbeat_from_the_future_counts_as_now_and_a_stall_is_still_seen(h, on_stdout):
    """On Compose the replica sets its heartbeat file's time itself; on Swarm and Kubernetes the copier writes it.
    Either way one forged heartbeat, a year ahead, counts as the moment orch first saw it."""
    p = h.plan(workers=2)
    backend = h.backend(stuck_at(3, workers=2, w0=[heartbeat(2.5, when=START + 365 * 86400)]),
                        reports_on_stdout=on_stdout)
    with pytest.raises(WorkerFailed, match="training stalled: no worker made progress for 5 s"):
        h.apply(p, backend)
    stopped_within(backend, 7.5, 9.5)
    assert h.record(p).state == RunState.FAILED


def test_a_heartbeat_time_is_clamped_once_not_at_every_look(tmp_path):
    run = RunDir(tmp_path / "r")
    folder = run.replica_dir(("worker", 0))
    folder.mkdir(parents=True)
    path = folder / contract.HEARTBEAT_FILE
    path.touch()
    os.utime(path, (START + 10**6, START + 10**6))
    assert run.heartbeat(("worker", 0), now=START + 1) == START + 1
    assert run.heartbeat(("worker", 0), now=START + 9) == START + 1  # the same forged time: the same moment
    os.utime(path, (START + 5, START + 5))
    assert run.heartbeat(("worker", 0), now=START + 10) == START + 5  # an honest one is taken as it is
    os.utime(path, (START + 10**7, START + 10**7))
    assert run.heartbeat(("worker", 0), now=START + 11) == START + 11  # a new forgery: a new beat, now


# -- the finish ------------------------------------------------------------------------------------------
class _Planting(FakeBackend):
    """Replicas that leave in shared/ a tree that shutil.rmtree cannot remove (``plant_tree``)."""

    def __init__(self, *args, outside: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.outside = outside

    def apply(self, plan, artifact) -> None:
        super().apply(plan, artifact)
        plant_tree(Path(plan.run_dir) / contract.SHARED_DIR, self.outside)


@pytest.mark.early
def test_a_shared_tree_no_rmtree_can_remove_still_ends_the_run(h, outside):  # noqa: F811
    p = h.plan(workers=2)
    backend = _Planting(h.clock, {0: trainer(), 1: trainer()}, outside=outside)
    info = h.apply(p, backend)
    assert info.state == RunState.SUCCEEDED and h.record(p).state == RunState.SUCCEEDED
    assert [w["test_accuracy"] for w in h.record(p).workers] == [0.9, 0.9]
    assert not (p.run_dir / contract.SHARED_DIR).exists()
    assert_outside_untouched(outside)


def test_an_error_in_the_clean_up_still_writes_the_terminal_state_and_says_it_in_one_line(h, monkeypatch):
    import shutil

    from orchestrator.run import runner

    def boom(*args, **kwargs):
        raise RuntimeError("boom\nat a second line")

    monkeypatch.setattr(runner, "remove_tree", boom, raising=False)
    monkeypatch.setattr(shutil, "rmtree", boom)
    p = h.plan(workers=2)
    info = h.apply(p, h.backend({0: trainer(), 1: trainer()}))
    assert info.state == RunState.SUCCEEDED and h.record(p).state == RunState.SUCCEEDED
    said = [line for line in h.said if "boom" in line]
    assert len(said) == 1 and "\n" not in said[0] and str(p.run_dir / contract.SHARED_DIR) in said[0], h.said


# -- the Swarm copier ------------------------------------------------------------------------------------
def test_a_fifo_planted_as_events_jsonl_does_not_block_the_copier(h):
    p, backend, copier = copier_for(h)
    fifo = p.run_dir / "worker-0" / contract.EVENTS_FILE
    os.mkfifo(fifo)
    say(backend, 1, '@orch events.jsonl 1/1 {"n":1}', "@orch heartbeat 1/1 1700000001.0")
    h.clock.advance(2)
    done = threading.Event()

    def pull():
        copier.pull(backend.states(p.spec.run_id))
        done.set()

    threading.Thread(target=pull, daemon=True).start()
    if not done.wait(5):
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # free the blocked writer
        pytest.fail("the copier blocked on a FIFO")
    assert (p.run_dir / "worker-0" / contract.HEARTBEAT_FILE).is_file()  # and went on with the other records


# -- the host's disk ---------------------------------------------------------------------------------------
class _Filling(FakeBackend):
    """Replicas of which worker 1 writes ``size`` bytes into its own folder as soon as it starts."""

    def __init__(self, *args, size: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.size = size

    def apply(self, plan, artifact) -> None:
        super().apply(plan, artifact)
        with open(Path(plan.run_dir) / "worker-1" / "junk.bin", "wb") as out:
            out.write(os.urandom(self.size))  # allocated blocks, not a sparse file


def test_a_replica_that_writes_past_the_disk_limit_stops_the_run_in_one_line(h):
    p = h.plan(workers=2, disk_limit_mb=1, max_restarts=2)
    backend = _Filling(h.clock, stuck_at(30, workers=2), size=3 << 20)
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    message = caught.value.message
    assert "over --disk-limit 1 MiB" in message and "worker-1/" in message and "\n" not in message
    assert h.record(p).state == RunState.FAILED and not backend.called("apply")[1:]  # never retried
    stopped_within(backend, 0, 2.5)


def test_the_free_space_floor_stops_a_run_whatever_its_limit(h, monkeypatch):
    free = os.statvfs(h.paths.runs.parent).f_bavail * os.statvfs(h.paths.runs.parent).f_frsize
    p = h.plan(workers=2, disk_limit_mb=0)
    backend = h.backend(stuck_at(30, workers=2))
    started = backend.apply

    def apply_then_fill(plan, artifact):  # the disk fills once the run is under way
        started(plan, artifact)
        monkeypatch.setenv("ORCH_DISK_FLOOR_MB", str((free >> 20) + 1024))  # more than this disk has free

    backend.apply = apply_then_fill
    with pytest.raises(WorkerFailed, match="below orch's floor of .* MiB .ORCH_DISK_FLOOR_MB.; the replicas were stopped"):
        h.apply(p, backend)


def test_a_disk_already_below_the_floor_starts_nothing(h, monkeypatch):
    free = os.statvfs(h.paths.runs.parent).f_bavail * os.statvfs(h.paths.runs.parent).f_frsize
    monkeypatch.setenv("ORCH_DISK_FLOOR_MB", str((free >> 20) + 1024))
    p = h.plan(workers=2)
    backend = h.backend(stuck_at(30, workers=2))
    with pytest.raises(DiskFull, match="below orch's floor .* so the run would be stopped at once"):
        h.apply(p, backend)
    assert backend.call_names == [] and not p.run_dir.exists()


def test_the_disk_scan_counts_allocated_blocks_never_follows_links_and_stops_early(tmp_path):
    from orchestrator.run import disk

    (tmp_path / "worker-0" / "deep" / "er").mkdir(parents=True)
    (tmp_path / "worker-0" / "deep" / "er" / "a.bin").write_bytes(b"x" * 100_000)
    (tmp_path / "worker-0" / "link").symlink_to("/usr")  # a link out of the tree: never entered
    (tmp_path / "shared").mkdir()
    use = disk.measure(tmp_path, ["worker-0", "shared", "missing-1"])
    assert use.complete and 100_000 <= use.written["worker-0"] < 200_000 and use.written["shared"] == 0
    assert use.largest() == "worker-0" and use.free and use.free > 0
    assert disk.verdict(use, limit_mb=1) is None
    stopped = disk.measure(tmp_path, ["worker-0"], stop_at=50_000)
    assert not stopped.complete and disk.verdict(stopped, limit_mb=0) is None  # no limit: only the floor
    many = tmp_path / "worker-1"
    many.mkdir()
    for i in range(50):
        (many / str(i)).touch()
    monkeypatch_max = disk.MAX_ENTRIES
    try:
        disk.MAX_ENTRIES = 10
        crowded = disk.measure(tmp_path, ["worker-1"])
        assert "more than 10 files and folders" in disk.verdict(crowded, limit_mb=0)
    finally:
        disk.MAX_ENTRIES = monkeypatch_max


# -- record files past their limit ---------------------------------------------------------------------------
def _flood(count: int = 12, size: int = 4000) -> list:
    """Error events of ``size`` characters each, written between the epochs of a healthy trainer."""
    return [raw_event(1.5, {"v": contract.CONTRACT_VERSION, "event": "error", "message": "x" * size})] * count


def test_a_replica_whose_events_pass_the_limit_is_read_no_further_and_marked(h, monkeypatch):
    """On Compose a replica writes its events file itself: orch reads its first EVENTS_LIMIT bytes and no more,
    says so once, marks the replica in run.json, and judges the run by what the replicas did."""
    monkeypatch.setattr(rundir, "EVENTS_LIMIT", 16 << 10)
    p = h.plan(workers=2)
    info = h.apply(p, h.backend({0: trainer(), 1: sorted(trainer() + _flood(), key=lambda s: s.at)}))
    assert info.state == RunState.SUCCEEDED
    assert (p.run_dir / "worker-1" / contract.EVENTS_FILE).stat().st_size > 48 << 10
    said = [line for line in h.said if "passed orch's limit" in line]
    assert len(said) == 1 and said[0].startswith("worker-1: its events.jsonl passed orch's limit of 16 KiB; ")
    assert said[0].endswith("; orch reads no more of its records")
    workers = h.record(p).workers
    assert "records_capped" not in workers[0] and workers[1]["records_capped"].startswith(
        "its events.jsonl passed orch's limit of 16 KiB")
    assert sum(1 for e in h.events if e.worker == 1 and e.event == "done") == 0  # past the limit: never read
    [summary] = collect([p.spec.run_id], paths=h.paths)
    assert not summary["partial"] and summary["workers"][1]["records_unread_bytes"] > 0
    assert any(w.startswith("worker-1: its events.jsonl passed orch's limit of 16 KiB") for w in summary["warnings"])


def test_a_replica_whose_stdout_records_pass_the_limit_is_copied_no_further_and_marked(h, monkeypatch):
    """On Swarm and Kubernetes orch writes the events file from what the replica printed: it stops at the limit."""
    monkeypatch.setattr(copier, "EVENTS_FILE_LIMIT", 16 << 10)
    p = h.plan(workers=2)
    info = h.apply(p, h.backend({0: trainer(), 1: sorted(trainer() + _flood(), key=lambda s: s.at)},
                                reports_on_stdout=True, part_size=8000))
    assert info.state == RunState.SUCCEEDED
    assert (p.run_dir / "worker-1" / contract.EVENTS_FILE).stat().st_size <= 16 << 10
    assert h.record(p).workers[1]["records_capped"] == (
        "its events.jsonl reached orch's limit of 16 KiB; the records after it were not copied")
    assert [line for line in h.said if "reached orch's limit" in line] == [
        "worker-1: its events.jsonl reached orch's limit of 16 KiB; the records after it were not copied; "
        "orch reads no more of its records"]
    [summary] = collect([p.spec.run_id], paths=h.paths)
    assert any("reached orch's limit of 16 KiB" in w for w in summary["warnings"])


def test_the_guard_looks_as_often_as_a_scan_allows_and_sooner_as_a_writer_eats_the_headroom():
    from orchestrator.run import disk

    assert disk.interval(0.0001, headroom=100 << 20, rate=1e6) == disk.EVERY  # cheap, and writing: often
    assert disk.interval(0.0001, headroom=10 << 20, rate=500e6) == pytest.approx((10 << 20) / 500e6 / 4)
    assert disk.interval(0.0001, headroom=100 << 20, rate=0.0) == disk.QUIET  # nothing grows
    assert disk.interval(0.3, headroom=1 << 20, rate=500e6) == pytest.approx(0.3 / disk.SHARE)  # never > SHARE of a core
    assert disk.interval(0.0001, headroom=None, rate=1e6) == disk.EVERY  # no limit: the floor and the count still


def _writer(tmp_path):
    """A process standing in for a replica: it runs until killed."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_the_guard_kills_every_writer_at_once_through_its_pidfd_and_the_supervisor_names_the_limit(
        tmp_path, monkeypatch):
    from orchestrator.run import disk

    (tmp_path / "worker-0").mkdir()
    proc = _writer(tmp_path)
    fallback = []
    monkeypatch.setattr(disk, "_cgroup_names", lambda pid, container: pid == proc.pid)
    guard = disk.Guard(tmp_path, ["worker-0", "shared"], 1, lambda: {"c0": proc.pid}, lambda: fallback.append(1))
    guard.start()
    try:
        with open(tmp_path / "worker-0" / "junk.bin", "wb") as out:
            out.write(os.urandom(3 << 20))
        assert proc.wait(timeout=10) == -9  # SIGKILL, from the guard
        assert "over --disk-limit 1 MiB" in disk.verdict(guard.latest, 1) and fallback == []
    finally:
        guard.stop()
        proc.kill()


def test_the_guard_signals_no_process_that_is_not_the_replicas_and_stops_the_run_another_way(tmp_path, monkeypatch):
    """A PID the engine named may have been taken by another process before the guard opened it: the guard holds
    only pidfds of processes in the replica's cgroup, and with none it cancels the run instead."""
    from orchestrator.run import disk

    (tmp_path / "worker-0").mkdir()
    bystander = _writer(tmp_path)
    fallback = []
    container = secrets.token_hex(32)  # an id as the engine gives it: no cgroup of a process outside it names it
    guard = disk.Guard(tmp_path, ["worker-0"], 1, lambda: {container: bystander.pid}, lambda: fallback.append(1))
    guard.start()
    try:
        (tmp_path / "worker-0" / "junk.bin").write_bytes(os.urandom(3 << 20))
        assert guard.measured_since(0.0, 5) is not None
        deadline = time.monotonic() + 5
        while not fallback and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fallback == [1] and bystander.poll() is None  # the run cancelled; the bystander lives
    finally:
        guard.stop()
        bystander.kill()


def test_a_process_belongs_to_a_container_only_where_its_cgroup_names_the_whole_id():
    from orchestrator.run.disk import names_container

    full = "3de6c049ceb9afd301255fa555626fc9" * 2  # "c0" is a part of it
    assert names_container(f"0::/system.slice/docker-{full}.scope\n".encode(), full)
    assert names_container(f"4:memory:/docker/{full}\n".encode(), full)
    assert not names_container(f"4:memory:/docker/{full}\n".encode(), "c0")  # a part of another id
    assert not names_container(f"4:memory:/docker/{full}\n".encode(), full[:-1])
    assert not names_container(b"0::/\n", "")


def test_a_writer_that_starts_between_two_scans_is_seen_within_the_free_space_sentinel(tmp_path, monkeypatch):
    """The guard has seen nothing grow, so its next scan is its turn away (made half a minute here); a burst into the
    page cache (gigabytes a second) is still seen at once: the scan that follows comes from the fall of the disk's
    free space, which the guard looks at every 10 ms. How soon after the crossing the writers stop is measured in
    benchmarks/disk_limit.py, not asserted here, where the machine's load sets it."""
    from orchestrator.run import disk

    monkeypatch.setattr(disk, "QUIET", 30.0)
    (tmp_path / "worker-0").mkdir()
    stopped = []
    guard = disk.Guard(tmp_path, ["worker-0"], 64, dict, lambda: stopped.append(time.monotonic()))
    guard.start()
    try:
        assert guard.measured_since(0.0, 5) is not None
        time.sleep(0.1)  # mid-wait: the next turn is half a minute away
        before = len(guard.causes)
        block, written = os.urandom(1 << 20), 0
        while not stopped and written < 256 << 20:
            with open(tmp_path / "worker-0" / f"junk-{written >> 20}.bin", "wb") as out:
                out.write(block)
            written += 1 << 20
        deadline = time.monotonic() + 5
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.005)
        assert stopped and guard.latest is not None and disk.verdict(guard.latest, 64)
        assert list(guard.causes)[before] == "free space", list(guard.causes)
    finally:
        guard.stop()


def test_a_replica_the_kernel_stops_at_its_file_size_cap_is_named_as_over_the_disk_limit_and_not_retried():
    from orchestrator.backends import ReplicaState, Status
    from orchestrator.run.supervisor import FILE_TOO_LARGE, Observation, Verdict, Watch, decide

    spec = make_spec(workers=2, disk_limit_mb=200, max_restarts=3)
    states = (ReplicaState("a", "w0", "r", "worker", 0, Status.RUNNING),
              ReplicaState("b", "w1", "r", "worker", 1, Status.FAILED, exit_code=FILE_TOO_LARGE))
    decision = decide(spec, Watch(), Observation(states=states, events=(), heartbeats={}, now=1.0, elapsed=1.0))
    assert decision.verdict == Verdict.FAILED
    assert decision.message.startswith("worker-1 wrote a file past --disk-limit 200 MiB, and the kernel stopped it")
    killed = (ReplicaState("a", "w0", "r", "worker", 0, Status.FAILED, exit_code=137), states[1])
    from orchestrator.run.disk import DiskUse

    over = DiskUse({"worker-0": 300 << 20}, 3, None)
    judged = decide(spec, Watch(), Observation(states=killed, events=(), heartbeats={}, now=1.0, elapsed=1.0, disk=over))
    assert judged.verdict == Verdict.FAILED and "over --disk-limit 200 MiB" in judged.message  # not a retry of 137
