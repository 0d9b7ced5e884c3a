"""Users' own scripts (--script): the spec, the plan, the supervisor's rules for them, the report helper,
and the extra-packages image's name. Pure: no engine."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import contract
from orchestrator.backends import Status
from orchestrator.errors import InvalidSpec
from orchestrator.images.user import image_for, read_requirements
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from orchestrator.run.records import parse_event, parse_result
from orchestrator.run import scripts
from orchestrator.run import snapshot as snapshot_module
from orchestrator.run.scripts import absolute, check
from orchestrator.run.snapshot import snapshot
from tests.bounds import HANG_S
from orchestrator.run.supervisor import Observation, Verdict, Watch, decide
from tests.test_cli_inprocess import one_line_error, orch
from tests.test_supervisor import NOW, ev, rs
from tests.test_trainer_reports import trainer  # noqa: F401 (a fixture)

PATHS = Paths(runs=Path("/srv/orch/runs"), cache=Path("/srv/orch/cache"))


def script_spec(**fields):
    return make_spec(run_id="s", script="/home/me/exp/train.py", **fields)


# -- the spec ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, needle", [
    ({"script": "train.py"}, "must be a Python file ending in .py"),
    ({"script": "/home/me/train.sh"}, "must be a Python file ending in .py"),
    ({"script": "/home/me/\ntrain.py"}, "must be a Python file ending in .py"),
    ({"script_args": ("--lr", "0.1")}, "arguments after `--` are for --script"),
    ({"script": "/x/t.py", "script_args": ("a\x00b",)}, "NUL byte"),
])
def test_script_fields_are_validated(fields, needle):
    with pytest.raises(InvalidSpec) as exc:
        make_spec(run_id="s", **fields)
    assert needle in exc.value.message and "\n" not in exc.value.message


def test_relative_scripts_become_absolute_against_their_base():
    assert absolute("train.py", Path("/home/me/exp")) == "/home/me/exp/train.py"
    assert absolute("../x/t.py", Path("/home/me/exp")) == "/home/me/x/t.py"
    assert absolute("/abs/t.py", Path("/elsewhere")) == "/abs/t.py"
    assert absolute(5, Path("/")) == 5  # left for the spec to refuse


def _spec(script, **fields):
    return make_spec(run_id="s", script=str(script), **fields)


def test_check_refuses_what_cannot_be_copied(tmp_path):
    with pytest.raises(InvalidSpec, match="cannot use"):
        check(_spec(tmp_path / "missing.py"))
    (tmp_path / "folder.py").mkdir()
    with pytest.raises(InvalidSpec, match="is not a regular file"):
        check(_spec(tmp_path / "folder.py"))
    (tmp_path / "ok.py").write_text("print(1)\n")
    listing = check(_spec(tmp_path / "ok.py"))
    assert ("ok.py", 9) in [(f.path, f.size) for f in listing.files] and listing.folder == tmp_path.resolve()


def test_a_snapshot_refuses_root_homes_and_orchs_own_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "proj").mkdir(parents=True)
    (tmp_path / "home" / "train.py").write_text("print(1)\n")
    (tmp_path / "home" / "proj" / "train.py").write_text("print(1)\n")
    with pytest.raises(InvalidSpec) as exc:
        check(_spec(tmp_path / "home" / "train.py"))
    assert "would copy the home folder" in exc.value.message and "--source DIR" in exc.value.message
    check(_spec(tmp_path / "home" / "proj" / "train.py"))  # a project inside the home folder is fine
    with pytest.raises(InvalidSpec, match="would copy the home folder"):
        check(_spec(tmp_path / "home" / "proj" / "train.py", source=str(tmp_path)))  # a folder holding a home
    runs = tmp_path / "home" / "proj" / "runs"
    runs.mkdir()
    with pytest.raises(InvalidSpec, match="holds orch's own runs/ folder"):
        check(_spec(tmp_path / "home" / "proj" / "train.py"), guarded=(runs,))
    with pytest.raises(InvalidSpec, match="is not inside --source"):
        check(_spec(tmp_path / "home" / "proj" / "train.py", source=str(tmp_path / "home" / "proj" / "runs")))


def test_a_snapshot_over_the_limit_is_refused_and_says_how_to_raise_it(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "weights.bin").write_bytes(b"\0" * (2 << 20))
    monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", "1")
    with pytest.raises(InvalidSpec) as exc:
        check(_spec(tmp_path / "train.py"))
    assert "more than 1 MiB" in exc.value.message and "ORCH_SOURCE_LIMIT_MB" in exc.value.message
    monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", "3")
    check(_spec(tmp_path / "train.py"))
    monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", "lots")
    with pytest.raises(InvalidSpec, match="ORCH_SOURCE_LIMIT_MB: 'lots' is not a whole number"):
        check(_spec(tmp_path / "train.py"))


def test_a_snapshot_copies_files_readably_hashes_them_and_skips_links_and_caches(tmp_path):
    src = tmp_path / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / ".git").mkdir()
    (src / "train.py").write_text("import pkg.model\n")
    (src / "pkg" / "model.py").write_text("X = 1\n")
    (src / "pkg" / "__pycache__" / "model.pyc").write_bytes(b"junk")
    (src / ".git" / "config").write_text("[core]\n")
    (src / "secret-link").symlink_to("/etc/hostname")
    os.mkfifo(src / "fifo")
    for path in (src / "train.py", src / "pkg" / "model.py", src / "pkg"):
        path.chmod(0o700 if path.is_dir() else 0o600)  # only the owner may read: the copy is for everyone
    run = tmp_path / "run"
    run.mkdir()
    record = snapshot(check(_spec(src / "train.py")), run / "source")
    assert sorted(str(p.relative_to(run / "source")) for p in (run / "source").rglob("*")) == [
        "pkg", "pkg/model.py", "train.py"]
    assert record["files"] == 2 and record["skipped"] == ["fifo", "secret-link"] and len(record["sha256"]) == 64
    assert (run / "source" / "train.py").stat().st_mode & 0o777 == 0o644
    assert (run / "source" / "pkg").stat().st_mode & 0o777 == 0o755
    manifest = (run / "source.sha256").read_text()
    assert manifest.endswith("  train.py\n") and "pkg/model.py" in manifest
    assert hashlib.sha256(manifest.encode()).hexdigest() == record["sha256"]
    again = tmp_path / "run2"
    again.mkdir()
    assert snapshot(check(_spec(src / "train.py")), again / "source")["sha256"] == record["sha256"]


# -- the plan ----------------------------------------------------------------------------------------------
def test_a_script_runs_from_its_own_folder_and_sees_only_the_runs_snapshot():
    spec = script_spec(workers=2, script_args=("--lr", "0.1", "$HOME", 'say "hi"'))
    p = plan(spec, PATHS)
    for r in p.replicas:
        assert r.command == ("python3", "-u", "/orch/script/train.py", "--lr", "0.1", "$HOME", 'say "hi"')
        assert r.working_dir == r.env[contract.ENV_OUTPUT_DIR] == f"/orch/run/worker-{r.index}"
        assert r.env[contract.ENV_SHARED_DIR] == "/orch/run/shared" and "TF_CONFIG" in r.env
        script_mount = [m for m in r.mounts if m.target == contract.SCRIPT_MOUNT]
        assert [(m.source, m.read_only) for m in script_mount] == [("/srv/orch/runs/s/source", True)]
        assert not any(m.source.startswith("/home/me") for m in r.mounts)  # nothing of the user's folders
    compose = yaml.safe_load(p.artifact)["services"]["worker-1"]
    # Quoted, so neither YAML nor Compose's interpolation ($ doubled) changes an argument.
    assert compose["entrypoint"] == ["python3", "-u", "/orch/script/train.py", "--lr", "0.1", "$$HOME", 'say "hi"']
    assert compose["working_dir"] == "/orch/run/worker-1" and compose["read_only"] is True


def test_with_source_the_script_runs_from_its_place_in_the_snapshot():
    spec = make_spec(run_id="s", script="/home/me/exp/bin/train.py", source="/home/me/exp")
    (replica,) = plan(spec, PATHS).replicas
    assert replica.command == ("python3", "-u", "/orch/script/bin/train.py")
    with pytest.raises(InvalidSpec, match="source: --source names the folder copied for --script"):
        make_spec(run_id="s", source="/home/me/exp")


def test_orchs_trainer_keeps_the_images_entry_point():
    (replica,) = plan(make_spec(run_id="s"), PATHS).replicas
    assert replica.command == () and "entrypoint" not in yaml.safe_load(plan(make_spec(run_id="s"), PATHS).artifact)[
        "services"]["worker-0"]


# -- the supervisor ------------------------------------------------------------------------------------------
def obs(states, events=(), heartbeats=None, now=NOW, elapsed=1.0):
    return Observation(states=tuple(states), events=tuple(events), heartbeats=heartbeats or {}, now=now,
                       elapsed=elapsed)


def test_a_silent_script_is_judged_by_its_exits_and_its_time_limit_alone():
    spec = script_spec(workers=2, startup_timeout=5, stall_timeout=5, time_limit=60)
    running = (rs(0), rs(1))
    d = decide(spec, Watch(), obs(running, elapsed=50, now=NOW + 50))  # no events: neither timeout applies
    assert d.verdict == Verdict.WAIT
    d = decide(spec, Watch(), obs(running, elapsed=61))
    assert d.verdict == Verdict.TIMED_OUT and "time limit of 60 s" in d.message
    done = (rs(0, Status.SUCCEEDED, exit_code=0), rs(1, Status.SUCCEEDED, exit_code=0))
    assert decide(spec, Watch(), obs(done)).verdict == Verdict.SUCCEEDED
    failed = (rs(0, Status.FAILED, exit_code=2, finished_at=NOW), rs(1))
    d = decide(spec, Watch(), obs(failed))
    assert d.verdict == Verdict.FAILED and "worker-0 exited with code 2" in d.message


def test_a_reporting_script_is_watched_for_progress_and_waited_for_after_its_result():
    spec = script_spec(workers=2, startup_timeout=5, stall_timeout=5)
    running = (rs(0), rs(1))
    d = decide(spec, Watch(), obs(running, events=(ev(0, "start", stage="training"),)))
    assert d.verdict == Verdict.WAIT and d.watch.joined_at == NOW  # worker-1 reports nothing: not awaited
    d2 = decide(spec, d.watch, obs(running, heartbeats={("worker", 0): NOW}, now=NOW + 6, elapsed=7))
    assert d2.verdict == Verdict.FAILED and "no worker made progress" in d2.message
    finished = (ev(0, "done", train_seconds=1.0, test_accuracy=0.5),)
    d3 = decide(spec, d.watch, obs(running, events=finished, heartbeats={("worker", 0): NOW + 60}, now=NOW + 60,
                                   elapsed=60))
    assert d3.verdict == Verdict.WAIT  # a script's exit is its verdict: no grace after its result


# -- the report helper, as the image has it -------------------------------------------------------------------
def test_the_report_helper_writes_what_the_host_reads(trainer, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv(contract.ENV_OUT_DIR, str(tmp_path))
    monkeypatch.setenv(contract.ENV_WORKER_INDEX, "1")
    monkeypatch.setenv(contract.ENV_ROLE, "worker")
    report = trainer.report
    report.epoch(1, samples=480, seconds=0.5, epochs=2, loss=0.7, accuracy=0.6)
    report.epoch(2, samples=480, seconds=0.4, epochs=2, loss=0.5, accuracy=0.8, val_accuracy=0.75)
    report.result(test_accuracy=0.8)
    folder = tmp_path / "worker-1"
    events = [parse_event(json.loads(line)) for line in (folder / contract.EVENTS_FILE).read_text().splitlines()]
    assert [e.event for e in events] == ["start", "epoch", "epoch", "done"]
    assert events[0].stage == "training" and events[2].epochs == 2 and events[2].val_accuracy == 0.75
    result = parse_result(json.loads((folder / contract.RESULT_FILE).read_text()))
    assert result.worker == 1 and result.samples_per_epoch == [480, 480] and result.test_accuracy == 0.8


# -- extra packages ---------------------------------------------------------------------------------------------
def test_the_extra_packages_image_is_named_by_the_files_content(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("tabulate==0.9.0\n")
    tag = image_for(read_requirements(req))
    assert tag.startswith("orch-trainer:") and "-user-" in tag and tag == image_for(b"tabulate==0.9.0\n")
    assert image_for(b"tabulate==0.8.10\n") != tag


@pytest.mark.parametrize("content, needle", [(None, "does not exist"), (b"\xff\xfe", "not UTF-8"),
                                             (b"x" * 70_000, "cannot read")])
def test_unreadable_requirements_are_one_line_errors(tmp_path, content, needle):
    req = tmp_path / "requirements.txt"
    if content is not None:
        req.write_bytes(content)
    with pytest.raises(InvalidSpec, match=needle):
        read_requirements(req)


# -- the CLI ------------------------------------------------------------------------------------------------------
def test_render_resolves_the_script_and_passes_the_arguments(tmp_path, monkeypatch):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setenv("ORCH_RUNS_DIR", str(tmp_path / "runs"))  # not inside the folder copied
    monkeypatch.setenv("ORCH_RESULTS_DIR", str(tmp_path / "results"))
    result = orch("render", "--script", "train.py", "--run-id", "r", "--", "--epochs", "2")
    assert result.code == 0, result
    service = yaml.safe_load(result.out)["services"]["worker-0"]
    assert service["entrypoint"][2:] == ["/orch/script/train.py", "--epochs", "2"]
    assert any(v["source"].endswith("/r/source") and v.get("read_only") for v in service["volumes"])
    assert not any(v["source"] == str(tmp_path / "proj") for v in service["volumes"])  # the folder itself never


def test_render_refuses_a_script_up_would_refuse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(orch("render", "--script", "/nonexistent/train.py", "--run-id", "r"), 2, "script: cannot use")


def test_up_with_a_missing_script_says_so_and_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(orch("up", "--script", "missing.py", "--run-id", "r"), 2, "script: cannot use")
    assert not (tmp_path / "runs" / "r").exists()


def test_arguments_without_a_script_are_refused():
    one_line_error(orch("up", "stray", "--run-id", "r"), 2, "arguments after `--` are for --script")


def test_an_experiment_names_its_script_relative_to_its_own_folder(tmp_path):
    from orchestrator.experiments.cells import expand
    from orchestrator.experiments.file import load

    (tmp_path / "exp").mkdir()
    path = tmp_path / "exp" / "scripts.yaml"
    path.write_text("name: scripts\nbase: {script: ../train.py, script_args: [--epochs, '2']}\n"
                    "grid: {workers: [1, 2]}\n")
    cells = expand(load(path))
    assert {c.fields["script"] for c in cells} == {str(tmp_path / "train.py")}
    assert cells[0].fields["script_args"] == ["--epochs", "2"]
    # Its quick form adds none of orch's trainer's sizes (epochs, samples), which the script would not read.
    assert [c.fields for c in expand(load(path), quick=True)] == [c.fields for c in cells]
    (tmp_path / "exp" / "epochs.yaml").write_text("name: epochs\nbase: {script: ../train.py, epochs: 3}\n")
    with pytest.raises(InvalidSpec, match="cell r0: epochs: orch's own trainer reads it, and --script runs your"):
        load(tmp_path / "exp" / "epochs.yaml")


# -- the snapshot: no name, race or link changes what its hash list says -------------------------------------------
def _tree(root: Path, files: dict) -> Path:
    """``root`` holding ``files`` (relative path, str or bytes name -> content), and train.py."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text("print(1)\n")
    for name, content in files.items():
        path = os.path.join(os.fsencode(root), os.fsencode(name))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    return root


