"""Plan and render: pure, pinned by a golden file."""
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from orchestrator import __version__
from orchestrator.backends.template import yaml_quote
from orchestrator.images.venv_volume import volume_name
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from tests.goldens import golden

PATHS = Paths(runs=Path("/srv/orch/runs"), cache=Path("/srv/orch/cache"))


def test_three_worker_compose_matchesgolden():
    p = plan(make_spec(run_id="golden", workers=3), PATHS, user="1000:1000")
    # Regenerate after an intended change with ORCH_UPDATE_GOLDEN=1, and review the diff.
    assert p.artifact == golden("compose-3-workers.yml", p.artifact)


def test_rendered_compose_is_what_the_plan_says():
    p = plan(make_spec(run_id="r3", workers=3, cpus=0.5), PATHS, user="1000:1000")
    doc = yaml.safe_load(p.artifact)
    assert doc["name"] == "orch-r3"
    assert sorted(doc["services"]) == ["worker-0", "worker-1", "worker-2"]
    for i in range(3):
        svc = doc["services"][f"worker-{i}"]
        assert json.loads(svc["environment"]["TF_CONFIG"])["task"] == {"type": "worker", "index": i}
        assert svc["labels"] == {"orch.run": "r3", "orch.role": "worker", "orch.index": str(i),
                                 "orch.version": __version__}
        assert svc["image"] == f"orch-trainer:{__version__}-multi"
        assert svc["cpus"] == 0.5
        assert "ports" not in svc
        # The trust boundary: the image's Python environment from its volume and the data, both read-only, the
        # shared folder, and the worker's own folder; nothing else of the run directory (records, the Compose
        # file, logs) is mounted.
        assert [(v["type"], v["source"], v["target"], v.get("read_only", False)) for v in svc["volumes"]] == [
            ("volume", volume_name(f"orch-trainer:{__version__}-multi"), "/opt/venv", True),
            ("bind", "/srv/orch/cache/data/mnist", "/orch/data", True),
            ("bind", "/srv/orch/runs/r3/shared", "/orch/run/shared", False),
            ("bind", f"/srv/orch/runs/r3/worker-{i}", f"/orch/run/worker-{i}", False)]
        assert svc["logging"] == {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}}
    assert doc["networks"]["cluster"]["internal"] is True
    # Made by orch before the run (images/venv_volume.py), never by Compose: external.
    assert doc["volumes"] == {volume_name(f"orch-trainer:{__version__}-multi"): {"external": True}}


def test_the_environment_volume_is_named_for_the_image_and_only_for_an_image_orch_chose():
    torch = yaml.safe_load(plan(make_spec(run_id="t", workers=2, framework="torch"), PATHS).artifact)
    assert torch["volumes"] == {volume_name(f"orch-torch:{__version__}"): {"external": True}}
    assert volume_name("a:b") != volume_name("a_b") and volume_name("a:b").startswith("orch-venv.a_b.")
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]+", volume_name("registry:5000/x/y:1.0-Ü" + "z" * 300))
    # A user's own image keeps its own environment: orch does not know what it holds.
    own = yaml.safe_load(plan(make_spec(run_id="u", workers=2, image="mine:1"), PATHS).artifact)
    assert "volumes" not in own and all(v["type"] == "bind" for v in own["services"]["worker-0"]["volumes"])
    # Where the replicas run on other nodes, they read the image as it is.
    swarm = yaml.safe_load(plan(make_spec(run_id="s", workers=2, backend="swarm"), PATHS).artifact)
    assert not any(v.get("type") == "volume" for svc in swarm["services"].values() for v in svc.get("volumes", []))


def test_single_worker_uses_single_image_and_no_tf_config():
    p = plan(make_spec(run_id="r1", workers=1), PATHS)
    svc = yaml.safe_load(p.artifact)["services"]["worker-0"]
    assert svc["image"].endswith("-single") and "TF_CONFIG" not in svc["environment"]


def test_shared_network_joins_worker_0_namespace():
    doc = yaml.safe_load(plan(make_spec(run_id="r", workers=2, network="shared"), PATHS).artifact)
    assert doc["services"]["worker-1"]["network_mode"] == "service:worker-0"
    assert "networks" not in doc["services"]["worker-1"]


def test_plan_is_pure_and_repeatable():
    spec = make_spec(run_id="same", workers=2)
    assert plan(spec, PATHS).artifact == plan(spec, PATHS).artifact


def test_quoting_cannot_add_keys_or_interpolate():
    hostile = 'x"\nprivileged: true\n${HOME}'
    doc = yaml.safe_load(f"key: {yaml_quote(hostile)}\n")
    assert doc == {"key": hostile.replace("$", "$$")}  # Compose turns $$ back into $


def test_host_network_uses_a_port_block_of_its_own():
    a = plan(make_spec(run_id="host-a", workers=2, network="host", expose_ports_on_host=True), PATHS)
    b = plan(make_spec(run_id="host-b", workers=2, network="host", expose_ports_on_host=True), PATHS)
    doc = yaml.safe_load(a.artifact)
    assert all(svc["network_mode"] == "host" for svc in doc["services"].values())
    assert "networks" not in doc["services"]["worker-0"]
    ports = lambda p: {addr.split(":")[1] for r in p.replicas for addr in r.rendezvous["tf_config"]["cluster"]["worker"]}  # noqa: E731
    assert ports(a) != ports(b)


