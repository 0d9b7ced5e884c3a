"""Kubernetes: the plan's manifests (``k8s_manifests.py``), applied by `orch up` or by `kubectl apply -f -`.

Three kinds (``--k8s-kind``):

- ``job`` (the default, plain Kubernetes): one Indexed Job for the whole group and a headless Service. One
  Job, not one per role, because a Job fails as a whole: with ``backoffLimit: 0`` any replica's failure ends
  every pod, which is orch's whole-group policy. Completion index i maps to (role, index) by counting
  through the roles in order, so roles stay data (a chief, parameter servers) without another object.
  Pods are ``<job>-<i>.<service>``.
- ``jobset``: a JobSet with one replicated Job per role (so each role could get its own template), and the
  JobSet's ``failurePolicy.maxRestarts`` restarting the whole group. Pods are ``<jobset>-<role>-0-<i>.<jobset>``.
- ``trainjob`` (render only): Kubeflow Trainer v2's TrainJob, and the runtime (the framework's declared kind and ML
  policy) whose JobSet template is orch's pod. Pods are ``<trainjob>-node-0-<i>.<trainjob>``.

With a kubeconfig, `orch up` applies the manifests through the official client (``kube.py``) and supervises the
pods as it does containers: its own timeouts and whole-group restarts, the Job deleted and created again. Without
one, ``preflight`` refuses and says to apply the rendered manifests with kubectl. See docs/multi-host.md.
"""
from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any, Iterator, Optional

from orchestrator import contract, rendezvous
from orchestrator.backends import k8s_manifests as manifests
from orchestrator.backends import kube
from orchestrator.backends import options
from orchestrator.backends.base import REMOVAL_WAIT, Backend, Key, ReplicaState, Status, Usage
from orchestrator.backends.k8s_manifests import documents_of
from orchestrator.backends.k8s_pods import COMPLETION_INDEX, CONTAINER, TRAINJOB_NODE, addresses, object_name
from orchestrator.errors import ClusterError, ClusterRefused, InvalidSpec, RenderOnlyBackend
from orchestrator.labels import LABEL_ROLE, LABEL_RUN
from orchestrator.timestamps import parse_timestamp

if TYPE_CHECKING:
    from pathlib import Path

    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan

__all__ = ["KubernetesBackend", "COMPLETION_INDEX", "documents_of", "object_name", "pod_state"]