def _snap(src: Path, run: Path):
    run.mkdir(parents=True)
    return snapshot(check(_spec(src / "train.py")), run / "source"), (run / "source.sha256").read_bytes()


def _sha256sum_checks(run: Path) -> None:
    """coreutils' sha256sum reads the list back and finds every file as hashed."""
    proc = subprocess.run(["sha256sum", "--check", "--strict", "../source.sha256"], cwd=run / "source",
                          capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_name_with_a_newline_cannot_forge_another_files_line(tmp_path):
    """Listed raw, a file named "x\\n<hash of y>  y" writes a line that looks like y's: a tree of it alone listed
    exactly as a tree of x and y. Escaped as sha256sum escapes it, every file is one line and the trees differ."""
    body_x, body_y = b"x = 1\n", b"y = 2\n"
    forged = "x\n" + hashlib.sha256(body_y).hexdigest() + "  y"
    honest, _ = _snap(_tree(tmp_path / "honest", {"x": body_x, "y": body_y}), tmp_path / "run1")
    forging, listed = _snap(_tree(tmp_path / "forging", {forged: body_x}), tmp_path / "run2")
    assert honest["sha256"] != forging["sha256"]
    assert listed.count(b"\n") == 2 and b"  x\\n" in listed  # train.py and the one escaped line
    assert listed.split(b"\n")[1].startswith(b"\\" + hashlib.sha256(body_x).hexdigest().encode())
    _sha256sum_checks(tmp_path / "run2")


def test_names_with_backslashes_newlines_and_any_bytes_list_apart_and_check(tmp_path):
    names = {"a\\nb": b"1", "a\nb": b"2", "back\\slash": b"3", "crlf\r\n.py": b"4", b"latin-\xff.py": b"5",
             "pkg/deep\nname.py": b"6", "plain.py": b"7"}
    record, listed = _snap(_tree(tmp_path / "src", names), tmp_path / "run")
    lines = listed.split(b"\n")[:-1]
    assert record["files"] == len(lines) == len(names) + 1 and len(set(lines)) == len(lines)
    assert b"\\" + hashlib.sha256(b"1").hexdigest().encode() + b"  a\\\\nb" in lines
    assert b"\\" + hashlib.sha256(b"2").hexdigest().encode() + b"  a\\nb" in lines
    assert hashlib.sha256(b"5").hexdigest().encode() + b"  latin-\xff.py" in lines  # its bytes, as on disk
    assert hashlib.sha256(listed).hexdigest() == record["sha256"]
    _sha256sum_checks(tmp_path / "run")


@pytest.fixture
def secret(tmp_path) -> Path:
    """A folder outside the source, laid out as the source's pkg/ (the same names and sizes): what a swap would
    have copied."""
    (tmp_path / "outside").mkdir()
    for name in ("model.py", "util.py"):
        (tmp_path / "outside" / name).write_text("SECRT\n")
    return tmp_path / "outside"


def _source_with_pkg(tmp_path: Path) -> Path:
    return _tree(tmp_path / "src", {"pkg/model.py": b"X = 1\n", "pkg/util.py": b"Y = 2\n"})


def _nothing_of(secret: Path, run: Path) -> None:
    for path in run.rglob("*"):
        if path.is_file():
            assert b"SECRT" not in path.read_bytes(), path


def test_a_folder_swapped_for_a_link_between_listing_and_copy_is_refused(tmp_path, secret):
    src = _source_with_pkg(tmp_path)
    listing = check(_spec(src / "train.py"))
    (src / "pkg").rename(tmp_path / "pkg.real")
    (src / "pkg").symlink_to(secret)  # the same names and sizes: only the identity tells them apart
    (tmp_path / "run").mkdir()
    with pytest.raises(InvalidSpec) as caught:
        snapshot(listing, tmp_path / "run" / "source")
    assert "pkg was replaced by a link or a file while orch copied the folder" in caught.value.message
    assert "\n" not in caught.value.message and not (tmp_path / "run" / "source.sha256").exists()
    _nothing_of(secret, tmp_path / "run")


def test_a_folder_swapped_for_another_folder_between_listing_and_copy_is_refused(tmp_path, secret):
    src = _source_with_pkg(tmp_path)
    listing = check(_spec(src / "train.py"))
    (src / "pkg").rename(tmp_path / "pkg.real")
    shutil.copytree(tmp_path / "pkg.real", src / "pkg")
    (tmp_path / "run").mkdir()
    with pytest.raises(InvalidSpec, match="pkg was replaced by another folder"):
        snapshot(listing, tmp_path / "run" / "source")


def test_a_folder_swapped_for_a_link_during_the_copy_is_never_followed(tmp_path, secret, monkeypatch):
    """The swap comes while pkg/model.py is being copied: pkg/util.py is read through the folder's fd, which still
    names the folder listed (now pkg.real), never through the link now at its path."""
    src = _source_with_pkg(tmp_path)
    listing = check(_spec(src / "train.py"))
    real_chunks = snapshot_module._chunks

    def swap_then_read(fd, size):
        if not (src / "pkg").is_symlink():
            (src / "pkg").rename(tmp_path / "pkg.real")
            (src / "pkg").symlink_to(secret)
        yield from real_chunks(fd, size)

    monkeypatch.setattr(snapshot_module, "_chunks", swap_then_read)
    (tmp_path / "run").mkdir()
    record = snapshot(listing, tmp_path / "run" / "source")
    assert record["files"] == 3 and (tmp_path / "run" / "source" / "pkg" / "util.py").read_text() == "Y = 2\n"
    _nothing_of(secret, tmp_path / "run")
    _sha256sum_checks(tmp_path / "run")


def test_a_file_swapped_for_a_link_between_listing_and_copy_is_refused(tmp_path, secret):
    src = _source_with_pkg(tmp_path)
    listing = check(_spec(src / "train.py"))
    (src / "pkg" / "model.py").unlink()
    (src / "pkg" / "model.py").symlink_to(secret / "model.py")
    (tmp_path / "run").mkdir()
    with pytest.raises(InvalidSpec, match="pkg/model.py was replaced by a link while"):
        snapshot(listing, tmp_path / "run" / "source")
    _nothing_of(secret, tmp_path / "run")


def _changed(folder: Path, rel: str, reason: str) -> str:
    """The refusal a user reads when ``rel`` of ``folder`` changed while orch copied it."""
    return f"source: {folder / rel} {reason} while orch copied the folder; run again once it holds still"


def _socket_in_place_of(path: Path) -> None:
    """``path`` replaced by a Unix socket, which no open() reads (ENXIO); bound by its short name, since a socket's
    path may not be long."""
    path.unlink()
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)
    finally:
        os.chdir(here)


