"""safeio: atomic writes leave the old file or the new one; a folder lock has one holder; bounded reads refuse
links, FIFOs, devices and oversized files without blocking; Tail stays bounded."""
import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator import safeio
from orchestrator.safeio import (
    FolderBusy,
    Tail,
    Unsafe,
    atomic_write,
    atomic_write_with,
    locked,
    read_bounded,
    write_json,
)


def _temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def _within(seconds: float, fn, fifo: Path = None):
    """``fn()`` in a thread that must end within ``seconds``; on a hang, a writer on ``fifo`` frees it."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"blocked for more than {seconds} s")
    if "error" in out:
        raise out["error"]
    return out.get("value")


# -- atomic writes ---------------------------------------------------------------------------------------
def test_atomic_write_replaces_the_file_whole(tmp_path):
    target = tmp_path / "a.json"
    atomic_write(target, "old\n")
    atomic_write(target, b"new\n")
    assert target.read_text() == "new\n" and _temps(tmp_path) == []
    write_json(target, {"x": [1, 2]})
    assert json.loads(target.read_text()) == {"x": [1, 2]}


@pytest.mark.parametrize("crash", [KeyboardInterrupt, OSError(errno.ENOSPC, "No space left on device")])
def test_a_crash_while_writing_leaves_the_old_file_and_no_temp(tmp_path, crash):
    target = tmp_path / "summary.json"
    atomic_write(target, "old\n")

    def half(f):
        f.write(b"{\"trunc")
        raise crash

    with pytest.raises(type(crash) if isinstance(crash, BaseException) else crash):
        atomic_write_with(target, half)
    assert target.read_text() == "old\n" and _temps(tmp_path) == []


def test_a_crash_at_the_rename_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "report.md"
    atomic_write(target, "old\n")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, "new\n")
    monkeypatch.undo()
    assert target.read_text() == "old\n" and _temps(tmp_path) == []


def test_atomic_write_with_text_mode_keeps_newlines(tmp_path):
    target = tmp_path / "epochs.csv"
    atomic_write_with(target, lambda f: f.write("a,b\r\n1,2\r\n"), mode="w")
    assert target.read_bytes() == b"a,b\r\n1,2\r\n"


# -- the folder lock -------------------------------------------------------------------------------------
HOLDER = """
import sys
from pathlib import Path
from orchestrator.safeio import locked
with locked(Path(sys.argv[1]), "a sweep"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_process_cannot_take_a_held_lock(tmp_path):
    folder = tmp_path / "results"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    try:
        assert holder.stdout.readline() == "held\n"
        started = time.monotonic()
        with pytest.raises(FolderBusy) as info:
            with locked(folder, "collect"):
                pytest.fail("took a lock another process holds")
        assert time.monotonic() - started < 1.0
        assert str(folder) in info.value.message and "\n" not in info.value.message and info.value.exit_code == 2
    finally:
        holder.communicate("", timeout=30)
    with locked(folder, "collect"):  # free again once the holder is gone
        pass


def test_a_second_open_in_the_same_process_is_refused_and_the_lock_is_freed_on_error(tmp_path):
    with locked(tmp_path, "a sweep"):
        with pytest.raises(FolderBusy):
            with locked(tmp_path, "a sweep"):
                pass
    with pytest.raises(RuntimeError):
        with locked(tmp_path, "a sweep"):
            raise RuntimeError("boom")
    with locked(tmp_path, "a sweep"):
        pass


def test_different_folders_do_not_block_each_other(tmp_path):
    with locked(tmp_path / "exp", "a sweep"):
        with locked(tmp_path / "exp" / "runs", "collect"):
            pass


# -- bounded reads ---------------------------------------------------------------------------------------
def test_read_bounded_reads_up_to_the_limit(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100
    with pytest.raises(Unsafe, match="larger than 99 bytes"):
        read_bounded(path, 99)
    assert read_bounded(tmp_path / "missing", 10) is None


def test_read_bounded_refuses_links(tmp_path):
    (tmp_path / "real").write_text("secret")
    for name, target in (("link", tmp_path / "real"), ("zero", Path("/dev/zero")), ("passwd", Path("/etc/passwd"))):
        (tmp_path / name).symlink_to(target)
        with pytest.raises(Unsafe, match="symbolic link"):
            read_bounded(tmp_path / name, 1 << 20)


def test_read_bounded_refuses_devices_and_folders():
    with pytest.raises(Unsafe, match="not a regular file"):
        _within(2, lambda: read_bounded(Path("/dev/zero"), 1 << 20))
    with pytest.raises(Unsafe, match="not a regular file"):
        read_bounded(Path("/tmp"), 10)


def test_read_bounded_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "predictions.npz"
    os.mkfifo(fifo)
    with pytest.raises(Unsafe, match="not a regular file"):
        _within(2, lambda: read_bounded(fifo, 1 << 20), fifo)


def test_read_json_bounded_gives_none_for_what_it_cannot_trust(tmp_path):
    (tmp_path / "ok.json").write_text('{"a": 1}')
    (tmp_path / "bad.json").write_text('{"a": ')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "link.json").symlink_to(tmp_path / "ok.json")
    assert safeio.read_json_bounded(tmp_path / "ok.json") == {"a": 1}
    for name in ("bad.json", "deep.json", "link.json", "missing.json"):
        assert safeio.read_json_bounded(tmp_path / name) is None, name


# -- Tail ------------------------------------------------------------------------------------------------
def test_tail_drops_an_over_long_line_without_growing(tmp_path):
    path = tmp_path / "events.jsonl"
    tail = Tail(path, max_line=100, max_read=64)
    with open(path, "ab") as f:
        f.write(b"first\n")
        f.flush()
        assert tail.read() == [b"first"]
        for _ in range(50):  # 5,000 bytes of one line with no newline, in bounded reads
            f.write(b"y" * 100)
            f.flush()
            while tail.offset < path.stat().st_size:
                assert tail.read() == [] and len(tail.pending) <= 100
        f.write(b"\nsecond\nthird")
    lines = []
    while tail.offset < path.stat().st_size:
        lines += tail.read()
    assert lines == [b"second"] and tail.pending == b"third"


def test_tail_refuses_a_fifo_and_a_link_without_blocking(tmp_path):
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    tail = Tail(fifo)
    assert _within(2, tail.read, fifo) == [] and "not a regular file" in tail.refused
    (tmp_path / "real").write_text("a\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    link = Tail(tmp_path / "link")
    assert link.read() == [] and "symbolic link" in link.refused


def test_tail_stops_at_a_file_that_shrank(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"a\nb\n")
    tail = Tail(path)
    assert tail.read() == [b"a", b"b"]
    path.write_bytes(b"c\n")
    assert tail.read() == [] and "shrank" in tail.refused
