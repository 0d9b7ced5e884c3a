"""safeio: atomic writes leave the old file or the new one; a folder lock has one holder; bounded reads refuse
links, FIFOs, devices and oversized files without blocking; Tail stays bounded."""
import errno
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from orchestrator import safeio, safetree
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
from tests.bounds import HANG_S


def _temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def _within(seconds: float, fn, fifo: Path = None, reader: Path = None):
    """``fn()`` in a thread that must end within ``seconds``; on a hang, a writer on ``fifo`` (or a reader on
    ``reader``) frees it."""
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
        if reader is not None:
            os.close(os.open(reader, os.O_RDONLY | os.O_NONBLOCK))
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
        assert time.monotonic() - started < HANG_S
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


# -- appending to a file a container can reach -----------------------------------------------------------
def test_append_bounded_appends_to_a_regular_file_within_its_limit(tmp_path):
    path = tmp_path / "events.jsonl"
    assert safeio.append_bounded(path, b"a\n", limit=4) is True
    assert safeio.append_bounded(path, b"b\n", limit=4) is True
    assert safeio.append_bounded(path, b"c\n", limit=4) is False  # the file would pass its limit: not written
    assert path.read_bytes() == b"a\nb\n" and path.stat().st_mode & 0o777 == 0o644


def test_append_bounded_refuses_a_fifo_a_link_and_a_device_without_blocking(tmp_path):
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(Unsafe, match="not a regular file"):
        _within(2, lambda: safeio.append_bounded(fifo, b"x\n", 1 << 20), reader=fifo)
    (tmp_path / "victim").write_text("keep")
    for name, target in (("link", tmp_path / "victim"), ("null", Path("/dev/null"))):
        (tmp_path / name).symlink_to(target)
        with pytest.raises(Unsafe, match="symbolic link"):
            safeio.append_bounded(tmp_path / name, b"x\n", 1 << 20)
    assert (tmp_path / "victim").read_text() == "keep"


# -- removing a tree a container wrote -------------------------------------------------------------------
NOBODY = 65534
DEPTH = 1200  # deeper than the recursion limit: shutil.rmtree raises RecursionError on Python 3.10-3.12