@pytest.mark.parametrize("change, reasons", [
    (lambda path: path.write_bytes(b"X = 100\n"), ["changed size (6 bytes listed, 8 now)"]),
    (lambda path: (path.unlink(), path.write_bytes(b"X = 9\n")),  # perhaps with the same inode
     ["was replaced by another file", "was replaced or rewritten"]),
    (lambda path: path.write_bytes(b"X = 9\n"), ["was replaced or rewritten"]),
    (lambda path: path.unlink(), ["is gone"]),
    (lambda path: (path.unlink(), os.mkfifo(path)), ["was replaced by another file"]),
    (_socket_in_place_of, ["cannot be read: No such device or address"]),
])
def test_a_file_that_changes_between_listing_and_copy_is_refused(tmp_path, change, reasons):
    src = _source_with_pkg(tmp_path)
    listing = check(_spec(src / "train.py"))
    change(src / "pkg" / "model.py")
    (tmp_path / "run").mkdir()
    started = time.monotonic()
    with pytest.raises(InvalidSpec) as caught:
        snapshot(listing, tmp_path / "run" / "source")
    assert caught.value.message in [_changed(listing.folder, "pkg/model.py", reason) for reason in reasons]
    assert time.monotonic() - started < HANG_S  # a FIFO is refused, never waited on
    assert not (tmp_path / "run" / "source.sha256").exists()


