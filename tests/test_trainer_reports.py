"""The trainer's side of engines with no shared folder: its rendezvous derived from a completion index, and its
reports as lines on stdout, read back by orchestrator.run.stdout. Imported as the image has it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import contract, frameworks
from orchestrator.images.builder import trainer_files
from orchestrator.run import stdout as stdout_reports


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    """The trainer's package as the image has it: orch build's files (the common modules, the shared ones and
    TensorFlow.s image.s, MPI.s among them), written out and imported; frameworks' libraries are imported only where used."""
    for name, data in trainer_files(frameworks.get("tensorflow").image_recipe()):
        path = tmp_path / "image" / name.removeprefix("orch/trainer/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "image"))
    names = ("orch_trainer", "orch_trainer.reporter", "orch_trainer.rendezvous", "orch_trainer.contract",
             "orch_trainer.report", "orch_trainer.worker", "orch_trainer.session")
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    import orch_trainer.rendezvous
    import orch_trainer.report
    import orch_trainer.reporter
    import orch_trainer.session
    import orch_trainer.worker

    yield orch_trainer
    for name in names:
        sys.modules.pop(name, None)


def test_completion_indexes_count_through_the_roles(trainer):
    cluster = [["chief", ["c:1"]], ["ps", ["p0:1", "p1:1"]], ["worker", ["w0:1", "w1:1", "w2:1"]]]
    replica_of = trainer.rendezvous.replica_of
    assert [replica_of(cluster, i) for i in range(6)] == [
        ("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1), ("worker", 2)]
    assert replica_of(cluster, 2, role="worker") == ("worker", 2)  # one Job per role: the index is the role's
    for bad, role in ((6, None), (-1, None), (3, "worker"), (0, "launcher")):
        with pytest.raises(ValueError):
            replica_of(cluster, bad, role)
    given = {contract.ENV_CLUSTER: json.dumps(cluster), contract.ENV_COMPLETION_INDEX: "4"}
    env = trainer.rendezvous.env_from_index({**given, contract.ENV_RENDEZVOUS: "tf_config"})
    assert json.loads(env["TF_CONFIG"]) == {"cluster": dict(cluster), "task": {"type": "worker", "index": 1}}
    assert env[contract.ENV_NUM_WORKERS] == "3"
    assert trainer.rendezvous.env_from_index({**given, contract.ENV_RENDEZVOUS: "rank"})["RANK"] == "4"
    # MPI's: nothing beyond the role and index, which its launcher turns into ranks
    assert set(trainer.rendezvous.env_from_index(given)) == {contract.ENV_ROLE, contract.ENV_WORKER_INDEX,
                                                             contract.ENV_NUM_WORKERS}
    with pytest.raises(ValueError):
        trainer.rendezvous.env_from_index({**given, contract.ENV_RENDEZVOUS: "jax"})
    assert trainer.rendezvous.env_from_index({}) == {}  # Compose: everything already set


def test_stdout_reports_round_trip(trainer, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(contract.ENV_REPORT, contract.REPORT_STDOUT)
    reporter = trainer.reporter.Reporter(str(tmp_path), 1)
    reporter.event(contract.EVENT_START, stage="importing")
    reporter.heartbeat(1700000000.25)
    result = {"v": contract.CONTRACT_VERSION, "worker": 1, "epochs": [{"loss": 0.5, "note": "é\n" * 5000}]}
    reporter.write_json(contract.RESULT_FILE, result)
    reporter.say("a line for people")
    out = capsys.readouterr().out
    assert all(len(line.encode()) <= contract.STDOUT_LINE_LIMIT for line in out.splitlines())
    got = list(stdout_reports.records(out.splitlines()))
    assert [name for name, _text in got] == [contract.EVENTS_FILE, contract.HEARTBEAT_FILE, contract.RESULT_FILE]
    assert json.loads(got[0][1])["stage"] == "importing" and got[1][1] == "1700000000.250"
    assert json.loads(got[2][1]) == result
    assert not list((tmp_path / contract.replica_dir("worker", 1)).iterdir())  # nothing written to files


def test_files_stay_the_default(trainer, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(contract.ENV_REPORT, raising=False)
    reporter = trainer.reporter.Reporter(str(tmp_path), 0)
    reporter.event(contract.EVENT_START, stage="importing")
    assert capsys.readouterr().out == ""
    assert (tmp_path / contract.replica_dir("worker", 0) / contract.EVENTS_FILE).read_text().count("\n") == 1


def test_hostile_report_lines_are_ignored():
    p = contract.STDOUT_PREFIX
    lines = [f"{p} ../../etc/passwd 1/1 x", f"{p} result.json 2/1 x", f"{p} result.json 0/0 x",
             f"{p} result.json 1/999999 x", f"{p} events.jsonl 1/2 {{", f"{p} events.jsonl 3/3 }}",
             f"{p} heartbeat 1/1 5", f"{p}x heartbeat 1/1 6", "[orch] worker 0 done"]
    assert list(stdout_reports.records(lines)) == [("heartbeat", "5")]


def test_every_trainer_writes_the_predictions_grid_orch_reads(trainer, tmp_path, monkeypatch):
    """TensorFlow's and PyTorch's trainers write their grid with one function; orch's bounded reader takes it."""
    import numpy as np

    from orchestrator.analysis import predictions

    monkeypatch.delenv(contract.ENV_REPORT, raising=False)
    reporter = trainer.reporter.Reporter(str(tmp_path), 0)
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 784), dtype=np.float32), rng.integers(0, 10, 40)
    trainer.worker.write_predictions(reporter, x, y, y[::-1].copy())
    got_x, got_true, got_pred = predictions.read_predictions(Path(reporter.dir) / contract.PREDICTIONS_FILE)
    assert got_x.shape == (25, 784) and (got_true == y[:25]).all() and (got_pred == y[::-1][:25]).all()
    text = trainer.reporter.Reporter(str(tmp_path), 1)
    trainer.worker.write_predictions(text, rng.integers(0, 100, (40, 20)), y, y)  # token ids: no grid
    assert not (Path(text.dir) / contract.PREDICTIONS_FILE).exists()


def test_leaving_writes_the_result_marks_it_done_and_exits_0(trainer, tmp_path):
    """``leave`` never returns: it writes the result, tells the other workers, waits for theirs and exits."""
    script = (f"import sys; sys.path.insert(0, {str(Path(trainer.__file__).parent.parent)!r})\n"
              "from orch_trainer import reporter, worker\n"
              f"r = reporter.Reporter({str(tmp_path)!r}, 0)\n"
              "worker.leave(r, {'worker': 0, 'train_seconds': 1.5, 'test_accuracy': 0.5}, 1)\n"
              "print('returned')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "returned" not in done.stdout
    assert "worker 0 done: train 1.50 s, test accuracy 0.5000" in done.stdout
    folder = tmp_path / contract.replica_dir("worker", 0)
    assert json.loads((folder / contract.RESULT_FILE).read_text())["test_accuracy"] == 0.5
    assert (tmp_path / contract.DONE_DIR / contract.replica_dir("worker", 0)).is_file()
    assert json.loads((folder / contract.EVENTS_FILE).read_text().splitlines()[-1])["event"] == contract.EVENT_DONE


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell them apart")
def test_threads_a_transport_starts_run_on_every_core_while_the_steps_stay_pinned(trainer):
    """PyTorch's trainer starts gloo's threads inside ``threads_left_free``: they run on the container's cores, the
    rank's own threads (and those it starts later) on its share. In a child process: pinning is per process."""
    script = (f"import os, sys, threading; sys.path.insert(0, {str(Path(trainer.__file__).parent.parent)!r})\n"
              "from orch_trainer import worker\n"
              "every = os.sched_getaffinity(0); first = min(every)\n"
              "worker.pin(str(first))\n"
              "stop = threading.Event()\n"
              "with worker.threads_left_free(every) as started:\n"
              "    inside = threading.Thread(target=stop.wait); inside.start()\n"
              "after = threading.Thread(target=stop.wait); after.start()\n"
              "print(sorted(os.sched_getaffinity(inside.native_id)) == sorted(every),\n"
              "      os.sched_getaffinity(after.native_id) == {first}, os.sched_getaffinity(0) == {first},\n"
              "      started == [inside.native_id], worker.cores_of(started) == sorted(every))\n"
              "stop.set()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"] * 5
