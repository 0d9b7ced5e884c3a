"""A function as the job (run/function.py, api.run): its source checked, the entry script generated and run here with
this Python against a temporary folder (as a replica runs it, no engine), and the return files read back as untrusted
input."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

import orchestrator
from orchestrator import api
from orchestrator.errors import FunctionFailed, InvalidSpec, OrchError, WorkerFailed, WorkerTraceback
from orchestrator.run import function
from orchestrator.run.rundir import RunInfo, RunState


# -- functions that travel, and ones that cannot --------------------------------------------------------------------
def rank_times(n, scale=1.0):
    import os

    return {"rank": int(os.environ.get("RANK", "0")) * n, "scale": scale, "nan": float("nan")}


def raises():
    import sys

    sys.stderr.write("about to fail\n")
    raise ValueError("bad \x1b]0;title\x07 value")


class Arrayish:
    def __init__(self, values):
        self.values = values

    def tolist(self):
        return list(self.values)


def returns_arrayish():
    class Arrayish:  # as a NumPy array or a tensor: a tolist() method
        def tolist(self):
            return [1, 2, 3]

    class Tensorish:  # as a TensorFlow tensor: no tolist() or item(), a numpy() array
        def numpy(self):
            return Arrayish()

    return {"weights": Arrayish(), "tensor": Tensorish()}


def returns_object():
    return object()


def uses_a_module_name():
    return math.pi


def decorated_by(fn):
    return fn


@decorated_by
def decorated():
    return 1


def closure():
    x = 1

    def inner():
        return x

    return inner


def _run_entry(tmp_path: Path, fn, args=(), kwargs=None, env=None) -> tuple[subprocess.CompletedProcess, Path]:
    folder, out = tmp_path / "source", tmp_path / "worker-0"
    folder.mkdir()
    out.mkdir()
    entry = function.write_folder(fn, args, kwargs, folder)
    proc = subprocess.run([sys.executable, str(entry)], capture_output=True, text=True, timeout=60, cwd=out,
                          env={**os.environ, "ORCH_OUTPUT_DIR": str(out), **(env or {})})
    return proc, out / function.RETURN_FILE


def test_the_entry_script_writes_the_return_value_as_strict_json(tmp_path):
    proc, written = _run_entry(tmp_path, rank_times, (3,), {"scale": 2.5}, {"RANK": "2"})
    assert proc.returncode == 0, proc.stderr
    text = written.read_text()
    record = json.loads(text, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert record == {"v": 1, "ok": True, "value": {"rank": 6, "scale": 2.5, "nan": None,
                                                     "nan_invalid": "not finite: nan"}}
    assert function.returns(tmp_path, [("worker", 0)], "rank_times") == [record["value"]]
    assert json.loads((tmp_path / "source" / function.ARGS_FILE).read_text()) == {
        "function": "rank_times", "args": [3], "kwargs": {"scale": 2.5}}
    assert function.name_of(tmp_path / "source") == "rank_times"


def test_an_array_is_returned_as_its_list_and_an_object_fails_the_worker(tmp_path):
    (tmp_path / "a").mkdir()
    proc, written = _run_entry(tmp_path / "a", returns_arrayish)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(written.read_text())["value"] == {"weights": [1, 2, 3], "tensor": [1, 2, 3]}
    (tmp_path / "b").mkdir()
    proc, written = _run_entry(tmp_path / "b", returns_object)
    assert proc.returncode == 1
    record = json.loads(written.read_text())
    assert record["ok"] is False and "object is not JSON" in record["traceback"]


def test_a_function_that_raises_writes_its_traceback_and_exits_1(tmp_path):
    proc, written = _run_entry(tmp_path, raises)
    assert proc.returncode == 1
    assert "about to fail" in proc.stderr and "ValueError: bad" in proc.stderr  # in the replica's log too
    record = json.loads(written.read_text())
    assert record["ok"] is False and record["traceback"].startswith("Traceback (most recent call last):")
    error = function.failure(tmp_path, [("worker", 0)], "raises", {("worker", 0): 1})
    assert isinstance(error, FunctionFailed) and isinstance(error, WorkerFailed)
    assert error.worker == 0 and error.worker_exit_code == 1 and error.exit_code == 1
    assert error.message.startswith("worker-0: raises() raised ValueError: bad ") and "\n" not in error.message
    # The traceback the container chose is shown, not obeyed: its control characters escaped.
    assert "\x1b" not in error.traceback and "\x07" not in error.traceback and "\\x1b]0;title\\x07" in error.traceback
    assert 'raise ValueError("bad' in error.traceback and error.details == error.traceback
    with pytest.raises(FunctionFailed):
        function.returns(tmp_path, [("worker", 0)], "raises")


@pytest.mark.parametrize(("fn", "says"), [
    (lambda: 1, "is a lambda"),
    (len, "is not a Python function defined with def"),
    (Arrayish(()).tolist, "is not a Python function defined with def"),
    (closure(), "is a closure over x"),
    (decorated, "is decorated"),
    (uses_a_module_name, "uses math from outside it"),
])
def test_a_function_that_cannot_travel_is_refused_in_one_line(fn, says):
    with pytest.raises(InvalidSpec) as caught:
        function.source(fn)
    assert says in caught.value.message and "\n" not in caught.value.message and caught.value.exit_code == 2


def test_a_function_with_its_imports_inside_travels_dedented():
    def nested(n):
        import math as m

        for i in range(n):
            total = m.sqrt(i)
        return [total for _ in range(2)]

    text = function.source(nested)
    assert text.startswith("def nested(n):\n") and "import math as m" in text


@pytest.mark.parametrize(("args", "kwargs", "says"), [
    ((object(),), None, "travel as JSON"),
    ((float("nan"),), None, "travel as JSON"),
    ((), {1: 2}, "every key must be a string"),
])
def test_arguments_that_are_not_json_are_refused_in_one_line(args, kwargs, says):
    with pytest.raises(InvalidSpec) as caught:
        function.arguments("f", args, kwargs)
    assert says in caught.value.message and "\n" not in caught.value.message


def test_a_return_file_that_is_not_orchs_is_no_value(tmp_path):
    folder = tmp_path / "worker-0"
    folder.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"v": 1, "ok": True, "value": "secret"}))
    (folder / function.RETURN_FILE).symlink_to(target)  # never followed
    with pytest.raises(OrchError, match=r"worker-0: f\(\) left no return value"):
        function.returns(tmp_path, [("worker", 0)], "f")
    (folder / function.RETURN_FILE).unlink()
    (folder / function.RETURN_FILE).write_text(json.dumps({"v": 1, "ok": False}))  # no traceback: not orch's
    assert function.failure(tmp_path, [("worker", 0)], "f") is None


# -- api.run, through the script seam, with `up` replaced by replicas run here --------------------------------------
@pytest.fixture
def local_up(tmp_path, monkeypatch):
    """runner.up as replicas would run the job: the entry script in each worker's folder, with its RANK."""
    seen = {}

    def up(spec, detach=False, paths=None, say=None, on_event=None, stats_interval=None):
        seen["spec"] = spec
        run_dir = paths.runs / spec.run_id
        failed = None
        for i in range(spec.workers):
            out = run_dir / f"worker-{i}"
            out.mkdir(parents=True)
            proc = subprocess.run([sys.executable, spec.script], capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "ORCH_OUTPUT_DIR": str(out), "RANK": str(i)})
            if proc.returncode and failed is None:
                failed = WorkerFailed(i, proc.returncode, f"worker-{i} exited with code {proc.returncode}")
        if failed is not None:
            raise failed
        return RunInfo(run_id=spec.run_id, state=RunState.SUCCEEDED, spec=spec, run_dir=str(run_dir))

    monkeypatch.setattr("orchestrator.run.start.up", up)
    return seen


