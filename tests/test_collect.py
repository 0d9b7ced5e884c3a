"""`orch collect`: comparison rows (pure), a run folder written by hand, and files, plots and JSON from real runs."""
import csv
import io
import json
import os
import re
import struct
import time
import zipfile
from pathlib import Path
from typing import Callable

import jsonschema
import numpy as np
import pytest

from orchestrator import contract
from orchestrator.analysis.collect import collect, compare, summarize
from orchestrator.analysis.predictions import PREDICTIONS_LIMIT, read_predictions
from orchestrator.errors import RunNotFound
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.run.rundir import RunDir, RunInfo, RunState
from orchestrator.run.stats import STATS_FIELDS
from orchestrator.safeio import FolderBusy, Unsafe, locked
from tests.bounds import HANG_S
from tests.conftest import run_orch
from tests.strictjson import every_file as every_json_file
from tests.strictjson import loads as strict_loads
from tests.test_cli_inprocess import orch as orch_cli
from tests.test_summarize import event

SCHEMA = json.loads((Path(__file__).parent.parent / "orchestrator/schemas/summary.schema.json").read_text())
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _summary(run_id, workers, seconds, failed=False, samples=60000):
    return {"run_id": run_id, "state": "failed" if failed else "succeeded", "failed": failed,
            "spec": {"workers": workers, "dataset": "mnist", "samples": samples, "epochs": 5, "global_batch": 96},
            "train_seconds": seconds, "test_accuracy": 0.9, "cpu_mean_percent": 50.0, "net_bytes": 2_000_000}


def test_ratio_speedup_and_efficiency_against_the_matching_baseline():
    rows = compare([_summary("a", 1, 10.0), _summary("b", 2, 8.0), _summary("c", 3, 40.0),
                    _summary("d", 3, 5.0, samples=5000)])
    by_id = {r["run_id"]: r for r in rows}
    assert by_id["a"]["time_ratio"] == 1.0 and by_id["a"]["efficiency"] == 1.0
    assert by_id["b"]["speedup"] == pytest.approx(1.25) and by_id["b"]["efficiency"] == pytest.approx(0.625)
    assert by_id["c"]["time_ratio"] == pytest.approx(4.0)
    assert by_id["d"]["time_ratio"] is None  # no 1-worker run on 5,000 samples to compare with
    assert by_id["c"]["net_mb"] == 2.0


def test_failed_baseline_is_not_used():
    rows = compare([_summary("a", 1, 10.0, failed=True), _summary("b", 3, 30.0)])
    assert rows[1]["time_ratio"] is None


def _fake_run(paths: Paths, run_id: str, workers: int = 2, state: RunState = RunState.SUCCEEDED) -> RunDir:
    """A run folder as runner.apply leaves it, written by hand: record, events, results, stats, predictions."""
    spec = make_spec(workers=workers, dataset="synthetic", samples=6000, epochs=2, collective="auto", run_id=run_id)
    run = RunDir.of(paths, run_id)
    for key in spec.replica_keys():
        folder = run.replica_dir(key)
        folder.mkdir(parents=True)
        i = key[1]
        lines = [event(i, "start", 100.0, stage="training"),
                 event(i, "epoch", 110.0, epoch=1, epochs=2, loss=0.9, accuracy=0.5, samples=1900),
                 event(i, "epoch", 120.0, epoch=2, epochs=2, loss=0.5, accuracy=0.7, samples=1900),
                 event(i, "epoch", 130.0, epoch=2, epochs=2, loss=0.4, accuracy=0.8, samples=1900),  # redone
                 event(i, "done", 131.0, train_seconds=30.0 + i, test_accuracy=0.8)]
        (folder / contract.EVENTS_FILE).write_text("\n".join(lines) + "\n")
        if state == RunState.SUCCEEDED:
            (folder / contract.RESULT_FILE).write_text(json.dumps({
                "v": contract.CONTRACT_VERSION, "worker": i, "replicas": workers, "global_batch": 96,
                "steps_per_epoch": 40, "samples_per_epoch": [1920, 1920], "train_seconds": 30.0 + i,
                "test_accuracy": 0.8}))
            np.savez(run.predictions(key), x=np.zeros((3, 784), dtype=np.uint8), y_true=np.array([1, 2, 3]),
                     y_pred=np.array([1, 2, 0]))
    with open(run.path / "stats.csv", "w") as f:
        f.write(",".join(STATS_FIELDS) + "\n")
        for t in range(3):
            for i in range(workers):
                row = [100 + t, i, f"{run_id}-worker-{i}", 50 + t, 10**8, 2**31, 10**6 * t, 2 * 10**6 * t, 0, 0, 9, "worker",
                       2 * 10**8]
                f.write(",".join(map(str, row)) + "\n")
    workers_rec = [{"worker": i, "exit_code": 0 if state == RunState.SUCCEEDED else 137} for i in range(workers)]
    run.write_record(RunInfo(run_id=run_id, state=state, spec=spec, started=99.0, wall_seconds=40.0,
                             error=None if state == RunState.SUCCEEDED else "worker-0 was killed", workers=workers_rec))
    return run


