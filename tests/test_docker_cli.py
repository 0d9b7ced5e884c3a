"""The docker CLI's verbs (compose, stack, other contexts' images) against a fake `docker` first on PATH: the
command lines python-on-whales runs, under `timeout`, and the CLI's failures in orch's terms."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from orchestrator.docker import cli
from orchestrator.docker.engine import Engine
from orchestrator.errors import ComposeMissing, DockerError, EngineUnreachable, ImageMissing
from tests.fake_docker import FakeDocker


@pytest.fixture
def docker(tmp_path, monkeypatch) -> FakeDocker:
    fake = FakeDocker(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{fake.folder}{os.pathsep}{os.environ['PATH']}")
    return fake


def engine() -> Engine:
    return Engine(client=object())


def under_timeout(parent: list[str]) -> list[str]:
    """The options of the `timeout` that ran the fake, up to `docker`."""
    assert Path(parent[0]).name == "timeout", parent
    return parent[1:parent.index("docker") + 1]


# -- compose ---------------------------------------------------------------------------------------------------
def test_compose_up_is_called_detached_with_the_project_under_a_time_limit(docker, tmp_path, capfd):
    docker.answer((0, "some output\n", " Container orch-r1-worker-0  Started\n"))
    engine().compose_up(tmp_path / "compose.yml", "orch-r1")
    assert docker.calls == [["compose", "--file", str(tmp_path / "compose.yml"), "--project-name", "orch-r1", "up",
                             "--detach", "--pull", "never"]]
    assert under_timeout(docker.parents[0]) == ["--foreground", "--kill-after=10", str(cli.COMPOSE_UP_TIMEOUT),
                                                "docker"]
    assert capfd.readouterr() == ("", "")  # the CLI's output is captured, never orch's own


@pytest.mark.parametrize("uid, at_once", [(0, True), (1000, False)])
def test_rootless_podman_creates_a_runs_replicas_one_at_a_time(docker, tmp_path, monkeypatch, uid, at_once):
    # Its service looks up the user's subordinate ids for each keep-id container through libsubid, which fails or
    # crashes the service when Compose creates several at once.
    from orchestrator.docker import engines

    monkeypatch.setattr(engines.os, "getuid", lambda: uid)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    Engine(client=object(), kind="podman").compose_up(tmp_path / "compose.yml", "orch-r1")
    limit = ["env", "COMPOSE_PARALLEL_LIMIT=1"]
    assert under_timeout(docker.parents[0])[3:] == (["docker"] if at_once else [*limit, "docker"])


def test_compose_down_waits_the_grace_and_no_longer_than_its_limit(docker, tmp_path):
    engine().compose_down(tmp_path / "c.yml", "p", timeout=5)
    assert docker.calls == [["compose", "--file", str(tmp_path / "c.yml"), "--project-name", "p", "down",
                             "--remove-orphans", "--timeout", "5", "--volumes"]]
    assert under_timeout(docker.parents[0])[2:] == [str(5 + cli.COMPOSE_DOWN_TIMEOUT), "docker"]


def test_a_compose_call_that_hangs_is_stopped_with_a_message(docker, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "COMPOSE_UP_TIMEOUT", 1)
    docker.answer((0, "", "", 60))
    started = time.monotonic()
    with pytest.raises(DockerError, match=r"compose up did not finish within 1 s; the engine may be overloaded"):
        engine().compose_up(tmp_path / "c.yml", "p")
    assert time.monotonic() - started < 10


def test_a_cli_that_needed_timeouts_kill_is_reported_as_late(docker, tmp_path):
    docker.answer((137,))  # `timeout`'s own status once SIGTERM was not enough
    with pytest.raises(DockerError, match=r"compose down did not finish within \d+ s"):
        engine().compose_down(tmp_path / "c.yml", "p")


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
def test_compose_errors_are_translated(docker, tmp_path, stderr, error):
    docker.answer((1, "", stderr))
    with pytest.raises(error) as exc:
        engine().compose_up(tmp_path / "c.yml", "p")
    if error is DockerError:
        assert exc.value.message == "compose up failed: network cluster: something else broke"


def test_compose_version_is_read_from_the_cli(docker):
    docker.answer((0, "Docker Compose version v2.40.3\n"))
    assert engine().compose_version() == "2.40.3"
    assert docker.calls == [["compose", "version"]]


def test_no_docker_cli_at_all_is_said_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ComposeMissing, match="the docker CLI is not installed"):
        engine().compose_version()
    with pytest.raises(DockerError, match="the docker CLI is not installed"):
        engine().stack_rm("orch-r")


def test_no_timeout_command_is_said_so(docker, monkeypatch):
    monkeypatch.setenv("PATH", str(docker.folder))  # the fake docker, and no coreutils
    with pytest.raises(DockerError, match=r"stack rm: orch runs the docker CLI under `timeout`"):
        engine().stack_rm("orch-r")
    assert docker.calls == []


# -- stack -----------------------------------------------------------------------------------------------------
def test_stack_deploy_says_detach_where_the_cli_knows_it(docker, tmp_path, capfd):
    docker.answer((125, "", "unknown flag: --detach\nSee 'docker stack deploy --help'."),
                  (0, "Creating network orch-r_cluster\nCreating service orch-r_worker-0\n"))
    engine().stack_deploy(tmp_path / "stack.yml", "orch-r")
    first, second = docker.calls
    assert first == ["stack", "deploy", "--compose-file", str(tmp_path / "stack.yml"), "--resolve-image", "never",
                     "--detach=true", "orch-r"]
    assert second == [a for a in first if a != "--detach=true"]
    assert capfd.readouterr() == ("", "")  # "Creating service ..." is not orch's output
    docker.answer((0,))
    engine().stack_deploy(tmp_path / "s.yml", "orch-r", "always", registry_auth=True)
    ((argv,),) = [docker.calls]
    assert "--with-registry-auth" in argv and argv[argv.index("--resolve-image") + 1] == "always"


def test_stack_errors_are_translated(docker):
    docker.answer((1, "", "Error response from daemon: This node is not a swarm manager."))
    with pytest.raises(DockerError, match="stack rm: this engine is not a swarm manager"):
        engine().stack_rm("orch-r")
    assert docker.calls == [["stack", "remove", "orch-r"]]
    docker.answer((1, "", "Nothing found in stack: orch-r"))
    engine().stack_rm("orch-r")
    # Captured from Docker 20.10: the services are gone, the network waits for their tasks (the caller removes it).
    in_use = ("Failed to remove network 7994pksjltss: Error response from daemon: rpc error: code = "
              "FailedPrecondition desc = network 7994pksjltss is in use by task 9clh8wo39jnvfailed to remove some "
              "resources from stack: orch-r")
    docker.answer((1, "Removing service orch-r_worker-0\nRemoving network orch-r_cluster\n", in_use))
    engine().stack_rm("orch-r")
    docker.answer((1, "", "Failed to remove service orch-r_worker-0: boom\n" + in_use))
    with pytest.raises(DockerError, match="stack rm failed"):
        engine().stack_rm("orch-r")
    docker.answer((1, "", "boom"))
    with pytest.raises(DockerError, match="stack deploy failed: boom"):
        engine().stack_deploy(Path("s.yml"), "orch-r")
    docker.answer((1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."))
    with pytest.raises(EngineUnreachable):
        engine().stack_deploy(Path("s.yml"), "orch-r")


# -- other contexts --------------------------------------------------------------------------------------------
def test_an_image_is_looked_up_on_another_contexts_engine(docker):
    docker.answer((0, json.dumps([{"Id": "sha256:abc", "RepoTags": ["orch-trainer:9-multi"]}])))
    assert engine().context_image_id("node2", "orch-trainer:9-multi") == "sha256:abc"
    assert docker.calls == [["--context", "node2", "image", "inspect", "orch-trainer:9-multi"]]
    docker.answer((1, "", "Error: No such image: orch-trainer:9-multi"))
    assert engine().context_image_id("node2", "orch-trainer:9-multi") is None
    docker.answer((1, "", 'context "node9": context not found'))
    with pytest.raises(DockerError, match="cannot reach the engine of Docker context 'node9': context \"node9\""):
        engine().context_image_id("node9", "orch-trainer:9-multi")


def test_an_image_is_saved_to_a_scratch_file_and_loaded_on_the_context(docker, tmp_path):
    inspect = (0, json.dumps([{"Id": "sha256:abc"}]))
    docker.answer(inspect, (0,), (0, "Loaded image: orch-trainer:9-multi\n"))
    engine().copy_image("orch-trainer:9-multi", "node2", tmp_path / "cache")
    look, save, load = docker.calls
    assert look == ["image", "inspect", "orch-trainer:9-multi"]
    assert save[:3] == ["image", "save", "--output"] and save[4:] == ["orch-trainer:9-multi"]
    assert Path(save[3]).parent.parent == tmp_path / "cache"
    assert load == ["--context", "node2", "image", "load", "--input", save[3], "--quiet"]
    assert list((tmp_path / "cache").iterdir()) == []  # the file went with its folder

    docker.answer((1, "", "Error: No such image: orch-trainer:9-multi"))
    with pytest.raises(DockerError, match=r"^docker save orch-trainer:9-multi failed: Error: No such image"):
        engine().copy_image("orch-trainer:9-multi", "node2", tmp_path / "cache")
    docker.answer(inspect, (0,), (1, "", "Error processing tar file: write /x: no space left on device"))
    with pytest.raises(DockerError, match=r"^loading orch-trainer:9-multi on context node2 failed: .*no space left"):
        engine().copy_image("orch-trainer:9-multi", "node2", tmp_path / "cache")
    docker.answer((124,))
    with pytest.raises(DockerError, match=r"^copying orch-trainer:9-multi to context node2 did not finish within"):
        engine().copy_image("orch-trainer:9-multi", "node2", tmp_path / "cache")
