"""The `orch` command run in-process: main(argv, env=...) with consoles writing to StringIO. No engine."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import typing

import pytest
import yaml
from pydantic_core import PydanticUndefined

from orchestrator import __version__
from orchestrator.cli import main
from orchestrator.cli.env import Environment
from orchestrator.cli.options import spec_flags
from orchestrator.errors import ImageMissing
from orchestrator.frameworks.tensorflow.options import TensorFlowOptions
from orchestrator.jobspec import JobSpec, make_spec
from tests.conftest import ROOT

VERBS = [[], ["build"], ["render"], ["up"], ["ps"], ["down"], ["stats"], ["collect"], ["experiment"],
         ["experiment", "run"], ["logs"], ["doctor"]]

# Every flag the hand-written list had, and the field it set.
OLD_FLAGS = {
    "--workers": "workers", "-n": "workers", "--epochs": "epochs", "-e": "epochs", "--batch-size": "global_batch",
    "-b": "global_batch", "--dataset": "dataset", "--samples": "samples", "-s": "samples", "--seed": "seed",
    "--learning-rate": "learning_rate", "--steps-per-execution": "steps_per_execution", "--network": "network",
    "--threads": "threads", "--pin-cpus": "pin_cpus", "--log-reduction": "log_reduction", "--cache": "cache",
    "--prefetch": "prefetch", "--shuffle-buffer": "shuffle_buffer", "--collective": "collective",
    "--bytes-per-pack": "bytes_per_pack", "--collective-timeout": "collective_timeout",
    "--stall-timeout": "stall_timeout", "--checkpoint-every": "checkpoint_every", "--max-restarts": "max_restarts",
    "--startup-timeout": "startup_timeout", "--cpus": "cpus", "--memory": "memory_mb", "--image": "image",
    "--run-id": "run_id", "--backend": "backend",
}


class Result(typing.NamedTuple):
    code: int
    out: str
    err: str


def orch(*argv: str, isatty: bool = False) -> Result:
    """Run `orch argv` in this process; its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exc:
        main(list(argv), env=Environment.from_streams(out, err, isatty=isatty))
    return Result(exc.value.code, out.getvalue(), err.getvalue())


def one_line_error(result: Result, code: int, needle: str) -> None:
    assert result.code == code, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orch:") and needle in lines[0], result.err
    assert result.out == ""


def flat(text: str) -> str:
    """Whitespace collapsed, and a line broken after a hyphen joined again (the help wraps "free-space")."""
    return " ".join(text.split()).replace("- ", "-")


@pytest.fixture(autouse=True)
def folders(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("ORCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ORCH_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


class FakeBackend:
    """A backend with no replicas on it: what an engine with no orch runs reports."""

    name = "compose"

    def states(self, run_id=None):
        return []


@pytest.fixture
def no_engine(monkeypatch):
    from orchestrator import backends

    monkeypatch.setattr(backends, "get", lambda name, engine=None: FakeBackend())


# -- help and version ---------------------------------------------------------------------------------
@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v) or "orch")
def test_help_of_every_verb(verb):
    result = orch(*verb, "--help")
    assert result.code == 0, result
    assert result.out.startswith(f"Usage: orch {' '.join(verb)}".rstrip()), result.out
    assert result.err == ""


def test_version():
    assert orch("--version") == (0, f"orch, version {__version__}\n", "")


def test_help_shows_the_results_default_and_global_batch():
    assert "GLOBAL batch" in orch("up", "--help").out
    assert "ORCH_RESULTS_DIR" in orch("collect", "--help").out
    assert "ORCH_RESULTS_DIR" in orch("experiment", "run", "--help").out


# -- the generated spec flags -------------------------------------------------------------------------
def _expected_flags():
    """(field, flag, short, annotation, shown default) of every field with a flag, from the models themselves."""
    fields = list(JobSpec.model_fields.items()) + [(n, f) for n, f in TensorFlowOptions.model_fields.items()
                                                   if n != "name"]
    for name, info in fields:
        extra = info.json_schema_extra or {}
        if extra.get("flag") is False:
            continue
        shown = extra.get("default_text")
        if shown is None and info.default not in (PydanticUndefined, None) and not isinstance(info.default, bool):
            shown = str(info.default)
        yield name, extra.get("flag") or "--" + name.replace("_", "-"), extra.get("short"), info, shown


