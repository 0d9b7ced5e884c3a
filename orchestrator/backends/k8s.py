"""Kubernetes: the plan as manifests for a plain cluster, applied by `orch up` or by `kubectl apply -f -`.

Two kinds (``--k8s-kind``):

- ``job`` (the default, plain Kubernetes): one Indexed Job for the whole group and a headless Service. One
  Job, not one per role, because a Job fails as a whole: with ``backoffLimit: 0`` any replica's failure ends
  every pod, which is orch's whole-group policy. Completion index i maps to (role, index) by counting
  through the roles in order, so roles stay data (a chief, parameter servers) without another object.
  Pods are ``<job>-<i>.<service>``.
- ``jobset``: a JobSet with one replicated Job per role (so each role could get its own template), and the
  JobSet's ``failurePolicy.maxRestarts`` restarting the whole group. Pods are ``<jobset>-<role>-0-<i>.<jobset>``.

Every replica shares its Job's pod template, so nothing per replica can be a literal: the template carries
the whole cluster (``ORCH_CLUSTER``) and each pod derives its index, role and TF_CONFIG from the completion
index Kubernetes gives it (``orch_trainer/rendezvous.py``). Data comes from a data image copied by an init
container; events and results come back as lines on stdout (``ORCH_REPORT=stdout``); checkpoints live on a
PersistentVolumeClaim the user names. See docs/multi-host.md.

With a kubeconfig, `orch up` applies the manifests through the official client (``kube.py``) and supervises the
pods as it does containers: its own timeouts and whole-group restarts, the Job deleted and created again. Without
one, ``preflight`` refuses and says to apply the rendered manifests with kubectl.
"""
from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any, Iterator, Optional

import yaml

from .. import __version__, contract, data_images, frameworks, kube
from ..engine import LABEL_ROLE, LABEL_RUN
from ..errors import DockerError, EngineUnreachable, InvalidSpec, RenderOnlyBackend
from ..timestamps import parse_timestamp
from .base import REMOVAL_WAIT, Backend, Key, ReplicaState, Status, bounded_name

if TYPE_CHECKING:
    from pathlib import Path

    from ..replicas import Plan, Replica
    from ..spec import JobSpec

NAME_MAX = 40  # leaves room in a 63-character host name for "-<role>-0-<index>" (JobSet) or "-<index>"
CONTAINER = "trainer"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # on every pod of an Indexed Job
UID = 1000  # the trainer images' own user
DATA_IMAGE_DIR = contract.IMAGE_DATA_DIR  # where a data image holds the prepared data set
TMP_SIZE = "512Mi"  # as Compose's tmpfs
SHM_SIZE = "64Mi"  # Docker's default /dev/shm
RUN_SIZE = "1Gi"  # a replica's own folder: predictions, the done marker
# Exit codes that are the program's own verdict (orch's supervisor never retries them); 129-255 are signals.
PROGRAM_EXIT_CODES = list(range(1, 129))
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


class _Flow(list):
    """A list written on one line (the exit codes), so the manifest stays readable."""


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper (every value a quoted or plain scalar it can read back, never a new key), with
    _Flow lists on one line."""


_Dumper.add_representer(_Flow, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data,
                                                                            flow_style=True))


def object_name(run_id: str) -> str:
    """The run's Kubernetes object name: ``orch-<run id>`` where that is a valid DNS label of at most NAME_MAX
    characters, else a shortened, hyphenated form with a hash of the run id, so distinct ids stay distinct."""
    return bounded_name(run_id, NAME_MAX, "a-z0-9-")


def data_image_ref(dataset: str) -> str:
    """The data image orch builds for ``dataset`` (`orch build --data`): the prepared files under DATA_IMAGE_DIR
    on orch's base image, which has `cp`."""
    return data_images.data_image(dataset)


def pulled(image: str, spec: "JobSpec", own: bool) -> str:
    """``image`` as the nodes pull it: orch's own images under ``--registry``; a user's image as given."""
    return f"{spec.registry}/{image}" if own and spec.registry else image