def plant_tree(root: Path, outside: Path) -> None:
    """What a hostile replica can leave in ``root``: a folder DEPTH levels deep (made through folder fds, as a
    path that long could not be named), folders without permissions at the top and at the bottom, a read-only
    folder, 2,000 files, odd names, links out of the tree, a FIFO and a file of mode 000."""
    flags = os.O_RDONLY | os.O_DIRECTORY
    fd = os.open(root, flags)
    try:
        for _ in range(DEPTH):
            os.mkdir("d", dir_fd=fd)
            deeper = os.open("d", flags, dir_fd=fd)
            os.close(fd)
            fd = deeper
        os.mkdir("locked", dir_fd=fd)
        os.close(os.open("locked/inside", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
        os.chmod("locked", 0, dir_fd=fd)
    finally:
        os.close(fd)
    many = root / "many"
    many.mkdir()
    for i in range(2000):
        (many / f"f{i}").touch()
    for name in (b"\xff\xfe", b"new\nline", b"-rf", b" ", b"...", b"x" * 255, b"\x1b[2J"):
        os.close(os.open(os.path.join(bytes(root), name), os.O_WRONLY | os.O_CREAT, 0o644))
    os.symlink(outside, root / "out")
    os.symlink(outside / "precious", root / "out-file")
    os.symlink("/", root / "slash")
    os.mkfifo(root / "fifo")
    (root / "mode000").touch()
    (root / "mode000").chmod(0)
    readonly = root / "readonly"
    (readonly / "sub").mkdir(parents=True)
    (readonly / "sub" / "f").touch()
    (readonly / "sub").chmod(0o500)
    readonly.chmod(0o500)
    closed = root / "closed"
    (closed / "a" / "b").mkdir(parents=True)
    (closed / "a" / "b" / "f").touch()
    closed.chmod(0)


@pytest.fixture
def outside(tmp_path):
    """A folder with a file that a link in a planted tree names; the test's whole tmp_path is removed after
    it, so that no tree too deep for shutil.rmtree is left for pytest's own clean-up."""
    keep = tmp_path / "outside"
    keep.mkdir()
    (keep / "precious").write_text("x")
    yield keep
    safetree.remove_tree(tmp_path)


def assert_outside_untouched(keep: Path) -> None:
    assert sorted(p.name for p in keep.iterdir()) == ["precious"] and (keep / "precious").read_text() == "x"
    assert (keep / "precious").stat().st_mode & 0o777 != 0o700


def test_remove_tree_removes_any_tree_and_follows_no_link(tmp_path, outside):
    root = tmp_path / "shared"
    root.mkdir()
    plant_tree(root, outside)
    (outside / "precious").chmod(0o640)
    outside.chmod(0o750)
    started = time.monotonic()
    assert _within(60, lambda: safetree.remove_tree(root), reader=root / "fifo") == []
    assert not root.exists() and time.monotonic() - started < 30
    assert_outside_untouched(outside)
    assert outside.stat().st_mode & 0o777 == 0o750  # no permission of what a link names was changed


def test_remove_tree_of_a_missing_folder_or_a_link_to_one(tmp_path, outside):
    assert safetree.remove_tree(tmp_path / "missing") == []
    (tmp_path / "link").symlink_to(outside)
    assert safetree.remove_tree(tmp_path / "link") == []
    assert not (tmp_path / "link").is_symlink()
    assert_outside_untouched(outside)


def _as_owner(fn, *owned: Path):
    """``fn()``'s JSON-able result, as an unprivileged user that owns ``owned``: under root, in a forked child that
    becomes nobody (root may remove anything, so a folder of mode 000 would test nothing); else here."""
    if os.getuid() != 0:
        return json.loads(json.dumps(fn()))
    for path in owned:
        os.chown(path, NOBODY, NOBODY)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write_end, json.dumps({"value": fn()}).encode())
            status = 0
        except BaseException as exc:  # noqa: BLE001 - handed to the parent
            os.write(write_end, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        answer = json.loads(f.read() or b'{"error": "no answer"}')
    os.waitpid(pid, 0)
    assert "error" not in answer, answer["error"]
    return answer["value"]


@pytest.fixture
def public_tmp():
    """A folder any user can reach, unlike root's tmp_path."""
    base = Path(tempfile.mkdtemp(prefix="orch-remove-"))
    base.chmod(0o755)
    yield base
    safetree.remove_tree(base)


def test_remove_tree_says_what_it_could_not_remove_in_one_line_each(public_tmp):
    root = public_tmp / "shared"
    (root / "keep").mkdir(parents=True)
    (root / "keep" / "f").touch()
    (root / "gone").touch()

    def remove():
        (root / "keep").chmod(0o500)

        def refuse(*args, **kwargs):  # as for a folder of another owner
            raise PermissionError(1, "Operation not permitted")

        chmod, fchmod = os.chmod, os.fchmod
        os.chmod = os.fchmod = refuse
        try:
            return safetree.remove_tree(root)
        finally:
            os.chmod, os.fchmod = chmod, fchmod
            (root / "keep").chmod(0o700)

    left = _as_owner(remove, public_tmp, root, root / "keep", root / "keep" / "f", root / "gone")
    assert left and all("\n" not in line for line in left) and len(left) <= 5
    assert any("keep" in line for line in left) and not (root / "gone").exists()


def test_remove_tree_as_the_unprivileged_user_that_owns_the_tree(public_tmp, outside):
    """As orch runs: as the user the replicas ran as, so that folders of mode 000 must be made its own again."""
    root = public_tmp / "shared"
    root.mkdir()

    def plant_and_remove():
        plant_tree(root, outside)
        return [safetree.remove_tree(root), root.exists()]

    assert _as_owner(plant_and_remove, public_tmp, root) == [[], False]
    assert_outside_untouched(outside)
