"""A framework defined in this one file, registered at run time, and planned on every backend with no other change:
the proof that a framework is one unit and that nothing outside ``orchestrator/frameworks/`` names one."""
from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Literal

import pytest
import yaml
from pydantic import Field

from orchestrator import frameworks, macros
from orchestrator.errors import InvalidSpec
from orchestrator.frameworks import Framework, FrameworkOptions
from orchestrator.jobspec import load_spec, make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan

PATHS = Paths(runs=Path("/srv/orch/runs"), cache=Path("/srv/orch/cache"))


class GossipOptions(FrameworkOptions):
    """A toy: replicas that average numbers by gossip for some rounds."""

    name: Literal["gossip"] = Field("gossip", description="the framework")
    rounds: int = Field(3, ge=1, le=100, description="Rounds of gossip.")

    training_fields: ClassVar[tuple[str, ...]] = ("rounds",)

    def check(self, workers: int, global_batch: int) -> None:
        if self.rounds > 10 and workers > 4:
            raise ValueError("rounds: more than 10 rounds gossip among at most 4 workers")


class Gossip(Framework):
    name = "gossip"
    options = GossipOptions
    port = 4242
    shm_mb = 128

    def image(self, spec):
        return spec.image or "gossip:1"

    def env(self, spec, role, addresses):
        # The rank differs by replica: a placeholder each backend fills (a value, or the pod's completion index).
        return {"GOSSIP_PEERS": ",".join(addresses.values()), "GOSSIP_RANK": macros.RANK}

    def describe(self, spec, key, addresses):
        return {"gossip": {"rank": list(addresses).index(key), "peers": len(addresses)}}

    def image_refs(self):
        return ("gossip:1",)

    def main_image(self):
        return "gossip:1"


@pytest.fixture
def gossip(monkeypatch):
    monkeypatch.setattr(frameworks, "_registered", dict(frameworks._registered))  # gone again after the test
    frameworks.register(Gossip())
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
