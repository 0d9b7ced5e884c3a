"""The seam between frameworks and backends: a framework writes placeholders for what depends on the replica
(``macros``), and each backend fills them its own way. Compose and Swarm with values, Kubernetes with the
completion index where it is the value; and no backend names a framework."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator import frameworks, macros
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan

PATHS = Paths(runs=Path("/srv/orch/runs"), cache=Path("/srv/orch/cache"))
BACKENDS = Path(__file__).resolve().parent.parent / "orchestrator" / "backends"


def test_placeholders_are_filled_with_a_replicas_values():
    keys = [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]
    values = macros.values_of(keys, ("worker", 1))
    assert values == {macros.INDEX: "1", macros.RANK: "4", macros.ROLE: "worker"}
    text = f'{{"task":{{"type":"{macros.ROLE}","index":{macros.INDEX}}}}} rank {macros.RANK} ${{rank}}'
    assert macros.used(text) == {macros.ROLE, macros.INDEX, macros.RANK}
    # torchrun's own template (${rank}) is not orch's and stays as it is
    assert macros.fill(text, values) == '{"task":{"type":"worker","index":1}} rank 4 ${rank}'
    assert macros.fill_env({"A": macros.RANK, "B": "2"}, values) == {"A": "4", "B": "2"}
    with pytest.raises(KeyError):
        macros.fill(macros.INDEX, {macros.RANK: "0"})


def specs():
    """A job of every framework at 1, 2 and 5 replicas, with orch's trainer and with a script, and ps's roles."""
    for name in frameworks.BUILTIN:
        for workers in (1, 2, 5):
            for script in (None, "/home/me/train.py"):
                yield {"framework": name, "workers": workers, "script": script}
    yield {"framework": "tensorflow", "workers": 3, "strategy": "ps", "parameter_servers": 2}


@pytest.mark.parametrize("fields", list(specs()), ids=str)
def test_a_frameworks_environment_is_one_per_role_with_placeholders_and_each_replica_gets_its_values(fields):
    batch = {} if fields.get("script") else {"global_batch": 840}  # a script reads no batch of orch's
    p = plan(make_spec(backend="compose", run_id="m", **batch, **fields), PATHS, host_cpus=2)
    keys = p.spec.replica_keys()
    framework = frameworks.get(p.spec.framework.name)
    addresses = dict(zip(keys, [f"{r.role}-{r.index}:{r.port}" for r in p.replicas]))
    for r in p.replicas:
        template = framework.env(p.spec, r.role, addresses)
        # The same for every replica of the role: whatever differs by replica is a placeholder.
        assert all(r.template[k] == v for k, v in template.items())
        assert r.env == {k: v if k == "ORCH_CPUS" else macros.fill(v, macros.values_of(keys, r.key))
                         for k, v in r.template.items()}
        assert not any(macros.used(v) for v in r.env.values())
    for role in {r.role for r in p.replicas}:
        members = [r for r in p.replicas if r.role == role]
        shared = {k: v for k, v in members[0].template.items() if k != "ORCH_CPUS"}
        assert all({k: v for k, v in m.template.items() if k != "ORCH_CPUS"} == shared for m in members)


def test_one_kubernetes_job_of_several_roles_refuses_what_differs_by_role_and_no_pod_derives(monkeypatch):
    """A value of each role's own (not a placeholder) fits a Job per role, not one Job of every role."""
    tf = frameworks.get("tensorflow")
    own = tf.env
    monkeypatch.setattr(tf, "env", lambda spec, role, addresses: {**own(spec, role, addresses), "MY_ROLE": role})
    fields = {"backend": "k8s", "run_id": "m", "workers": 2, "strategy": "ps", "parameter_servers": 1}
    jobset = plan(make_spec(k8s_kind="jobset", **fields), PATHS)
    assert [r.env["MY_ROLE"] for r in jobset.replicas] == ["chief", "ps", "worker", "worker"]
    with pytest.raises(ValueError, match="k8s: the replicas differ in MY_ROLE, which one pod template cannot carry"):
        plan(make_spec(k8s_kind="job", **fields), PATHS)


def test_no_module_under_backends_names_a_framework():
    names = {*frameworks.BUILTIN, "jax", "torchrun", "tf_config", "keras", "gloo", "mpich", "horovod"}
    pattern = re.compile(rf"\b({'|'.join(sorted(names))})\b", re.IGNORECASE)
    sources = [path for path in sorted(BACKENDS.rglob("*")) if path.is_file() and "__pycache__" not in path.parts]
    found = [f"{path.name}:{n}: {line.strip()}" for path in sources
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
