"""The pod every replica of a Kubernetes run runs (``pod_template``): locked down, its environment with the
framework's placeholders filled from the completion index, its resources, the init container that copies the data
image, and its volumes. Pure; k8s_manifests.py puts it into a Job, a JobSet or a TrainJob."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from orchestrator import __version__, contract, macros, rendezvous
from orchestrator.backends import options
from orchestrator.backends.base import Key, bounded_name, pulled
from orchestrator.images import data as data_images
from orchestrator.labels import LABEL_ROLE, LABEL_RUN

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan, Replica

NAME_MAX = 40  # leaves room in a 63-character host name for "-<role>-0-<index>" (JobSet) or "-<index>"
CONTAINER = "trainer"
TRAINJOB_NODE = "node"  # Kubeflow Trainer v2's replicated Job and its container (k8s_manifests.py)
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # on every pod of an Indexed Job
# A value that depends on the pod (a placeholder of ``macros`` the pod's completion index fills) is written with
# $(JOB_COMPLETION_INDEX), which Kubernetes expands from a variable defined before it. The Job controller adds
# JOB_COMPLETION_INDEX after the template's own variables, too late for them, unless the template has it: so the
# template defines it first, from the same annotation, and the controller leaves it.
INDEX_REF = f"$({contract.ENV_COMPLETION_INDEX})"
INDEX_ENV = {"name": contract.ENV_COMPLETION_INDEX,
             "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}


UID = 1000  # the trainer images' own user
DATA_IMAGE_DIR = contract.IMAGE_DATA_DIR  # where a data image holds the prepared data set
TMP_SIZE = "512Mi"  # as Compose's tmpfs
SHM_SIZE = "64Mi"  # Docker's default /dev/shm
RUN_SIZE = "1Gi"  # a replica's own folder: predictions, the done marker
DATA_SIZE = "1Gi"  # the prepared data set the init container copies (the largest, Fashion-MNIST's, is about 55 MB)

def object_name(run_id: str) -> str:
    """The run's Kubernetes object name: ``orch-<run id>`` where that is a valid DNS label of at most NAME_MAX
    characters, else a shortened, hyphenated form with a hash of the run id, so distinct ids stay distinct."""
    return bounded_name(run_id, NAME_MAX, "a-z0-9-")


def addresses(spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
    """Each replica's DNS name and port: ``<job>-<i>.<service>``, ``<jobset>-<role>-0-<i>.<jobset>``, or a
    TrainJob's ``<trainjob>-node-0-<i>.<trainjob>``."""
    name, kind = object_name(spec.run_id), options.kubernetes(spec).k8s_kind
    if kind in ("jobset", "trainjob"):
        return {(role, index): f"{name}-{TRAINJOB_NODE if kind == 'trainjob' else role}-0-{index}.{name}:{port}"
                for role, index in keys}
    return {key: f"{name}-{position}.{name}:{port}" for position, key in enumerate(keys)}


def container_name(spec: "JobSpec") -> str:
    return TRAINJOB_NODE if options.kubernetes(spec).k8s_kind == "trainjob" else CONTAINER


def pod_labels(plan: "Plan", role: Optional[str] = None) -> dict[str, str]:
    labels = {LABEL_RUN: object_name(plan.spec.run_id), "orch.version": __version__}
    return {**labels, LABEL_ROLE: role} if role is not None else labels