def test_cpu_shares():
    from orchestrator.plan import cpuset

    assert cpuset(0, 1, 2) == "0-1"
    assert [cpuset(i, 2, 2) for i in range(2)] == ["0", "1"]
    assert [cpuset(i, 2, 8) for i in range(2)] == ["0-3", "4-7"]
    assert [cpuset(i, 3, 2) for i in range(3)] == ["0", "1", "0"]


def test_threads_and_pinning_reach_the_containers():
    p = plan(make_spec(run_id="t", workers=3, threads=1, pin_cpus=True), PATHS, host_cpus=2)
    doc = yaml.safe_load(p.artifact)
    # Pinning is the trainer's own, after TensorFlow's import, so the container's cpuset stays open.
    assert [doc["services"][f"worker-{i}"]["environment"]["ORCH_CPUS"] for i in range(3)] == ["0", "1", "0"]
    assert not any("cpuset" in service for service in doc["services"].values())
    unpinned = yaml.safe_load(plan(make_spec(run_id="t", workers=3, pin_cpus=False), PATHS).artifact)
    assert not any("ORCH_CPUS" in service["environment"] for service in unpinned["services"].values())
    assert doc["services"]["worker-2"]["environment"]["OMP_NUM_THREADS"] == "1"
    assert json.loads(doc["services"]["worker-2"]["environment"]["ORCH_JOB"])["threads"] == 1


