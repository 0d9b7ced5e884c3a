"""--transport shm for PyTorch and JAX: the plan starts the replicas as MPI's ranks, on one host's namespaces, and
refuses what shared memory cannot be."""
import json

import pytest

from orchestrator import frameworks
from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan

LAUNCHER = ("python3", "-m", "orch_trainer.mpi_launch", "python3", "-m", "orch_trainer")


def _paths(tmp_path):
    return Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_shm_starts_mpi_ranks_on_one_host(framework, tmp_path):
    spec = make_spec(framework=framework, workers=3, transport="shm", run_id="t")
    p = plan(spec, _paths(tmp_path))
    assert {r.host_group for r in p.replicas} == {"worker-0"}
    for position, replica in enumerate(p.replicas):
        assert tuple(replica.command) == LAUNCHER
        assert replica.env["ORCH_MPI_HOSTS"] == "worker-0,worker-1,worker-2"
        assert replica.env["UCX_TLS"].startswith("self,posix")
        assert json.loads(replica.env["ORCH_JOB"])["transport"] == "shm"
    assert frameworks.get(framework).floor_transport(spec) == "mpi-shm"
    assert "ipc: \"shareable\"" in p.artifact or "ipc: shareable" in p.artifact


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_native_transport_is_the_default_and_meets_as_before(framework, tmp_path):
    spec = make_spec(framework=framework, workers=3, run_id="t")
    p = plan(spec, _paths(tmp_path))
    assert all(not r.host_group and "ORCH_MPI_HOSTS" not in r.env for r in p.replicas)
    assert frameworks.get(framework).floor_transport(spec) == {"torch": "gloo", "jax": "jax-gloo"}[framework]
    assert json.loads(p.replicas[0].env["ORCH_JOB"])["transport"] == "auto"


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_one_worker_over_shm_is_the_serial_baseline(framework, tmp_path):
    (replica,) = plan(make_spec(framework=framework, transport="shm", run_id="t"), _paths(tmp_path)).replicas
    assert "ORCH_MPI_HOSTS" not in replica.env and not replica.host_group


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("fields, says", [
    ({"backend": "swarm", "workers": 2}, "only Compose can"),
    ({"script": __file__}, "a --script brings its own"),
    ({"transport": "tcp"}, "must be 'auto', 'gloo' or 'shm'"),
])
def test_what_shm_cannot_be_is_refused_in_one_line(framework, fields, says):
    with pytest.raises(InvalidSpec) as caught:
        make_spec(**{"framework": framework, "transport": "shm", **fields})
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_torch_over_shm_runs_one_rank_per_container():
    with pytest.raises(InvalidSpec, match="one rank per container"):
        make_spec(framework="torch", transport="shm", workers=2, procs_per_worker=2)
