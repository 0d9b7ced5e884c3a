"""Strict JSON on both sides of the contract: every JSON orch writes or prints, and every record a trainer writes,
is read by a strict parser (NaN and Infinity refused); a number that is not finite is null, its reason beside it."""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from orchestrator import contract
from orchestrator.jobspec import make_spec
from orchestrator.run.records import EpochEvent, event_of
from orchestrator.safeio import dumps, write_json
from tests.conftest import ROOT
from tests.strictjson import every_file, loads
from tests.test_cli_inprocess import FakeBackend, orch
from tests.test_trainer_reports import trainer  # noqa: F401 (a fixture)

NAN, INF = float("nan"), float("inf")


def test_strict_parser_refuses_what_python_would_accept():
    for text in ("NaN", "[Infinity]", '{"a": -Infinity}'):
        json.loads(text)  # Python's own parser takes them
        with pytest.raises(ValueError):
            loads(text)


def test_finite_makes_every_non_finite_number_null_with_its_reason_beside_it():
    payload = {"train_seconds": INF, "loss": NAN, "ok": 1.5, "n": 3, "name": "x", "nested": {"speedup": -INF},
               "loss_curve": [0.5, NAN, 0.25], "rows": [{"efficiency": INF}], "pair": (1.0, 2.0)}
    assert contract.finite(payload) == {
        "train_seconds": None, "train_seconds_invalid": "not finite: inf", "loss": None, "loss_invalid": "not finite: nan",
        "ok": 1.5, "n": 3, "name": "x", "nested": {"speedup": None, "speedup_invalid": "not finite: -inf"},
        "loss_curve": [0.5, None, 0.25], "loss_curve_invalid": "not finite: nan",
        "rows": [{"efficiency": None, "efficiency_invalid": "not finite: inf"}], "pair": [1.0, 2.0]}
    assert math.isnan(payload["loss"])  # the caller's object is left as it was
    assert contract.finite([NAN, 1]) == [None, 1] and contract.finite(INF) is None
    assert loads(dumps(payload)) == contract.finite(payload)


def _json_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if (node.func.attr in ("dump", "dumps") and isinstance(owner, ast.Name) and owner.id == "json") \
                    or node.func.attr == "print_json":
                yield node


def test_every_json_orch_writes_or_prints_is_written_strictly():
    """Every json.dump, json.dumps and rich print_json in orch (host, trainer, the bench's harness) refuses NaN and
    Infinity (allow_nan=False): one that met them would raise rather than write what a strict parser refuses. What
    may hold a number from outside goes through ``contract.finite`` first (safeio.dumps, env.json, the reporter)."""
    loose = []
    calls = 0
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        for call in _json_calls(ast.parse(path.read_text(), str(path))):
            calls += 1
            strict = any(k.arg == "allow_nan" and isinstance(k.value, ast.Constant) and k.value.value is False
                         for k in call.keywords)
            if not strict:
                loose.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert calls >= 15 and loose == []


def test_write_json_writes_null_and_the_reason_where_a_number_is_not_finite(tmp_path):
    write_json(tmp_path / "x.json", {"wall_seconds": INF, "workers": [{"train_seconds": NAN}]})
    assert loads((tmp_path / "x.json").read_text()) == {
        "wall_seconds": None, "wall_seconds_invalid": "not finite: inf",
        "workers": [{"train_seconds": None, "train_seconds_invalid": "not finite: nan"}]}


def test_the_trainers_records_are_strict_and_a_diverged_loss_is_still_a_valid_record(trainer, tmp_path, monkeypatch,
                                                                                     capsys):
    """Training that diverged reports a NaN loss. Written as NaN, a strict parser would refuse the record; written as
    null with its reason, the host reads a valid epoch whose loss is unknown."""
    monkeypatch.delenv(contract.ENV_REPORT, raising=False)
    reporter = trainer.reporter.Reporter(str(tmp_path), 0)
    reporter.event(contract.EVENT_EPOCH, epoch=1, loss=NAN, accuracy=0.5, seconds=1.0, samples=64)
    reporter.write_json(contract.RESULT_FILE, {"v": contract.CONTRACT_VERSION, "worker": 0, "train_seconds": 2.0,
                                               "test_accuracy": 0.5, "epochs": [{"loss": INF}]})
    folder = tmp_path / contract.replica_dir("worker", 0)
    [line] = (folder / contract.EVENTS_FILE).read_text().splitlines()
    record = loads(line)
    assert record["loss"] is None and record["loss_invalid"] == "not finite: nan"
    event = event_of(record)
    assert isinstance(event, EpochEvent) and event.loss is None and event.samples == 64
    assert loads((folder / contract.RESULT_FILE).read_text())["epochs"] == [
        {"loss": None, "loss_invalid": "not finite: inf"}]
    monkeypatch.setenv(contract.ENV_REPORT, contract.REPORT_STDOUT)
    trainer.reporter.Reporter(str(tmp_path), 1).event(contract.EVENT_EPOCH, epoch=1, loss=-INF)
    assert '"loss":null,"loss_invalid":"not finite: -inf"' in capsys.readouterr().out