@pytest.mark.parametrize("grow, reason", [(True, "grew past the 3,145,728 bytes listed"),
                                          (False, "shrank (3,145,728 bytes listed, 1,048,576 read)")])
def test_a_file_that_grows_or_shrinks_while_it_is_copied_is_refused(tmp_path, monkeypatch, grow, reason):
    """Copied as it grew, the snapshot would hold bytes the listing never saw; the copy reads what was listed,
    sees the rest, and refuses."""
    src = _tree(tmp_path / "src", {"weights.bin": b"\0" * (3 << 20)})
    listing = check(_spec(src / "train.py"))
    real_chunks = snapshot_module._chunks

    def change_after_the_first_chunk(fd, size):
        for i, chunk in enumerate(real_chunks(fd, size)):
            if i == 0 and size > 1000:
                if grow:
                    with open(src / "weights.bin", "ab") as f:
                        f.write(b"MORE")
                else:
                    os.truncate(src / "weights.bin", 1 << 20)
            yield chunk

    monkeypatch.setattr(snapshot_module, "_chunks", change_after_the_first_chunk)
    (tmp_path / "run").mkdir()
    with pytest.raises(InvalidSpec) as caught:
        snapshot(listing, tmp_path / "run" / "source")
    assert f"weights.bin {reason}" in caught.value.message


