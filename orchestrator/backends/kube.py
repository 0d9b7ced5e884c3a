"""The one boundary to a Kubernetes cluster: the official Python client, configured from the kubeconfig.

Only ``backends/k8s.py`` uses it. Objects go in and come out as plain dicts, as the manifests are rendered. Every
call goes through ``KubeApi._call``: a server under load (429, Too Many Requests) is asked again after the wait its
``Retry-After`` says, or a growing one, a few times; any other refusal becomes a one-line ``ClusterError`` quoting
the server's own ``Status`` message, escaped (it is the server's text, not orch's).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from orchestrator.errors import ClusterError, ClusterRefused, EngineUnreachable, OrchError
from orchestrator.safetext import one_line

JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
CONTAINER = "trainer"
# A server that sheds load (API Priority and Fairness) answers 429 to any verb before doing anything: asking again
# is safe. At most this many tries, waiting as Retry-After says (at most BACKOFF_LIMIT s) or 1, 2, 4, 8 s.
TRIES = 6
BACKOFF_LIMIT = 8.0
# Seconds one watch of a pod starting stays open before it is opened again (the server may end it sooner).
WATCH_SECONDS = 30
# A pod gone from the cluster and a container that has not started: a log read finds nothing yet, not an error.
NOTHING_YET = (400, 404)


def kubeconfig() -> Optional[Path]:
    """The kubeconfig the client would read (KUBECONFIG's first file, else ~/.kube/config), if it exists."""
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    path = Path(first).expanduser() if first else Path.home() / ".kube" / "config"
    return path if path.is_file() else None


def status_message(exc: Any) -> str:
    """The message of the ``Status`` the server answered with (its reason phrase if the body is none), on one line."""
    message = ""
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except (TypeError, ValueError):
        pass
    return one_line(message or str(exc.reason or "no reason given"), 300)


def retry_after(exc: Any, attempt: int) -> float:
    """Seconds to wait before asking again: the server's Retry-After, else 1, 2, 4, 8 s; at most BACKOFF_LIMIT."""
    header = (exc.headers or {}).get("Retry-After") if exc.headers is not None else None
    try:
        wait = float(header) if header is not None else 2.0 ** attempt
    except ValueError:
        wait = 2.0 ** attempt
    return min(max(wait, 0.0), BACKOFF_LIMIT)


class KubeApi:
    """Create, read, list, watch, read the logs of and delete orch's objects in the kubeconfig's current namespace.

    ``sleep`` paces the waits between tries (``time.sleep``; a test's fake clock)."""

    def __init__(self, config: Path, sleep: Callable[[float], None] = time.sleep) -> None:
        try:
            from kubernetes import client
            from kubernetes import config as loader
        except ImportError:
            raise OrchError("running on Kubernetes needs its Python client, an extra of orch: "
                            "pip install 'orch[k8s]'") from None
        from kubernetes.client.exceptions import ApiException

        try:
            # A client of its own, not the module's default configuration: nothing global changes.
            self._client = loader.new_client_from_config(config_file=str(config))
            _contexts, active = loader.list_kube_config_contexts(config_file=str(config))
        except (loader.ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            raise ClusterRefused(f"cannot use the kubeconfig {config}: {one_line(str(exc), 200)}") from None
        self.namespace = (active or {}).get("context", {}).get("namespace") or "default"
        self.server = one_line(str(self._client.configuration.host), 200)
        self.core, self.batch = client.CoreV1Api(self._client), client.BatchV1Api(self._client)
        self.custom = client.CustomObjectsApi(self._client)
        self.networking = client.NetworkingV1Api(self._client)
        self._sleep = sleep
        self._refused = ApiException

    # -- every call ------------------------------------------------------------------------------------
    def _call(self, what: str, call: Callable[[], Any], quiet: tuple[int, ...] = ()) -> Any:
        """``call()``, asked again while the server answers 429; a refusal as a ClusterError naming ``what``, except
        the statuses in ``quiet``, whose ApiException the caller handles."""
        from urllib3.exceptions import HTTPError

        for attempt in range(TRIES):
            try:
                return call()
            except self._refused as exc:
                if exc.status in quiet:
                    raise
                if exc.status == 429 and attempt + 1 < TRIES:
                    self._sleep(retry_after(exc, attempt))
                    continue
                raise self._error(exc, what) from None
            except HTTPError as exc:
                raise EngineUnreachable(f"cannot reach the Kubernetes API server at {self.server} to {what}: "
                                        f"{one_line(str(exc), 200)}; check the kubeconfig's current context") from None
        raise AssertionError("unreachable")  # pragma: no cover - the last try returns or raises

    def _error(self, exc: Any, what: str) -> ClusterError:
        said, status = status_message(exc), exc.status
        if status == 401:
            return ClusterRefused(f"the Kubernetes API server at {self.server} did not accept the kubeconfig's "
                                  f"credentials ({said}); log in again or check the kubeconfig's user", status=status)
        if status == 403:
            return ClusterRefused(f"the cluster forbids orch to {what} in namespace {self.namespace}: {said}; the "
                                  "kubeconfig's user needs a role that allows it, or use a context of another namespace",
                                  status=status)
        if status == 409:
            return ClusterRefused(f"the cluster refused to {what}: {said}", status=status)
        if status == 422:
            return ClusterRefused(f"the cluster refused to {what} as invalid: {said}", status=status)
        if status == 429:
            return ClusterError(f"the Kubernetes API server is overloaded (429) and still refused to {what} after "
                                f"{TRIES} tries: {said}; try again later", status=status)
        return ClusterError(f"the Kubernetes API server answered {status} to {what}: {said}", status=status)

    # -- what backends/k8s.py asks ---------------------------------------------------------------------
    def check(self) -> None:
        """Raise unless the API server answers and lets orch list pods in the namespace."""
        self._call("list pods", lambda: self.core.list_namespaced_pod(self.namespace, limit=1))

    def _verbs(self, kind: str) -> tuple[Callable[[dict[str, Any]], Any], Callable[[str], Any],
                                         Callable[[str, dict[str, Any]], Any]]:
        """Create, read and delete of ``kind`` in the namespace. A create's and a delete's answer come back as the
        server wrote them (``_preload_content=False``): the object exists, or is gone, whatever the client's models
        would make of the answer (a delete answers a Status, or the object while its dependents go)."""
        ns, raw = self.namespace, {"_preload_content": False}
        if kind == "Service":
            return (lambda doc: self.core.create_namespaced_service(ns, doc, **raw),
                    lambda name: self.core.read_namespaced_service(name, ns),
                    lambda name, body: self.core.delete_namespaced_service(name, ns, body=body, **raw))
        if kind == "Job":
            return (lambda doc: self.batch.create_namespaced_job(ns, doc, **raw),
                    lambda name: self.batch.read_namespaced_job(name, ns),
                    lambda name, body: self.batch.delete_namespaced_job(name, ns, body=body, **raw))
        if kind == "NetworkPolicy":
            return (lambda doc: self.networking.create_namespaced_network_policy(ns, doc, **raw),
                    lambda name: self.networking.read_namespaced_network_policy(name, ns),
                    lambda name, body: self.networking.delete_namespaced_network_policy(name, ns, body=body, **raw))
        if kind == "JobSet":
            custom = (JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL)
            return (lambda doc: self.custom.create_namespaced_custom_object(*custom, doc, **raw),
                    lambda name: self.custom.get_namespaced_custom_object(*custom, name),
                    lambda name, body: self.custom.delete_namespaced_custom_object(*custom, name, body=body, **raw))
        raise ValueError(f"orch creates no {kind}")

    def _dict(self, obj: Any) -> dict[str, Any]:
        return obj if isinstance(obj, dict) else self._client.sanitize_for_serialization(obj)

    @staticmethod
    def _answer(response: Any) -> dict[str, Any]:
        """The JSON object a raw response holds ({} for anything else); the connection goes back to the pool."""
        try:
            body = json.loads(response.data or b"{}")
        except ValueError:
            body = {}
        finally:
            response.release_conn()
        return body if isinstance(body, dict) else {}

    def create(self, doc: dict[str, Any]) -> str:
        """Create ``doc``; its uid. A 404 means the cluster has no such kind (a CRD not installed)."""
        kind, name = doc["kind"], doc["metadata"]["name"]
        create, _read, _delete = self._verbs(kind)
        try:
            made = self._answer(self._call(f"create {kind} {name}", lambda: create(doc), quiet=(404,)))
        except self._refused as exc:
            raise ClusterRefused(f"the cluster answered 404 to create {kind} {name}: {status_message(exc)}; where it "
                                 f"has no {kind} ({doc['apiVersion']}), install its controller and CRD first",
                                 status=404) from None
        return str((made.get("metadata") or {}).get("uid") or "")

    def get(self, kind: str, name: str) -> Optional[dict[str, Any]]:
        """The object ``kind``/``name`` as the cluster has it, or None if it has none."""
        _create, read, _delete = self._verbs(kind)
        try:
            return self._dict(self._call(f"read {kind} {name}", lambda: read(name), quiet=(404,)))
        except self._refused:
            return None

    def delete(self, kind: str, name: str, uid: str = "") -> bool:
        """Delete ``kind``/``name`` and, in the background, what it owns (a Job's pods): without a propagation
        policy the API orphans them. With ``uid``, only that very object (not another of the same name). Whether it
        was there to delete."""
        _create, _read, delete = self._verbs(kind)
        body: dict[str, Any] = {"propagationPolicy": "Background", **({"preconditions": {"uid": uid}} if uid else {})}
        try:
            self._answer(self._call(f"delete {kind} {name}", lambda: delete(name, body), quiet=(404, 409)))
        except self._refused:  # gone already, or another object of that name (a precondition failed): not ours
            return False
        return True

    def pods(self, selector: str) -> list[dict[str, Any]]:
        """The pods of ``selector`` as the API writes them (times as RFC 3339 text)."""
        listed = self._call("list pods", lambda: self.core.list_namespaced_pod(self.namespace, label_selector=selector))
        items: list[dict[str, Any]] = self._dict(listed).get("items", [])
        return items

    def log(self, pod: str, tail: Optional[int] = None, since_seconds: Optional[int] = None) -> str:
        """The trainer's log so far, each line with the time the kubelet read it; "" while the container has not
        started (the server answers 400 while an init container runs) and once the pod is gone (404)."""
        try:
            text = self._call(f"read the log of pod {pod}", lambda: self.core.read_namespaced_pod_log(
                pod, self.namespace, timestamps=True, tail_lines=tail, since_seconds=since_seconds,
                container=CONTAINER), quiet=NOTHING_YET)
        except self._refused:
            return ""
        return text if isinstance(text, str) else ""

    def wait_started(self, pod: str) -> bool:
        """Wait (watching the pod) until its trainer has started; False if the pod is gone or ended first."""
        from kubernetes import watch

        selector = f"metadata.name={pod}"

        def next_change() -> Optional[bool]:
            listed = self._dict(self.core.list_namespaced_pod(self.namespace, field_selector=selector))
            if not listed.get("items") or not waiting(listed["items"][0]):
                return bool(listed.get("items")) and started(listed["items"][0])
            version = (listed.get("metadata") or {}).get("resourceVersion")
            try:
                # Deserialised, though only the raw object is read: with deserialize=False the client's watch fails
                # on the ERROR event of an expired version (KeyError 'raw_object') instead of raising 410.
                for event in watch.Watch().stream(self.core.list_namespaced_pod, self.namespace,
                                                  field_selector=selector, resource_version=version,
                                                  timeout_seconds=WATCH_SECONDS):
                    pod = event.get("raw_object") or {}
                    if event.get("type") == "DELETED":
                        return False
                    if not waiting(pod):
                        return started(pod)
            except self._refused as exc:
                if exc.status != 410:
                    raise
            return None  # the watch ended (or its version expired, 410) with the pod still starting: look again

        while True:
            change: Optional[bool] = self._call(f"watch pod {pod} start", next_change)
            if change is not None:
                return change

    def follow_log(self, pod: str, since_seconds: Optional[int] = None) -> Iterator[str]:
        """A pod's log lines as they come, until the pod's container ends; it waits while the pod starts."""
        while True:
            try:
                response = self._call(f"follow the log of pod {pod}", lambda: self.core.read_namespaced_pod_log(
                    pod, self.namespace, timestamps=True, follow=True, since_seconds=since_seconds,
                    container=CONTAINER, _preload_content=False), quiet=NOTHING_YET)
            except self._refused as exc:
                if exc.status == 400 and self.wait_started(pod):
                    continue  # the container started meanwhile: read it from its first line
                return
            break
        buffered = b""
        try:
            for chunk in response.stream():
                buffered += chunk
                *lines, buffered = buffered.split(b"\n")
                yield from (line.decode("utf-8", "replace") for line in lines)
            if buffered:
                yield buffered.decode("utf-8", "replace")
        finally:
            response.release_conn()


def waiting(pod: dict[str, Any]) -> bool:
    """Whether the pod is still starting: pending, its trainer not yet run."""
    return (pod.get("status") or {}).get("phase") in ("Pending", None) and not started(pod)


def started(pod: dict[str, Any]) -> bool:
    """Whether the pod's trainer container has started (it runs, or it ran and ended)."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c.get("name") == CONTAINER:
            state = c.get("state") or {}
            return bool(state.get("running") or state.get("terminated"))
    return False