@pytest.fixture
def folders(tmp_path, monkeypatch):
    for name in ("RUNS", "CACHE", "RESULTS"):
        monkeypatch.setenv(f"ORCH_{name}_DIR", str(tmp_path / name.lower()))
    return tmp_path


def test_every_verbs_json_is_strict_even_where_a_file_it_reads_holds_nan(folders, monkeypatch):
    """Python's json reads NaN and Infinity in a run record or an experiment's cells.json; whatever orch prints of
    them with --format json, and every JSON file it writes, a strict parser reads."""
    from tests.test_collect import _fake_run
    from orchestrator.paths import Paths

    paths = Paths(runs=folders / "runs", cache=folders / "cache", results=folders / "results")
    run = _fake_run(paths, "nan-run", workers=1)
    record = json.loads((run.path / "run.json").read_text())
    (run.path / "run.json").write_text(json.dumps({**record, "wall_seconds": NAN, "started": INF}))
    cells = folders / "results" / "sweep"
    cells.mkdir(parents=True)
    (cells / "cells.json").write_text(json.dumps({"a": {"params": {"workers": 1}, "state": "succeeded", "fields": {},
                                                        "summary": {"train_seconds": INF}}}))
    outputs = {"render": orch("render", "--format", "json", "--workers", "2", "--run-id", "r")}
    from orchestrator import backends

    monkeypatch.setattr(backends, "get", lambda name, engine=None: FakeBackend())  # an engine with no replicas
    outputs |= {
        "ps": orch("ps", "--format", "json"),
        "collect": orch("collect", "nan-run", "--format", "json"),
        "experiment list": orch("experiment", "list", "--format", "json"),
        "experiment show": orch("experiment", "show", "sweep", "--format", "json"),
    }
    for verb, result in outputs.items():
        assert result.code == 0, (verb, result)
        loads(result.out)
    [listed] = loads(outputs["ps"].out)
    assert listed["wall_seconds"] is None and listed["wall_seconds_invalid"] == "not finite: nan"
    summary = loads(outputs["collect"].out)
    assert summary["wall_seconds"] is None and summary["wall_seconds_invalid"] == "not finite: nan"
    assert "not finite: inf" in outputs["experiment show"].out
    (run.path / "run.json").unlink()  # the two files written by hand above
    (cells / "cells.json").unlink()
    assert {p.name for p in every_file(folders)} >= {"summary.json"}


def test_job_json_and_rendezvous_are_strict():
    spec = make_spec(workers=2, run_id="strict")
    from orchestrator.paths import Paths
    from orchestrator.plan import plan

    p = plan(spec, Paths(runs=Path("/srv/runs"), cache=Path("/srv/cache")), user="1000:1000", host_cpus=2)
    for replica in p.replicas:
        for name in (contract.ENV_JOB, "TF_CONFIG"):
            if name in replica.env:
                loads(replica.env[name])


def test_every_json_file_of_a_run_and_its_collect_is_strict(tmp_path):
    """run.json, plan.json, the replicas' records, summary.json and the HTML report's data: a run through the
    runner (a fake backend and clock) and its collect, every JSON file read strictly."""
    from orchestrator.analysis.collect import collect
    from tests.fakes import trainer as replica
    from tests.test_runner import Harness

    h = Harness(tmp_path)
    p = h.plan()
    h.apply(p, h.backend({i: replica() for i in range(3)}))
    [summary] = collect([p.spec.run_id], paths=h.paths)
    names = {path.name for path in every_file(tmp_path)}
    assert {"run.json", "plan.json", "result.json", "summary.json"} <= names
    page = (Path(summary["results_dir"]) / "report.html").read_text()
    opening = '<script type="application/json" id="data">'
    blob = page[page.index(opening) + len(opening):]
    loads(blob[:blob.index("</script>")])
