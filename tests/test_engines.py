"""The container engines of one host: which one a command and a run use, where each is reached, and what Compose
renders for Podman. Pure: no engine answers here."""
from __future__ import annotations

import pytest
import yaml

from orchestrator import backends
from orchestrator.backends.compose import ComposeBackend
from orchestrator.docker import engines
from orchestrator.docker.engine import Engine
from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan


@pytest.fixture(autouse=True)
def _no_engine_env(monkeypatch):
    for name in ("ORCH_ENGINE", "DOCKER_HOST", "CONTAINER_HOST", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_docker_is_the_default_and_orch_engine_or_a_name_chooses(monkeypatch):
    assert engines.get() is engines.DOCKER
    monkeypatch.setenv("ORCH_ENGINE", "podman")
    assert engines.get() is engines.PODMAN and engines.get("docker") is engines.DOCKER
    with pytest.raises(ValueError, match="unknown engine 'rkt'; orch runs on docker or podman"):
        engines.get("rkt")


def test_each_engine_is_reached_where_its_own_tools_look(monkeypatch):
    assert engines.DOCKER.address() == "unix:///var/run/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.2:2375")
    assert engines.DOCKER.address() == "tcp://10.0.0.2:2375"
    assert engines.podman_socket(uid=0) == "/run/podman/podman.sock"  # rootful
    assert engines.podman_socket(uid=1000) == "/run/user/1000/podman/podman.sock"  # rootless
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/tmp/rt")
    assert engines.podman_socket(uid=1000) == "/tmp/rt/podman/podman.sock"
    monkeypatch.setenv("CONTAINER_HOST", "unix:///srv/podman.sock")  # Podman's remote client's variable
    assert engines.PODMAN.address() == "unix:///srv/podman.sock"
    message = Engine(kind="podman").unreachable().message
    assert message.startswith("cannot reach the Podman service at unix:///srv/podman.sock; start it with `orch "
                              "doctor --engine podman --fix`")


def test_a_run_is_followed_on_the_engine_it_was_started_on():
    docker = backends.for_record({"backend": "compose", "spec": {"backend_options": {}}})
    podman = backends.for_record({"backend": "compose", "spec": {"backend_options": {"engine": "podman"}}})
    old = backends.for_record({"backend": "compose"})  # an orch before Podman recorded no engine
    assert isinstance(podman, ComposeBackend) and podman.engine.kind is engines.PODMAN
    assert docker.engine.kind is engines.DOCKER and old.engine.kind is engines.DOCKER
    assert podman.place == "compose on podman" != docker.place == "compose on docker"
    spec = make_spec(run_id="r", engine="podman")
    chosen = backends.for_spec(spec)
    assert isinstance(chosen, ComposeBackend) and chosen.engine.kind is engines.PODMAN


def test_the_engine_defaults_to_orch_engine_and_is_recorded_in_the_spec(monkeypatch):
    assert make_spec(run_id="r").backend_options.engine == "docker"
    monkeypatch.setenv("ORCH_ENGINE", "podman")
    assert make_spec(run_id="r").backend_options.engine == "podman"
    assert make_spec(run_id="r").model_dump(mode="json")["backend_options"]["engine"] == "podman"


def test_a_missing_image_is_built_or_copied_on_the_runs_own_engine(tmp_path):
    assert engines.DOCKER.build_fix("orch build --framework torch") == "run `orch build --framework torch`"
    assert engines.PODMAN.build_fix("orch build --bootstrap-base") == \
        "run `orch build --engine podman --bootstrap-base` (or copy Docker's: `orch push --to-engine podman`)"
    paths = Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results")
    assert plan(make_spec(run_id="r"), paths).build_hint == "run `orch build` first"
    assert plan(make_spec(run_id="r", engine="podman"), paths).build_hint.startswith(
        "run `orch build --engine podman` (or copy")


def test_podman_refuses_gpus_through_dockers_runtime():
    with pytest.raises((InvalidSpec, ValueError), match="gpus: orch asks for GPUs through Docker's NVIDIA runtime"):
        make_spec(run_id="r", engine="podman", gpus=1)


