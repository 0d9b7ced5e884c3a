"""Log records: parsing, noise, filters; and `orch logs` on real runs."""
import re
import subprocess

import pytest

from orchestrator.run.logs import (
    LogFilter,
    LogRecord,
    format_saved_line,
    is_noise,
    parse_engine_line,
    parse_saved_line,
    parse_since,
    select,
)
from tests.conftest import run_orch

TF_NOISE = [
    "I0000 00:00:1795264806.063359       1 port.cc:153] oneDNN custom operations are on. You may see slightly",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "2026-11-21 12:00:00.000000: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow binary",
    "W0000 00:00:1795264828.788357       1 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be",
]


@pytest.mark.parametrize("line", TF_NOISE)
def test_tensorflow_noise_is_recognised(line):
    assert is_noise(line)


def test_orch_lines_and_tracebacks_are_not_noise():
    assert not is_noise("[orch] worker 0 epoch 1/5 loss 0.7 acc 0.8")
    assert not is_noise("Traceback (most recent call last):")


def test_engine_timestamp_is_parsed_with_nanoseconds():
    record = parse_engine_line("2026-11-21T12:44:41.648064379Z hello world", 2, "stderr")
    assert record.worker == 2 and record.stream == "stderr" and record.line == "hello world"
    assert abs(record.time - 1795265081.648064) < 1e-3


def test_saved_line_round_trips():
    record = LogRecord(1, "stdout", 1795265081.5, "a line with  spaces")
    assert parse_saved_line(format_saved_line(record), 1) == record


# A container's one line with every break str.splitlines() knows, the first of them a "\r" followed by a forged
# saved-log prefix: another time and another stream.
FORGERY = ("progress 10%\r2001-01-01T00:00:00.000000Z stderr forged\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\u2029i")


class _Engine:
    """A backend's log API: one replica's stdout, two lines."""

    def log_lines(self, replica, stream, follow=False, since=None):
        lines = [f"2026-11-21T12:00:01.000000000Z {FORGERY}", "2026-11-21T12:00:02.000000000Z next"]
        return iter(lines if stream == "stdout" else [])


def test_a_break_inside_a_containers_line_is_not_a_second_record(tmp_path):
    from orchestrator.backends import ReplicaState, Status
    from orchestrator.run import logs
    from orchestrator.run.rundir import RunDir
    from orchestrator.run.attempt import meaningful_lines

    run = RunDir(tmp_path / "r1")
    (run.path / "logs").mkdir(parents=True)
    replica = ReplicaState(id="c1", name="r1-worker-0", run="r1", role="worker", index=0, status=Status.SUCCEEDED)
    logs.save(_Engine(), run, [replica])
    records = logs.saved_records(run, [("worker", 0)])
    assert [(r.stream, r.line) for r in records] == [("stdout", FORGERY), ("stdout", "next")]
    assert records[0].time == parse_engine_line("2026-11-21T12:00:01.000000000Z x", 0, "stdout").time
    assert meaningful_lines(f"{FORGERY}\nlast\n", 5) == [FORGERY, "last"]


def test_filters_and_tail_per_worker():
    records = [LogRecord(w, "stdout", float(t), f"w{w} line {t}") for t in range(10) for w in (0, 1)]
    assert [r.line for r in select(records, LogFilter(workers=frozenset({1})), tail=2)] == ["w1 line 8", "w1 line 9"]
    assert len(select(records, LogFilter(grep=re.compile(r"line [12]$")))) == 4
    assert all(r.time >= 5 for r in select(records, LogFilter(since=5.0)))
    assert select(records, LogFilter(), tail=0) == []


def test_since_accepts_durations_and_iso_times():
    assert parse_since("5m", now=1000.0) == 700.0
    assert parse_since("2026-11-21T12:00:00Z") == 1795262400.0
    with pytest.raises(ValueError):
        parse_since("yesterday")


@pytest.mark.docker
def test_logs_of_a_finished_run_are_merged_and_prefixed(observed_runs):
    proc = run_orch(["logs", "observed-w3", "--no-color"], observed_runs["env"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert {line.split(" | ")[0] for line in lines} == {"worker-0", "worker-1", "worker-2"}
    assert not any(is_noise(line.split(" | ", 1)[1]) for line in lines)
    assert any("epoch 3/3" in line for line in lines)
    noisy = run_orch(["logs", "observed-w3", "--all"], observed_runs["env"]).stdout.splitlines()
    assert len(noisy) > len(lines)


@pytest.mark.docker
def test_logs_filters_on_a_real_run(observed_runs):
    env = observed_runs["env"]
    only = run_orch(["logs", "observed-w3", "--worker", "2", "--grep", "epoch", "--tail", "2"], env).stdout.splitlines()
    assert len(only) == 2 and all(line.startswith("worker-2 | ") and "epoch" in line for line in only)
    newest = run_orch(["logs", "--tail", "1"], env)  # the newest run
    assert newest.returncode == 0 and newest.stdout.strip()
    bad = run_orch(["logs", "observed-w3", "--since", "yesterday"], env)
    assert bad.returncode == 2 and bad.stderr.startswith("orch: error:")


@pytest.mark.docker
def test_follow_streams_a_running_run_until_it_ends(images, orch_env, cleanup):
    cleanup.append("live-follow")
    up = run_orch(["up", "-n", "2", "--dataset", "synthetic", "--samples", "6000", "--epochs", "2",
                   "--steps-per-execution", "1", "--run-id", "live-follow", "--detach"], orch_env)
    assert up.returncode == 0, up.stderr
    followed = run_orch(["logs", "live-follow", "-f", "--grep", "done"], orch_env, timeout=300)
    assert followed.returncode == 0, followed.stderr
    assert sorted(line.split(" | ")[0] for line in followed.stdout.splitlines()) == ["worker-0", "worker-1"]
    assert run_orch(["down", "live-follow"], orch_env).returncode == 0
    after = run_orch(["logs", "live-follow", "--grep", "done"], orch_env)  # saved by `down`
    assert len(after.stdout.splitlines()) == 2
    assert subprocess.run(["docker", "ps", "-aq", "--filter", "label=orch.run=live-follow"], capture_output=True,
                          text=True).stdout.strip() == ""
