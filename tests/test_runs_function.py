"""Live: a Python function as the job (orchestrator.run) on real containers, waited for or handled (Run), and the
notebook that compares 1 with 2 workers with it, executed as Jupyter would. Each test removes what it started."""
from __future__ import annotations

import json

import pytest

import orchestrator
from orchestrator.errors import FunctionFailed
from orchestrator.paths import default_paths
from orchestrator.run.rundir import RunState
from tests.conftest import ROOT, orch_containers, orch_networks

pytestmark = pytest.mark.docker

SMALL = {"dataset": "synthetic"}


@pytest.fixture
def paths(tmp_path, monkeypatch):
    """This test's runs and results folders; the caches stay the machine's (the frameworks' data caches)."""
    monkeypatch.setenv("ORCH_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("ORCH_RESULTS_DIR", str(tmp_path / "results"))
    return default_paths()


def where_am_i(offset):
    import json
    import os

    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    return {"index": int(os.environ["ORCH_WORKER_INDEX"]) + offset, "workers": int(os.environ["ORCH_NUM_WORKERS"]),
            "task": task.get("index"), "folder": os.environ["ORCH_OUTPUT_DIR"]}


def fails_on_worker_1():
    import os

    if os.environ["ORCH_WORKER_INDEX"] == "1":
        raise RuntimeError("worker one gives up")
    return "fine"


def sleeps(seconds):
    import time

    time.sleep(seconds)
    return seconds


def test_a_function_on_two_containers_returns_each_workers_value(images, paths, cleanup):
    cleanup.append("fn-w2")
    result = orchestrator.run(where_am_i, args=(100,), workers=2, run_id="fn-w2", paths=paths, **SMALL)
    assert result.state == RunState.SUCCEEDED
    assert result.returns == [{"index": 100 + i, "workers": 2, "task": i, "folder": f"/orch/run/worker-{i}"}
                              for i in range(2)]
    assert [w["exit_code"] for w in result.workers] == [0, 0]
    assert result.source is not None and result.source["files"] == 3  # the function, its arguments, the entry
    assert not orch_containers("fn-w2") and not orch_networks("fn-w2")


def test_a_function_that_raises_names_the_worker_with_its_traceback(images, paths, cleanup):
    cleanup.append("fn-raises")
    with pytest.raises(FunctionFailed) as caught:
        orchestrator.run(fails_on_worker_1, workers=2, run_id="fn-raises", paths=paths, **SMALL)
    error = caught.value
    assert error.worker == 1 and error.message == ("worker-1: fails_on_worker_1() raised RuntimeError: worker one "
                                                   "gives up")
    assert 'raise RuntimeError("worker one gives up")' in error.traceback
    assert orchestrator.ps("fn-raises", paths=paths)[0].state == RunState.FAILED
    assert not orch_containers("fn-raises") and not orch_networks("fn-raises")


def test_a_handle_waits_collects_and_cancels(images, paths, cleanup):
    cleanup += ["fn-handle", "fn-cancel"]
    run = orchestrator.submit(sleeps, args=(3,), workers=2, run_id="fn-handle", paths=paths, **SMALL)
    assert run.status() == RunState.RUNNING and len(orch_containers("fn-handle")) == 2
    assert "fn-handle" in run._repr_html_()
    result = run.wait(timeout=300)
    assert result.state == RunState.SUCCEEDED and result.returns == [3, 3]
    assert not orch_containers("fn-handle") and not orch_networks("fn-handle")
    collected = run.collect()
    assert [s["run_id"] for s in collected.summaries] == ["fn-handle"]
    stopped = orchestrator.submit(sleeps, args=(600,), workers=2, run_id="fn-cancel", paths=paths, **SMALL)
    with pytest.raises(TimeoutError):
        stopped.wait(timeout=2)
    stopped.cancel()
    assert stopped.status() == RunState.STOPPED
    assert not orch_containers("fn-cancel") and not orch_networks("fn-cancel")


def test_start_returns_a_handle(images, paths, cleanup):
    cleanup.append("up-handle")
    run = orchestrator.start(workers=1, samples=3000, epochs=1, run_id="up-handle", paths=paths, **SMALL)
    result = run.wait(timeout=600)
    assert result.state == RunState.SUCCEEDED and result.returns == [] and result.test_accuracy is not None
    assert not orch_containers("up-handle")


def test_the_comparison_notebook_runs_and_compares_one_with_two_workers(images, paths, cleanup, tmp_path):
    """examples/notebooks/compare.ipynb, executed cell by cell in a kernel of this Python, as Jupyter would."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(ROOT / "examples" / "notebooks" / "compare.ipynb", as_version=4)
    try:
        nbclient.NotebookClient(notebook, timeout=1200, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:  # the runs the notebook started, whatever became of them
        cleanup += [run.name for run in paths.runs.iterdir()] if paths.runs.is_dir() else []
    printed = [line for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
               if out.get("name") == "stdout" for line in out["text"].splitlines()]
    summary = json.loads(next(line for line in printed if line.startswith('{"compared"')))
    assert summary["compared"] == [1, 2] and summary["states"] == ["succeeded", "succeeded"]
    assert [len(r) for r in summary["returns"]] == [1, 2]
    assert all(r["accuracy"] > 0.5 for returns in summary["returns"] for r in returns)
    assert summary["t2_over_t1"] > 0
    shown = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
             if "text/html" in out.get("data", {})]
    assert shown and "succeeded" in shown[-1]["data"]["text/html"]
    assert all(not orch_containers(run_id) for run_id in cleanup)
