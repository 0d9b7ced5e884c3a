"""A container's text reaches a terminal or a report only made safe: control characters, escape sequences and
lone surrogates shown visibly, never interpreted; Rich markup never read in it; Markdown escaped. No engine."""
from __future__ import annotations

import io
import json
import re

import pytest

from orchestrator import contract
from orchestrator.cli.env import Environment
from orchestrator.errors import ContractMismatch, WorkerFailed
from orchestrator.jobspec import make_spec
from orchestrator.run import logs
from orchestrator.run.records import parse_event
from orchestrator.run.rundir import RunDir, RunInfo, RunState
from orchestrator.safetext import markdown, printable
from tests.test_cli_inprocess import folders, no_engine, orch  # noqa: F401 - fixtures

# A window title (OSC 0), the clipboard (OSC 52), clearing the screen (CSI), an 8-bit CSI (C1), DEL, a bell,
# a backspace, a carriage return and Rich markup.
HOSTILE = "ok \x1b]0;pwned\x07 \x1b]52;c;ZXZpbA==\x1b\\ \x1b[2J\x9b31m\x7f\x08\r [bold red]markup[/] end"
UNSAFE = [chr(c) for c in [*range(0, 9), *range(11, 32), *range(0x7F, 0xA0)]]


def assert_safe(text: str) -> None:
    found = sorted({f"{ord(c):#x}" for c in text if c in UNSAFE or 0xD800 <= ord(c) <= 0xDFFF})
    assert not found, f"unsafe characters reached the output: {found}"


def unescaped(char: str, text: str) -> bool:
    """Whether ``char`` occurs in ``text`` without a backslash before it."""
    return bool(re.search(r"(?<!\\)" + re.escape(char), text))


# -- the one function ------------------------------------------------------------------------------------
def test_printable_shows_every_control_character_visibly_and_keeps_the_rest():
    shown = printable(HOSTILE)
    assert_safe(shown)
    assert shown.startswith("ok \\x1b]0;pwned\\x07 \\x1b]52;c;ZXZpbA==\\x1b\\ \\x1b[2J\\x9b31m\\x7f\\x08\\x0d ")
    assert "[bold red]markup[/] end" in shown
    assert printable("tab\tand newline\nstay; é, 中文 and emoji 🙂 too") == "tab\tand newline\nstay; é, 中文 and emoji 🙂 too"
    assert printable("\ud800 lone") == "\\ud800 lone"  # would crash the UTF-8 write


def test_markdown_is_inert_text():
    text = markdown("[x](javascript:alert(1)) <img src=x onerror=alert(1)> *b* `c` |d| $e$ \\ \x1b[2J\n# heading")
    assert_safe(text)
    assert "\n" not in text and not unescaped("<", text) and not unescaped("`", text) and not unescaped("]", text)
    assert "\\[x\\]" in text and "\\<img" in text and "\\x1b" in text and "\\|d\\|" in text


# -- every path to the terminal ------------------------------------------------------------------------
def _run_with_log(root, lines: list[str], run_id: str = "r1") -> RunDir:
    spec = make_spec(run_id=run_id, workers=1, dataset="synthetic")
    run = RunDir(root / "runs" / run_id)
    (run.path / "logs").mkdir(parents=True)
    run.write_record(RunInfo(run_id=run_id, state=RunState.FAILED, spec=spec, started=1.0,
                             error="worker-0 said \x1b]0;title\x07 \x9b2J"))
    records = [logs.LogRecord(0, "stdout", 1_700_000_000.0 + i, line) for i, line in enumerate(lines)]
    run.saved_log(("worker", 0)).write_text("".join(logs.format_saved_line(r) + "\n" for r in records))
    return run


@pytest.mark.parametrize("isatty", [False, True])
def test_orch_logs_shows_a_containers_escapes_visibly(folders, no_engine, isatty):  # noqa: F811
    _run_with_log(folders, [HOSTILE, "second \x1b[31mline"])
    result = orch("logs", "r1", isatty=isatty)
    assert result.code == 0, result
    assert "\x1b]" not in result.out and "\x1b[2J" not in result.out and "\x1b[31ml" not in result.out
    assert "\x9b" not in result.out and "\x07" not in result.out and "\x7f" not in result.out
    assert "\\x1b]0;pwned\\x07" in result.out and "[bold red]markup[/] end" in result.out
    if not isatty:
        assert_safe(result.out)


def test_orch_logs_raw_writes_the_bytes_as_stored_and_never_to_a_terminal(folders, no_engine):  # noqa: F811
    _run_with_log(folders, [HOSTILE])
    result = orch("logs", "--raw", "r1")
    assert result.code == 0, result
    assert result.out == f"worker-0 | {HOSTILE}\n"
    refused = orch("logs", "--raw", "r1", isatty=True)
    assert refused.code == 2 and refused.out == ""
    lines = refused.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orch: error:") and "--raw" in lines[0] and "terminal" in lines[0]


def test_ps_json_escapes_what_a_terminal_would_read(folders, no_engine):  # noqa: F811
    _run_with_log(folders, ["x"])
    result = orch("ps", "--format", "json")
    assert result.code == 0, result
    assert_safe(result.out)
    assert json.loads(result.out)[0]["error"] == "worker-0 said \x1b]0;title\x07 \x9b2J"  # the data itself, whole