def test_gpus_render_a_device_request_per_container_and_none_by_default():
    doc = yaml.safe_load(plan(make_spec(run_id="g", workers=2, gpus=2), PATHS).artifact)
    for service in doc["services"].values():
        assert service["deploy"]["resources"]["reservations"]["devices"] == [
            {"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]
    plain = yaml.safe_load(plan(make_spec(run_id="g", workers=2), PATHS).artifact)
    assert not any("deploy" in service for service in plain["services"].values())


def test_the_plans_json_view_names_every_replica_and_file_as_render_prints_it():
    spec = make_spec(run_id="view", workers=2)
    p = plan(spec, PATHS, user="1000:1000")
    view = p.to_dict()
    assert {k: view[k] for k in ("run_id", "backend", "project", "image", "run_dir", "data_dir", "artifact_file",
                                 "user", "artifact")} == {
        "run_id": "view", "backend": "compose", "project": p.engine_name, "image": p.image,
        "run_dir": str(PATHS.runs / "view"), "data_dir": str(p.data_dir),
        "artifact_file": str(PATHS.runs / "view" / p.artifact_name), "user": "1000:1000", "artifact": p.artifact}
    assert view["spec"] == spec.model_dump(mode="json") and set(view) == {
        "run_id", "backend", "project", "image", "run_dir", "data_dir", "artifact_file", "user", "spec", "replicas",
        "artifact"}
    assert [(r["role"], r["index"], r["name"]) for r in view["replicas"]] == [("worker", 0, "worker-0"),
                                                                               ("worker", 1, "worker-1")]
    assert view["replicas"][1]["labels"] == p.replicas[1].labels
    assert view["replicas"][1]["tf_config"] == p.replicas[1].rendezvous["tf_config"]
    assert p.replicas[1].key == ("worker", 1) and p.artifact_file == PATHS.runs / "view" / p.artifact_name


def test_a_replica_and_a_plan_default_to_the_images_own_command_and_no_extras():
    from orchestrator.plan.model import Mount, Plan, Replica

    replica = Replica(role="worker", index=0, image="i", env={}, template={}, labels={}, mounts=(), rendezvous={})
    assert (replica.command, replica.working_dir, replica.host_group, replica.port, replica.shm_mb) == ((), "", "", 0, 0)
    assert Mount("a", "b", True).volume is False
    p = Plan(spec=make_spec(run_id="d"), backend="compose", engine_name="e", run_dir=Path("r"), data_dir=Path("d"),
             cache_dir=Path("c"), image="i", user="u", replicas=(), artifact_name="a", artifact="")
    assert (p.base_image, p.build_hint, p.rendezvous_kind, p.loaders_dir, p.loaders_on, p.script_on) == \
        ("", "", "", None, "", "")


def test_a_plan_its_replicas_and_mounts_cannot_change_once_computed():
    import dataclasses

    import pytest

    p = plan(make_spec(run_id="frozen", workers=2), PATHS, user="1000:1000")
    for thing, field in ((p, "image"), (p.replicas[0], "image"), (p.replicas[0].mounts[0], "source")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(thing, field, "other")


def test_each_replica_is_pinned_to_its_own_share_of_the_cores_or_one_in_turn():
    from orchestrator.plan import cpuset

    assert [cpuset(i, 1, 2) for i in range(1)] == ["0-1"]
    assert [cpuset(i, 2, 2) for i in range(2)] == ["0", "1"]
    assert [cpuset(i, 3, 2) for i in range(3)] == ["0", "1", "0"]
    assert [cpuset(i, 2, 4) for i in range(2)] == ["0-1", "2-3"]
    assert [cpuset(i, 3, 4) for i in range(3)] == ["0", "1", "2"]
    assert cpuset(0, 1, 0) == "0" and cpuset(0, 1, 1) == "0"  # no core count known: one core


def test_the_cores_each_replica_gets_and_how_many_share_one():
    from orchestrator.plan import rank_cores

    assert [rank_cores(n, 2) for n in (1, 3, 5)] == [(2, 1), (1, 2), (1, 3)]
    assert rank_cores(1, 0) == (1, 1) and rank_cores(2, 8) == (4, 1)
    assert all(isinstance(n, int) for n in rank_cores(5, 2))


def test_a_plan_runs_as_uid_1000_and_pins_to_one_core_where_the_core_count_is_unknown(monkeypatch):
    p = plan(make_spec(run_id="u", workers=1, pin_cpus=True), PATHS)
    assert p.user == "1000:1000"
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    from orchestrator import contract

    assert plan(make_spec(run_id="u", workers=1, pin_cpus=True), PATHS).replicas[0].env[contract.ENV_CPUS] == "0"


def test_a_script_sees_its_snapshot_and_the_frameworks_caches_read_only_and_runs_from_its_own_folder():
    p = plan(make_spec(run_id="s", script="/src/proj/train.py", workers=2), PATHS)
    r = p.replicas[1]
    assert [(m.source, m.target, m.read_only) for m in r.mounts[-4:]] == [
        ("/srv/orch/runs/s/source", "/orch/script", True),
        ("/srv/orch/cache/data/loaders/keras", "/tmp/.keras", True),
        ("/srv/orch/cache/data/loaders/torchvision", "/orch/run/data", True),
        ("/srv/orch/cache/data/loaders/torchvision", "/orch/run/worker-1/data", True)]
    assert r.env["ORCH_KERAS_MNIST"] == "/tmp/.keras/datasets/mnist.npz" and "ORCH_LOADERS_DIR" not in r.env
    assert (r.working_dir, r.command) == ("/orch/run/worker-1", ("python3", "-u", "/orch/script/train.py"))
    assert (p.loaders_on, p.script_on) == ("", "")


def test_where_nodes_see_no_host_folder_a_script_and_its_caches_come_in_the_image():
    p = plan(make_spec(run_id="s", script="/src/proj/train.py", backend="swarm", registry="reg.example:5000"), PATHS)
    r = p.replicas[0]
    assert r.env["ORCH_LOADERS_DIR"] == "/orch-loaders"
    assert r.env["ORCH_KERAS_MNIST"] == "/orch-loaders/keras/datasets/mnist.npz"
    assert not any(m.target in ("/orch/script", "/tmp/.keras", "/orch/data") for m in r.mounts)
    assert p.loaders_on.endswith("-mnist") and p.script_on == p.loaders_on + "-loaders" and p.image != p.base_image


def test_orchs_trainer_runs_as_its_image_says_and_mpis_launcher_from_the_image_workdir():
    r = plan(make_spec(run_id="s"), PATHS).replicas[0]
    assert (r.working_dir, r.command) == ("", ())
    r = plan(make_spec(run_id="s", framework="mpi", workers=2), PATHS).replicas[0]
    assert (r.working_dir, r.command[:3]) == ("/tmp", ("python3", "-m", "orch_trainer.mpi_launch"))


def test_the_build_hint_names_orchs_build_only_for_orchs_own_image_and_shm_is_the_specs():
    assert plan(make_spec(run_id="s"), PATHS).build_hint == "run `orch build` first"
    assert plan(make_spec(run_id="s", image="my:1"), PATHS).build_hint == "pull or build it first"
    assert plan(make_spec(run_id="s", shm_size="512m"), PATHS).replicas[0].shm_mb == 512


@pytest.mark.parametrize("fields", [
    {"workers": 3}, {"framework": "mpi", "workers": 2}, {"framework": "torch", "workers": 2},
    {"framework": "jax", "workers": 3}, {"workers": 2, "strategy": "ps", "parameter_servers": 1},
    {"workers": 2, "backend": "swarm"}, {"workers": 2, "memory": "2g", "cpus": 1.5, "collective_timeout": 30},
], ids=lambda fields: "-".join(f"{k}={v}" for k, v in fields.items()))
def test_a_spec_read_back_from_its_run_record_plans_the_same_artifact(tmp_path, fields):
    """A run's supervisor (run/supervise.py) plans the run again from its run.json, and refuses a run whose artifact
    it would render otherwise: every spec must survive that round trip, its types included."""
    from orchestrator.run.rundir import RunDir, RunInfo, RunState

    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache")
    p = plan(make_spec(run_id="round-trip", **fields), paths, user="1000:1000", host_cpus=2)
    run = RunDir(p.run_dir)
    run.create(p)
    run.write_record(RunInfo(run_id="round-trip", state=RunState.STARTING, spec=p.spec))
    again = plan(run.record().spec, paths, user="1000:1000", host_cpus=2)
    assert again.artifact == (run.path / p.artifact_name).read_text() == p.artifact