class KubernetesBackend(Backend):
    """Manifests for `kubectl apply`; no cluster access (``preflight`` says so)."""

    name = "k8s"
    artifact_name = "k8s.yml"

    def __init__(self, engine: Any = None, api: Any = None) -> None:
        self._engine = engine  # unused: a cluster is reached through ``api`` (kube.KubeApi, or a test's fake)
        self._api = api

    # -- pure ----------------------------------------------------------------------------------
    def engine_name(self, run_id: str) -> str:
        return object_name(run_id)

    def addresses(self, spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
        name = object_name(spec.run_id)
        if spec.k8s_kind == "jobset":
            return {(role, index): f"{name}-{role}-0-{index}.{name}:{port}" for role, index in keys}
        return {key: f"{name}-{position}.{name}:{port}" for position, key in enumerate(keys)}

    def render(self, plan: "Plan") -> str:
        spec = plan.spec
        documents = ([self._jobset(plan)] if spec.k8s_kind == "jobset"
                     else [self._service(plan), self._job(plan)])
        return "\n".join(self._notes(plan)) + "\n" + yaml.dump_all(
            documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True, width=120)

    # -- the manifests -------------------------------------------------------------------------
    def _notes(self, plan: "Plan") -> list[str]:
        """The comment lines above the manifests: what they are and what they need."""
        spec = plan.spec
        # The object name, not the run id: a comment line must hold nothing that could end it.
        notes = [f"# Rendered by orch {__version__} for run {object_name(spec.run_id)}; apply with `kubectl apply -f -`, "
                 "do not edit."]
        if spec.k8s_kind == "jobset":
            notes.append(f"# Needs the JobSet controller ({JOBSET_API}) on the cluster.")
        if spec.image is None and spec.registry is None:
            notes.append("# orch's images are named as built here; push them where the nodes can pull them and "
                         "pass --registry HOST/PATH.")
        return notes

    def _labels(self, plan: "Plan", role: Optional[str] = None) -> dict[str, str]:
        labels = {LABEL_RUN: object_name(plan.spec.run_id), "orch.version": __version__}
        return {**labels, LABEL_ROLE: role} if role is not None else labels

    def _metadata(self, plan: "Plan") -> dict[str, Any]:
        # The run id itself in an annotation: a label value cannot hold every run id (a trailing "_").
        return {"name": object_name(plan.spec.run_id), "labels": self._labels(plan),
                "annotations": {"orch.run-id": plan.spec.run_id}}

    def _service(self, plan: "Plan") -> dict[str, Any]:
        """The headless Service that gives each pod of the Job its DNS name."""
        port = frameworks.get(plan.spec.framework.name).port
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self._metadata(plan),
            "spec": {
                "clusterIP": "None",
                # Peers must resolve each other while they start, before any is ready.
                "publishNotReadyAddresses": True,
                "selector": {LABEL_RUN: object_name(plan.spec.run_id)},
                "ports": [{"name": "rendezvous", "port": port, "targetPort": port}],
            },
        }

    def _job(self, plan: "Plan") -> dict[str, Any]:
        """The Indexed Job of every replica, one pod template for all of them."""
        roles = sorted({r.role for r in plan.replicas})
        pod = self._pod_template(plan, list(plan.replicas), role=roles[0] if len(roles) == 1 else None,
                                 fixed_role=False, subdomain=object_name(plan.spec.run_id))
        metadata = self._metadata(plan)
        if plan.spec.max_restarts:
            # Whole-group restarts of a plain Job are orch's: it recreates the Job; the Job only fails.
            metadata["annotations"]["orch.max-restarts"] = str(plan.spec.max_restarts)
        spec = self._job_spec(plan, len(plan.replicas), pod)
        keys = plan.spec.replica_keys()
        reporting = plan.spec.reporting_keys()
        if reporting != keys:
            # Under ps the servers and workers never exit: the Job succeeds when the chief's index has,
            # and Kubernetes then stops the rest.
            indexes = ",".join(str(keys.index(key)) for key in reporting)
            spec = {**spec, "successPolicy": {"rules": [{"succeededIndexes": indexes}]}}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}

    def _jobset(self, plan: "Plan") -> dict[str, Any]:
        """The JobSet: one replicated Job per role, restarted as a group up to --max-restarts times."""
        spec = plan.spec
        roles = list(dict.fromkeys(r.role for r in plan.replicas))
        replicated = []
        for role in roles:
            members = [r for r in plan.replicas if r.role == role]
            pod = self._pod_template(plan, members, role=role, fixed_role=True)
            replicated.append({"name": role, "replicas": 1,
                               "template": {"metadata": {"labels": self._labels(plan, role)},
                                            "spec": self._job_spec(plan, len(members), pod)}})
        return {
            "apiVersion": JOBSET_API,
            "kind": "JobSet",
            "metadata": self._metadata(plan),
            "spec": {
                "network": {"enableDNSHostnames": True, "subdomain": object_name(spec.run_id),
                            "publishNotReadyAddresses": True},
                # Under ps only the chief's Job ends; the servers' and workers' never do.
                "successPolicy": {"operator": "All", "targetReplicatedJobs": [
                    role for role in roles if role in spec.framework.reporting_roles(spec.workers)]},
                "failurePolicy": {
                    "maxRestarts": spec.max_restarts,
                    # Old pods gone before new ones start: the new group reuses their host names.
                    "restartStrategy": "BlockingRecreate",
                    "rules": [
                        # The program's own exit code (the pod failure policy's FailJob) or the time limit:
                        # a restart would only fail again. Anything else (a signal, an evicted pod) restarts.
                        {"name": "ProgramExit", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
                        {"name": "TimeLimit", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
                    ],
                },
                "replicatedJobs": replicated,
            },
        }

    def _job_spec(self, plan: "Plan", completions: int, pod: dict[str, Any]) -> dict[str, Any]:
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
                {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In",
                                                      "values": _Flow(PROGRAM_EXIT_CODES)}},
            ]},
        }
        if plan.spec.time_limit:
            spec["activeDeadlineSeconds"] = math.ceil(plan.spec.time_limit)
        spec["template"] = pod
        return spec

    def _pod_template(self, plan: "Plan", members: list["Replica"], role: Optional[str], fixed_role: bool,
                      subdomain: Optional[str] = None) -> dict[str, Any]:
        """The locked-down pod every replica in ``members`` runs; ``subdomain`` is the headless Service that
        names its pods (JobSet sets its own)."""
        spec = plan.spec
        env = self._env(plan, members, role if fixed_role else None)
        resources = self._resources(spec)
        trainer = {
            "name": CONTAINER,
            "image": pulled(plan.image, spec, own=spec.image is None),
            "imagePullPolicy": "IfNotPresent",
            # The replicas of a Job share its template, so one command serves all (a launcher's, as MPI's).
            **({"command": list(members[0].command), "workingDir": members[0].working_dir}
               if members[0].command else {}),
            "env": [{"name": k, "value": v} for k, v in env.items()],
            "ports": [{"name": "rendezvous", "containerPort": frameworks.get(spec.framework.name).port}],
            "resources": resources,
            "securityContext": self._container_security(),
            "volumeMounts": [
                {"name": "data", "mountPath": contract.DATA_MOUNT, "readOnly": True},
                {"name": "run", "mountPath": contract.OUT_MOUNT},
                {"name": "shared", "mountPath": f"{contract.OUT_MOUNT}/{contract.SHARED_DIR}",
                 **({"subPath": spec.run_id} if spec.k8s_checkpoint_claim else {})},
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
            pod["initContainers"] = [self._data_container(spec, resources)]
        pod["containers"] = [trainer]
        pod["volumes"] = self._volumes(spec)
        return {"metadata": {"labels": self._labels(plan, role)}, "spec": pod}

    def _env(self, plan: "Plan", members: list["Replica"], role: Optional[str]) -> dict[str, str]:
        """What the replicas' environments share, the cluster every pod derives its own rendezvous from, and
        the stdout reports. Raises ValueError if a per-replica variable could not be derived in the pod."""
        drop = set(contract.DERIVED_FROM_INDEX) | {contract.ENV_CPUS}  # cores pinned by the kubelet, not orch
        shared = [{k: v for k, v in r.env.items() if k not in drop} for r in members]
        if any(env != shared[0] for env in shared):
            differing = sorted({k for env in shared for k in env if env.get(k) != shared[0].get(k)})
            raise ValueError(f"k8s: the replicas differ in {', '.join(differing)}, which one pod template cannot "
                             "carry")
        port = frameworks.get(plan.spec.framework.name).port
        cluster: dict[str, list[str]] = {}
        for key, address in self.addresses(plan.spec, [r.key for r in plan.replicas], port).items():
            cluster.setdefault(key[0], []).append(address)  # role order, then index order
        env = {**shared[0], contract.ENV_CLUSTER: json.dumps(list(cluster.items()), separators=(",", ":")),
               contract.ENV_REPORT: contract.REPORT_STDOUT}
        if role is not None:
            env[contract.ENV_ROLE] = role
        return env

    def _resources(self, spec: "JobSpec") -> dict[str, Any]:
        """Requests equal to limits (the Guaranteed class); one CPU where --cpus is not given."""
        amounts: dict[str, Any] = {"cpu": _quantity(spec.cpus or 1), "memory": f"{spec.memory_mb}Mi"}
        if spec.gpus:
            amounts["nvidia.com/gpu"] = spec.gpus
        return {"requests": dict(amounts), "limits": dict(amounts)}

    def _container_security(self) -> dict[str, Any]:
        return {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "privileged": False,
                "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}

    def _data_container(self, spec: "JobSpec", resources: dict[str, Any]) -> dict[str, Any]:
        """The init container that copies the data image's files into the pod's data volume."""
        amounts = {k: v for k, v in resources["limits"].items() if k != "nvidia.com/gpu"}
        return {
            "name": "data",
            "image": pulled(data_image_ref(spec.dataset), spec, own=True),
            "imagePullPolicy": "IfNotPresent",
            "command": ["cp", "-R", f"{DATA_IMAGE_DIR}/.", f"{contract.DATA_MOUNT}/"],
            "resources": {"requests": dict(amounts), "limits": dict(amounts)},
            "securityContext": self._container_security(),
            "volumeMounts": [{"name": "data", "mountPath": contract.DATA_MOUNT}],
        }

    def _volumes(self, spec: "JobSpec") -> list[dict[str, Any]]:
        claim = spec.k8s_checkpoint_claim
        shared = ({"persistentVolumeClaim": {"claimName": claim}} if claim
                  else {"emptyDir": {"sizeLimit": RUN_SIZE}})  # pod-local: no restarts (the spec refuses them)
        return [
            {"name": "data", "emptyDir": {}},
            {"name": "run", "emptyDir": {"sizeLimit": RUN_SIZE}},
            {"name": "shared", **shared},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_SIZE}},
            {"name": "dshm", "emptyDir": {"medium": "Memory",
                                           "sizeLimit": f"{frameworks.shm_mb(spec)}Mi" if frameworks.shm_mb(spec) else SHM_SIZE}},
        ]

    # -- the cluster: the official client, through kube.KubeApi --------------------------------
    reports_on_stdout = True  # no folder is shared with a pod: records come as @orch lines in its log

    @property
    def api(self) -> Any:
        if self._api is None:
            config = kube.kubeconfig()
            if config is None:
                raise RenderOnlyBackend("no kubeconfig (KUBECONFIG or ~/.kube/config) to reach a cluster with; "
                                        "use `orch render --backend k8s | kubectl apply -f -`")
            self._api = kube.KubeApi(config)
        return self._api

    def preflight(self, plan: "Plan") -> None:
        try:
            self.api.check()
        except RenderOnlyBackend:
            raise
        except Exception as exc:  # noqa: BLE001 - the client raises urllib3's, its own and the config's errors
            raise EngineUnreachable(f"cannot reach the Kubernetes API server: {str(exc).splitlines()[0][:200]}; "
                                    "check the kubeconfig's current context") from None
        if plan.spec.k8s_kind == "jobset" and plan.spec.max_restarts:
            # The JobSet's failurePolicy restarts the group itself; orch restarting it as well would count twice.
            raise InvalidSpec("max_restarts: a JobSet restarts its group itself (failurePolicy), so `orch up` would "
                              "restart it twice; use --k8s-kind job with `orch up`, or apply the JobSet with kubectl")

    def apply(self, plan: "Plan", artifact: "Path") -> None:
        for doc in documents_of(artifact.read_text()):
            self.api.create(doc)

    def states(self, run_id: Optional[str] = None) -> list[ReplicaState]:
        selector = LABEL_RUN if run_id is None else f"{LABEL_RUN}={object_name(run_id)}"
        return [s for pod in self.api.pods(selector) if (s := pod_state(pod, run_id)) is not None]

    def logs(self, replica: ReplicaState, tail: Optional[int] = None) -> str:
        return self.api.log(replica.id, tail=tail)

    def log_lines(self, replica: ReplicaState, stream: str, follow: bool = False,
                  since: Optional[float] = None) -> Iterator[str]:
        if stream != "stdout":
            return iter(())  # a pod's log is one stream
        since_seconds = max(1, int(time.time() - since) + 1) if since else None
        if follow:
            return self.api.follow_log(replica.id, since_seconds=since_seconds)
        return iter(self.api.log(replica.id, since_seconds=since_seconds).splitlines())

    def stats_stream(self, replica: ReplicaState) -> Iterator[dict[str, Any]]:
        return iter(())  # the metrics server is an add-on; orch reads no node's stats

    def stats_once(self, replica: ReplicaState) -> Optional[dict[str, Any]]:
        return None

    def cancel(self, run_id: str, artifact: Optional["Path"], grace: int, clock: Any = None) -> None:
        clock = clock or time
        if artifact is None or not artifact.is_file():
            return
        for doc in reversed(documents_of(artifact.read_text())):
            self.api.delete(doc["kind"], doc["metadata"]["name"])
        # Deletion goes on in the background: wait until the pods are gone, so that a restarted group's Job
        # (the same name) is not refused, and no pod of this attempt is read as one of the next.
        deadline = clock.monotonic() + grace + REMOVAL_WAIT
        while self.api.pods(f"{LABEL_RUN}={object_name(run_id)}"):
            if clock.monotonic() > deadline:
                raise DockerError(f"the pods of run {run_id} were not gone within {grace + REMOVAL_WAIT} s; "
                                  f"`orch down {run_id}` tries again")
            clock.sleep(0.5)


def documents_of(text: str) -> list[dict[str, Any]]:
    """The manifests of a rendered artifact, in order."""
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def pod_state(pod: dict[str, Any], run_id: Optional[str]) -> Optional[ReplicaState]:
    """A pod (as the API returns it) as a replica state: its role and index from its labels and completion index."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    index = annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX))
    env = {e.get("name"): e.get("value") for c in (pod.get("spec") or {}).get("containers") or []
           if c.get("name") == CONTAINER for e in c.get("env") or []}
    if index is None or not str(index).isdigit():
        return None
    role, position = labels.get(LABEL_ROLE), int(index)
    if role is None:  # one Job for every role: the index counts through them (rendezvous.py does the same)
        cluster = json.loads(env.get(contract.ENV_CLUSTER) or "[]")
        for name, addresses in cluster:
            if position < len(addresses):
                role = name
                break
            position -= len(addresses)
    if role is None:
        return None
    terminated = {}
    for c in status.get("containerStatuses") or []:
        if c.get("name") == CONTAINER:
            terminated = (c.get("state") or {}).get("terminated") or {}
    phase = status.get("phase", "Unknown")
    code = terminated.get("exitCode")
    state = {"Pending": Status.PENDING, "Running": Status.RUNNING, "Succeeded": Status.SUCCEEDED,
             "Failed": Status.FAILED}.get(phase, Status.UNKNOWN)
    finished = terminated.get("finishedAt")
    return ReplicaState(id=meta.get("name", ""), name=meta.get("name", ""), run=run_id or labels.get(LABEL_RUN, ""),
                        role=role, index=position, status=state, exit_code=code,
                        oom_killed=terminated.get("reason") == "OOMKilled",
                        finished_at=parse_timestamp(finished) if finished else None)



def _quantity(cpus: float) -> str:
    """A CPU amount as Kubernetes writes it: whole cores as "2", else millicores ("500m")."""
    millis = round(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