def _services(tmp_path, engine):
    spec = make_spec(run_id="r", framework="mpi", workers=3, dataset="synthetic", samples=600, engine=engine)
    p = plan(spec, Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results"))
    return yaml.safe_load(p.artifact)["services"]


def test_podman_gives_an_init_only_to_the_replica_that_owns_the_shared_pid_namespace(tmp_path):
    podman = _services(tmp_path, "podman")
    assert podman["worker-0"]["init"] is True
    for name in ("worker-1", "worker-2"):  # they join worker-0's PID namespace: its init reaps for them
        assert podman[name]["pid"] == "service:worker-0" and "init" not in podman[name]
    docker = _services(tmp_path, "docker")
    assert all(s["init"] is True for s in docker.values())  # Docker's init is PID 1 of each container's view
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert podman["worker-1"]["ulimits"] == {**docker["worker-1"]["ulimits"], "nproc": engines._capped(
        resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768), "nofile": engines._capped(nofile, 1 << 20)}
    assert set(docker["worker-1"]["ulimits"]) == {"fsize"}  # Docker's containers keep its daemon's limits
    same = ("init", "ulimits")
    assert {k: v for k, v in podman["worker-1"].items() if k not in same} == \
        {k: v for k, v in docker["worker-1"].items() if k not in same}  # nothing else differs
    tcp = yaml.safe_load(plan(make_spec(run_id="r", workers=3, engine="podman"),
                              Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results")).artifact)
    assert all(s["init"] is True for s in tcp["services"].values())  # no shared namespace: each has its own


def test_only_the_compose_backend_takes_an_engine():
    with pytest.raises((InvalidSpec, ValueError), match="engine"):
        make_spec(run_id="r", backend="swarm", engine="podman")


class _Backend:
    def __init__(self, place, states=(), error=None):
        self.place, self._states, self._error = place, list(states), error

    def states(self, run_id=None):
        if self._error is not None:
            raise self._error
        return self._states


def test_ps_asks_a_runs_own_engine_before_it_calls_the_run_lost(tmp_path):
    from orchestrator.backends import ReplicaState, Status
    from orchestrator.errors import EngineUnreachable
    from orchestrator.run.rundir import RunDir, RunState
    from orchestrator.run.runs import _unseen_state

    run = RunDir.of(Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results"), "r")
    docker = _Backend("compose on docker")
    up = ReplicaState(id="c", name="orch-r-worker-0", run="r", role="worker", index=0, status=Status.RUNNING)
    assert _unseen_state(run, _Backend("compose on docker", [up]), docker) is RunState.LOST  # already asked
    assert _unseen_state(run, _Backend("compose on podman", [up]), docker) is RunState.RUNNING
    assert _unseen_state(run, _Backend("compose on podman"), docker) is RunState.LOST
    silent = _Backend("compose on podman", error=EngineUnreachable("no"))
    assert _unseen_state(run, silent, docker) is RunState.UNKNOWN


@pytest.mark.parametrize("argv, needle", [
    ([], "name the engines to copy to: --context NAME (another node's), or --to-engine podman"),
    (["--context", "n2", "--to-engine", "podman"], "--context and --to-engine copy to different places"),
    (["--to-engine", "podman", "--dataset", "mnist"], "--dataset and --image are for --context"),
    (["--context", "n2", "--framework", "mpi"], "--framework is for --to-engine"),
    (["--to-engine", "rkt"], "Invalid value for '--to-engine'"),
])
def test_push_says_in_one_line_what_a_bad_combination_should_be(argv, needle):
    from tests.test_cli_inprocess import one_line_error, orch

    one_line_error(orch("push", *argv), 2, needle)


def test_a_line_written_in_parts_reads_as_written_with_its_first_time():
    from orchestrator.docker.base import stamped_lines

    frames = [b"2026-12-03T11:58:44Z hello\n", b"2026-12-03T11:58:44Z aaa", b"2026-12-03T11:58:45Z b\n",
              b"2026-12-03T11:58:46.5Z two\nlines in one\n", b"2026-12-03T11:58:47Z ", b"not-a-time rest", b"end"]
    assert list(stamped_lines(iter(frames))) == [
        "2026-12-03T11:58:44Z hello", "2026-12-03T11:58:44Z aaab", "2026-12-03T11:58:46.5Z two", "lines in one",
        "2026-12-03T11:58:47Z not-a-time restend"]


def test_a_follow_ended_by_the_read_timeout_follows_again_from_its_last_line():
    import requests

    calls = []

    class Api:
        def logs(self, container_id, **kwargs):
            calls.append(kwargs.get("since"))
            if len(calls) == 1:
                yield b"2026-12-03T11:58:44Z one\n"
                yield b"2026-12-03T11:58:45Z two\n"
                raise requests.exceptions.ConnectionError("Read timed out.")
            yield b"2026-12-03T11:58:45Z two\n"  # the engine's since is inclusive: the last time's lines again
            yield b"2026-12-03T11:58:45Z three\n"
            yield b"2026-12-03T11:58:50Z four\n"

        def ping(self):
            return True

    engine = Engine(client=type("Client", (), {"api": Api()})(), kind="podman")
    lines = [line.split(" ", 1)[1] for line in engine.log_lines("c", "stdout", follow=True, since=1.0)]
    assert lines == ["one", "two", "three", "four"]
    assert calls[0] == 1.0 and calls[1] == pytest.approx(1796299125.0)

    Api.ping = lambda self: (_ for _ in ()).throw(requests.exceptions.ConnectionError("refused"))
    calls.clear()
    assert [line[-3:] for line in engine.log_lines("c", "stdout", follow=True)] == ["one", "two"]  # engine gone


def test_rootless_podmans_replicas_keep_their_users_id(tmp_path, monkeypatch):
    """Rootless Podman maps uid 1000 of a replica to a subordinate uid that owns none of the run's folders; with
    keep-id the replicas run as the user who started orch, as themselves. Root's engines need no mapping."""
    assert all("userns_mode" not in s for s in _services(tmp_path, "podman").values())
    monkeypatch.setattr("os.getuid", lambda: 1001)
    assert {s["userns_mode"] for s in _services(tmp_path, "podman").values()} == {"keep-id"}
    assert all("userns_mode" not in s for s in _services(tmp_path, "docker").values())
