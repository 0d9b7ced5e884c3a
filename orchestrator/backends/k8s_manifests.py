"""Kubernetes manifests for a plan: an Indexed Job and a headless Service, a JobSet, or a Kubeflow TrainJob. Pure.

Every replica shares its Job's pod template: the framework's placeholders (``macros``) are filled with the completion
index Kubernetes gives each pod where that is their value, and the template carries the whole cluster
(``ORCH_CLUSTER``) for what each pod derives at start-up where it is not (``rendezvous.py``). Data comes from a data image
copied by an init container; events and results come back as lines on stdout (``ORCH_REPORT=stdout``);
checkpoints live on a PersistentVolumeClaim the user names. ``k8s.py`` is the backend that applies these.
"""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Optional

import yaml

from orchestrator import __version__, contract, frameworks, macros, rendezvous
from orchestrator.backends import options
from orchestrator.backends.base import Key, bounded_name, pulled
from orchestrator.images import data as data_images
from orchestrator.labels import LABEL_ROLE, LABEL_RUN

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan, Replica

NAME_MAX = 40  # leaves room in a 63-character host name for "-<role>-0-<index>" (JobSet) or "-<index>"
CONTAINER = "trainer"
# Kubeflow Trainer v2 (--k8s-kind trainjob): its TrainJob runs the runtime's replicated Job "node", whose container
# "node" gets the variables of the ML policy the framework declares; pods are <trainjob>-node-0-<i>.<trainjob>.
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
TRAINJOB_NODE = "node"
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
# Exit codes that are the program's own verdict (orch's supervisor never retries them); 129-255 are signals.
PROGRAM_EXIT_CODES = list(range(1, 129))
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


class _Flow(list[int]):
    """A list written on one line (the exit codes), so the manifest stays readable."""


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """PyYAML's safe dumper (every value a quoted or plain scalar it can read back, never a new key), with
    _Flow lists on one line; libyaml's emitter where PyYAML has it (the same text, several times faster)."""


_Dumper.add_representer(_Flow, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data,
                                                                            flow_style=True))


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


def _container(spec: "JobSpec") -> str:
    return TRAINJOB_NODE if options.kubernetes(spec).k8s_kind == "trainjob" else CONTAINER


def render(plan: "Plan") -> str:
    """The manifests of ``plan``, with comment lines above saying what they need."""
    spec = plan.spec
    # The policy first: no pod of the job runs before it does (and `cancel` deletes it last).
    kind = options.kubernetes(spec).k8s_kind
    documents = [_network_policy(plan)] + (
        [_jobset(plan)] if kind == "jobset" else _trainjob(plan) if kind == "trainjob" else [_service(plan), _job(plan)])
    return "\n".join(_notes(plan)) + "\n" + yaml.dump_all(
        documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True, width=120)


def _notes(plan: "Plan") -> list[str]:
    """The comment lines above the manifests: what they are and what they need."""
    spec = plan.spec
    # The object name, not the run id: a comment line must hold nothing that could end it.
    notes = [f"# Rendered by orch {__version__} for run {object_name(spec.run_id)}; apply with `kubectl apply -f -`, "
             "do not edit."]
    if options.kubernetes(spec).k8s_kind == "jobset":
        notes.append(f"# Needs the JobSet controller ({JOBSET_API}) on the cluster.")
    if options.kubernetes(spec).k8s_kind == "trainjob":
        notes.append(f"# Needs Kubeflow Trainer v2 ({TRAINER_API}) and its JobSet controller on the cluster.")
    if spec.image is None and options.kubernetes(spec).registry is None:
        notes.append("# orch's images are named as built here; push them where the nodes can pull them and "
                     "pass --registry HOST/PATH.")
    return notes

def _labels(plan: "Plan", role: Optional[str] = None) -> dict[str, str]:
    labels = {LABEL_RUN: object_name(plan.spec.run_id), "orch.version": __version__}
    return {**labels, LABEL_ROLE: role} if role is not None else labels

