"""Kubernetes manifests for a plan: an Indexed Job and a headless Service, a JobSet, or a Kubeflow TrainJob. Pure.

Every replica shares its Job's pod template: the framework's placeholders (``macros``) are filled with the completion
index Kubernetes gives each pod where that is their value, and the template carries the whole cluster
(``ORCH_CLUSTER``) for what each pod derives at start-up where it is not (``rendezvous.py``). Data comes from a data image
copied by an init container; events and results come back as lines on stdout (``ORCH_REPORT=stdout``);
checkpoints live on a PersistentVolumeClaim the user names. The pod they all run is k8s_pods.py's; ``k8s.py`` is the backend that applies these.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import yaml

from orchestrator import __version__, frameworks
from orchestrator.backends import options
from orchestrator.backends.k8s_pods import TRAINJOB_NODE, container_name, object_name, pod_labels, pod_template
from orchestrator.labels import LABEL_RUN

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan

# Kubeflow Trainer v2 (--k8s-kind trainjob): its TrainJob runs the runtime's replicated Job "node", whose container
# "node" gets the variables of the ML policy the framework declares; pods are <trainjob>-node-0-<i>.<trainjob>.
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
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

def _metadata(plan: "Plan") -> dict[str, Any]:
    # The run id itself in an annotation: a label value cannot hold every run id (a trailing "_").
    return {"name": object_name(plan.spec.run_id), "labels": pod_labels(plan),
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
    pod = pod_template(plan, list(plan.replicas), role=roles[0] if len(roles) == 1 else None,
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
        pod = pod_template(plan, members, role=role, fixed_role=True)
        replicated.append({"name": role, "replicas": 1,
                           "template": {"metadata": {"labels": pod_labels(plan, role)},
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
    pod = pod_template(plan, list(plan.replicas), role=plan.replicas[0].role, fixed_role=True)
    labels = {**pod_labels(plan, plan.replicas[0].role), "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    runtime = {"apiVersion": TRAINER_API, "kind": kind,
               "metadata": {**_metadata(plan), "labels": {**pod_labels(plan), "trainer.kubeflow.org/framework": framework.name}},
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
            {"action": "FailJob", "onExitCodes": {"containerName": container_name(plan.spec), "operator": "In",
                                                  "values": _Flow(PROGRAM_EXIT_CODES)}},
        ]},
    }
    if plan.spec.time_limit:
        spec["activeDeadlineSeconds"] = math.ceil(plan.spec.time_limit)
    spec["template"] = pod
    return spec

def documents_of(text: str) -> list[dict[str, Any]]:
    """The manifests of a rendered artifact, in order."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: the same documents
    return [d for d in yaml.load_all(text, Loader=loader) if isinstance(d, dict)]