@pytest.mark.parametrize("verb", ["up", "render"])
def test_every_spec_field_with_a_flag_is_in_the_help(verb):
    helptext = flat(orch(verb, "--help").out)
    for name, flag, short, info, shown in _expected_flags():
        annotation = info.annotation
        if annotation is bool:
            assert f"{flag} / --no-{flag[2:]}" in helptext, name
        else:
            assert flag in helptext, name
        if short:
            assert f"{short}, {flag}" in helptext, name
        assert flat(info.description) in helptext, name
        if shown is not None:
            assert f"{flat(info.description)} [default: {shown}]" in helptext, name
        if typing.get_origin(annotation) is typing.Literal:
            assert "[" + "|".join(typing.get_args(annotation)) + "]" in helptext, name


def test_the_generated_flags_cover_the_old_list():
    by_decl = {}
    for f in spec_flags():
        by_decl[f.flag] = f.field
        if f.short:
            by_decl[f.short] = f.field
    for decl, field in OLD_FLAGS.items():
        assert by_decl.get(decl) == field, decl
    helptext = orch("up", "--help").out
    assert "--no-pin-cpus" in helptext and "--no-cache" in helptext


def test_an_optional_field_without_a_default_shows_none():
    helps = {f.field: f.help for f in spec_flags()}
    assert helps["cpus"].endswith("[default: none]")  # default_text
    assert helps["memory_mb"].endswith("[default: 2g]")  # default_text, as Docker writes a size
    assert helps["seed"].endswith("[default: 42]")  # the field's default
    assert helps["run_id"].endswith("[default: time-based]")  # required, with default_text


def spec_of(*flags: str) -> dict:
    result = orch("render", "--format", "json", "--run-id", "r1", *flags)
    assert result.code == 0, result
    return json.loads(result.out)["spec"]


def test_unset_flags_take_the_spec_defaults():
    assert spec_of() == make_spec(run_id="r1").model_dump(mode="json")


@pytest.mark.parametrize("flags, field, value", [
    (["-n", "2", "-b", "100"], "global_batch", 100),
    (["--memory", "4096"], "memory_mb", 4096),
    (["--no-pin-cpus"], "pin_cpus", False),
    (["--cpus", "1.5"], "cpus", 1.5),
    (["--network", "shared"], "network", "shared"),
    (["--backend", "compose"], "backend", "compose"),
    (["--collective", "auto"], "collective", "auto"),
    (["--no-cache"], "cache", False),
    (["--steps-per-execution", "7"], "steps_per_execution", 7),
])
def test_set_flags_reach_the_spec(flags, field, value):
    spec = spec_of(*flags)
    assert {**spec, **spec["framework"]}[field] == value


# -- render ------------------------------------------------------------------------------------------
def test_render_compose_prints_the_file_and_starts_nothing(folders):
    result = orch("render", "--workers", "3", "--run-id", "render-only")
    assert result.code == 0, result
    assert sorted(yaml.safe_load(result.out)["services"]) == ["worker-0", "worker-1", "worker-2"]
    assert result.err == ""
    assert not (folders / "runs").exists()


def test_render_json_has_every_tf_config():
    result = orch("render", "-n", "2", "--run-id", "r", "--format", "json")
    plan = json.loads(result.out)
    assert [r["tf_config"]["task"]["index"] for r in plan["replicas"]] == [0, 1]
    assert plan["run_id"] == "r" and plan["backend"] == "compose"


