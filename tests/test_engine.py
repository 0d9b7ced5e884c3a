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