@pytest.mark.parametrize("isatty", [False, True])
def test_a_failures_last_lines_and_message_are_shown_safely(monkeypatch, isatty):
    from orchestrator.run import runs

    def fail(*args, **kwargs):
        raise WorkerFailed(0, 1, "worker-0 exited \x1b]0;t\x07", details=f"{HOSTILE}\nTraceback \x9b31m\ud800")

    monkeypatch.setattr(runs, "ps", fail)
    result = orch("ps", isatty=isatty)
    assert result.code == 1, result
    assert "\x1b]" not in result.err and "\x9b" not in result.err and "\x07" not in result.err
    assert "\\x1b]0;pwned\\x07" in result.err and "[bold red]markup[/]" in result.err and "\\ud800" in result.err


@pytest.mark.parametrize("isatty", [False, True])
def test_error_events_and_progress_lines_are_shown_safely(isatty):
    from orchestrator.cli.cmd_up import Watcher

    out, err = io.StringIO(), io.StringIO()
    env = Environment.from_streams(out, err, isatty=isatty)
    message = HOSTILE + "x" * 9000  # (a lone surrogate is refused by the record's validation)
    event = parse_event({"v": contract.CONTRACT_VERSION, "worker": 0, "time": 1.0, "event": "error",
                         "message": message})
    with Watcher(env, [("worker", 0)], epochs=1) as watcher:
        watcher(("worker", 0), event)
    env.say(f"cell c1 failed: {HOSTILE} \ud800")
    env.error(f"orch: error: {HOSTILE}")
    text = err.getvalue()
    assert "\x1b]" not in text and "\x9b" not in text and "\x07" not in text and "\ud800" not in text
    assert text.count("[bold red]markup[/]") == 3 and "\\ud800" in text


@pytest.mark.parametrize("isatty", [False, True])
def test_a_replicas_printed_lines_are_shown_live_prefixed_and_inert(isatty):
    from orchestrator.cli.cmd_up import Watcher
    from orchestrator.run.logs import LogRecord

    out, err = io.StringIO(), io.StringIO()
    env = Environment.from_streams(out, err, isatty=isatty)
    with Watcher(env, [("worker", 0)], epochs=None, replicas=[("worker", 0), ("worker", 10)]) as watcher:
        watcher.line(LogRecord(0, "stdout", 1.0, HOSTILE))
        watcher.line(LogRecord(10, "stderr", 1.0, "loss 0.5"))
    text = err.getvalue()
    assert "\x1b]" not in text and "\x9b" not in text and "\x07" not in text
    assert "worker-0  | " in text and "[bold red]markup[/]" in text  # aligned as docker compose aligns them
    assert "worker-10 | loss 0.5" in text and out.getvalue() == ""
    quiet_err = io.StringIO()
    with Watcher(Environment.from_streams(io.StringIO(), quiet_err, isatty=isatty), [("worker", 0)], epochs=None,
                 quiet=True) as quiet:
        quiet.line(LogRecord(0, "stdout", 1.0, "hidden"))
    assert "hidden" not in quiet_err.getvalue()


def test_table_cells_are_shown_safely():
    from rich.console import Console

    from orchestrator.cli.tables import workers_table

    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(workers_table([{"role": "worker\x1b[2J", "worker": 0, "exit_code": "1\x9b"}]))
    assert_safe(console.file.getvalue())
    assert "worker\\x1b[2J-0" in console.file.getvalue()


# -- Markdown reports ----------------------------------------------------------------------------------------
def test_a_contract_version_a_container_chose_is_bounded_and_inert_in_report_md(monkeypatch, tmp_path):
    from orchestrator.analysis import report
    from orchestrator.experiments.file import parse

    version = "[click](javascript:alert(1)) <img src=x onerror=alert(1)>\n# owned " + "y" * 5000
    with pytest.raises(ContractMismatch) as caught:
        parse_event({"v": version, "event": "error", "worker": 0, "message": "x"}, "an event of worker-0")
    assert len(caught.value.message) < 400 and "\n" not in caught.value.message
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")
    experiment = parse("name: md\nbase: {dataset: synthetic}\n")
    cells = {"r0": {"params": {}, "fields": {"dataset": "synthetic"}, "state": "failed", "run_id": "md-r0-0000",
                    "error": caught.value.message + " | cell | \x1b[2J"}}
    text = report.write_experiment_report(experiment, False, cells, [], tmp_path).read_text()
    assert_safe(text.replace("\n", " "))
    failed = [line for line in text.splitlines() if line.startswith("- `r0`")]
    assert len(failed) == 1 and "\\<img" in failed[0] and not unescaped("<", failed[0].split(":", 1)[1])
    assert "\\](javascript" in failed[0] and not unescaped("]", failed[0])
    assert "\\| cell \\|" in failed[0] and not any(line.startswith("# owned") for line in text.splitlines())


def test_orch_logs_json_is_one_object_a_line_with_the_line_whole_and_no_raw_control(folders, no_engine):  # noqa: F811
    _run_with_log(folders, [HOSTILE, "second"])
    result = orch("logs", "--format", "json", "r1")
    assert result.code == 0, result
    assert_safe(result.out)
    rows = [json.loads(line) for line in result.out.splitlines()]
    assert [r["line"] for r in rows] == [HOSTILE, "second"]  # the data itself, whole
    assert rows[0]["replica"] == "worker-0" and rows[0]["stream"] == "stdout" and rows[0]["time"] == 1_700_000_000.0
    both = orch("logs", "--format", "json", "--raw", "r1")
    assert both.code == 2 and "pick one" in both.err


def test_down_json_lists_the_runs_taken_down(folders, no_engine):  # noqa: F811
    _run_with_log(folders, ["x"])
    result = orch("down", "--format", "json", "r1")
    assert result.code == 0, result
    assert json.loads(result.out) == [{"run_id": "r1", "state": "down"}]
