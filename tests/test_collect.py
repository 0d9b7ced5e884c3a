"""`orch collect`: comparison rows (pure), a run folder written by hand, and files, plots and JSON from real runs."""
import csv
import io
import json
import os
import struct
import time
import zipfile
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from orchestrator import contract
from orchestrator.analysis.collect import PREDICTIONS_LIMIT, collect, compare, read_predictions, summarize
from orchestrator.errors import RunNotFound
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.run.rundir import RunDir, RunInfo, RunState
from orchestrator.run.stats import STATS_FIELDS
from orchestrator.safeio import FolderBusy, Unsafe, locked
from tests.bounds import HANG_S
from tests.conftest import run_orch

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


def _event(worker, kind, when, **fields):
    return json.dumps({"v": contract.CONTRACT_VERSION, "event": kind, "worker": worker, "time": when, **fields})


def _fake_run(paths: Paths, run_id: str, workers: int = 2, state: RunState = RunState.SUCCEEDED) -> RunDir:
    """A run folder as runner.apply leaves it, written by hand: record, events, results, stats, predictions."""
    spec = make_spec(workers=workers, dataset="synthetic", samples=6000, epochs=2, collective="auto", run_id=run_id)
    run = RunDir.of(paths, run_id)
    for key in spec.replica_keys():
        folder = run.replica_dir(key)
        folder.mkdir(parents=True)
        i = key[1]
        lines = [_event(i, "start", 100.0, stage="training"),
                 _event(i, "epoch", 110.0, epoch=1, epochs=2, loss=0.9, accuracy=0.5, samples=1900),
                 _event(i, "epoch", 120.0, epoch=2, epochs=2, loss=0.5, accuracy=0.7, samples=1900),
                 _event(i, "epoch", 130.0, epoch=2, epochs=2, loss=0.4, accuracy=0.8, samples=1900),  # redone
                 _event(i, "done", 131.0, train_seconds=30.0 + i, test_accuracy=0.8)]
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
    result: refused at the contract, each in one line, so no sum, mean, ratio or plot meets them."""
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    run = _fake_run(paths, "huge")
    folder = run.replica_dir(("worker", 0))
    with open(folder / contract.EVENTS_FILE, "a") as f:
        f.write(_event(0, "epoch", 125.0, epoch=3, loss=0.3, samples=1900).replace('"samples": 1900', f'"samples": {HUGE}') + "\n")
        f.write(_event(0, "epoch", 126.0, epoch=4, loss=1e300, samples=1900) + "\n")
        f.write(_event(0, "epoch", 127.0, epoch=5, samples=1900).replace('"epoch": 5', f'"epoch": {HUGE}') + "\n")
        f.write(_event(0, "epoch", 128.0, epoch=6, samples=1900).replace('"time": 128.0', '"time": 1e400') + "\n")
    result = json.loads((folder / contract.RESULT_FILE).read_text())
    (folder / contract.RESULT_FILE).write_text(
        json.dumps({**result, "samples_per_epoch": [0, 0]}).replace("[0, 0]", f"[{HUGE}, {HUGE}]"))
    [summary] = collect(["huge"], paths=paths)
    jsonschema.validate(summary, SCHEMA)
    assert summary["epochs_completed"] == 2 and summary["loss_curve"] == [0.9, 0.4]  # only the valid epochs
    assert summary["workers"][0]["train_seconds"] is None and summary["workers"][1]["train_seconds"] == 31.0
    [warning] = summary["warnings"]
    assert warning.startswith("worker-0: the result of worker-0 is refused: samples_per_epoch.0: ")
    assert "\n" not in warning and HUGE not in warning
    assert "training.png" in summary["files"] and "cpu.png" in summary["files"]


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