def test_a_file_rewritten_in_place_while_it_is_copied_is_refused(tmp_path, monkeypatch):
    """The same size, other bytes, written while the copy reads it: only the inode's change time tells."""
    src = _tree(tmp_path / "src", {"data.txt": b"0123456789"})
    listing = check(_spec(src / "train.py"))
    (listed,) = [f for f in listing.files if f.path == "data.txt"]
    real_chunks = snapshot_module._chunks

    def rewrite_while_read(fd, size):
        for chunk in real_chunks(fd, size):
            deadline = time.monotonic() + HANG_S
            while size == listed.size and os.stat(src / "data.txt").st_ctime_ns == listed.changed \
                    and time.monotonic() < deadline:  # again until the file system's clock has moved on
                with open(src / "data.txt", "r+b") as f:
                    f.write(b"9876543210")
            yield chunk

    monkeypatch.setattr(snapshot_module, "_chunks", rewrite_while_read)
    (tmp_path / "run").mkdir()
    with pytest.raises(InvalidSpec) as caught:
        snapshot(listing, tmp_path / "run" / "source")
    assert caught.value.message == _changed(listing.folder, "data.txt", "was rewritten")


def test_a_file_cut_short_after_its_bytes_were_read_is_refused_for_its_size(tmp_path, monkeypatch):
    """Its bytes were all read, then it shrank: the size it has now differs from the listing's, and that refuses
    the copy whether or not the file system's clock has moved on since the file was written."""
    src = _tree(tmp_path / "src", {"data.txt": b"0123456789"})
    listing = check(_spec(src / "train.py"))
    real_chunks = snapshot_module._chunks

    def cut_after_reading(fd, size):
        yield from real_chunks(fd, size)
        if size == 10:
            os.truncate(src / "data.txt", 4)

    monkeypatch.setattr(snapshot_module, "_chunks", cut_after_reading)
    (tmp_path / "run").mkdir()
    with pytest.raises(InvalidSpec) as caught:
        snapshot(listing, tmp_path / "run" / "source")
    assert caught.value.message == _changed(listing.folder, "data.txt",
                                            "changed size while it was copied (10 bytes listed, 4 now)")


