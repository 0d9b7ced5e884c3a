"""The Python API: the verbs as functions of keyword arguments, making the plans the CLI makes."""
import importlib
import json
import os

import pytest

import orchestrator
from orchestrator import api
from orchestrator.errors import InvalidSpec, WorkerFailed
from orchestrator.paths import Paths
from tests.conftest import orch_containers, orch_networks
from tests.test_cli_inprocess import orch

VERBS = ["job_spec", "render", "up", "collect", "experiment", "ps", "down", "doctor"]


@pytest.fixture
def paths(tmp_path, monkeypatch):
    for name in ("RUNS", "CACHE", "RESULTS"):
        monkeypatch.setenv(f"ORCH_{name}_DIR", str(tmp_path / name.lower()))
    return Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")


def test_every_verb_is_a_function_on_every_access():
    """Not the module of the same name, however often and in whatever order the packages are imported."""
    for name in VERBS:
        first = getattr(orchestrator, name)
        importlib.import_module("orchestrator.plan")
        importlib.import_module("orchestrator.docker.doctor")
        assert callable(first) and not isinstance(first, type(orchestrator)), name
        assert getattr(orchestrator, name) is first, name
    assert set(VERBS) <= set(orchestrator.__all__) and set(VERBS) <= set(dir(orchestrator))
    with pytest.raises(AttributeError):
        orchestrator.no_such_verb  # noqa: B018


def test_help_of_every_verb_shows_the_function(capsys):
    """help(orchestrator.run) too, whose name is also a package's: the call and its fields come first."""
    for name in VERBS:
        help(getattr(orchestrator, name))
        shown = capsys.readouterr().out
        assert f"{name}(" in shown[:600], name
        assert "workers" in shown or name in ("ps", "down", "collect", "experiment", "doctor"), name
    help(orchestrator.run)
    assert "run(fn: " in capsys.readouterr().out


def test_the_package_is_typed():
    assert (orchestrator.__file__ and os.path.isfile(os.path.join(os.path.dirname(orchestrator.__file__),
                                                                   "py.typed")))


@pytest.mark.parametrize("backend", ["compose", "swarm", "k8s"])
def test_render_makes_the_plan_the_cli_makes(paths, backend):
    flags = ["--workers", "3", "--dataset", "synthetic", "--batch-size", "48", "--backend", backend,
             "--run-id", "same"]
    cli = orch("render", *flags, "--format", "json")
    assert cli.code == 0, cli.err
    p = orchestrator.render(workers=3, dataset="synthetic", global_batch=48, backend=backend, run_id="same")
    assert p.to_dict() == json.loads(cli.out)
    assert orch("render", *flags).out == p.artifact


def test_a_spec_or_fields_not_both(paths):
    spec = orchestrator.job_spec(workers=2, run_id="x")
    assert orchestrator.render(spec).spec == spec
    with pytest.raises(TypeError):
        orchestrator.render(spec, workers=3)


def test_bad_fields_raise_the_clis_one_line_error(paths):
    with pytest.raises(InvalidSpec) as info:
        orchestrator.render(workers=0)
    assert info.value.exit_code == 2 and "\n" not in info.value.message and "workers" in info.value.message


def test_a_relative_script_is_made_absolute_against_cwd(tmp_path, paths):
    (tmp_path / "train.py").write_text("print('hi')\n")
    spec = api.job_spec(script="train.py", cwd=tmp_path, script_args=("--lr", "0.1"), run_id="s")
    assert spec.script == str(tmp_path / "train.py") and spec.script_args == ("--lr", "0.1")


@pytest.mark.docker
def test_up_collect_ps_and_down_as_a_library(images, paths, cleanup, tmp_path):
    run_id = "api-w2"
    cleanup.append(run_id)
    said: list[str] = []
    info = orchestrator.up(workers=2, dataset="synthetic", samples=3000, epochs=1, run_id=run_id, say=said.append)
    assert info.state.value == "succeeded" and info.test_accuracy is not None and len(info.workers) == 2
    assert any("starting run api-w2" in line for line in said)
    got = orchestrator.collect(run_id)
    (summary,) = got.summaries
    assert summary["run_id"] == run_id and (paths.results / run_id / "summary.json").is_file()
    assert [r.run_id for r in orchestrator.ps(run_id)] == [run_id]
    assert orchestrator.down(run_id) == [run_id] and not orch_containers(run_id) and not orch_networks(run_id)
    cleanup.append("api-bad")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "fail.py").write_text("raise SystemExit(3)\n")
    with pytest.raises(WorkerFailed, match="exited with code 3"):  # raised once its record is written
        orchestrator.up(workers=1, dataset="synthetic", script=str(tmp_path / "bad" / "fail.py"),
                        run_id="api-bad")
    assert orchestrator.ps("api-bad")[0].state.value == "failed"
    assert not orch_containers("api-bad")


def test_an_unknown_framework_is_a_problem_of_its_field():
    with pytest.raises(InvalidSpec) as caught:
        orchestrator.make_spec(framework="pytorch")
    assert [(p.field, p.example) for p in caught.value.problems] == [("framework", "tensorflow")]
    assert "choose tensorflow or mpi or torch or jax" in caught.value.problems[0].text