def _metadata(plan: "Plan") -> dict[str, Any]:
    # The run id itself in an annotation: a label value cannot hold every run id (a trailing "_").
    return {"name": object_name(plan.spec.run_id), "labels": _labels(plan),
            "annotations": {"orch.run-id": plan.spec.run_id}}

def _service(plan: "Plan") -> dict[str, Any]:
    """The headless Service that gives each pod of the Job its DNS name."""
    port = plan.replicas[0].port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(plan),
        "spec": {
            "clusterIP": "None",
            # Peers must resolve each other while they start, before any is ready.
            "publishNotReadyAddresses": True,
            "selector": {LABEL_RUN: object_name(plan.spec.run_id)},
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port}],
        },
    }

def _network_policy(plan: "Plan") -> dict[str, Any]:
    """The job's pods talk to each other and to the cluster's DNS, and to nothing else; nothing else reaches them.

    The frameworks' rendezvous and all-reduce servers have no authentication. Peers may use any TCP port of each
    other: collective libraries' pairs and TCP transports listen on ports the OS picks."""
    own = {"podSelector": {"matchLabels": {LABEL_RUN: object_name(plan.spec.run_id)}}}
    dns = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(plan),
        "spec": {
            **own,
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [own], "ports": [{"protocol": "TCP", "port": 1, "endPort": 65535}]}],
            "egress": [{"to": [own], "ports": [{"protocol": "TCP", "port": 1, "endPort": 65535}]},
                       {"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}],
        },
    }

def _job(plan: "Plan") -> dict[str, Any]:
    """The Indexed Job of every replica, one pod template for all of them."""
    roles = sorted({r.role for r in plan.replicas})
    pod = _pod_template(plan, list(plan.replicas), role=roles[0] if len(roles) == 1 else None,
                             fixed_role=False, subdomain=object_name(plan.spec.run_id))
    metadata = _metadata(plan)
    if plan.spec.max_restarts:
        # Whole-group restarts of a plain Job are orch's: it recreates the Job; the Job only fails.
        metadata["annotations"]["orch.max-restarts"] = str(plan.spec.max_restarts)
    spec = _job_spec(plan, len(plan.replicas), pod)
    keys = plan.spec.replica_keys()
    reporting = plan.spec.reporting_keys()
    if reporting != keys:
        # Under ps the servers and workers never exit: the Job succeeds when the chief's index has,
        # and Kubernetes then stops the rest.
        indexes = ",".join(str(keys.index(key)) for key in reporting)
        spec = {**spec, "successPolicy": {"rules": [{"succeededIndexes": indexes}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}

def _jobset(plan: "Plan") -> dict[str, Any]:
    """The JobSet: one replicated Job per role, restarted as a group up to --max-restarts times."""
    spec = plan.spec
    roles = list(dict.fromkeys(r.role for r in plan.replicas))
    replicated = []
    for role in roles:
        members = [r for r in plan.replicas if r.role == role]
        pod = _pod_template(plan, members, role=role, fixed_role=True)
        replicated.append({"name": role, "replicas": 1,
                           "template": {"metadata": {"labels": _labels(plan, role)},
                                        "spec": _job_spec(plan, len(members), pod)}})
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": _metadata(plan),
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": object_name(spec.run_id),
                        "publishNotReadyAddresses": True},
            # Under ps only the chief's Job ends; the servers' and workers' never do.
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [
                role for role in roles if role in spec.framework.reporting_roles(spec.workers)]},
            "failurePolicy": _failure_policy(spec),
            "replicatedJobs": replicated,
        },
    }