class KubernetesBackend(Backend):
    """Manifests for `kubectl apply`, applied and watched through the official client where there is a kubeconfig."""

    name = "k8s"
    artifact_name = "k8s.yml"

    def __init__(self, engine: Any = None, api: Optional[kube.KubeApi] = None) -> None:
        self._engine = engine  # unused: a cluster is reached through ``api`` (kube.KubeApi)
        self._api = api
        # run id -> (kind, name, uid) of what this process created for it: a cancel deletes those very objects, so
        # a run whose create found another's of the same name never deletes the other's.
        self._created: dict[str, list[tuple[str, str, str]]] = {}

    # -- pure ----------------------------------------------------------------------------------
    def engine_name(self, run_id: str) -> str:
        return object_name(run_id)

    def addresses(self, spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
        return addresses(spec, keys, port)

    def render(self, plan: "Plan") -> str:
        return manifests.render(plan)

    # -- the cluster: the official client, through kube.KubeApi --------------------------------
    reports_on_stdout = True  # no folder is shared with a pod: records come as @orch lines in its log
    script_in_image = True  # a node or pod sees no folder of this host

    @property
    def api(self) -> kube.KubeApi:
        if self._api is None:
            config = kube.kubeconfig()
            if config is None:
                raise RenderOnlyBackend("no kubeconfig (KUBECONFIG or ~/.kube/config) to reach a cluster with; "
                                        "use `orch render --backend k8s | kubectl apply -f -`")
            self._api = kube.KubeApi(config)
        return self._api

    def preflight(self, plan: "Plan") -> None:
        if options.kubernetes(plan.spec).k8s_kind == "trainjob":
            raise InvalidSpec("k8s_kind: Kubeflow Trainer supervises a TrainJob itself, so `orch up` renders it "
                              "only; apply it with `orch render --backend k8s --k8s-kind trainjob | kubectl apply "
                              "-f -`, or use --k8s-kind job with `orch up`")
        self.api.check()
        if plan.script_on and options.kubernetes(plan.spec).registry is None:
            raise InvalidSpec("script: a cluster's nodes pull the image orch makes of your script for this run; pass "
                              "--registry HOST/PATH, a registry they pull from (orch pushes the image there)")
        if options.kubernetes(plan.spec).k8s_kind == "jobset" and plan.spec.max_restarts:
            # The JobSet's failurePolicy restarts the group itself; orch restarting it as well would count twice.
            raise InvalidSpec("max_restarts: a JobSet restarts its group itself (failurePolicy), so `orch up` would "
                              "restart it twice; use --k8s-kind job with `orch up`, or apply the JobSet with kubectl")
        for doc in documents_of(plan.artifact):  # before the run's folder is made: nothing to undo
            if self.api.get(doc["kind"], doc["metadata"]["name"]) is not None:
                raise _exists(plan.spec.run_id, doc)

    def stage_script(self, plan: "Plan", snapshot: "Path", say: Any) -> None:
        from orchestrator.docker.engine import Engine
        from orchestrator.images import script as script_images

        script_images.stage(Engine(), plan, snapshot, say)  # built by this host's Docker engine, pushed

    def apply(self, plan: "Plan", artifact: "Path") -> None:
        run_id = plan.spec.run_id
        created = self._created[run_id] = []
        for doc in documents_of(artifact.read_text()):
            kind, name = doc["kind"], doc["metadata"]["name"]
            try:
                created.append((kind, name, self.api.create(doc)))
            except ClusterRefused as exc:
                if exc.status == 409:
                    raise _exists(run_id, doc) from None  # made meanwhile by another orch: its objects stay
                raise

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
        text = self.api.log(replica.id, since_seconds=since_seconds)
        return iter(text.split("\n") if text else ())

    def stats_stream(self, replica: ReplicaState) -> Iterator[Usage]:
        return iter(())  # the metrics server is an add-on; orch reads no node's stats

    def stats_once(self, replica: ReplicaState) -> Optional[Usage]:
        return None

    def stats_elsewhere(self, run_id: str) -> Optional[str]:
        return ("a cluster gives pods' figures through its metrics server, an add-on orch does not read; `kubectl top "
                f"pod -l {LABEL_RUN}={object_name(run_id)}` shows them where it runs")

    def cancel(self, run_id: str, artifact: Optional["Path"], grace: int, clock: Any = None) -> None:
        clock = clock or time
        owned = self._created.pop(run_id, None)
        if owned is not None:  # this process created them: those very objects, by uid
            targets = owned
        elif artifact is not None and artifact.is_file():  # `orch down`: the run's objects, by name
            targets = [(d["kind"], d["metadata"]["name"], "") for d in documents_of(artifact.read_text())]
        else:
            return
        deleted = [kind for kind, name, uid in reversed(targets) if self.api.delete(kind, name, uid)]
        if owned is not None and not set(deleted) & POD_OWNERS:
            return  # no Job of this process's was there: no pod of it to wait for (any left are another's)
        # Deletion goes on in the background: wait until the pods are gone, so that a restarted group's Job
        # (the same name) is not refused, and no pod of this attempt is read as one of the next.
        deadline = clock.monotonic() + grace + REMOVAL_WAIT
        while self.api.pods(f"{LABEL_RUN}={object_name(run_id)}"):
            if clock.monotonic() > deadline:
                raise ClusterError(f"the pods of run {run_id} were not gone within {grace + REMOVAL_WAIT} s; "
                                   f"`orch down {run_id}` tries again")
            clock.sleep(1.0)  # a list a second: gentle on a busy API server


def _exists(run_id: str, doc: dict[str, Any]) -> ClusterRefused:
    return ClusterRefused(f"run_id: the cluster already has a {doc['kind']} {doc['metadata']['name']} (run "
                          f"{run_id}, from an earlier `orch up` or `kubectl apply`); `orch down {run_id}` or "
                          f"`kubectl delete -f` removes it, or pass another --run-id")


POD_OWNERS = {"Job", "JobSet"}  # what orch creates that owns pods, which go after it in the background
# The kubelet's words for a pod it evicted for writing past an emptyDir's sizeLimit (its eviction manager's
# emptyDirMessageFmt): the volume and the limit.
EMPTY_DIR_EVICTION = re.compile(r'Usage of EmptyDir volume "([^"]{1,63})" exceeds the limit "([^"]{1,32})"')


def pod_state(pod: dict[str, Any], run_id: Optional[str]) -> Optional[ReplicaState]:
    """A pod (as the API returns it) as a replica state: its role and index from its labels and completion index."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    index = annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX))
    env = {e.get("name"): e.get("value") for c in (pod.get("spec") or {}).get("containers") or []
           if c.get("name") in (CONTAINER, TRAINJOB_NODE) for e in c.get("env") or []}
    if index is None or not str(index).isdigit():
        return None
    try:  # one Job for every role: the index counts through them, as in the pod itself
        role, position = rendezvous.replica_of(json.loads(env.get(contract.ENV_CLUSTER) or "[]"), int(index),
                                               labels.get(LABEL_ROLE))
    except (ValueError, TypeError):
        return None
    terminated: dict[str, Any] = {}
    for c in status.get("containerStatuses") or []:
        if c.get("name") == CONTAINER:
            terminated = (c.get("state") or {}).get("terminated") or {}
    phase = status.get("phase", "Unknown")
    code, reason = terminated.get("exitCode"), None
    state = {"Pending": Status.PENDING, "Running": Status.RUNNING, "Succeeded": Status.SUCCEEDED,
             "Failed": Status.FAILED}.get(phase, Status.UNKNOWN)
    if status.get("reason") == "Evicted":
        over = EMPTY_DIR_EVICTION.search(str(status.get("message") or ""))
        if over is not None:
            # The kubelet killed it for what it wrote, which a restart would write again: not a signal's exit code.
            state, code = Status.FAILED, None
            reason = (f"evicted for writing more than its disk limit on the node: {over.group(2)} in its folder "
                      f"{over.group(1)!r} (the emptyDir's sizeLimit)")
    finished = terminated.get("finishedAt")
    try:
        finished_at = parse_timestamp(str(finished)) if finished else None
    except ValueError:
        finished_at = None
    # The run's id is in the pod's environment; its label holds the object name, which may be shortened.
    return ReplicaState(id=meta.get("name", ""), name=meta.get("name", ""),
                        run=run_id or env.get(contract.ENV_RUN_ID) or labels.get(LABEL_RUN, ""),
                        role=role, index=position, status=state, exit_code=code,
                        oom_killed=terminated.get("reason") == "OOMKilled",
                        finished_at=finished_at, reason=reason)
