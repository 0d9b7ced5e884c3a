"""The `orch` command as a user runs it: output streams, exit codes and one-line errors."""
import json

import pytest
import yaml

from orchestrator import __version__
from tests.conftest import orch_containers, run_orch
from tests.test_cli_inprocess import orch as orch_cli


def test_version_and_help(orch_env):
    assert run_orch(["--version"], orch_env).stdout.strip() == f"orch, version {__version__}"
    helptext = run_orch(["up", "--help"], orch_env).stdout
    for flag in ("--workers", "--epochs", "--batch-size", "--dataset", "--samples", "--seed", "--run-id", "--detach"):
        assert flag in helptext
    assert "GLOBAL batch" in helptext


def test_render_prints_the_compose_file_and_starts_nothing(orch_env):
    """With no engine to reach, render still renders: it starts nothing because it asks no engine anything."""
    proc = run_orch(["render", "--workers", "3", "--run-id", "render-only"],
                    {**orch_env, "DOCKER_HOST": "unix:///nonexistent"})
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    assert sorted(doc["services"]) == ["worker-0", "worker-1", "worker-2"]


def test_render_json_has_every_tf_config(orch_env):
    proc = run_orch(["render", "-n", "2", "--run-id", "r", "--format", "json"], orch_env)
    plan = json.loads(proc.stdout)
    assert [r["tf_config"]["task"]["index"] for r in plan["replicas"]] == [0, 1]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["up", "--workers", "0"], "workers"),
        (["up", "--workers", "abc"], "'abc' is not a valid integer"),
        (["up", "--dataset", "cifar10"], "'cifar10' is not one of"),
        (["up", "--samples", "60001"], "samples: mnist has 60000 training samples"),
        (["up", "-n", "3", "-b", "100"], "not divisible by 3 workers"),
        (["up", "--run-id", "Bad Id"], "--run-id:"),
        (["up", "--bogus"], "No such option"),
        (["down"], "name a run"),
        (["ps", "no-such-run"], "no run 'no-such-run'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(orch_env, monkeypatch, args, needle):
    """In this process, as main() runs it (the process boundary: the test below)."""
    for name, value in orch_env.items():
        monkeypatch.setenv(name, value)
    result = orch_cli(*args)
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orch: error:") and needle in lines[0], result.err
    assert result.out == ""


def test_bad_input_is_one_line_and_exit_2_from_the_command_as_a_user_runs_it(orch_env):
    for args, needle in ((["up", "--workers", "abc"], "'abc' is not a valid integer"), (["down"], "name a run")):
        proc = run_orch(args, orch_env)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("orch: error:") and needle in lines[0], proc.stderr
        assert proc.stdout == ""


def test_stopped_engine_is_one_line_and_exit_2(orch_env, tmp_path):
    orch_env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
    proc = run_orch(["up", "--workers", "2", "--dataset", "synthetic", "--run-id", "no-engine"], orch_env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("orch: error: cannot reach the Docker engine")
    assert not (tmp_path / "runs" / "no-engine").exists()


@pytest.mark.docker
def test_missing_image_says_to_build(orch_env, tmp_path):
    proc = run_orch(["up", "--dataset", "synthetic", "--image", "orch-trainer:does-not-exist", "--run-id", "noimg"],
                    orch_env)
    assert proc.returncode == 2
    assert "image orch-trainer:does-not-exist is not present" in proc.stderr
    assert orch_containers("noimg") == [] and not (tmp_path / "runs" / "noimg").exists()


@pytest.mark.docker
def test_missing_own_image_names_orch_build(monkeypatch, tmp_path):
    from orchestrator.errors import ImageMissing
    from orchestrator.frameworks import tensorflow
    from orchestrator.jobspec import make_spec
    from orchestrator.paths import Paths
    from orchestrator.run import start

    monkeypatch.setattr(tensorflow, "__version__", "0.0.0-never-built")
    with pytest.raises(ImageMissing, match="run `orch build`"):
        start.up(make_spec(dataset="synthetic", run_id="never"), paths=Paths(tmp_path / "runs", tmp_path / "cache"))
    assert orch_containers("never") == []