def _failure_policy(spec: "JobSpec") -> dict[str, Any]:
    """A JobSet's whole-group restarts, up to --max-restarts."""
    return {
        "maxRestarts": spec.max_restarts,
        # Old pods gone before new ones start: the new group reuses their host names.
        "restartStrategy": "BlockingRecreate",
        "rules": [
            # The program's own exit code (the pod failure policy's FailJob) or the time limit:
            # a restart would only fail again. Anything else (a signal, an evicted pod) restarts.
            {"name": "ProgramExit", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
            {"name": "TimeLimit", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
        ],
    }

def _trainjob(plan: "Plan") -> list[dict[str, Any]]:
    """Kubeflow Trainer v2: a runtime holding orch's locked-down pod as the JobSet template of its "node" Job, and
    the TrainJob that runs it. The runtime names the ML policy of Trainer's that the framework declares
    (``Framework.trainer_policy``: Trainer's plugin of that name gives the nodes its variables), or none (Trainer's
    plain policy, which only counts the nodes)."""
    spec, name = plan.spec, object_name(plan.spec.run_id)
    framework = frameworks.get(spec.framework.name)
    policy, kind = framework.trainer_policy, framework.trainer_runtime
    pod = _pod_template(plan, list(plan.replicas), role=plan.replicas[0].role, fixed_role=True)
    labels = {**_labels(plan, plan.replicas[0].role), "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    runtime = {"apiVersion": TRAINER_API, "kind": kind,
               "metadata": {**_metadata(plan), "labels": {**_labels(plan), "trainer.kubeflow.org/framework": framework.name}},
               "spec": {"mlPolicy": {"numNodes": len(plan.replicas), **({policy: {}} if policy else {})},
                        "template": {"spec": {"failurePolicy": _failure_policy(spec), "replicatedJobs": [{
                            "name": TRAINJOB_NODE, "replicas": 1, "template": {
                                "metadata": {"labels": labels},
                                "spec": _job_spec(plan, len(plan.replicas), pod)}}]}}}}
    # Ranks per node are a launching policy's; the plain policy launches none.
    per_node = {"numProcPerNode": spec.procs_per_worker} if policy else {}
    job = {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": _metadata(plan),
           "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": kind, "name": name},
                    "trainer": {"numNodes": len(plan.replicas), **per_node}}}
    return [runtime, job]

def _job_spec(plan: "Plan", completions: int, pod: dict[str, Any]) -> dict[str, Any]:
    """An Indexed Job's spec that fails as a whole on the first failed pod, the way orch's supervisor does."""
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": completions,
        "backoffLimit": 0,  # no per-pod retries: a group restart is the only retry (see failurePolicy)
        "podFailurePolicy": {"rules": [
            # A pod the cluster took away (preemption, eviction, a drained node) is retryable: counted,
            # it fails the Job as BackoffLimitExceeded, which a group restart retries.
            {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            # Exit codes 1-128 are the program's own verdict: the Job fails as PodFailurePolicy, never
            # retried. Signals (129-255) fall through to Count, as above.
            {"action": "FailJob", "onExitCodes": {"containerName": _container(plan.spec), "operator": "In",
                                                  "values": _Flow(PROGRAM_EXIT_CODES)}},
        ]},
    }
    if plan.spec.time_limit:
        spec["activeDeadlineSeconds"] = math.ceil(plan.spec.time_limit)
    spec["template"] = pod
    return spec

def _pod_template(plan: "Plan", members: list["Replica"], role: Optional[str], fixed_role: bool,
                  subdomain: Optional[str] = None) -> dict[str, Any]:
    """The locked-down pod every replica in ``members`` runs; ``subdomain`` is the headless Service that
    names its pods (JobSet sets its own)."""
    spec = plan.spec
    env = _env(plan, members, role if fixed_role else None)
    resources = _resources(spec)
    trainer = {
        "name": _container(spec),
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
    return {"metadata": {"labels": _labels(plan, role)}, "spec": pod}

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


def documents_of(text: str) -> list[dict[str, Any]]:
    """The manifests of a rendered artifact, in order."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: the same documents
    return [d for d in yaml.load_all(text, Loader=loader) if isinstance(d, dict)]


def _quantity(cpus: float) -> str:
    """A CPU amount as Kubernetes writes it: whole cores as "2", else millicores ("500m")."""
    millis = round(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
