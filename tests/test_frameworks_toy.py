"""A framework defined in one folder outside orch (tests/toy_gossip/), registered at run time, planned on every backend
with no other change and built into an image of its own by orch's generic builder: the proof that a framework is one
unit and that nothing outside ``orchestrator/frameworks/`` names one."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator import frameworks
from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import load_spec, make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from tests import toy_gossip
from tests.conftest import ENGINE, once

PATHS = Paths(runs=Path("/srv/orch/runs"), cache=Path("/srv/orch/cache"))


@pytest.fixture
def gossip(monkeypatch):
    monkeypatch.setattr(frameworks, "_registered", dict(frameworks._registered))  # gone again after the test
    frameworks.register(toy_gossip.Gossip())
    return frameworks.get("gossip")


def test_a_registered_framework_is_a_spec_choice_with_its_own_options_and_checks(gossip):
    assert "gossip" in frameworks.names()
    spec = make_spec(run_id="g", framework="gossip", workers=3, rounds=5, dataset="synthetic")
    assert spec.framework.rounds == 5 and spec.framework.resolved_strategy(3) == "gossip"
    assert spec.training_fields()["rounds"] == 5 and spec.training_fields()["framework"] == "gossip"
    assert load_spec(json.loads(spec.model_dump_json())) == spec  # the run record round-trips
    with pytest.raises(InvalidSpec, match="rounds: more than 10 rounds"):
        make_spec(run_id="g", framework="gossip", workers=5, rounds=11, dataset="synthetic")
    with pytest.raises(InvalidSpec, match="strategy: --strategy is an option of --framework tensorflow, not gossip"):
        make_spec(run_id="g", framework="gossip", strategy="mwms")
    with pytest.raises(InvalidSpec, match="checkpoint_every: gossip checkpoints after every epoch"):
        make_spec(run_id="g", framework="gossip", workers=2, checkpoint_every=10, dataset="synthetic")


def test_an_unregistered_framework_is_refused_in_one_line():
    with pytest.raises(InvalidSpec, match="framework: gossip is not one orch runs; choose tensorflow or mpi or torch"):
        make_spec(run_id="g", framework="gossip")


@pytest.mark.parametrize("backend", ["compose", "swarm", "k8s"])
def test_every_backend_plans_and_renders_it(gossip, backend):
    spec = make_spec(run_id="g", framework="gossip", workers=3, rounds=7, dataset="synthetic", backend=backend)
    p = plan(spec, PATHS, user="1000:1000", host_cpus=2)
    assert [r.image for r in p.replicas] == ["gossip:1"] * 3
    peers = {r.env["GOSSIP_PEERS"] for r in p.replicas}
    assert len(peers) == 1 and len(next(iter(peers)).split(",")) == 3 and ":4242" in next(iter(peers))
    assert [r.env["GOSSIP_RANK"] for r in p.replicas] == ["0", "1", "2"]
    assert [r.rendezvous for r in p.replicas] == [{"gossip": {"rank": i, "peers": 3}} for i in range(3)]
    assert all(json.loads(r.env["ORCH_JOB"])["rounds"] == 7 for r in p.replicas)
    docs = list(yaml.safe_load_all(p.artifact))
    assert docs and "gossip:1" in p.artifact and "GOSSIP_PEERS" in p.artifact
    if backend == "k8s":  # the pods of a role share one template: each pod's rank comes from its own index
        (job,) = [d for d in docs if d["kind"] == "Job"]
        env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.annotations['batch.kubernetes.io/job-completion-index']")
        assert list(env).index("JOB_COMPLETION_INDEX") < list(env).index("GOSSIP_RANK")
        assert env["GOSSIP_RANK"]["value"] == "$(JOB_COMPLETION_INDEX)"


@pytest.mark.docker
def test_its_own_image_holds_its_trainer_alone_and_runs_its_job(images, gossip, tmp_path):
    """The generic builder makes the toy's image from its folder (its recipe, its lock of one wheel, its trainer), with
    no other framework's trainer in it, and a job of 3 replicas gossips to the mean of their ranks."""
    from orchestrator import api
    from orchestrator.paths import Paths

    tags = ["gossip:1", "orch-gossip-runtime:0.1.0"]
    try:
        with ENGINE.hold(alone=False), once("build"):
            built = gossip.build(frameworks.BuildOptions(), None, None, lambda _m: None)
        assert [b.tag for b in built] == ["gossip:1"]
        listing = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", "gossip:1", "-c",
             "import os, orch_trainer, orch_trainer.entries as e; "
             "print(e.ENTRIES, sorted(os.listdir(os.path.dirname(orch_trainer.__file__))))"],
            capture_output=True, text=True, timeout=120)
        assert listing.returncode == 0, listing.stderr
        assert listing.stdout.startswith("{'gossip': 'gossip_loop'} ")
        assert "gossip_loop.py" in listing.stdout
        assert not any(f"'{m}'" in listing.stdout for m in ("torch_loop.py", "jax_loop.py", "mpi_loop.py", "session.py"))
        with ENGINE.hold(alone=False):
            info = api.up(framework="gossip", workers=3, rounds=4, dataset="synthetic", run_id="live-gossip",
                          paths=Paths(runs=tmp_path / "runs", cache=tmp_path / "cache"))
        values = [json.loads((tmp_path / "runs" / "live-gossip" / f"worker-{i}" / "result.json").read_text())["value"]
                  for i in range(3)]
        assert info.state.value == "succeeded" and values == [1.0, 1.0, 1.0]  # the mean of ranks 0, 1 and 2
    finally:  # the toy's images, and the Python environment orch's runs keep of an image in a volume
        volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter", "name=orch-venv.gossip_1."],
                                 capture_output=True, text=True).stdout.split()
        subprocess.run(["docker", "volume", "rm", *volumes], capture_output=True)
        subprocess.run(["docker", "rmi", *tags], capture_output=True)
