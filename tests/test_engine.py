"""The Docker boundary against captured Engine API JSON and injected fakes."""
import json
from pathlib import Path

import pytest
from python_on_whales.exceptions import DockerException

from orchestrator.engine import Engine, parse_container
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


class FakeCompose:
    def __init__(self, error):
        self.error = error
        self.calls = []

    def up(self, **kwargs):
        self.calls.append(("up", kwargs))
        if self.error:
            raise self.error

    def down(self, **kwargs):
        self.calls.append(("down", kwargs))


class FakeWhales:
    def __init__(self, error=None):
        self.compose = FakeCompose(error)
        self.kwargs = None

    def __call__(self, **kwargs):
        self.kwargs = kwargs
        return self


def test_compose_up_is_called_detached_with_the_project(tmp_path):
    whales = FakeWhales()
    Engine(client=object(), whales=whales).compose_up(tmp_path / "compose.yml", "orch-r1")
    assert whales.kwargs == {"compose_files": [tmp_path / "compose.yml"], "compose_project_name": "orch-r1"}
    assert whales.compose.calls == [("up", {"detach": True, "quiet": True})]


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
    exc = DockerException(["docker", "compose", "up"], 1, stdout=b"", stderr=stderr.encode())
    with pytest.raises(error):
        Engine(client=object(), whales=FakeWhales(exc)).compose_up(tmp_path / "c.yml", "p")


def test_unreachable_engine_is_reported(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnreachable, match="cannot reach the Docker engine at unix:///nonexistent"):
        Engine().ping()
