"""The Compose backend: engine-neutral replica states, addresses, and a clean-up that always finishes."""
import json
from pathlib import Path

import pytest

from orchestrator.backends import Status, get
from orchestrator.backends.compose import ComposeBackend, replica_state
from orchestrator.docker.engine import ContainerState, parse_container
from orchestrator.jobspec import make_spec

FIXTURES = Path(__file__).parent / "fixtures"


def _container(status, exit_code=None, oom=False, finished="2026-11-21T12:00:01.5Z"):
    return ContainerState(id="c1", name="orch-r-worker-1-1", run="r", role="worker", index=1, status=status,
                          exit_code=exit_code, oom_killed=oom, finished_at=finished)


@pytest.mark.parametrize("status, code, expected", [
    ("created", None, Status.PENDING), ("restarting", None, Status.PENDING), ("running", None, Status.RUNNING),
    ("paused", None, Status.PAUSED), ("exited", 0, Status.SUCCEEDED), ("exited", 137, Status.FAILED),
    ("dead", 1, Status.FAILED), ("removing", None, Status.UNKNOWN),
])
def test_container_status_maps_to_replica_status(status, code, expected):
    state = replica_state(_container(status, code))
    assert state.status == expected and state.key == ("worker", 1) and state.label == "worker-1"
    assert (state.finished_at is not None) == expected.is_terminal


def test_captured_inspect_json_becomes_a_failed_replica():
    state = replica_state(parse_container(json.loads((FIXTURES / "inspect_exited.json").read_text())))
    assert state.status in (Status.FAILED, Status.SUCCEEDED) and state.finished_at > 1.7e9


def test_addresses_follow_the_network_mode():
    backend = ComposeBackend()
    keys = [("worker", 0), ("worker", 1)]
    assert backend.addresses(make_spec(run_id="r", workers=2), keys, 7) == {
        ("worker", 0): "worker-0:7", ("worker", 1): "worker-1:7"}
    shared = backend.addresses(make_spec(run_id="r", workers=2, network="shared"), keys, 7)
    assert list(shared.values()) == ["localhost:7", "localhost:8"]


class _Engine:
    def __init__(self):
        self.calls = []

    def compose_down(self, compose_file, project, timeout):
        self.calls.append(("down", project, timeout))
        raise RuntimeError("compose down failed")

    def containers(self, run):
        self.calls.append(("containers", run))
        return [_container("running")]

    def remove_container(self, cid):
        self.calls.append(("remove", cid))


def test_cancel_removes_leftovers_even_when_compose_down_fails(tmp_path):
    artifact = tmp_path / "compose.yml"
    artifact.write_text("services: {}\n")
    engine = _Engine()
    with pytest.raises(RuntimeError):
        get("compose", engine).cancel("r", artifact, grace=3)
    assert engine.calls == [("down", "orch-r", 3), ("containers", "r"), ("remove", "c1")]


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="unknown backend 'nomad'"):
        get("nomad")
