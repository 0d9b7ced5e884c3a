"""Each refusal of a user's script folder (orchestrator/run/scripts.py's check), word for word: which field it names,
the flag, the path and the advice. No engine.

tests/test_scripts.py checks what is refused; these pin what the user reads, which mutation testing
(benchmarks/mutation.py) found it left open."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import make_spec
from orchestrator.run.scripts import absolute, check, limit_bytes

ADVICE = "move the script into a folder of its own, or name one with --source DIR"


def refusal(script: Path, guarded: tuple = (), **fields) -> str:
    with pytest.raises(InvalidSpec) as caught:
        check(make_spec(run_id="s", script=str(script), **fields), guarded)
    return caught.value.message


def test_a_script_that_is_missing_no_file_or_unreadable_is_named_with_why(tmp_path, monkeypatch):
    missing, folder, ok = tmp_path / "missing.py", tmp_path / "folder.py", tmp_path / "ok.py"
    folder.mkdir()
    ok.write_text("print(1)\n")
    assert refusal(missing) == f"script: cannot use {str(missing)!r}: No such file or directory"
    assert refusal(folder) == f"script: {str(folder)!r} is not a regular file"
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert refusal(ok) == f"script: {str(ok)!r} is not readable"


def test_a_source_that_is_no_folder_or_does_not_hold_the_script_is_refused(tmp_path):
    (tmp_path / "proj").mkdir()
    script = tmp_path / "proj" / "train.py"
    script.write_text("print(1)\n")
    (tmp_path / "other").mkdir()
    assert refusal(script, source=str(script)) == f"source: {str(script)!r} is not a folder"
    assert refusal(script, source=str(tmp_path / "other")) == \
        f"source: the script {str(script)!r} is not inside --source {str(tmp_path / 'other')!r}"


def test_a_home_folder_or_orchs_own_folder_is_refused_by_the_flag_that_named_it(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    (home / "proj" / "runs").mkdir(parents=True)
    (home / "train.py").write_text("print(1)\n")
    (home / "proj" / "train.py").write_text("print(1)\n")
    assert refusal(home / "train.py") == (f"script: --script would copy the home folder {home.resolve()}, with its "
                                          f"keys and credentials; {ADVICE}")
    assert refusal(home / "proj" / "train.py", source=str(tmp_path)).startswith(
        "source: --source would copy the home folder ")
    proj = (home / "proj").resolve()
    assert refusal(home / "proj" / "train.py", guarded=(home / "proj" / "runs",)) == (
        f"script: {proj} holds orch's own runs/ folder, which replicas must not see; {ADVICE}, or keep orch's "
        "folders elsewhere (--runs-dir, --results-dir)")


def test_a_folder_over_the_limit_names_the_flag_that_chose_it(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "weights.bin").write_bytes(b"\0" * (2 << 20))
    monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", "1")
    assert refusal(tmp_path / "train.py") == (
        f"script: {tmp_path.resolve()} holds more than 1 MiB, too much to copy into every run; name a smaller folder "
        "with --source DIR, or raise ORCH_SOURCE_LIMIT_MB")


def test_the_size_limit_counts_every_file_and_takes_a_folder_of_exactly_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", "1")
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "a.bin").write_bytes(b"\0" * ((1 << 20) - 9))
    assert check(make_spec(run_id="s", script=str(tmp_path / "train.py"))).size == 1 << 20
    (tmp_path / "a.bin").write_bytes(b"\0" * (600 << 10))
    (tmp_path / "b.bin").write_bytes(b"\0" * (600 << 10))
    assert "holds more than 1 MiB" in refusal(tmp_path / "train.py")


def test_the_file_count_and_depth_limits_hold_at_their_edges(tmp_path, monkeypatch):
    from orchestrator.run import scripts

    monkeypatch.setattr(scripts, "MAX_FILES", 3)
    monkeypatch.setattr(scripts, "MAX_DEPTH", 3)
    for name in ("train.py", "b.py", "c.py"):
        (tmp_path / name).write_text("print(1)\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    listing = check(make_spec(run_id="s", script=str(tmp_path / "train.py")))
    assert [f.path for f in listing.folders] == ["", "a", "a/b"] and {f.size for f in listing.folders} == {0}
    (tmp_path / "d.py").write_text("print(1)\n")
    assert refusal(tmp_path / "train.py").startswith(f"script: {tmp_path.resolve()} holds more than 3 files, ")
    (tmp_path / "d.py").unlink()
    (tmp_path / "a" / "b" / "c").mkdir()
    assert refusal(tmp_path / "train.py") == \
        f"script: {tmp_path.resolve()} is nested deeper than 3 folders ({tmp_path.resolve() / 'a/b/c'})"


def test_a_skipped_folder_leaves_out_only_itself(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("x")
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "z.py").write_text("print(2)\n")
    listing = check(make_spec(run_id="s", script=str(tmp_path / "train.py")))
    assert [f.path for f in listing.files] == ["train.py", "z.py"]


def test_the_snapshot_limit_is_read_in_mib_and_refused_whole_when_it_is_none(monkeypatch):
    monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", "3")
    assert limit_bytes() == 3 << 20
    for raw, message in (("lots", "ORCH_SOURCE_LIMIT_MB: 'lots' is not a whole number of MiB, e.g. 256"),
                         ("0", "ORCH_SOURCE_LIMIT_MB: 0 is below 1 MiB")):
        monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", raw)
        with pytest.raises(InvalidSpec) as caught:
            limit_bytes()
        assert caught.value.message == message


def test_a_script_name_with_a_nul_is_left_for_the_spec_to_refuse():
    assert absolute("a\x00b.py", Path("/base")) == "a\x00b.py"
    assert absolute("", Path("/base")) == ""


def test_source_root_is_refused_as_root_not_as_a_home_folder(tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    assert refusal(tmp_path / "train.py", source="/") == f"source: --source would copy / itself; {ADVICE}"


def test_a_limit_that_is_no_number_is_shown_cut_to_40_characters(monkeypatch):
    monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", "9" * 39 + "x" * 60)
    with pytest.raises(InvalidSpec) as caught:
        limit_bytes()
    assert caught.value.message == \
        f"ORCH_SOURCE_LIMIT_MB: {'9' * 39 + 'x'!r} is not a whole number of MiB, e.g. 256"


def test_a_folder_that_cannot_be_listed_is_named_with_the_systems_reason(tmp_path, monkeypatch):
    """A read error on the folder itself (an I/O error of its disk, made here) is one line: the folder and why."""
    (tmp_path / "train.py").write_text("print(1)\n")

    def failing(path):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "scandir", failing)
    assert refusal(tmp_path / "train.py") == f"script: cannot read {tmp_path.resolve()}: Input/output error"


def test_a_folder_over_the_size_limit_at_exactly_the_file_limit_is_refused_for_its_size(tmp_path, monkeypatch):
    from orchestrator.run import scripts

    monkeypatch.setattr(scripts, "MAX_FILES", 2)
    monkeypatch.setenv("ORCH_SOURCE_LIMIT_MB", "1")
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "weights.bin").write_bytes(b"\0" * (2 << 20))  # the second file: the count is at its limit, not over
    assert refusal(tmp_path / "train.py").startswith(f"script: {tmp_path.resolve()} holds more than 1 MiB, ")