def test_collect_a_run_written_by_hand(tmp_path):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    _fake_run(paths, "hand-w2")
    [summary] = collect(["hand-w2"], paths=paths)  # out_root None: paths.results
    jsonschema.validate(summary, SCHEMA)
    out = tmp_path / "results" / "hand-w2"
    assert summary["results_dir"] == str(out) and json.loads((out / "summary.json").read_text()) == summary
    assert summary["spec"]["workers"] == 2 and summary["spec"]["framework"]["collective"] == "auto"
    assert summary["train_seconds"] == 31.0 and summary["test_accuracy"] == 0.8 and not summary["failed"]
    assert summary["epochs_completed"] == 2 and summary["net_bytes"] == 2 * 6 * 10**6
    assert [w["exit_code"] for w in summary["workers"]] == [0, 0]
    with open(out / "epochs.csv", newline="") as f:
        epochs = list(csv.DictReader(f))
    assert [(e["worker"], e["epoch"], e["loss"]) for e in epochs] == [
        ("0", "1", "0.9"), ("0", "2", "0.4"), ("1", "1", "0.9"), ("1", "2", "0.4")]  # the redone epoch once
    for name in ("cpu.png", "network.png", "training.png", "predictions-worker-0.png", "predictions-worker-1.png"):
        assert name in summary["files"] and (out / name).read_bytes().startswith(PNG_MAGIC), name
    assert "stats.csv" in summary["files"] and "host.csv" not in summary["files"]


def test_collect_a_failed_run_and_the_newest_by_default(tmp_path):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    _fake_run(paths, "hand-failed", workers=1, state=RunState.FAILED)
    [summary] = collect(None, out_root=tmp_path / "elsewhere", paths=paths)
    jsonschema.validate(summary, SCHEMA)
    assert summary["run_id"] == "hand-failed" and summary["failed"] and summary["error"] == "worker-0 was killed"
    assert summary["workers"][0]["exit_code"] == 137 and summary["workers"][0]["train_seconds"] is None
    assert summary["workers"][0]["samples_per_epoch"] == [1900, 1900]  # from the events (redone epoch once)
    assert (tmp_path / "elsewhere" / "hand-failed" / "summary.json").is_file()


def test_summarize_and_collect_refuse_what_is_not_a_run(tmp_path):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    with pytest.raises(RunNotFound):
        summarize(RunDir(tmp_path / "nothing"))
    with pytest.raises(RunNotFound):
        collect(["missing"], paths=paths)


