"""The Docker boundary against captured Engine API JSON and injected fakes."""
import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.docker.engine import Engine, parse_container
from orchestrator.errors import ComposeMissing, DockerError, EngineUnreachable, ImageMissing

FIXTURES = Path(__file__).parent / "fixtures"


def test_parse_exited_container_from_captured_inspect():
    state = parse_container(json.loads((FIXTURES / "inspect_exited.json").read_text()))
    assert (state.run, state.role, state.index, state.status, state.exit_code) == ("cap-run", "worker", 2, "exited", 3)
    assert state.finished_at.startswith("2026-") and not state.oom_killed


def test_running_container_has_no_exit_code():
    attrs = json.loads((FIXTURES / "inspect_exited.json").read_text())
    attrs["State"].update(Status="running", Running=True, ExitCode=0)
    assert parse_container(attrs).exit_code is None


class FakeAPI:
    def __init__(self, attrs):
        self.attrs = attrs
        self.filters = None

    def containers(self, all, filters):
        self.filters = filters
        return [{"Id": a["Id"]} for a in self.attrs]

    def inspect_container(self, cid):
        return next(a for a in self.attrs if a["Id"] == cid)


class FakeClient:
    def __init__(self, attrs):
        self.api = FakeAPI(attrs)


def test_containers_are_found_by_label_and_sorted_by_index():
    base = json.loads((FIXTURES / "inspect_exited.json").read_text())
    attrs = []
    for i in (2, 0, 1):
        a = json.loads(json.dumps(base))
        a["Id"] = f"id{i}"
        a["Config"]["Labels"]["orch.index"] = str(i)
        attrs.append(a)
    engine = Engine(client=FakeClient(attrs))
    states = engine.containers("cap-run")
    assert engine.client.api.filters == {"label": "orch.run=cap-run"}
    assert [s.index for s in states] == [0, 1, 2]


class FakeRunner:
    """The command runner: records each argv and time limit, answers with a canned result."""

    def __init__(self, returncode=0, stdout="", stderr="", raises=None):
        self.result = subprocess.CompletedProcess([], returncode, stdout, stderr)
        self.raises = raises
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append((argv, timeout))
        if self.raises:
            raise self.raises
        return self.result


def test_compose_up_is_called_detached_with_the_project_and_a_time_limit(tmp_path):
    runner = FakeRunner()
    Engine(client=object(), runner=runner).compose_up(tmp_path / "compose.yml", "orch-r1")
    ((argv, timeout),) = runner.calls
    assert argv == ["docker", "compose", "--file", str(tmp_path / "compose.yml"), "--project-name", "orch-r1", "up",
                    "--detach", "--pull", "never"]
    assert 0 < timeout <= 600


def test_compose_down_waits_the_grace_and_no_longer_than_its_limit(tmp_path):
    runner = FakeRunner()
    Engine(client=object(), runner=runner).compose_down(tmp_path / "c.yml", "p", timeout=5)
    ((argv, timeout),) = runner.calls
    assert argv == ["docker", "compose", "--file", str(tmp_path / "c.yml"), "--project-name", "p", "down",
                    "--remove-orphans", "--volumes", "--timeout", "5"]
    assert 5 < timeout <= 600


def test_a_compose_call_that_hangs_is_stopped_with_a_message(tmp_path):
    runner = FakeRunner(raises=subprocess.TimeoutExpired(["docker"], 300))
    with pytest.raises(DockerError, match=r"compose up did not finish within \d+ s"):
        Engine(client=object(), runner=runner).compose_up(tmp_path / "c.yml", "p")


@pytest.mark.parametrize(
    "stderr, error",
    [
        ("docker: 'compose' is not a docker command.", ComposeMissing),
        ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
         EngineUnreachable),
        ("Error response from daemon: No such image: orch-trainer:9-multi", ImageMissing),
        ("network cluster: something else broke", DockerError),
    ],
)
def test_compose_errors_are_translated(tmp_path, stderr, error):
    with pytest.raises(error):
        Engine(client=object(), runner=FakeRunner(1, stderr=stderr)).compose_up(tmp_path / "c.yml", "p")


def test_compose_version_is_read_from_the_cli():
    runner = FakeRunner(stdout="2.40.3\n")
    assert Engine(client=object(), runner=runner).compose_version() == "2.40.3"
    assert runner.calls[0][0] == ["docker", "compose", "version", "--short"]


def test_unreachable_engine_is_reported(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnreachable, match="cannot reach the Docker engine at unix:///nonexistent"):
        Engine().ping()


def test_doctor_fix_never_replaces_a_users_own_compose_plugin(tmp_path, monkeypatch):
    from orchestrator.docker import doctor

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    plugin = tmp_path / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir()
    plugin.write_text("#!/bin/sh\necho mine\n")
    doctor.link_compose_plugin()
    assert plugin.read_text() == "#!/bin/sh\necho mine\n" and not plugin.is_symlink()
    plugin.unlink()
    if doctor.compose_plugin_source() is not None:
        doctor.link_compose_plugin()
        assert plugin.is_symlink() and plugin.resolve() == doctor.compose_plugin_source().resolve()