def test_run_returns_every_workers_value_and_leaves_no_temporary_folder(tmp_path, local_up):
    from orchestrator.paths import Paths

    paths = Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results")
    result = orchestrator.run(rank_times, args=(10,), workers=2, dataset="synthetic", run_id="fn", paths=paths)
    assert isinstance(result, api.RunResult) and result.state == RunState.SUCCEEDED
    assert [r["rank"] for r in result.returns] == [0, 10]
    script = Path(local_up["spec"].script)
    assert script.name == function.ENTRY_FILE and not script.parent.exists()  # the run keeps its own copy


def test_run_raises_function_failed_naming_the_worker(tmp_path, local_up):
    from orchestrator.paths import Paths

    paths = Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results")
    with pytest.raises(FunctionFailed) as caught:
        orchestrator.run(raises, workers=2, dataset="synthetic", run_id="fn-bad", paths=paths)
    assert caught.value.worker == 0 and "worker-0: raises() raised ValueError" in caught.value.message
    assert "Traceback (most recent call last)" in caught.value.traceback
    cause = caught.value.__cause__  # the worker's traceback, printed under the error as Python prints a cause
    assert isinstance(cause, WorkerTraceback) and cause.text == caught.value.traceback
    shown = "".join(traceback.format_exception(caught.value))
    assert "the traceback on worker-0:" in shown and "ValueError" in shown.split("The above exception")[0]