@pytest.mark.docker
def test_collect_writes_files_plots_and_schema_valid_json(observed_runs, tmp_path):
    env = observed_runs["env"]
    proc = run_orch(["collect", "observed-w3", "--out", str(tmp_path), "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    jsonschema.validate(summary, SCHEMA)
    assert summary["state"] == "succeeded" and len(summary["workers"]) == 3
    out = tmp_path / "observed-w3"
    for name in ("summary.json", "stats.csv", "host.csv", "epochs.csv"):
        assert name in summary["files"] and (out / name).stat().st_size > 0
    with open(out / "epochs.csv", newline="") as f:
        epochs = list(csv.DictReader(f))
    assert len(epochs) == 9 and {e["worker"] for e in epochs} == {"0", "1", "2"}
    for name in ("cpu.png", "network.png", "training.png", "predictions-worker-0.png", "predictions-worker-2.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
    for w in summary["workers"]:
        assert w["stats_samples"] >= 2 and w["net_rx_bytes"] > 0 and w["cpu_max_percent"] > 0


@pytest.mark.docker
def test_comparison_table_of_two_runs(observed_runs, tmp_path):
    proc = run_orch(["collect", "observed-w1", "observed-w3", "--out", str(tmp_path), "--format", "json"],
                    observed_runs["env"])
    assert proc.returncode == 0, proc.stderr
    rows = {r["workers"]: r for r in json.loads(proc.stdout)["comparison"]}
    assert rows[1]["time_ratio"] == 1.0
    assert rows[3]["time_ratio"] > 0 and rows[3]["efficiency"] == pytest.approx(1 / rows[3]["time_ratio"] / 3)
    table = run_orch(["collect", "observed-w1", "observed-w3", "--out", str(tmp_path)], observed_runs["env"])
    assert "T(N)/T(1)" in table.stdout and "observed-w3" in table.stdout


@pytest.mark.docker
def test_failed_run_is_collected_as_failed(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-fail")
    # A script that writes 1 GiB in a 256 MiB container is OOM-killed at once. (orch's trainer under 256 MiB may
    # instead re-read TensorFlow's pages for minutes: test_runs_faults checks what orch says then.)
    script = tmp_path / "hog" / "hog.py"
    script.parent.mkdir()
    script.write_text('held = b"x" * (1 << 30)\n')
    proc = run_orch(["up", "--script", str(script), "--memory", "256", "--run-id", "live-fail"], orch_env)
    assert proc.returncode == 1 and "exceeding its memory limit" in proc.stderr
    collected = run_orch(["collect", "live-fail", "--out", str(tmp_path), "--format", "json"], orch_env)
    assert collected.returncode == 0, collected.stderr
    summary = json.loads(collected.stdout)
    jsonschema.validate(summary, SCHEMA)
    assert summary["failed"] and summary["state"] == "failed" and "worker-0" in summary["error"]
    assert summary["workers"][0]["exit_code"] == 137


# -- a container's predictions.npz is input, not trusted --------------------------------------------------
def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _good(k=3, **override) -> bytes:
    arrays = {"x": np.zeros((k, 784), dtype=np.uint8), "y_true": np.arange(k), "y_pred": np.arange(k)}
    return _npz(**{**arrays, **override})


def _bomb(lie: bool) -> bytes:
    """A zip whose x.npy unpacks to 64 MiB from a few KiB; with ``lie``, its headers claim 1,000 bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", b"\0" * (64 << 20))
        archive.writestr("y_true.npy", b"")
        archive.writestr("y_pred.npy", b"")
    data = bytearray(buf.getvalue())
    if lie:
        struct.pack_into("<I", data, 22, 1000)  # the local header's uncompressed size
        struct.pack_into("<I", data, data.find(b"PK\x01\x02") + 24, 1000)  # the central directory's
    return bytes(data)


def _claims_too_much() -> bytes:
    """A .npy header claiming 10**12 rows, with no data: numpy would allocate first and read after."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (10**12, 784)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("x.npy", header.getvalue())
        archive.writestr("y_true.npy", _npy(np.arange(3)))
        archive.writestr("y_pred.npy", _npy(np.arange(3)))
    return buf.getvalue()


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


HOSTILE = {
    "truncated": lambda path: path.write_bytes(_good()[:300]),
    "not a zip": lambda path: path.write_bytes(b"not a zip at all"),
    "empty": lambda path: path.write_bytes(b""),
    "zip bomb": lambda path: path.write_bytes(_bomb(lie=False)),
    "zip bomb with lying sizes": lambda path: path.write_bytes(_bomb(lie=True)),
    "header claims 10**12 rows": lambda path: path.write_bytes(_claims_too_much()),
    "pickled objects": lambda path: path.write_bytes(_good(x=np.array([{"a": 1}] * 3, dtype=object))),
    "float images": lambda path: path.write_bytes(_good(x=np.zeros((3, 784)))),
    "images of another shape": lambda path: path.write_bytes(_good(x=np.zeros((3, 28, 28), dtype=np.uint8))),
    "float labels": lambda path: path.write_bytes(_good(y_pred=np.zeros(3))),
    "too many": lambda path: path.write_bytes(_good(k=101)),
    "none": lambda path: path.write_bytes(_good(k=0)),
    "lengths differ": lambda path: path.write_bytes(_good(y_true=np.arange(2))),
    "another array": lambda path: path.write_bytes(_npz(x=np.zeros((3, 784), np.uint8), y_true=np.arange(3),
                                                        y_pred=np.arange(3), extra=np.arange(3))),
    "an array missing": lambda path: path.write_bytes(_npz(x=np.zeros((3, 784), np.uint8), y_true=np.arange(3))),
    "larger than the limit": lambda path: path.write_bytes(b"\0" * (PREDICTIONS_LIMIT + 1)),
    "a link to /etc/passwd": lambda path: path.symlink_to("/etc/passwd"),
    "a link to /dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "a FIFO": lambda path: os.mkfifo(path),
    "a folder": lambda path: path.mkdir(),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_predictions_file_is_refused_fast_in_one_line(tmp_path, attack):
    target = tmp_path / "predictions.npz"
    HOSTILE[attack](target)
    started = time.monotonic()
    with pytest.raises(Unsafe) as info:
        read_predictions(target)
    assert time.monotonic() - started < HANG_S
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


@pytest.mark.parametrize("attack", ["truncated", "zip bomb with lying sizes", "pickled objects", "a FIFO"])
def test_a_hostile_predictions_file_skips_that_plot_with_a_warning(tmp_path, attack):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    run = _fake_run(paths, "hostile")
    (run.path / "stats.csv").unlink()  # fewer plots to draw
    target = run.predictions(("worker", 1))
    target.unlink()
    HOSTILE[attack](target)
    [summary] = collect(["hostile"], paths=paths)
    jsonschema.validate(summary, SCHEMA)
    assert "predictions-worker-0.png" in summary["files"] and "predictions-worker-1.png" not in summary["files"]
    [warning] = summary["warnings"]
    assert warning.startswith("worker-1: no prediction plot: ") and "\n" not in warning and len(warning) < 300
    assert not (tmp_path / "results" / "hostile" / "predictions-worker-1.png").exists()


def test_good_predictions_are_read_and_checked(tmp_path):
    path = tmp_path / "predictions.npz"
    path.write_bytes(_good(k=100, y_true=np.arange(100, dtype=np.uint8)))
    x, y_true, y_pred = read_predictions(path)
    assert x.shape == (100, 784) and x.dtype == np.uint8 and list(y_true[:3]) == [0, 1, 2] and len(y_pred) == 100
    assert read_predictions(tmp_path / "missing.npz") is None


# -- integrity of collect's files --------------------------------------------------------------------------
def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".orch.lock"}


def assert_whole(folder: Path, before: dict[str, bytes]) -> None:
    """Every file of ``before`` is still in ``folder`` and complete; no temporary file is left."""
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]
    for name in before:
        data = (folder / name).read_bytes()
        if name.endswith(".json"):
            json.loads(data)
        elif name.endswith(".csv"):
            rows = list(csv.reader(io.StringIO(data.decode())))
            assert rows and data.endswith(b"\n") and {len(r) for r in rows} == {len(rows[0])}, name
        elif name.endswith(".png"):
            assert data.startswith(PNG_MAGIC) and data.endswith(b"IEND\xaeB`\x82"), name
        elif name.endswith(".md"):
            assert data.startswith(b"# ") and data.endswith(b"|\n"), name


def interrupt_replace(monkeypatch, under: Path, n: int) -> list:
    """os.replace raises KeyboardInterrupt at its ``n``th call that writes under ``under`` (0: never); returns
    the targets of those calls, as they come."""
    real, calls = os.replace, []

    def replace(src, dst, *args, **kwargs):
        if Path(dst).is_relative_to(under):
            calls.append(dst)
            if len(calls) == n:
                raise KeyboardInterrupt
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return calls


@pytest.mark.early
def test_a_crash_at_each_write_of_collect_leaves_every_earlier_file_whole(tmp_path, monkeypatch):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    _fake_run(paths, "crash", workers=1)
    (paths.runs / "crash" / "host.csv").write_text("time,cpu\n1,2\n")
    with monkeypatch.context() as patch:
        writes = interrupt_replace(patch, paths.results, 0)
        collect(["crash"], paths=paths)
    out = tmp_path / "results" / "crash"
    # each file once; the TensorBoard events are a folder renamed into place whole, after summary.json
    assert sorted(Path(w).name for w in writes) == sorted(n for n in _tree(out) if not n.startswith("tensorboard/")) == [
        "cpu.png", "epochs.csv", "host.csv", "network.png", "predictions-worker-0.png", "report.html", "stats.csv",
        "summary.json", "training.png"]
    assert [n for n in _tree(out) if n.startswith("tensorboard/")] == ["tensorboard/events.out.tfevents.orch"]
    for n in range(1, len(writes) + 1):
        before = _tree(out)
        with monkeypatch.context() as patch:
            interrupt_replace(patch, paths.results, n)
            with pytest.raises(KeyboardInterrupt):
                collect(["crash"], paths=paths)
        assert set(_tree(out)) == set(before)
        assert_whole(out, before)
        assert json.loads((out / "summary.json").read_text())["run_id"] == "crash"


def test_collect_into_a_folder_another_orch_writes_fails_at_once_and_writes_nothing(tmp_path):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    _fake_run(paths, "busy", workers=1)
    with locked(paths.results, "collect"):
        with pytest.raises(FolderBusy) as info:
            collect(["busy"], paths=paths)
    assert "\n" not in info.value.message and not (paths.results / "busy").exists()


# -- numbers out of range ---------------------------------------------------------------------------------------
HUGE = "1" + "0" * 400  # as a container writes it into its JSON: Python reads it as an int of 401 digits


def test_numbers_out_of_range_are_refused_and_collect_plots_the_rest(tmp_path):
    """Epoch and sample counts of 10**400, a loss of 1e300 and a time of 1e400 (infinity) in a worker's events and
    result: refused at the contract, in one line, so no sum, mean, ratio or plot meets them; that worker's figures
    are invalid, and the run's are the other worker's."""
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    run = _fake_run(paths, "huge")
    folder = run.replica_dir(("worker", 0))
    with open(folder / contract.EVENTS_FILE, "a") as f:
        f.write(event(0, "epoch", 125.0, epoch=3, loss=0.3, samples=1900).replace('"samples": 1900', f'"samples": {HUGE}') + "\n")
        f.write(event(0, "epoch", 126.0, epoch=4, loss=1e300, samples=1900) + "\n")
        f.write(event(0, "epoch", 127.0, epoch=5, samples=1900).replace('"epoch": 5', f'"epoch": {HUGE}') + "\n")
        f.write(event(0, "epoch", 128.0, epoch=6, samples=1900).replace('"time": 128.0', '"time": 1e400') + "\n")
    result = json.loads((folder / contract.RESULT_FILE).read_text())
    (folder / contract.RESULT_FILE).write_text(
        json.dumps({**result, "samples_per_epoch": [0, 0]}).replace("[0, 0]", f"[{HUGE}, {HUGE}]"))
    [summary] = collect(["huge"], paths=paths)
    jsonschema.validate(summary, SCHEMA)
    assert summary["epochs_completed"] == 2 and summary["loss_curve"] == [0.9, 0.4]  # worker 1's
    assert summary["partial"] and summary["train_seconds"] == 31.0
    assert summary["workers"][0]["train_seconds"] is None and summary["workers"][1]["train_seconds"] == 31.0
    [warning] = summary["warnings"]
    assert warning.startswith("worker-0: its figures are invalid: record 6 of worker-0's events.jsonl is refused: "
                              "epoch.samples: ")
    assert summary["workers"][0]["invalid"] in warning and summary["workers"][1]["invalid"] is None
    assert "\n" not in warning and HUGE not in warning
    assert "training.png" in summary["files"] and "cpu.png" in summary["files"]
    assert "predictions-worker-0.png" not in summary["files"]  # an invalid worker's claims are not drawn


def test_extreme_numbers_within_range_give_no_infinite_rate(tmp_path):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    run = _fake_run(paths, "tiny")
    for i in (0, 1):
        path = run.replica_dir(("worker", i)) / contract.RESULT_FILE
        path.write_text(json.dumps({**json.loads(path.read_text()), "train_seconds": 1e-300,
                                    "samples_per_epoch": [10**12] * 10_000}))
    [summary] = collect(["tiny"], paths=paths)
    assert summary["samples_per_second"] is None and summary["train_seconds"] == 1e-300
    assert "Infinity" not in (tmp_path / "results" / "tiny" / "summary.json").read_text()


# -- each worker judged alone; several runs, each collected alone --------------------------------------------------
def _append(run: RunDir, i: int, *records: str) -> None:
    with open(run.replica_dir(("worker", i)) / contract.EVENTS_FILE, "a") as f:
        f.write("".join(record + "\n" for record in records))


def _rewrite_result(run: RunDir, i: int, text: Callable[[str], str]) -> None:
    path = run.replica_dir(("worker", i)) / contract.RESULT_FILE
    path.write_text(text(path.read_text()))


def _cli(paths: Paths, *argv: str):
    """`orch argv` in this process, on the runs of ``paths``."""
    return orch_cli("--runs-dir", str(paths.runs), *argv)


V = contract.CONTRACT_VERSION
BAD_RECORDS = {  # worker 1's attack, and the words its one-line reason holds
    "an event of an unknown contract version": (
        lambda run: _append(run, 1, json.dumps({"v": 99, "event": "epoch", "worker": 1, "time": 1.0, "epoch": 1})),
        "contract version 99"),
    "a result of an unknown contract version": (
        lambda run: _rewrite_result(run, 1, lambda t: t.replace(f'"v": {V}', '"v": 77')), "contract version 77"),
    "a denormal train time in the result": (
        lambda run: _rewrite_result(run, 1, lambda t: t.replace('"train_seconds": 31.0', '"train_seconds": 5e-324')),
        "train_seconds: Value error, a denormal number is not a time"),
    "a denormal train time in an event": (
        lambda run: _append(run, 1, event(1, "done", 132.0, train_seconds=5e-324, test_accuracy=0.8)), "denormal"),
    "a negative epoch time": (lambda run: _append(run, 1, event(1, "epoch", 140.0, epoch=1, seconds=-1.0)),
                              "epoch.seconds: Input should be greater than or equal to 0"),
    "an infinite epoch time": (lambda run: _append(run, 1, event(1, "epoch", 140.0, epoch=1, seconds=float("inf"))),
                               "epoch.seconds"),
    "a NaN time": (lambda run: _append(run, 1, event(1, "epoch", float("nan"), epoch=1)), "epoch.time"),
    "a mistyped field": (lambda run: _append(run, 1, event(1, "epoch", 140.0, epoch="two")), "epoch.epoch"),
    "a missing field": (lambda run: _append(run, 1, event(1, "done", 140.0, test_accuracy=0.8)),
                        "done.train_seconds: Field required"),
    "an absurd sample count": (lambda run: _append(run, 1, event(1, "epoch", 140.0, epoch=1, samples=10**13)),
                               "epoch.samples"),
    "another worker's name": (lambda run: _append(run, 1, event(0, "epoch", 140.0, epoch=1, loss=9.9)),
                              "names worker 0"),
    "a line that is not JSON": (lambda run: _append(run, 1, '{"v": 2, "event": '), "is not JSON"),
    "a line over 64 KiB": (lambda run: _append(run, 1, event(1, "error", 140.0, message="x" * (70 << 10))),
                           "a line longer than 64 KiB"),
    "a result that names another worker": (
        lambda run: _rewrite_result(run, 1, lambda t: t.replace('"worker": 1', '"worker": 0')), "names worker 0"),
    "a result that is a link": (lambda run: (run.replica_dir(("worker", 1)) / contract.RESULT_FILE).unlink()
                                or (run.replica_dir(("worker", 1)) / contract.RESULT_FILE).symlink_to("/etc/passwd"),
                                "symbolic link"),
    "an events file that is a FIFO": (lambda run: (run.replica_dir(("worker", 1)) / contract.EVENTS_FILE).unlink()
                                      or os.mkfifo(run.replica_dir(("worker", 1)) / contract.EVENTS_FILE),
                                      "not a regular file"),
}


@pytest.mark.parametrize("attack", sorted(BAD_RECORDS))
def test_a_workers_bad_record_spoils_its_own_figures_only(tmp_path, attack):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    bad, good = _fake_run(paths, "bad"), _fake_run(paths, "good")
    (bad.path / "stats.csv").unlink()
    (good.path / "stats.csv").unlink()
    plant, words = BAD_RECORDS[attack]
    plant(bad)
    result = _cli(paths, "collect", "bad", "good", "--no-plots", "--format", "json", "--out", str(tmp_path / "out"))
    assert result.code == 0 and "Traceback" not in result.err, result
    runs = {s["run_id"]: s for s in strict_loads(result.out)["runs"]}
    summary = runs["bad"]
    jsonschema.validate(summary, SCHEMA)
    assert summary["partial"] and not runs["good"]["partial"] and runs["good"]["train_seconds"] == 31.0
    worker0, worker1 = summary["workers"]
    assert worker0["invalid"] is None and worker0["train_seconds"] == 30.0 and worker0["samples_per_epoch"] == [1920] * 2
    assert words in worker1["invalid"] and "\n" not in worker1["invalid"] and len(worker1["invalid"]) <= 300
    assert worker1["train_seconds"] is worker1["test_accuracy"] is None and worker1["samples_per_epoch"] == []
    # The run's figures are worker 0's alone: the slowest valid worker, its curve; no rate from half the workers.
    assert summary["train_seconds"] == 30.0 and summary["loss_curve"] == [0.9, 0.4] and summary["epochs_completed"] == 2
    assert summary["samples_per_second"] is None
    assert f"bad: worker-1: its figures are invalid: {worker1['invalid']}" in " ".join(result.err.split())
    with open(tmp_path / "out" / "bad" / "epochs.csv", newline="") as f:
        assert {row["worker"] for row in csv.DictReader(f)} == {"0"}
    rows = {r["run_id"]: r for r in strict_loads(result.out)["comparison"]}
    assert rows["bad"]["partial"] and not rows["good"]["partial"]


def test_an_epoch_record_without_optional_fields_is_valid_and_its_unknowns_stay_unknown(tmp_path):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    run = _fake_run(paths, "bare")
    for i in (0, 1):
        (run.replica_dir(("worker", i)) / contract.EVENTS_FILE).write_text(
            event(i, "epoch", 110.0, epoch=1) + "\n" + event(i, "epoch", 120.0, epoch=2, samples=1900) + "\n")
        _rewrite_result(run, i, lambda t: t.replace('"samples_per_epoch": [1920, 1920], ', ""))
    [summary] = collect(["bare"], paths=paths)
    jsonschema.validate(summary, SCHEMA)
    assert not summary["partial"] and summary["warnings"] == []
    assert summary["workers"][0]["samples_per_epoch"] == [None, 1900] and summary["samples_per_second"] is None
    assert summary["loss_curve"] == [None, None] and summary["epochs_completed"] == 2


def test_collect_of_several_runs_collects_every_run_it_can_and_says_each_failure_in_one_line(tmp_path, monkeypatch):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    _fake_run(paths, "first", workers=1)
    _fake_run(paths, "blocked", workers=1)
    _fake_run(paths, "broken", workers=1)
    _fake_run(paths, "last", workers=1)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "blocked").write_text("a file where its folder goes")
    real = summarize

    def summarize_or_fail(run):
        if run.run_id == "broken":
            raise TypeError("a bug met on this run")
        return real(run)

    monkeypatch.setattr("orchestrator.analysis.collect.summarize", summarize_or_fail)
    result = _cli(paths, "collect", "first", "missing", "blocked", "broken", "last", "--no-plots", "--format", "json",
                  "--out", str(tmp_path / "out"))
    assert result.code == 2 and "Traceback" not in result.err
    payload = strict_loads(result.out)
    assert [s["run_id"] for s in payload["runs"]] == ["first", "last"]
    assert [f["run_id"] for f in payload["failed"]] == ["missing", "blocked", "broken"]
    errors = [line for line in result.err.splitlines() if line.startswith("orch: error: ")]
    assert len(errors) == 3 and all(len(line) < 500 for line in errors)
    assert errors[0].startswith("orch: error: missing: no run 'missing'")
    assert errors[1].startswith("orch: error: blocked: cannot write its results: ")
    assert errors[2] == "orch: error: broken: internal error: TypeError: a bug met on this run"
    for run_id in ("first", "last"):
        assert strict_loads((tmp_path / "out" / run_id / "summary.json").read_text())["run_id"] == run_id
    # The table form says the same, and a single run that cannot be collected fails as it always did.
    table = _cli(paths, "collect", "first", "missing", "--no-plots", "--out", str(tmp_path / "out"))
    assert table.code == 2 and "first" in table.out and "orch: error: missing: no run 'missing'" in table.err
    alone = _cli(paths, "collect", "missing", "--format", "json", "--out", str(tmp_path / "out"))
    assert alone.code == 2 and alone.out == "" and len(alone.err.strip().splitlines()) == 1
    with pytest.raises(RunNotFound):  # and so does the library, asked without a list for failures
        collect(["missing"], paths=paths)


def test_collect_without_plots_writes_every_figure_and_report_but_no_png(tmp_path):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    _fake_run(paths, "quick")
    result = _cli(paths, "collect", "quick", "--no-plots", "--format", "json", "--out", str(tmp_path / "out"))
    assert result.code == 0, result
    summary = strict_loads(result.out)
    assert summary["files"] == ["epochs.csv", "stats.csv", "summary.json"] and summary["train_seconds"] == 31.0
    written = sorted(p.name for p in (tmp_path / "out" / "quick").iterdir())
    assert not [name for name in written if name.endswith(".png")] and "report.html" in written, written
    assert strict_loads((tmp_path / "out" / "quick" / "summary.json").read_text()) == summary


# -- strict JSON ----------------------------------------------------------------------------------------------------
def test_collect_json_is_strict_where_a_ratio_overflows(tmp_path):
    """A 1-worker baseline of 10**8 s and a 2-worker run of 1e-307 s (both within the contract's range): their speedup
    overflows to infinity, which strict JSON has no word for. It is null, with the reason beside it."""
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    one, two = _fake_run(paths, "one", workers=1), _fake_run(paths, "two", workers=2)
    _rewrite_result(one, 0, lambda t: t.replace('"train_seconds": 30.0', '"train_seconds": 100000000.0'))
    for i in (0, 1):
        _rewrite_result(two, i, lambda t: re.sub(r'"train_seconds": [0-9.]+', '"train_seconds": 1e-307', t))
    result = _cli(paths, "collect", "one", "two", "--no-plots", "--format", "json", "--out", str(tmp_path / "out"))
    assert result.code == 0, result
    rows = {r["run_id"]: r for r in strict_loads(result.out)["comparison"]}
    assert rows["two"]["speedup"] is None and rows["two"]["speedup_invalid"] == "not finite: inf"
    assert rows["two"]["efficiency"] is None and rows["two"]["efficiency_invalid"] == "not finite: inf"
    assert rows["two"]["time_ratio"] == pytest.approx(1e-315)
    for folder in ("out/one", "out/two"):
        assert len(every_json_file(tmp_path / folder)) == 1  # summary.json, strict
