"""One spec rendered for Compose, Swarm and Kubernetes: every replica gets the same image, role, environment,
limits and hardening on all three, read back out of each backend's own artifact. Pure."""
from __future__ import annotations

import json

import pytest
import yaml

from orchestrator import contract
from orchestrator.backends.k8s_pods import INDEX_ENV
from orchestrator.jobspec import make_spec
from orchestrator.plan import plan
from tests.test_backends_k8s import PATHS, documents, job_templates, kubelet_env
from tests.test_trainer_reports import trainer  # noqa: F401 (a fixture)

# What differs by design: the report channel (files or stdout), the cores (no cpuset beyond Compose), where the
# data set is (mounted, or in the image), and the cluster and index a Kubernetes pod derives its own values from.
TRANSPORT = {contract.ENV_REPORT, contract.ENV_CPUS, contract.ENV_DATA_DIR, contract.ENV_CLUSTER,
             contract.ENV_COMPLETION_INDEX, contract.ENV_RENDEZVOUS, INDEX_ENV["name"]}


def _env(env: dict) -> dict:
    """The environment but for TRANSPORT; TF_CONFIG as its task and the shape of its cluster, since each
    engine names the replicas its own way (a service, a pod of a headless Service)."""
    out = {k: v for k, v in env.items() if k not in TRANSPORT}
    if "TF_CONFIG" in out:
        config = json.loads(out["TF_CONFIG"])
        out["TF_CONFIG"] = {"task": config["task"], "cluster": {r: len(a) for r, a in config["cluster"].items()}}
    return out


def compose(p) -> dict:
    services = yaml.safe_load(p.artifact)["services"]
    return {name: {"image": s["image"], "role": s["labels"]["orch.role"], "env": _env(s["environment"]),
                   "memory_mb": int(s["mem_limit"].rstrip("m")), "cpus": float(s["cpus"]), "user": s["user"],
                   "read_only": s["read_only"], "caps": s["cap_drop"]} for name, s in services.items()}


def swarm(p) -> dict:
    services = yaml.safe_load(p.artifact)["services"]
    return {name: {"image": s["image"], "role": s["labels"]["orch.role"], "env": _env(s["environment"]),
                   "memory_mb": int(s["deploy"]["resources"]["limits"]["memory"].rstrip("M")),
                   "cpus": float(s["deploy"]["resources"]["limits"]["cpus"]), "user": s["user"],
                   "read_only": s["read_only"], "caps": s["cap_drop"]} for name, s in services.items()}


def _cores(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def k8s(p, rendezvous) -> dict:
    out = {}
    for doc in documents(p.artifact):
        for job in job_templates(doc):
            pod = job["spec"]["template"]["spec"]
            container = pod["containers"][0]
            for index in range(job["spec"]["completions"]):
                env = {**kubelet_env(container, index), contract.ENV_COMPLETION_INDEX: str(index)}
                env.update(rendezvous.env_from_index(env))  # what the pod computes at start-up
                name = f"{env[contract.ENV_ROLE]}-{env[contract.ENV_WORKER_INDEX]}"
                limits, security = container["resources"]["limits"], container["securityContext"]
                out[name] = {"image": container["image"], "role": env[contract.ENV_ROLE], "env": _env(env),
                             "memory_mb": int(limits["memory"].rstrip("Mi")), "cpus": _cores(limits["cpu"]),
                             "user": f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}",
                             "read_only": security["readOnlyRootFilesystem"], "caps": security["capabilities"]["drop"]}
    return out


@pytest.mark.parametrize("fields", [{"workers": 3}, {"workers": 2, "strategy": "ps", "parameter_servers": 2}])
def test_every_backend_gives_each_replica_the_same_image_role_environment_limits_and_hardening(trainer, fields):  # noqa: F811
    common = {"run_id": "parity", "dataset": "synthetic", "cpus": 1.5, "memory_mb": 3072, "global_batch": 96, **fields}
    got = {"compose": compose(plan(make_spec(backend="compose", **common), PATHS)),
           "swarm": swarm(plan(make_spec(backend="swarm", **common), PATHS)),
           "k8s": k8s(plan(make_spec(backend="k8s", **common), PATHS), trainer.rendezvous)}
    names = [f"{role}-{i}" for role, i in make_spec(**common).replica_keys()]
    for backend, replicas in got.items():
        assert sorted(replicas) == sorted(names), backend
    for name in names:
        reference = got["compose"][name]
        assert reference["user"] == "1000:1000" and reference["read_only"] is True and reference["caps"] == ["ALL"]
        assert reference["memory_mb"] == 3072 and reference["cpus"] == 1.5 and "TF_CONFIG" in reference["env"]
        for backend in ("swarm", "k8s"):
            assert got[backend][name] == reference, (backend, name)
