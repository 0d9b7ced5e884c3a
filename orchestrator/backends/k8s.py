"""Kubernetes: the plan's manifests (``k8s_manifests.py``), applied by `orch up` or by `kubectl apply -f -`.

Three kinds (``--k8s-kind``):

- ``job`` (the default, plain Kubernetes): one Indexed Job for the whole group and a headless Service. One
  Job, not one per role, because a Job fails as a whole: with ``backoffLimit: 0`` any replica's failure ends
  every pod, which is orch's whole-group policy. Completion index i maps to (role, index) by counting
  through the roles in order, so roles stay data (a chief, parameter servers) without another object.
  Pods are ``<job>-<i>.<service>``.
- ``jobset``: a JobSet with one replicated Job per role (so each role could get its own template), and the
  JobSet's ``failurePolicy.maxRestarts`` restarting the whole group. Pods are ``<jobset>-<role>-0-<i>.<jobset>``.
- ``trainjob`` (PyTorch, render only): Kubeflow Trainer v2's TrainJob, and a TrainingRuntime whose JobSet template
  is orch's pod. Pods are ``<trainjob>-node-0-<i>.<trainjob>``.

With a kubeconfig, `orch up` applies the manifests through the official client (``kube.py``) and supervises the
pods as it does containers: its own timeouts and whole-group restarts, the Job deleted and created again. Without
one, ``preflight`` refuses and says to apply the rendered manifests with kubectl. See docs/multi-host.md.
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterator, Optional

from orchestrator import contract, rendezvous
from orchestrator.backends import k8s_manifests as manifests
from orchestrator.backends import kube
from orchestrator.backends import options
from orchestrator.backends.base import REMOVAL_WAIT, Backend, Key, ReplicaState, Status, Usage
from orchestrator.backends.k8s_manifests import COMPLETION_INDEX, CONTAINER, documents_of, object_name
from orchestrator.errors import DockerError, EngineUnreachable, InvalidSpec, OrchError, RenderOnlyBackend
from orchestrator.labels import LABEL_ROLE, LABEL_RUN
from orchestrator.timestamps import parse_timestamp

if TYPE_CHECKING:
    from pathlib import Path

    from orchestrator.jobspec import JobSpec
    from orchestrator.plan.model import Plan

__all__ = ["KubernetesBackend", "COMPLETION_INDEX", "documents_of", "object_name", "pod_state"]

class KubernetesBackend(Backend):
    """Manifests for `kubectl apply`; no cluster access (``preflight`` says so)."""

    name = "k8s"
    artifact_name = "k8s.yml"

    def __init__(self, engine: Any = None, api: Optional[kube.KubeApi] = None) -> None:
        self._engine = engine  # unused: a cluster is reached through ``api`` (kube.KubeApi, or a test's fake)
        self._api = api

    # -- pure ----------------------------------------------------------------------------------
    def engine_name(self, run_id: str) -> str:
        return object_name(run_id)

    def addresses(self, spec: "JobSpec", keys: list[Key], port: int) -> dict[Key, str]:
        return manifests.addresses(spec, keys, port)

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
        try:
            self.api.check()
        except OrchError:  # no kubeconfig, or no client installed
            raise
        except Exception as exc:  # noqa: BLE001 - the client raises urllib3's, its own and the config's errors
            raise EngineUnreachable(f"cannot reach the Kubernetes API server: {str(exc).splitlines()[0][:200]}; "
                                    "check the kubeconfig's current context") from None
        if plan.script_on and options.kubernetes(plan.spec).registry is None:
            raise InvalidSpec("script: a cluster's nodes pull the image orch makes of your script for this run; pass "
                              "--registry HOST/PATH, a registry they pull from (orch pushes the image there)")
        if options.kubernetes(plan.spec).k8s_kind == "jobset" and plan.spec.max_restarts:
            # The JobSet's failurePolicy restarts the group itself; orch restarting it as well would count twice.
            raise InvalidSpec("max_restarts: a JobSet restarts its group itself (failurePolicy), so `orch up` would "
                              "restart it twice; use --k8s-kind job with `orch up`, or apply the JobSet with kubectl")

    def stage_script(self, plan: "Plan", snapshot: "Path", say: Any) -> None:
        from orchestrator.docker.engine import Engine
        from orchestrator.images import script as script_images

        script_images.stage(Engine(), plan, snapshot, say)  # built by this host's Docker engine, pushed

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
        return iter(self.api.log(replica.id, since_seconds=since_seconds).split("\n"))

    def stats_stream(self, replica: ReplicaState) -> Iterator[Usage]:
        return iter(())  # the metrics server is an add-on; orch reads no node's stats

    def stats_once(self, replica: ReplicaState) -> Optional[Usage]:
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


def pod_state(pod: dict[str, Any], run_id: Optional[str]) -> Optional[ReplicaState]:
    """A pod (as the API returns it) as a replica state: its role and index from its labels and completion index."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    index = annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX))
    env = {e.get("name"): e.get("value") for c in (pod.get("spec") or {}).get("containers") or []
           if c.get("name") == CONTAINER for e in c.get("env") or []}
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
    code = terminated.get("exitCode")
    state = {"Pending": Status.PENDING, "Running": Status.RUNNING, "Succeeded": Status.SUCCEEDED,
             "Failed": Status.FAILED}.get(phase, Status.UNKNOWN)
    finished = terminated.get("finishedAt")
    return ReplicaState(id=meta.get("name", ""), name=meta.get("name", ""), run=run_id or labels.get(LABEL_RUN, ""),
                        role=role, index=position, status=state, exit_code=code,
                        oom_killed=terminated.get("reason") == "OOMKilled",
                        finished_at=parse_timestamp(finished) if finished else None)