@pytest.mark.parametrize(("fields", "says"), [
    ({"script": "/x/train.py"}, "script: run() makes the job's script from the function"),
    ({"procs_per_worker": 2, "framework": "torch"}, "procs_per_worker: run() calls the function once per container"),
])
def test_run_refuses_what_would_replace_the_function(fields, says, local_up):
    with pytest.raises(InvalidSpec, match=says.replace("(", r"\(").replace(")", r"\)")):
        orchestrator.run(rank_times, **fields)
    assert "spec" not in local_up


def test_orchestrator_run_calls_the_function_and_stays_the_package():
    import inspect

    from orchestrator.run import runner

    assert orchestrator.run is sys.modules["orchestrator.run"] and orchestrator.run.runner is runner
    assert callable(orchestrator.run) and "run" in dir(orchestrator)
    assert inspect.signature(orchestrator.run) == inspect.signature(api.run)
    assert "workers: 'int' = 1" in str(inspect.signature(orchestrator.run))


def test_the_notebooks_function_travels(tmp_path):
    """examples/notebooks/compare.ipynb's job passes the checks run() makes, before any container starts."""
    import importlib.util

    from tests.conftest import ROOT

    notebook = json.loads((ROOT / "examples" / "notebooks" / "compare.ipynb").read_text())
    code = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    (tmp_path / "cell.py").write_text(next(c for c in code if c.startswith("def train(")))
    spec = importlib.util.spec_from_file_location("cell", tmp_path / "cell.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert function.source(module.train).startswith("def train(epochs, samples, batch_size):")


def test_where_no_folder_is_shared_the_record_also_goes_as_report_lines_orch_copies(tmp_path):
    """ORCH_REPORT=stdout (Swarm, Kubernetes): the record as report lines, which the copier writes into the replica's
    folder of the run, as it writes a result."""
    from orchestrator.backends import ReplicaState, Status
    from orchestrator.run.copier import ReportCopier
    from orchestrator.run.rundir import RunDir
    from orchestrator.run.stdout import records

    proc, written = _run_entry(tmp_path, rank_times, (2,), None, {"ORCH_REPORT": "stdout", "RANK": "3"})
    assert proc.returncode == 0, proc.stderr
    ((name, text),) = list(records(proc.stdout.splitlines()))
    assert name == function.RETURN_FILE and json.loads(text) == json.loads(written.read_text())

    class Printed:  # the engine's log API over what the replica printed
        reports_on_stdout = True

        def log_lines(self, state, stream, follow=False, since=None):
            return iter([f"2026-11-28T10:00:00.{i:09d}Z {line}" for i, line in enumerate(proc.stdout.splitlines())])

    run = RunDir(tmp_path / "run")
    (run.path / "worker-0").mkdir(parents=True)
    state = ReplicaState(id="c0", name="r-worker-0", run="r", role="worker", index=0, status=Status.SUCCEEDED)
    ReportCopier(Printed(), run, [("worker", 0)]).pull([state], force=True)
    assert function.returns(run.path, [("worker", 0)], "rank_times")[0]["rank"] == 6