def pod_template(plan: "Plan", members: list["Replica"], role: Optional[str], fixed_role: bool,
                  subdomain: Optional[str] = None) -> dict[str, Any]:
    """The locked-down pod every replica in ``members`` runs; ``subdomain`` is the headless Service that
    names its pods (JobSet sets its own)."""
    spec = plan.spec
    env = _env(plan, members, role if fixed_role else None)
    resources = _resources(spec)
    trainer = {
        "name": container_name(spec),
        "image": pulled(plan.image, spec, own=spec.image is None),
        "imagePullPolicy": "IfNotPresent",
        # The replicas of a Job share its template, so one command serves all (a launcher's, where there is one).
        **({"command": list(members[0].command), "workingDir": members[0].working_dir}
           if members[0].command else {}),
        "env": ([INDEX_ENV] if any(INDEX_REF in v for v in env.values()) else [])
               + [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"name": "rendezvous", "containerPort": members[0].port}],
        "resources": resources,
        "securityContext": _container_security(),
        "volumeMounts": [
            {"name": "data", "mountPath": contract.DATA_MOUNT, "readOnly": True},
            {"name": "run", "mountPath": contract.OUT_MOUNT},
            {"name": "shared", "mountPath": f"{contract.OUT_MOUNT}/{contract.SHARED_DIR}",
             **({"subPath": spec.run_id} if options.kubernetes(spec).k8s_checkpoint_claim else {})},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    pod: dict[str, Any] = {
        **({"subdomain": subdomain} if subdomain else {}),
        "restartPolicy": "Never",  # a pod failure policy needs it; the Job decides what a failure means
        "automountServiceAccountToken": False,  # the trainer never talks to the API server
        "enableServiceLinks": False,  # no environment about other Services
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": 10,  # as Compose's stop_grace_period
    }
    if spec.dataset != "synthetic":  # synthetic data is made in the trainer
        pod["initContainers"] = [_data_container(spec, resources)]
    pod["containers"] = [trainer]
    pod["volumes"] = _volumes(spec, members[0].shm_mb)
    return {"metadata": {"labels": pod_labels(plan, role)}, "spec": pod}

def _env(plan: "Plan", members: list["Replica"], role: Optional[str]) -> dict[str, str]:
    """The environment one pod template gives ``members``: their shared template with its placeholders filled where
    the pod's completion index is the value, the cluster every pod derives the rest from (``rendezvous.py``), and
    the stdout reports. Raises ValueError for a variable one template cannot carry and no pod derives."""
    # orch's own index variables each pod derives at start-up (rendezvous.py); cores are the kubelet's to pin.
    drop = {contract.ENV_ROLE, contract.ENV_WORKER_INDEX, contract.ENV_NUM_WORKERS, contract.ENV_CPUS}
    templates = [{k: v for k, v in r.template.items() if k not in drop} for r in members]
    keys = plan.spec.replica_keys()
    counted = list(range(len(members)))
    # One pod: its own values. Several: the completion index counts the Job's pods, so it is a replica's index where
    # they are one role's replicas, and its rank where they are the whole job's, in order.
    values = macros.values_of(keys, members[0].key) if len(members) == 1 else {
        **({macros.ROLE: members[0].role} if len({r.role for r in members}) == 1 else {}),
        **({macros.INDEX: INDEX_REF} if [r.index for r in members] == counted else {}),
        **({macros.RANK: INDEX_REF} if [keys.index(r.key) for r in members] == counted else {})}
    env: dict[str, str] = {}
    for name in dict.fromkeys(k for t in templates for k in t):
        try:
            if any(t.get(name) != templates[0].get(name) for t in templates):
                raise KeyError(name)
            env[name] = macros.fill(templates[0][name], values)
        except KeyError:
            if name not in contract.DERIVED_FROM_INDEX:
                raise ValueError(f"k8s: the replicas differ in {name}, which one pod template cannot carry") from None
            # derived in the pod instead, from the cluster and its completion index
    port = plan.replicas[0].port
    cluster = rendezvous.cluster_of(addresses(plan.spec, [r.key for r in plan.replicas], port))
    env = {**env, contract.ENV_CLUSTER: json.dumps(cluster, separators=(",", ":"), allow_nan=False),
           **({contract.ENV_RENDEZVOUS: plan.rendezvous_kind} if plan.rendezvous_kind else {}),
           contract.ENV_REPORT: contract.REPORT_STDOUT}
    if role is not None:
        env[contract.ENV_ROLE] = role
    return env

def _resources(spec: "JobSpec") -> dict[str, Any]:
    """Requests equal to limits (the Guaranteed class); one CPU where --cpus is not given."""
    amounts: dict[str, Any] = {"cpu": _quantity(spec.cpus or 1), "memory": f"{spec.memory_mb}Mi"}
    if spec.gpus:
        amounts["nvidia.com/gpu"] = spec.gpus
    return {"requests": dict(amounts), "limits": dict(amounts)}

def _container_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "privileged": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}

def _data_container(spec: "JobSpec", resources: dict[str, Any]) -> dict[str, Any]:
    """The init container that copies the data image's files into the pod's data volume."""
    amounts = {k: v for k, v in resources["limits"].items() if k != "nvidia.com/gpu"}
    return {
        "name": "data",
        "image": pulled(data_images.data_image(spec.dataset), spec, own=True),  # `orch build --data`
        "imagePullPolicy": "IfNotPresent",
        "command": ["cp", "-R", f"{DATA_IMAGE_DIR}/.", f"{contract.DATA_MOUNT}/"],
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "securityContext": _container_security(),
        "volumeMounts": [{"name": "data", "mountPath": contract.DATA_MOUNT}],
    }

def _volumes(spec: "JobSpec", shm_mb: int) -> list[dict[str, Any]]:
    claim = options.kubernetes(spec).k8s_checkpoint_claim
    shared = ({"persistentVolumeClaim": {"claimName": claim}} if claim
              else {"emptyDir": {"sizeLimit": RUN_SIZE}})  # pod-local: no restarts (the spec refuses them)
    return [
        {"name": "data", "emptyDir": {"sizeLimit": DATA_SIZE}},
        {"name": "run", "emptyDir": {"sizeLimit": RUN_SIZE}},
        {"name": "shared", **shared},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_SIZE}},
        {"name": "dshm", "emptyDir": {"medium": "Memory",
                                       "sizeLimit": f"{shm_mb}Mi" if shm_mb else SHM_SIZE}},
    ]


def _quantity(cpus: float) -> str:
    """A CPU amount as Kubernetes writes it: whole cores as "2", else millicores ("500m")."""
    millis = round(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
