"""The Docker boundary against captured Engine API JSON and injected fakes (the CLI's verbs: test_docker_cli.py)."""
import json
from pathlib import Path

import pytest

from orchestrator.docker.engine import Engine, parse_container
from orchestrator.errors import EngineUnreachable

FIXTURES = Path(__file__).parent / "fixtures"


def test_parse_exited_container_from_captured_inspect():
    state = parse_container(json.loads((FIXTURES / "inspect_exited.json").read_text()))
    assert (state.run, state.role, state.index, state.status, state.exit_code) == ("cap-run", "worker", 2, "exited", 3)
    assert state.finished_at.startswith("2026-") and not state.oom_killed
    assert state.started_at == "2026-11-21T12:44:41.648064379Z"


def test_a_container_never_started_has_no_start_time():
    attrs = json.loads((FIXTURES / "inspect_exited.json").read_text())
    attrs["State"].update(Status="created", StartedAt="0001-01-01T00:00:00Z", FinishedAt="0001-01-01T00:00:00Z")
    assert parse_container(attrs).started_at is None
    del attrs["State"]["StartedAt"]
    assert parse_container(attrs).started_at is None


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


class _Raising:
    """An SDK API whose every call raises ``error`` (or returns ``value``)."""

    def __init__(self, error=None, value=None):
        self.error, self.value = error, value

    def __getattr__(self, name):
        def call(*_args, **_kwargs):
            if self.error is not None:
                raise self.error
            return self.value
        return call


def _engine_raising(error=None, value=None) -> Engine:
    return Engine(client=type("Client", (), {"api": _Raising(error, value)})())


def test_removals_and_inspections_take_an_object_already_gone_as_nothing_to_do():
    import docker
    import requests

    from orchestrator.errors import DockerError

    gone = docker.errors.NotFound("no such object")
    assert _engine_raising(gone).remove_container("c" * 64) is None
    assert _engine_raising(gone).remove_volume("v") is None
    assert _engine_raising(gone).volume_labels("v") is None
    assert _engine_raising(value={"Labels": {"a": "b"}}).volume_labels("v") == {"a": "b"}
    assert _engine_raising(value={"Labels": None}).volume_labels("v") == {}
    # Any other refusal is the engine's, in one line naming the call; a dropped connection is an unreachable engine.
    busy = docker.errors.APIError("409 Conflict", explanation="volume is in use")
    with pytest.raises(DockerError) as caught:
        _engine_raising(busy).remove_volume("v")
    assert caught.value.message == "remove volume v: volume is in use"
    with pytest.raises(DockerError) as caught:
        _engine_raising(busy).remove_container("c" * 64)
    assert caught.value.message == "remove container cccccccccccc: volume is in use"
    for call in (lambda e: e.remove_container("c"), lambda e: e.remove_volume("v"), lambda e: e.volume_labels("v")):
        with pytest.raises(EngineUnreachable):
            call(_engine_raising(requests.exceptions.ConnectionError("refused")))