def test_a_source_folder_swapped_for_a_link_before_the_copy_is_refused(tmp_path, secret):
    src = _source_with_pkg(tmp_path)
    listing = check(_spec(src / "train.py"))
    src.rename(tmp_path / "src.real")
    src.symlink_to(secret)
    (tmp_path / "run").mkdir()
    with pytest.raises(InvalidSpec) as caught:
        snapshot(listing, tmp_path / "run" / "source")
    assert caught.value.message == f"source: cannot read {listing.folder}: Not a directory"
    assert not (tmp_path / "run" / "source.sha256").exists()
    _nothing_of(secret, tmp_path / "run")


def test_a_file_removed_while_its_folder_is_listed_is_left_out_and_the_rest_listed(tmp_path, monkeypatch):
    """a.py is gone between the folder's read and the look at each of its entries: the listing goes on past it."""
    src = _tree(tmp_path / "src", {"a.py": b"1", "b.py": b"2"})
    real_scandir = os.scandir

    def scandir_then_remove(fd):
        with real_scandir(fd) as found:
            entries = list(found)
        (src / "a.py").unlink(missing_ok=True)
        return contextlib.nullcontext(entries)

    monkeypatch.setattr(os, "scandir", scandir_then_remove)
    listing = check(_spec(src / "train.py"))
    assert [f.path for f in listing.files] == ["b.py", "train.py"]


