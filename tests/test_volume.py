"""The run's --disk-limit file system (run/volume.py) and the copy that brings the replicas' files home
(safetree.copy_tree): real loop mounts where orch runs as root, as CI does; nothing is left mounted."""
from __future__ import annotations

import os
import socket
import stat

import pytest

from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from orchestrator.run import volume
from orchestrator.run.rundir import RunDir
from orchestrator.safetree import MAX_COPY_DEPTH, copy_tree

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="loop mounts need root")


def _run(tmp_path, workers=2) -> tuple[RunDir, list[str]]:
    p = plan(make_spec(run_id="vol", workers=workers, dataset="synthetic"), Paths(tmp_path / "runs", tmp_path / "c"))
    run = RunDir(p.run_dir)
    run.create(p)
    return run, volume.folders(p.spec)


def test_copy_tree_copies_the_tree_as_left_and_never_follows_a_link(tmp_path):
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "secret"
    (src / "a" / "b").mkdir(parents=True)
    dst.mkdir()
    outside.write_text("not the replica's")
    (src / "a" / "b" / "result.json").write_text("{}")
    (src / "a" / "events.jsonl").write_bytes(b"x" * 100_000)
    os.utime(src / "a" / "events.jsonl", (1_000_000, 1_000_000))
    (src / "link").symlink_to(outside)
    (src / "dirlink").symlink_to(tmp_path)
    os.mkfifo(src / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    sock.close()
    problems = copy_tree(src, dst)
    assert (dst / "a" / "b" / "result.json").read_text() == "{}"
    assert (dst / "a" / "events.jsonl").stat().st_size == 100_000
    assert (dst / "a" / "events.jsonl").stat().st_mtime == 1_000_000
    assert os.readlink(dst / "link") == str(outside) and os.readlink(dst / "dirlink") == str(tmp_path)
    assert stat.S_ISFIFO(os.lstat(dst / "fifo").st_mode) and not os.path.lexists(dst / "sock")
    assert outside.read_text() == "not the replica's"
    assert problems == [f"{src}: 1 socket(s) or device(s) left out"]


def test_copy_tree_stops_at_its_depth_and_says_so(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    deep = src.joinpath(*["d"] * (MAX_COPY_DEPTH + 3))
    deep.mkdir(parents=True)
    (deep / "f").write_text("deep")
    dst.mkdir()
    problems = copy_tree(src, dst)
    assert len(problems) == 1 and f"deeper than {MAX_COPY_DEPTH} folders" in problems[0]
    assert dst.joinpath(*["d"] * MAX_COPY_DEPTH).is_dir()


def test_without_root_or_a_limit_nothing_is_mounted_and_the_reason_is_one_line(tmp_path, monkeypatch):
    run, folders = _run(tmp_path)
    assert volume.bind(run, folders, 0) == "--disk-limit is 0"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert volume.bind(run, folders, 200) == "mounting one needs root"
    assert not (run.path / volume.DISK_DIR).exists() and volume.release(run, folders) == []


@root_only
def test_the_folders_sit_on_a_file_system_of_the_limit_and_come_home_at_release(tmp_path):
    run, folders = _run(tmp_path)
    try:
        assert volume.bind(run, folders, 32) is None and volume.is_bound(run)
        worker = run.path / "worker-0"
        assert os.path.ismount(worker) and os.stat(worker).st_uid == 1000
        size = os.statvfs(worker).f_blocks * os.statvfs(worker).f_frsize
        assert 32 << 20 < size <= volume.image_mb(32) << 20
        (worker / "result.json").write_text('{"ok": true}')
        (run.path / "shared" / "ckpt").write_bytes(b"c" * 1000)
        with pytest.raises(OSError) as full:  # the kernel holds the limit, an eighth and ext4's tables past it
            with open(worker / "filler", "wb") as f:
                for _ in range(volume.image_mb(32)):
                    f.write(b"\0" * (1 << 20))
                    f.flush()
        assert full.value.errno == 28
    finally:
        problems = volume.release(run, folders, drop=("shared",))
    assert problems == [] and not volume.is_bound(run) and not (run.path / volume.DISK_DIR).exists()
    assert not any(os.path.ismount(run.path / f) for f in folders)
    assert (run.path / "worker-0" / "result.json").read_text() == '{"ok": true}'
    assert stat.S_ISREG(os.lstat(run.path / "worker-0" / "filler").st_mode)
    assert not (run.path / "shared" / "ckpt").exists()  # dropped: a finished run's checkpoints are not kept