# -- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["up", "--workers", "0"], "workers"),
    (["render", "--workers", "abc"], "'abc' is not a valid integer"),
    (["up", "--dataset", "cifar10"], "'cifar10' is not one of"),
    (["render", "--backend", "nomad"], "'nomad' is not one of"),
    (["up", "--samples", "60001"], "samples: mnist has 60000 training samples"),
    (["render", "-n", "3", "-b", "100"], "not divisible by 3 workers"),
    (["up", "--run-id", "Bad Id"], "--run-id:"),
    (["up", "--bogus"], "No such option"),
    (["render", "--format", "yaml"], "'yaml' is not one of"),
    (["logs", "--grep", "("], "not a regular expression"),
    (["logs", "--tail", "-1"], "must be 0 or more"),
    (["experiment", "run"], "Missing argument"),
    (["nosuchverb"], "No such command"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    one_line_error(orch(*args), 2, needle)


# -- ps ----------------------------------------------------------------------------------------------
def test_ps_on_an_empty_runs_folder(no_engine):
    result = orch("ps")
    assert result.code == 0 and result.out == "", result
    assert "no runs yet" in result.err
    assert json.loads(orch("ps", "--format", "json").out) == []


def test_ps_lists_a_recorded_run_and_one_without_a_spec(folders, no_engine):
    spec = make_spec(workers=2, global_batch=64, run_id="done-run")
    for run_id, record_spec in (("done-run", spec.model_dump(mode="json")), ("no-spec", {})):
        (folders / "runs" / run_id).mkdir(parents=True)
        record = {"state": "succeeded", "spec": record_spec, "started": 1.0 if record_spec else 2.0,
                  "workers": [{"worker": 0, "train_seconds": 3.5, "test_accuracy": 0.9, "samples_per_epoch": [100]}]}
        (folders / "runs" / run_id / "run.json").write_text(json.dumps(record))
    result = orch("ps")
    assert result.code == 0, result
    rows = [line for line in result.out.splitlines() if "done-run" in line or "no-spec" in line]
    assert len(rows) == 2
    assert "succeeded" in rows[0] and " 64 " in rows[0] and "3.50" in rows[0] and "0.9000" in rows[0]
    assert "?" in rows[1]
    [listed] = json.loads(orch("ps", "done-run", "--format", "json").out)
    assert listed["state"] == "succeeded" and listed["spec"]["global_batch"] == 64


# -- the progress watcher ----------------------------------------------------------------------------
@pytest.mark.parametrize("isatty", [False, True])
def test_watcher_prints_worker_text_as_it_is(isatty):
    from orchestrator.cli.cmd_up import Watcher
    from orchestrator.run.records import parse_event

    out, err = io.StringIO(), io.StringIO()
    env = Environment.from_streams(out, err, isatty=isatty)
    events = [
        {"event": "start", "stage": "training", "steps_per_epoch": 10},
        {"event": "epoch", "epoch": 1, "epochs": 2, "loss": 0.5, "accuracy": 0.8, "val_accuracy": 0.7,
         "seconds": 1.5, "samples": 640},
        {"event": "resumed", "epoch": 1},
        {"event": "error", "message": "[/job:worker/replica:0/task:1] collective [bold]failed"},
        {"event": "done", "train_seconds": 3.0, "test_accuracy": 0.9},
    ]
    from orchestrator import contract

    with Watcher(env, [("worker", 0), ("worker", 1)], epochs=2) as watcher:
        for raw in events:
            watcher(("worker", 0), parse_event({"v": contract.CONTRACT_VERSION, "worker": 0, "time": 1.0, **raw}))
    text = err.getvalue()
    assert "[/job:worker/replica:0/task:1] collective [bold]failed" in text
    assert "resumed from its checkpoint at epoch 1" in text
    if not isatty:
        assert "worker-0 epoch 1/2 loss 0.5000 acc 0.8000 val_acc 0.7000 (640 samples) 1.5s" in text
        assert "training (10 steps per epoch)" in text
    assert out.getvalue() == ""


def test_a_scripts_bar_shows_what_orch_knows_of_it_not_epochs_it_cannot_count():
    from orchestrator.backends import ReplicaState, Status
    from orchestrator.cli.cmd_up import Watcher

    out, err = io.StringIO(), io.StringIO()
    env = Environment.from_streams(out, err, isatty=True)
    with Watcher(env, [("worker", 0)], epochs=None) as watcher:
        task = watcher.progress.tasks[watcher.tasks[("worker", 0)]]
        assert task.total is None and "epochs" not in task.fields["count"]
        watcher.state(ReplicaState("c0", "w0", "r", "worker", 0, Status.RUNNING))
        assert task.description == "worker-0 running"
        watcher.state(ReplicaState("c0", "w0", "r", "worker", 0, Status.FAILED, exit_code=3))
        assert task.description == "worker-0 exited 3" and task.finished
    text = err.getvalue()
    assert "worker-0 exited 3" in text and "0/5 epochs" not in text


# -- the error boundary ------------------------------------------------------------------------------
def _raising(exc):
    def fail(*args, **kwargs):
        raise exc
    return fail


@pytest.mark.parametrize("exc, code, needle", [
    (ImageMissing("image x is not present; run `orch build`", details="more"), 2, "orch: error: image x"),
    (RuntimeError("boom [/job:x]"), 1, "orch: internal error: RuntimeError: boom [/job:x] (run with --debug"),
    (OSError(28, "No space left on device", "results/x"), 2, "no space left on device writing results/x"),
    (OSError(13, "Permission denied", "runs/x"), 2, "orch: error: Permission denied: runs/x"),
    (KeyboardInterrupt(), 130, "orch: interrupted"),
])
def test_failures_map_to_one_message_and_an_exit_code(monkeypatch, exc, code, needle):
    from orchestrator.run import runs

    monkeypatch.setattr(runs, "ps", _raising(exc))
    result = orch("ps")
    assert result.code == code, result
    assert needle in result.err and result.out == ""
    assert result.err.strip().splitlines()[0].startswith("orch:") or isinstance(exc, KeyboardInterrupt)


def test_debug_shows_the_traceback_of_an_internal_error(monkeypatch):
    from orchestrator.run import runs

    monkeypatch.setattr(runs, "ps", _raising(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        main(["--debug", "ps"], env=Environment.from_streams(io.StringIO(), io.StringIO()))


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_are_terminated_143(monkeypatch, signame):
    from orchestrator.run import runs

    signum = getattr(signal, signame)
    before = signal.getsignal(signum)

    def killed(*args, **kwargs):
        os.kill(os.getpid(), signum)
        raise AssertionError("the signal should have interrupted")

    monkeypatch.setattr(runs, "ps", killed)
    result = orch("ps")
    assert result.code == 143, result
    assert "orch: terminated" in result.err and result.out == ""
    assert signal.getsignal(signum) == before  # main put the handler back


def test_doctor_exits_2_when_a_check_fails(monkeypatch):
    from orchestrator.docker import doctor

    checks = [doctor.Check("engine", True, "answers"), doctor.Check("disk", False, "1 GB [free]", "free some")]
    monkeypatch.setattr(doctor, "doctor", lambda fix=False: checks)
    result = orch("doctor")
    assert result.code == 2, result
    assert "1 GB [free]" in result.out and "free some" in result.out
    assert json.loads(orch("doctor", "--format", "json").out)[1]["ok"] is False


# -- structure ---------------------------------------------------------------------------------------
def test_no_module_level_consoles():
    from rich.console import Console

    import orchestrator.cli as package

    modules = [m for name, m in sys.modules.items() if name.startswith("orchestrator.cli")]
    assert package in modules and len(modules) > 5
    for module in modules:
        assert not [n for n, v in vars(module).items() if isinstance(v, Console)], module.__name__


def test_help_imports_no_verb_library():
    code = ("import sys\nfrom orchestrator.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "loaded = [m for m in ('orchestrator.analysis.collect', 'orchestrator.experiments.sweep', 'orchestrator.analysis.report', "
            "'orchestrator.images.builder', 'orchestrator.run.runner') if m in sys.modules]\nprint(loaded, file=sys.stderr)\n"
            "sys.exit(1 if loaded else 0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr


# -- up, with the runner replaced ----------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--detach"], ["--format", "json"]])
def test_up_prints_the_run_and_its_workers(monkeypatch, extra):
    from orchestrator import contract
    from orchestrator.run import start
    from orchestrator.run.records import parse_event
    from orchestrator.run.rundir import RunInfo, RunState

    def fake_up(spec, detach=False, say=None, on_event=None, stats_interval=1.0, **kwargs):
        assert spec.workers == 2 and spec.global_batch == 64 and spec.framework.collective == "auto"
        say(f"starting run {spec.run_id}")
        on_event(("worker", 1), parse_event({"v": contract.CONTRACT_VERSION, "worker": 1, "event": "epoch", "epoch": 1,
                              "epochs": 1, "loss": 0.1, "samples": 100}))
        workers = [{"worker": i, "train_seconds": 2.0 + i, "test_accuracy": 0.95, "samples_per_epoch": [100],
                    "exit_code": 0} for i in range(2)]
        return RunInfo(run_id=spec.run_id, state=RunState.RUNNING if detach else RunState.SUCCEEDED, spec=spec,
                       wall_seconds=9.0, workers=[] if detach else workers)

    monkeypatch.setattr(start, "up", fake_up)
    result = orch("up", "-n", "2", "-b", "64", "--collective", "auto", "--run-id", "fake", *extra)
    assert result.code == 0, result
    assert "orch: starting run fake" in result.err and "worker-1 epoch 1/1 loss 0.1000" in result.err
    if extra == ["--detach"]:
        assert result.out == "fake\n" and "`orch down fake` stops it" in result.err
    elif extra:
        record = json.loads(result.out)
        assert record["state"] == "succeeded" and record["train_seconds"] == 3.0
    else:
        assert "succeeded" in result.out and "3.00" in result.out and "worker-1" in result.out


def test_the_runs_and_results_folders_are_flags_as_well_as_variables(tmp_path, monkeypatch):
    from orchestrator.paths import default_paths

    monkeypatch.delenv("ORCH_RUNS_DIR", raising=False)  # restored after the test, whatever the flags set
    monkeypatch.delenv("ORCH_RESULTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert (default_paths().runs, default_paths().results.resolve()) == (tmp_path / "runs", tmp_path / "results")
    result = orch("--runs-dir", "elsewhere/runs", "--results-dir", "out", "ps", "--format", "json")
    assert result.code == 0, result
    assert (default_paths().runs, default_paths().results) == (tmp_path / "elsewhere/runs", tmp_path / "out")
    help_text = orch("--help").out
    assert "--runs-dir" in help_text and "ORCH_RUNS_DIR" in help_text and "--results-dir" in help_text


@pytest.mark.parametrize("argv", [("--debug", "render", "--workers", "0"), ("render", "--debug", "--workers", "0"),
                                  ("render", "--workers", "0", "--debug")])
def test_debug_is_taken_anywhere_before_the_scripts_arguments(argv):
    result = orch(*argv)
    assert result.code == 2 and "No such option" not in result.err
    assert "InvalidSpec" in result.err  # the traceback --debug asks for, wherever it stands


def test_debug_after_the_separator_belongs_to_the_script(tmp_path, monkeypatch):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path / "proj")
    result = orch("render", "--script", "train.py", "--run-id", "r", "--", "--debug")
    assert result.code == 0, result.err
    assert '"--debug"' in result.out or "- --debug" in result.out


# -- no flag ignored ----------------------------------------------------------------------------------------------
@pytest.fixture
def script(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.py").write_text("print('hi')\n")
    return str(tmp_path / "src" / "x.py")


def test_a_flag_the_script_would_ignore_exits_2_naming_it(script):
    result = orch("up", "--script", script, "--epochs", "3", "--dry-run")
    one_line_error(result, 2, "--epochs: orch's own trainer reads it, and --script runs your script instead")
    several = orch("render", "--script", script, "-e", "3", "--batch-size", "10", "--cache")
    one_line_error(several, 2, "--epochs: orch's own trainer reads it")
    assert several.err.rstrip().endswith("--batch-size: the same")  # --cache is its default: nothing is lost


def test_requirements_without_a_script_and_expose_without_host_network_are_refused(tmp_path):
    (tmp_path / "requirements.txt").write_text("six\n")
    one_line_error(orch("render", "--requirements", str(tmp_path / "requirements.txt")), 2,
                   "error: --requirements adds packages for a --script; orch's own trainer imports none of them")
    one_line_error(orch("render", "--expose-ports-on-host"), 2,
                   "--expose-ports-on-host: it does nothing without --network host; leave it out")


def test_the_flags_table_in_the_docs_is_the_one_the_metadata_makes():
    from orchestrator.cli.reference import TABLE_BEGIN, flags_table, with_flags_table

    page = (ROOT / "docs" / "cli.md").read_text()
    assert TABLE_BEGIN in page and with_flags_table(page) == page, "run `python tools/generate.py`"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in flags_table().splitlines() if line.startswith("| `")}
    assert rows["`--epochs`, `-e`"].startswith("| `--epochs`, `-e` | yes | refused |")
    assert rows["`--source`"].startswith("| `--source` | refused | yes |")
    assert "`--network host`" in rows["`--expose-ports-on-host`"]
    assert set(rows) >= {f"`{f.flag}`" + (f", `{f.short}`" if f.short else "") for f in spec_flags()}


# -- orch up --dry-run --------------------------------------------------------------------------------------------
class AnsweringEngine:
    """The Docker boundary of an engine that answers (Compose's preflight calls these); anything that would start or
    make something is absent, so a dry run that tried would fail the test."""

    def __init__(self, cpus=2):
        from orchestrator import frameworks

        self.images = set(frameworks.get("tensorflow").image_refs())  # built; PyTorch's is not
        self.cpus, self.calls = cpus, []

    def ping(self):
        self.calls.append("ping")

    def compose_version(self):
        return "2.29.0"

    def require_image(self, ref, hint):
        self.calls.append(f"image {ref}")
        if ref not in self.images:
            raise ImageMissing(f"image {ref} is missing; {hint}")

    def info(self):
        return {"NCPU": self.cpus}


@pytest.fixture
def engine(monkeypatch):
    from orchestrator import backends

    fake, real = AnsweringEngine(), backends.get
    monkeypatch.setattr(backends, "get", lambda name, engine=None: real(name, fake))
    return fake


def test_a_dry_run_with_no_engine_checks_the_rest_plans_and_leaves_nothing(folders):
    result = orch("up", "--workers", "2", "--memory", "2g", "--disk-limit", "200M", "--run-id", "dry", "--dry-run")
    assert result.code == 0, result
    assert "worker-0" in result.out and "worker-1" in result.out and "2g" in result.out
    lines = result.err.strip().splitlines()
    assert lines[0].startswith("orch: could not check the images or the engine's limits: cannot reach the Docker")
    assert lines[-1].startswith("orch: dry run: nothing was started or written")
    assert not any((folders / name).exists() for name in ("runs", "cache", "results"))  # nothing written


def test_a_dry_run_refuses_what_up_would_refuse_and_starts_nothing(folders, engine):
    ok = orch("up", "--run-id", "dry", "--dry-run", "--format", "json")
    assert ok.code == 0 and json.loads(ok.out)["run_id"] == "dry", ok
    assert engine.calls == ["ping", "image orch-trainer:0.1.0-single"] and "could not check" not in ok.err
    one_line_error(orch("up", "--framework", "torch", "--dry-run"), 2, "image orch-torch:")  # not built here
    one_line_error(orch("up", "--cpus", "3", "--dry-run"), 2, "--cpus: this Docker engine has 2 CPUs, and Compose "
                                                               "cannot give a container more; use --cpus 2 or less")
    (folders / "runs" / "taken").mkdir(parents=True)
    one_line_error(orch("up", "--run-id", "taken", "--dry-run"), 2, "--run-id: taken is already used")
    one_line_error(orch("up", "--script", str(folders / "missing.py"), "--dry-run"), 2, "--script: cannot use")
    one_line_error(orch("up", "--dry-run", "--detach"), 2, "--detach is for a run that starts; --dry-run starts none")
    assert sorted(p.name for p in (folders / "runs").iterdir()) == ["taken"]


def test_a_dry_run_of_a_script_names_the_caches_up_would_make(folders, engine, script):
    result = orch("up", "--script", script, "--workers", "2", "--dry-run")
    assert result.code == 0, result
    assert "python3 -u /orch/script/x.py" in result.out
    assert any("Keras' and torchvision's data caches for scripts not made yet" in line
               for line in result.err.splitlines())
    assert not (folders / "runs").exists() and not (folders / "cache").exists()