def test_a_snapshots_record_says_where_from_how_much_and_at_most_20_of_what_it_left_out(tmp_path):
    src = _tree(tmp_path / "src", {"pkg/model.py": b"X = 1\n"})
    for i in range(25):
        (src / f"link{i:02}").symlink_to("/etc/hostname")
    record, listed = _snap(src, tmp_path / "run")
    assert record == {"from": str(src.resolve()), "files": 2, "bytes": 9 + 6,
                      "sha256": hashlib.sha256(listed).hexdigest(), "skipped": [f"link{i:02}" for i in range(20)]}


def test_an_executable_file_stays_executable_and_no_other_file_becomes_so(tmp_path):
    src = _tree(tmp_path / "src", {"run.sh": b"#!/bin/sh\n", "others.sh": b"#!/bin/sh\n", "shared.py": b"X = 1\n"})
    (src / "run.sh").chmod(0o700)
    (src / "others.sh").chmod(0o601)  # executable by others alone
    (src / "shared.py").chmod(0o666)  # writable by anyone, executable by no one
    _snap(src, tmp_path / "run")
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "run" / "source").iterdir()}
    assert modes == {"run.sh": 0o755, "others.sh": 0o755, "shared.py": 0o644, "train.py": 0o644}


@pytest.mark.early
def test_a_real_race_swapping_a_folder_and_a_link_never_copies_what_the_link_names(tmp_path, secret):
    """A thread swaps pkg between the real folder and a link to another one, as fast as it can, while snapshots are
    listed and copied over and over. Each is refused or copies the real folder's bytes, with a hash list that
    sha256sum checks; none holds a byte of the other folder."""
    src = _source_with_pkg(tmp_path)
    (tmp_path / "link").symlink_to(secret)
    stop = threading.Event()
    swaps = [0]

    def swapper():
        while not stop.is_set():
            os.rename(src / "pkg", tmp_path / "held")  # the real folder out, the link in, and back
            os.rename(tmp_path / "link", src / "pkg")
            os.rename(src / "pkg", tmp_path / "link")
            os.rename(tmp_path / "held", src / "pkg")
            swaps[0] += 1

    thread = threading.Thread(target=swapper)
    thread.start()
    outcomes = {"copied": 0, "refused": 0}
    try:
        deadline = time.monotonic() + 3
        attempt = 0
        while time.monotonic() < deadline or min(outcomes.values()) == 0 and attempt < 2000:
            attempt += 1
            run = tmp_path / f"run{attempt}"
            run.mkdir()
            try:
                record = snapshot(check(_spec(src / "train.py")), run / "source")
            except InvalidSpec:
                outcomes["refused"] += 1
            else:
                outcomes["copied"] += 1
                _nothing_of(secret, run)
                assert record["files"] in (1, 3)  # pkg listed as the folder, or skipped as a link
                _sha256sum_checks(run)
            shutil.rmtree(run)
    finally:
        stop.set()
        thread.join()
    assert swaps[0] > 100 and outcomes["copied"] > 0, (swaps, outcomes)
