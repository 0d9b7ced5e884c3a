"""The Swarm backend without an engine: stack files pinned by golden files and checked key by key, names and
addresses, the tasks' states as the Engine API reports them, and the engine calls against fakes (the `docker
stack` command lines themselves: test_docker_cli.py)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from orchestrator import contract
from orchestrator.backends import Status, get
from orchestrator.backends.swarm import (
    NOT_EXPRESSIBLE,
    STACK_MAX,
    SwarmBackend,
    replica_state,
    replica_states,
    stack_name,
)
from orchestrator.errors import DockerError, ImageMissing, InvalidSpec
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from orchestrator.run.supervisor import describe_exit
from tests.fakes import FakeClock
from tests.test_cli_inprocess import orch
from tests.goldens import golden

PATHS = Paths(runs=Path("/srv/orch/runs"), cache=Path("/srv/orch/cache"))
LOCK_DOWN = {"user": "1000:1000", "init": True, "read_only": True, "cap_drop": ["ALL"], "stop_grace_period": "10s"}
# The keys of the stack file format 3.9 that orch writes (docker/cli's schema allows these and more).
SERVICE_KEYS = {"image", "hostname", "networks", "user", "init", "stop_grace_period", "environment", "labels",
                "volumes", "read_only", "cap_drop", "logging", "deploy"}
DEPLOY_KEYS = {"mode", "replicas", "endpoint_mode", "restart_policy", "labels", "resources"}


def swarm_plan(**fields):
    return plan(make_spec(backend="swarm", **{"run_id": "golden", **fields}), PATHS)


def stack(text: str) -> dict:
    return yaml.safe_load(text)


# -- the stack file -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, fields", [
    *[(f"swarm-{n}-workers.yml", {"workers": n, "global_batch": 840}) for n in range(1, 5)],
    ("swarm-ps-2-workers.yml", {"workers": 2, "strategy": "ps"}),
])
def test_stack_files_matchgolden(name, fields):
    p = swarm_plan(**fields)
    # Regenerate after an intended change with ORCH_UPDATE_GOLDEN=1, and review the diff.
    assert p.artifact == golden(name, p.artifact)


@pytest.mark.parametrize("fields", [
    {"workers": 3}, {"workers": 2, "strategy": "ps", "parameter_servers": 2}, {"workers": 2, "cpus": 1.5},
    {"workers": 2, "registry": "reg.example:5000/ml", "dataset": "synthetic"}, {"workers": 1, "max_restarts": 2},
])
def test_every_service_is_locked_down(fields):
    p = swarm_plan(**fields)
    doc = stack(p.artifact)
    assert doc["version"] == "3.9" and set(doc) == {"version", "services", "networks"}
    assert list(doc["services"]) == [r.name for r in p.replicas]
    for r in p.replicas:
        service = doc["services"][r.name]
        assert set(service) == SERVICE_KEYS and set(service["deploy"]) == DEPLOY_KEYS
        assert {k: service[k] for k in LOCK_DOWN} == LOCK_DOWN
        deploy = service["deploy"]
        assert deploy["replicas"] == 1 and deploy["mode"] == "replicated"
        assert deploy["endpoint_mode"] == "dnsrr" and deploy["restart_policy"] == {"condition": "none"}
        limits = deploy["resources"]["limits"]
        assert limits["memory"] == "2048M" and limits["pids"] == 1024
        assert limits.get("cpus") == ("1.5" if fields.get("cpus") else None)
        # Found again by labels: the service's (states) and the container's (engine.containers, `orch ps`).
        assert service["labels"] == deploy["labels"] == r.labels
        assert service["hostname"] == r.name and service["networks"] == ["cluster"]
        env = service["environment"]
        assert env[contract.ENV_REPORT] == contract.REPORT_STDOUT and contract.ENV_CPUS not in env
        mounts = {m["target"]: m for m in service["volumes"]}
        # No folder of this host but the run's shared one, and that only where a restart resumes from it.
        assert contract.DATA_MOUNT not in mounts and all(m["type"] == "tmpfs" or m["target"].endswith("/shared")
                                                         for m in mounts.values())
        if p.spec.dataset == "synthetic":
            assert env[contract.ENV_DATA_DIR] == contract.DATA_MOUNT and service["image"].endswith("-multi")
        else:  # the data set comes in the image
            assert env[contract.ENV_DATA_DIR] == contract.IMAGE_DATA_DIR and service["image"].endswith("-mnist")
        shared = mounts[f"{contract.OUT_MOUNT}/shared"]
        if fields.get("max_restarts"):
            assert shared["type"] == "bind" and shared["source"] == str(p.run_dir / "shared")
        else:
            assert shared["type"] == "tmpfs"
        assert f"{contract.OUT_MOUNT}/{r.name}" not in mounts  # its records come on stdout
        for target in (contract.OUT_MOUNT, "/tmp", "/dev/shm"):
            assert mounts[target]["type"] == "tmpfs" and mounts[target]["tmpfs"]["size"] > 0
    assert doc["networks"] == {"cluster": {"driver": "overlay", "internal": True, "attachable": False,
                                           "labels": {"orch.run": "golden"}}}


def test_the_notes_say_what_swarm_cannot_express():
    text = swarm_plan(workers=2).artifact
    head = text[:text.index('"version"')]
    assert all(line.startswith("#") for line in head.splitlines())
    for line in NOT_EXPRESSIBLE:
        assert line in head
    assert "--pin-cpus is not applied" in head and "--registry HOST/PATH" in head
    quiet = swarm_plan(workers=2, pin_cpus=False, registry="reg.example/ml").artifact
    assert "--pin-cpus is not applied" not in quiet and "--registry HOST/PATH" not in quiet


def test_registry_prefixes_orchs_images_only():
    doc = stack(swarm_plan(workers=2, registry="reg.example/ml").artifact)
    assert doc["services"]["worker-0"]["image"].startswith("reg.example/ml/orch-trainer:")
    own = stack(swarm_plan(workers=2, registry="reg.example/ml", image="ex.org/t:1", dataset="synthetic").artifact)
    assert own["services"]["worker-1"]["image"] == "ex.org/t:1"
    # With a data set, orch adds it to the user's image: that image is orch's to push, under the registry.
    data = stack(swarm_plan(workers=2, registry="reg.example/ml", image="ex.org/t:1").artifact)
    assert data["services"]["worker-1"]["image"].startswith("reg.example/ml/orch-data:")


@pytest.mark.parametrize("fields", [{"workers": n, "global_batch": 840} for n in range(1, 6)]
                         + [{"workers": 2, "strategy": "ps"}])
def test_tf_config_is_composes(fields):
    compose = plan(make_spec(run_id="golden", **fields), PATHS)
    doc = stack(swarm_plan(**fields).artifact)
    for r in compose.replicas:
        env = doc["services"][r.name]["environment"]
        assert env.get("TF_CONFIG") == r.env.get("TF_CONFIG")
        # The same but for the report channel, the cores (no cpuset on Swarm) and the data set's place (the image).
        assert {k: v for k, v in env.items() if k not in (contract.ENV_REPORT, contract.ENV_DATA_DIR)} == {
            k: v for k, v in r.env.items() if k not in (contract.ENV_CPUS, contract.ENV_DATA_DIR)}


def test_names_and_addresses_are_deterministic():
    spec = make_spec(backend="swarm", run_id="r", workers=3)
    backend = SwarmBackend()
    keys = spec.replica_keys()
    assert backend.addresses(spec, keys, 7) == {("worker", 0): "worker-0:7", ("worker", 1): "worker-1:7",
                                                ("worker", 2): "worker-2:7"}
    assert swarm_plan(workers=2).artifact == swarm_plan(workers=2).artifact
    assert backend.engine_name("r") == "orch-r" == swarm_plan(run_id="r").engine_name


@pytest.mark.parametrize("run_id", ["a" * 63, "x_y_", "9" * 40, "short"])
def test_stack_names_leave_room_for_service_names(run_id):
    name = stack_name(run_id)
    assert len(name) <= STACK_MAX and len(f"{name}_worker-31") <= 63


def test_distinct_run_ids_get_distinct_stacks():
    ids = ["a" * 63, "a" * 62 + "b", "a" * 40, "a" * 41]
    assert len({stack_name(i) for i in ids}) == len(ids)


def test_hostile_values_stay_values():
    hostile = 'x"\n  evil: {privileged: true}\n# ${HOME} $(id)'
    spec = make_spec(backend="swarm", run_id="r", workers=2, dataset="synthetic")  # no data image around the image
    spec = spec.model_copy(update={"run_id": "r\n" + hostile, "image": hostile})  # past validation, on purpose
    p = plan(spec, PATHS)
    doc = stack(p.artifact)
    assert set(doc) == {"version", "services", "networks"} and list(doc["services"]) == ["worker-0", "worker-1"]
    for service in doc["services"].values():
        assert set(service) == SERVICE_KEYS
        # `docker stack deploy` reads "$$" as one "$": the values arrive as they were, uninterpolated.
        assert service["image"] == hostile.replace("$", "$$")
        assert service["environment"][contract.ENV_RUN_ID] == ("r\n" + hostile).replace("$", "$$")
        assert service["labels"]["orch.run"] == ("r\n" + hostile).replace("$", "$$")


# -- refusals ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, needle", [
    ({"network": "shared"}, "network: --network shared is for --backend compose"),
    ({"network": "host", "expose_ports_on_host": True}, "network: --network host is for --backend compose"),
    ({"gpus": 1}, "gpus: a Swarm service gets GPUs only"),
])
def test_refusals_are_one_line_naming_the_flag(fields, needle):
    with pytest.raises(InvalidSpec) as exc:
        make_spec(backend="swarm", run_id="r", workers=2, **fields)
    assert needle in exc.value.message and "\n" not in exc.value.message


def test_defaults_and_restarts_are_accepted():
    spec = make_spec(backend="swarm", run_id="r", workers=2, max_restarts=2)  # --pin-cpus is on by default
    assert spec.pin_cpus and spec.max_restarts == 2


def test_cli_render_prints_the_stack_file():
    result = orch("render", "--backend", "swarm", "-n", "2", "--run-id", "golden")
    assert result.code == 0 and result.err == "", result
    assert stack(result.out)["services"]["worker-1"]["deploy"]["endpoint_mode"] == "dnsrr"
    plan_json = json.loads(orch("render", "--backend", "swarm", "-n", "2", "--run-id", "r", "--format", "json").out)
    assert plan_json["backend"] == "swarm" and plan_json["project"] == "orch-r"
    assert plan_json["artifact_file"].endswith("stack.yml")


# -- tasks as replica states --------------------------------------------------------------------------
def service(sid: str, role: str = "worker", index: int = 0, run: str = "r") -> dict:
    labels = {"orch.run": run, "orch.role": role, "orch.index": str(index), "com.docker.stack.namespace": f"orch-{run}"}
    return {"ID": sid, "Version": {"Index": 10}, "Spec": {"Name": f"orch-{run}_{role}-{index}", "Labels": labels,
                                                        "TaskTemplate": {"ContainerSpec": {"Labels": labels}}}}


def task(sid: str, state: str, exit_code=None, err=None, container="c" * 64, version=20, node="node-a",
         timestamp="2026-11-21T12:00:01.5Z") -> dict:
    status = {"Timestamp": timestamp, "State": state, "Message": state}
    if err:
        status["Err"] = err
    if container:
        status["ContainerStatus"] = {"ContainerID": container, "PID": 0 if exit_code is not None else 4242,
                                     **({"ExitCode": exit_code} if exit_code is not None else {})}
    return {"ID": f"task-{sid}-{version}", "Version": {"Index": version}, "CreatedAt": "2026-11-21T12:00:00.1Z",
            "ServiceID": sid, "Slot": 1, "NodeID": node, "Status": status, "DesiredState":
            "running" if state in ("new", "pending", "assigned", "preparing", "starting", "running") else "shutdown",
            "Spec": {"ContainerSpec": {"Labels": service(sid)["Spec"]["Labels"]}}}


@pytest.mark.parametrize("state, code, expected", [
    ("new", None, Status.PENDING), ("pending", None, Status.PENDING), ("assigned", None, Status.PENDING),
    ("preparing", None, Status.PENDING), ("starting", None, Status.PENDING), ("running", None, Status.RUNNING),
    ("complete", 0, Status.SUCCEEDED), ("failed", 137, Status.FAILED), ("failed", 3, Status.FAILED),
    ("shutdown", 143, Status.UNKNOWN), ("remove", None, Status.UNKNOWN),
])
def test_task_states_map_to_replica_states(state, code, expected):
    r = replica_state(service("s1", index=1), task("s1", state, code))
    assert r.status == expected and r.key == ("worker", 1) and r.run == "r" and r.name == "orch-r_worker-1"
    assert r.id == "c" * 64  # the container: logs and stats of this node's containers
    assert r.exit_code == (code if expected.is_terminal else None)
    assert (r.finished_at is not None) == expected.is_terminal


def test_a_killed_task_is_a_signal_and_a_rejected_one_says_why():
    killed = replica_state(service("s1"), task("s1", "failed", 137, err="task: non-zero exit (137)"))
    assert describe_exit(killed) == "was killed by signal 9 (exit 137)" and killed.reason is None
    rejected = replica_state(service("s1"), task("s1", "rejected", container=None,
                                                  err='invalid mount config for type "bind": bind source path does '
                                                      'not exist: /srv/orch/runs/r/shared\n\x1b[31m'))
    assert rejected.status == Status.FAILED and rejected.exit_code is None and rejected.id == "task-s1-20"
    assert describe_exit(rejected) == ('failed: the swarm rejected it (invalid mount config for type "bind": bind '
                                       'source path does not exist: /srv/orch/runs/r/shared [31m)')
    orphaned = replica_state(service("s1"), task("s1", "orphaned", 0))
    assert orphaned.exit_code is None and "its node left the swarm" in describe_exit(orphaned)


def test_a_service_without_a_task_yet_is_pending_and_the_newest_task_counts():
    states = replica_states([service("s1", index=1), service("s0", index=0)],
                            [task("s1", "failed", 137, version=30), task("s1", "running", version=40)])
    assert [(s.index, s.status) for s in states] == [(0, Status.PENDING), (1, Status.RUNNING)]
    assert states[0].id == "s0"


# -- the backend against a fake engine ----------------------------------------------------------------
class FakeEngine:
    """The Engine methods the Swarm backend calls, recording them."""

    def __init__(self, services=(), tasks=(), swarm=None, containers=(), networks=(), image=True, oom=False,
                 linger=0):
        self.services_list, self.tasks_list = list(services), list(tasks)
        self.swarm_info = swarm if swarm is not None else {"LocalNodeState": "active", "ControlAvailable": True,
                                                           "NodeID": "node-a"}
        self.containers_list, self.network_ids = list(containers), list(networks)
        self.image, self.oom, self.linger = image, oom, linger  # linger: listings that still show the stack
        self.calls: list[tuple] = []

    def ping(self):
        self.calls.append(("ping",))

    def swarm(self):
        return self.swarm_info

    def require_image(self, ref, hint):
        self.calls.append(("require_image", ref))
        if not self.image:
            raise ImageMissing(f"image {ref} is not present; {hint}")

    def stack_deploy(self, path, stack, resolve_image, registry_auth):
        self.calls.append(("deploy", stack, resolve_image, registry_auth))

    def stack_rm(self, stack):
        self.calls.append(("rm", stack))

    def services(self, label):
        self.calls.append(("services", label))
        if label.startswith("com.docker.stack.namespace"):
            if self.linger:
                self.linger -= 1
                return self.services_list
            return []
        return self.services_list

    def tasks(self, ids):
        return [t for t in self.tasks_list if t["ServiceID"] in ids]

    def containers(self, run):
        self.calls.append(("containers", run))
        return self.containers_list

    def remove_container(self, cid):
        self.calls.append(("remove_container", cid))
        self.containers_list = [c for c in self.containers_list if c.id != cid]

    def networks(self, label):
        return list(self.network_ids)

    def remove_network(self, nid):
        self.calls.append(("remove_network", nid))
        self.network_ids.remove(nid)

    def oom_killed(self, cid):
        return self.oom

    def logs(self, cid, tail=None):
        return f"container {cid}"

    def service_logs(self, sid, tail=None):
        return f"service {sid}"

    def log_lines(self, cid, stream, follow=False, since=None):
        return iter([f"container {cid} {stream}"])

    def service_log_lines(self, sid, stream, follow=False, since=None):
        return iter([f"service {sid} {stream}"])

    def stats_once(self, cid):
        return {"id": cid}


def test_preflight_needs_an_active_swarm_manager_and_the_image():
    p = swarm_plan(workers=2)
    with pytest.raises(DockerError, match=r"in no swarm; run `docker swarm init`"):
        SwarmBackend(FakeEngine(swarm={"LocalNodeState": "inactive"})).preflight(p)
    with pytest.raises(DockerError, match="is a swarm worker"):
        SwarmBackend(FakeEngine(swarm={"LocalNodeState": "active", "ControlAvailable": False})).preflight(p)
    with pytest.raises(ImageMissing, match="run `orch build` first"):
        SwarmBackend(FakeEngine(image=False)).preflight(p)
    engine = FakeEngine(image=False)  # with a registry the nodes pull: this node need not have the image
    SwarmBackend(engine).preflight(swarm_plan(workers=2, registry="reg.example/ml"))
    assert ("require_image", p.image) not in engine.calls


def test_apply_deploys_the_stack(tmp_path):
    engine = FakeEngine()
    SwarmBackend(engine).apply(swarm_plan(workers=2), tmp_path / "stack.yml")
    SwarmBackend(engine).apply(swarm_plan(workers=2, registry="reg.example/ml"), tmp_path / "stack.yml")
    assert [c for c in engine.calls if c[0] == "deploy"] == [("deploy", "orch-golden", "never", False),
                                                              ("deploy", "orch-golden", "always", True)]


def test_states_route_logs_and_stats_by_node():
    services = [service("s0", index=0), service("s1", index=1)]
    tasks = [task("s0", "running", container="here", node="node-a"),
             task("s1", "failed", 137, container="there", node="node-b")]
    backend = SwarmBackend(FakeEngine(services, tasks, oom=True))
    here, there = backend.states("r")
    assert (here.status, there.status, there.exit_code) == (Status.RUNNING, Status.FAILED, 137)
    assert not there.oom_killed  # on another node: its container cannot be inspected from here
    assert backend.logs(here) == "container here" and backend.logs(there) == "service s1"
    assert list(backend.log_lines(there, "stdout")) == ["service s1 stdout"]
    assert backend.stats_once(here) == {"id": "here"} and backend.stats_once(there) is None
    assert list(backend.stats_stream(there)) == []
    pending = SwarmBackend(FakeEngine([service("s0")], []))
    (waiting,) = pending.states("r")
    assert waiting.status == Status.PENDING
    local = SwarmBackend(FakeEngine(services, [task("s1", "failed", 137, container="c1")], oom=True)).states("r")
    assert local[1].oom_killed and describe_exit(local[1]).startswith("was killed for exceeding its memory limit")


def test_cancel_removes_the_stack_then_waits_for_its_network():
    leftover = SimpleNamespace(id="c1")
    engine = FakeEngine([service("s0")], containers=[leftover], networks=["n1"], linger=2)
    SwarmBackend(engine).cancel("r", None, grace=0, clock=FakeClock())
    names = [c[0] for c in engine.calls]
    assert names.index("remove_container") < names.index("rm")  # grace 0: no stop grace period to wait out
    assert ("rm", "orch-r") in engine.calls and ("remove_network", "n1") in engine.calls
    assert engine.network_ids == []


def test_cancel_gives_up_with_a_message_and_keeps_the_containers_grace():
    engine = FakeEngine([service("s0")], linger=10**6)
    clock = FakeClock()
    with pytest.raises(DockerError, match=r"stack orch-r was not gone within 65 s \(1 service\(s\) left\); "
                                          r"`orch down r` tries again"):
        SwarmBackend(engine).cancel("r", None, grace=5, clock=clock)
    assert not any(c[0] == "remove_container" for c in engine.calls) and 65 <= clock.elapsed < 70


def test_cancel_runs_every_step_when_one_fails_and_raises_the_first_failure():
    class Failing(FakeEngine):
        def remove_container(self, cid):
            self.calls.append(("remove_container", cid))
            raise DockerError("remove container c1: device busy")

        def stack_rm(self, stack):
            self.calls.append(("rm", stack))
            raise DockerError("stack rm failed: boom")

    engine = Failing([service("s0")], containers=[SimpleNamespace(id="c1")], networks=["n1"])
    engine.containers_list = []  # gone by the time the wait looks: the engine removed it after all
    engine.containers = lambda run: (engine.calls.append(("containers", run)) or
                                     ([SimpleNamespace(id="c1")] if len(engine.calls) == 1 else []))
    with pytest.raises(DockerError, match="remove container c1: device busy"):
        SwarmBackend(engine).cancel("r", None, grace=0, clock=FakeClock())
    names = [c[0] for c in engine.calls]
    assert "rm" in names and ("remove_network", "n1") in engine.calls  # the stack and network went all the same


def test_the_registry_knows_swarm():
    assert isinstance(get("swarm"), SwarmBackend) and get("swarm").reports_on_stdout


def test_the_overlay_mtu_must_fit_the_nodes_interface_with_vxlans_50_bytes():
    from orchestrator.backends.swarm import check_mtu

    interfaces = {"10.0.0.5": ("eth0", 1400), "10.0.1.5": ("eth1", 1500)}
    with pytest.raises(InvalidSpec) as exc:
        check_mtu(0, "10.0.0.5", interfaces)  # the default 1450 + 50 > 1400
    assert "eth0, whose MTU is 1400" in exc.value.message and "--overlay-mtu 1350" in exc.value.message
    check_mtu(1350, "10.0.0.5", interfaces)
    check_mtu(0, "10.0.1.5", interfaces)
    check_mtu(0, "192.0.2.1", interfaces)  # an address of no interface here: nothing to check against
    with pytest.raises(InvalidSpec, match="overlay_mtu: --overlay-mtu is an option of --backend swarm, not compose"):
        make_spec(run_id="r", overlay_mtu=1350)
    network = stack(swarm_plan(workers=2, overlay_mtu=1350).artifact)["networks"]["cluster"]
    assert network["driver_opts"] == {"com.docker.network.driver.mtu": "1350"}


@pytest.mark.parametrize("registry", [None, "reg.example/ml"])
def test_a_scripts_copy_is_a_layer_on_the_runs_image_not_a_folder_of_this_host(registry):
    p = swarm_plan(workers=2, script="/home/me/train.py", **({"registry": registry} if registry else {}))
    assert p.image == "orch-script:golden"
    for name, service in stack(p.artifact)["services"].items():
        assert service["image"] == (f"{registry}/orch-script:golden" if registry else "orch-script:golden")
        assert service["entrypoint"][-1] == "/orch/script/train.py"
        volumes = {v["target"]: v for v in service["volumes"]}
        assert contract.SCRIPT_MOUNT not in volumes
        own = volumes[f"/orch/run/{name}"]
        # One node's folder where there is one node; with a registry there may be several: the container's.
        assert own["type"] == ("tmpfs" if registry else "bind")
        # /orch/run is the image's, where its layer links torchvision's "../data"; the caches are in the image.
        assert ("/orch/run" in volumes) == bool(registry)  # the image's, where a layer links "../data"
        assert service["environment"]["ORCH_LOADERS_DIR"] == "/orch-loaders"
    assert p.loaders_on == "orch-trainer:0.1.0-multi-mnist" and p.script_on == "orch-trainer:0.1.0-multi-mnist-loaders"
    assert "The script's copy is a layer on orch-trainer:0.1.0-multi-mnist-loaders" in p.artifact


def test_the_script_layer_holds_the_snapshot_read_only_under_the_script_mount(tmp_path):
    import io
    import tarfile

    from orchestrator.images.script import archive

    (tmp_path / "pkg").mkdir()
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "pkg" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "pkg" / "run.sh").chmod(0o755)
    (tmp_path / "link.py").symlink_to(tmp_path / "train.py")
    with tarfile.open(fileobj=io.BytesIO(archive(tmp_path))) as tar:
        members = {m.name: (m.type, oct(m.mode), m.mtime) for m in tar.getmembers()}
        assert tar.extractfile("orch/script/train.py").read() == b"print(1)\n"
    assert members == {"orch": (tarfile.DIRTYPE, "0o755", 0), "orch/script": (tarfile.DIRTYPE, "0o755", 0),
                       "orch/script/pkg": (tarfile.DIRTYPE, "0o755", 0),
                       "orch/script/pkg/run.sh": (tarfile.REGTYPE, "0o555", 0),
                       "orch/script/train.py": (tarfile.REGTYPE, "0o444", 0)}  # the link is left out
