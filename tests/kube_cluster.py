"""A Kubernetes API server for tests: the standard library's HTTP server answering the calls orch makes, in the
API's JSON and with its status codes, so the real ``kubernetes`` client talks to it through a real kubeconfig,
``Configuration`` and ``ApiClient``. No cluster can run on this machine; this is the next closest thing.

What it models, each as the API server and its controllers behave:

- create, get, list, watch and delete of Services, NetworkPolicies, Jobs, JobSets and Pods, with resource
  versions, uids, and times written as the API writes them (``2026-11-22T07:00:09Z``);
- ``Status`` bodies for 401, 403, 404, 409 (exists, or a precondition that does not hold), 422 (a name that is
  not a DNS label) and 429 (with ``Retry-After``), and any of them injected on a path with ``Cluster.fail``;
- the Job and JobSet controllers: an Indexed Job's pods (``<job>-<i>-<suffix>``, the completion index as a
  label and an annotation), a JobSet's (``<jobset>-<role>-0-<i>-<suffix>``), each pending until a test moves it on;
- the garbage collector: a deleted Job's pods go only when the delete asked for it (``propagationPolicy``),
  after ``linger`` further listings;
- a pod's log: 400 while its container waits to start (an init container still copying), 404 once the pod is
  gone, ``tailLines``, ``sinceSeconds``, ``timestamps`` and ``follow`` (streamed until the container ends);
- watches of pods as a stream of events, from a resource version, ending after ``timeoutSeconds``, or at once with
  an ERROR event of 410 where the version has expired (``expire_watches``).
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlsplit

import yaml

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
TOKEN = "test-token"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# (API prefix, resource) -> kind, for every collection the server keeps.
RESOURCES = {("api/v1", "services"): "Service", ("api/v1", "pods"): "Pod",
             ("apis/batch/v1", "jobs"): "Job",
             ("apis/networking.k8s.io/v1", "networkpolicies"): "NetworkPolicy",
             ("apis/jobset.x-k8s.io/v1alpha2", "jobsets"): "JobSet"}
PATH = re.compile(r"^/(api/v1|apis/[^/]+/[^/]+)/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?(?:/(log))?$")


def stamp(t: float) -> str:
    """A time as the API server writes it: RFC 3339, UTC, whole seconds, ``Z``."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def log_stamp(t: float) -> str:
    """A log line's time as the kubelet writes it with ``timestamps=true``: nanoseconds, ``Z``."""
    whole = datetime.fromtimestamp(int(t), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{int(round((t % 1) * 1e9)):09d}Z"


def status_body(code: int, reason: str, message: str, details: Optional[dict] = None) -> dict[str, Any]:
    """A ``Status`` object, as the API server answers a refusal."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}


@dataclass
class Fault:
    """An answer given instead of the normal one to the next ``times`` requests matching ``method`` and ``path``."""

    method: str
    path: re.Pattern
    code: int
    reason: str
    message: str
    times: int = 1
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any


class Cluster:
    """The state behind the server: objects by (resource, name), pods' logs, and what was asked of it."""

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace
        self.lock = threading.Condition()
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.logs: dict[str, list[tuple[float, str]]] = {}  # pod -> (time, line)
        self.history: list[tuple[int, str, dict[str, Any]]] = []  # pods' watch events: (resource version, type, pod)
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self.version = 1000
        self.linger = 0  # listings of pods that still show the pods of a cascading delete (then they are gone)
        self.doomed: list[tuple[int, str]] = []  # (listings left, pod)
        self.on_list: Optional[Callable[["Cluster"], None]] = None  # the pods' lives, advanced per listing
        self.lists = 0
        self.expire_watches = 0  # watches from a resource version that answer 410 (expired) first

    # -- what tests do ---------------------------------------------------------------------------------
    def fail(self, method: str, path: str, code: int, reason: str, message: str, times: int = 1,
             headers: Optional[dict[str, str]] = None) -> None:
        """Answer the next ``times`` requests of ``method`` to a path matching ``path`` with a Status of ``code``."""
        with self.lock:
            self.faults.append(Fault(method, re.compile(path), code, reason, message, times, headers or {}))

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Create ``doc`` as `kubectl apply` would (its pods too, for a Job or a JobSet); the object made."""
        resource = next(res for (_p, res), kind in RESOURCES.items() if kind == doc["kind"])
        with self.lock:
            code, made = self._create(resource, json.loads(json.dumps(doc)))
        assert code == 201, made
        return made

    def delete(self, resource: str, name: str, options: Optional[dict[str, Any]] = None) -> None:
        """Delete as `kubectl delete` would with ``options`` (a propagation policy, say)."""
        with self.lock:
            code, answer = self._delete(resource, name, options or {})
        assert code == 200, answer

    def pods(self) -> list[dict[str, Any]]:
        with self.lock:
            return [o for (res, _n), o in sorted(self.objects.items()) if res == "pods"]

    def pod(self, prefix: str) -> dict[str, Any]:
        """The one pod whose name starts with ``prefix`` (a pod's name ends in a suffix the controller picks)."""
        (found,) = [p for p in self.pods() if p["metadata"]["name"].startswith(prefix)]
        return found

    def start(self, name: str, at: Optional[float] = None) -> None:
        """The pod's init container is done and its trainer runs."""
        self._set(name, "Running", {"running": {"startedAt": stamp(at or time.time())}})

    def finish(self, name: str, exit_code: int, at: Optional[float] = None, reason: Optional[str] = None) -> None:
        """The pod's trainer ended with ``exit_code`` (``reason``: OOMKilled, Error, Completed)."""
        terminated = {"exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                      "startedAt": stamp((at or time.time()) - 5), "finishedAt": stamp(at or time.time())}
        self._set(name, "Succeeded" if exit_code == 0 else "Failed", {"terminated": terminated})

    def evict(self, name: str, message: str, exit_code: int = 137) -> None:
        """The kubelet evicted the pod (its trainer killed), saying why in the pod's status."""
        self.finish(name, exit_code)
        with self.lock:
            pod = self.objects[("pods", name)]
            pod["status"].update({"reason": "Evicted", "message": message})
            self._changed("MODIFIED", pod)

    def write(self, name: str, *lines: str, at: Optional[float] = None) -> None:
        """Lines the pod's trainer printed, at ``at`` (now), each a microsecond after the one before."""
        t = at or time.time()
        with self.lock:
            self.logs.setdefault(name, []).extend((t + i * 1e-6, line) for i, line in enumerate(lines))
            self.lock.notify_all()

    def asked(self, method: str, pattern: str = "") -> list[Request]:
        """The requests of ``method`` to a path matching ``pattern``, in order."""
        with self.lock:
            return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # -- the state -------------------------------------------------------------------------------------
    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    def _changed(self, kind: str, pod: dict[str, Any]) -> None:
        pod["metadata"]["resourceVersion"] = self._next()
        self.history.append((self.version, kind, json.loads(json.dumps(pod))))
        self.lock.notify_all()

    def _set(self, name: str, phase: str, state: dict[str, Any]) -> None:
        with self.lock:
            pod = self.objects[("pods", name)]
            pod["status"]["phase"] = phase
            for c in pod["status"].get("initContainerStatuses") or []:
                c["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
            for c in pod["status"]["containerStatuses"]:
                c["state"] = state
            self._changed("MODIFIED", pod)

    def _meta(self, doc: dict[str, Any]) -> None:
        meta = doc.setdefault("metadata", {})
        meta.update({"namespace": self.namespace, "resourceVersion": self._next(), "creationTimestamp": stamp(time.time()),
                     "uid": hashlib.sha256(f"{meta.get('name')}-{self.version}".encode()).hexdigest()[:32]})

    def _create(self, resource: str, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = (doc.get("metadata") or {}).get("name", "")
        if not DNS_LABEL.fullmatch(name or ""):
            return 422, status_body(422, "Invalid", f'{RESOURCES.get(("", resource), resource)} "{name}" is invalid: '
                                    "metadata.name: Invalid value: a lowercase RFC 1123 label must consist of ...",
                                    {"name": name, "kind": resource})
        if (resource, name) in self.objects:
            return 409, status_body(409, "AlreadyExists", f'{resource}.x "{name}" already exists',
                                    {"name": name, "kind": resource})
        self._meta(doc)
        self.objects[(resource, name)] = doc
        if resource == "jobs":
            self._job_pods(doc, name, doc["spec"])
        elif resource == "jobsets":
            for replicated in doc["spec"]["replicatedJobs"]:
                self._job_pods(doc, f"{name}-{replicated['name']}-0", replicated["template"]["spec"])
        return 201, doc

    def _job_pods(self, owner: dict[str, Any], job: str, spec: dict[str, Any]) -> None:
        """The Job controller: one pending pod per completion index, its name ending in a suffix of its own."""
        template = json.loads(json.dumps(spec["template"]))
        for i in range(spec["completions"]):
            name = f"{job}-{i}-{hashlib.sha256(f'{job}{i}{self.version}'.encode()).hexdigest()[:5]}"
            meta = template.get("metadata") or {}
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "labels": {**(meta.get("labels") or {}), COMPLETION_INDEX: str(i),
                                                         "job-name": job},
                                "annotations": {COMPLETION_INDEX: str(i)},
                                "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                                     "name": owner["metadata"]["name"],
                                                     "uid": owner["metadata"]["uid"]}]},
                   "spec": {**template["spec"], "hostname": f"{job}-{i}", "nodeName": "node-1"},
                   "status": {"phase": "Pending", "containerStatuses": [
                       {"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
                        "state": {"waiting": {"reason": "PodInitializing"}}} for c in template["spec"]["containers"]]}}
            if template["spec"].get("initContainers"):
                pod["status"]["initContainerStatuses"] = [
                    {"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
                     "state": {"running": {"startedAt": stamp(time.time())}}} for c in template["spec"]["initContainers"]]
            self._meta(pod)
            self.objects[("pods", name)] = pod
            self._changed("ADDED", pod)

    def _delete(self, resource: str, name: str, options: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        doc = self.objects.get((resource, name))
        if doc is None:
            return 404, status_body(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})
        uid = ((options or {}).get("preconditions") or {}).get("uid")
        if uid and uid != doc["metadata"]["uid"]:
            return 409, status_body(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, UID in object "
                                    f"meta: {doc['metadata']['uid']}", {"name": name, "kind": resource})
        del self.objects[(resource, name)]
        if resource == "pods":
            self._changed("DELETED", doc)
        elif (options or {}).get("propagationPolicy") in ("Background", "Foreground"):
            for pod in self.pods():  # the garbage collector, after ``linger`` listings
                if any(ref["uid"] == doc["metadata"]["uid"] for ref in pod["metadata"].get("ownerReferences", [])):
                    self.doomed.append((self.linger, pod["metadata"]["name"]))
        if resource in ("services", "pods"):  # their registries return the object deleted (Services since 1.22)
            return 200, doc
        return 200, {**status_body(200, "", "", {"name": name, "kind": resource, "uid": doc["metadata"]["uid"]}),
                     "status": "Success"}

    def _collect(self) -> None:
        kept = []
        for left, name in self.doomed:
            if left > 0:
                kept.append((left - 1, name))
            elif ("pods", name) in self.objects:
                self._changed("DELETED", self.objects.pop(("pods", name)))
        self.doomed = kept

    def _selected(self, pod: dict[str, Any], query: dict[str, str]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        for term in filter(None, query.get("labelSelector", "").split(",")):
            key, eq, value = term.partition("=")
            if key not in labels or (eq and labels[key] != value):
                return False
        for term in filter(None, query.get("fieldSelector", "").split(",")):
            key, _, value = term.partition("=")
            if key == "metadata.name" and pod["metadata"]["name"] != value:
                return False
        return True

    def _container_started(self, pod: dict[str, Any], container: str) -> Optional[str]:
        """None if ``container`` has started, else why not (as the API server says it)."""
        for c in pod["status"]["containerStatuses"]:
            if c["name"] == container and "waiting" in c["state"]:
                return (f'container "{container}" in pod "{pod["metadata"]["name"]}" is waiting to start: '
                        f'{c["state"]["waiting"]["reason"]}')
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body go out as two writes on a kept-alive connection: with Nagle's algorithm the second
    # waits for the client's delayed acknowledgement, 40 ms a request, as no API server makes its clients wait.
    disable_nagle_algorithm = True
    cluster: Cluster

    def log_message(self, *args: Any) -> None:
        """Quiet: a test reads ``Cluster.requests`` instead."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- answers ---------------------------------------------------------------------------------------
    def _send(self, code: int, payload: Any, content_type: str = "application/json",
              headers: Optional[dict[str, str]] = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream_start(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _handle(self, method: str) -> None:
        cluster = self.cluster
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with cluster.lock:
            cluster.requests.append(Request(method, url.path, query, json.loads(raw) if raw else None))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._send(401, status_body(401, "Unauthorized", "Unauthorized"))
            for fault in cluster.faults:
                if fault.method == method and fault.times > 0 and fault.path.search(url.path):
                    fault.times -= 1
                    return self._send(fault.code, status_body(fault.code, fault.reason, fault.message),
                                      headers=fault.headers)
        match = PATH.match(url.path)
        if match is None or (match.group(1), match.group(3)) not in RESOURCES:
            return self._send(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        _prefix, namespace, resource, name, log = match.groups()
        if namespace != cluster.namespace:
            return self._send(403, status_body(403, "Forbidden", f'{resource} is forbidden: User "orch" cannot '
                                               f'{method.lower()} resource "{resource}" in the namespace "{namespace}"'))
        if log:
            return self._log(name, query)
        if method == "GET" and name is None and query.get("watch") in ("true", "1"):
            return self._watch(query)
        with cluster.lock:
            if method == "POST" and name is None:
                return self._send(*cluster._create(resource, body or {}))
            if method == "DELETE" and name is not None:
                return self._send(*cluster._delete(resource, name, body or {}))
            if method == "GET" and name is not None:
                doc = cluster.objects.get((resource, name))
                if doc is None:
                    return self._send(404, status_body(404, "NotFound", f'{resource} "{name}" not found',
                                                       {"name": name, "kind": resource}))
                return self._send(200, doc)
            if method == "GET":
                return self._list(resource, query)
        return self._send(405, status_body(405, "MethodNotAllowed", "the server does not allow this method"))

    def _list(self, resource: str, query: dict[str, str]) -> None:
        cluster = self.cluster
        if resource == "pods":
            cluster.lists += 1
            if cluster.on_list is not None:
                cluster.on_list(cluster)
            cluster._collect()
        items = [o for (res, _n), o in sorted(cluster.objects.items())
                 if res == resource and (resource != "pods" or cluster._selected(o, query))]
        if query.get("limit"):
            items = items[: int(query["limit"])]
        kind = RESOURCES[next(k for k in RESOURCES if k[1] == resource)]
        self._send(200, {"kind": f"{kind}List", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(cluster.version)}, "items": items})

    def _watch(self, query: dict[str, str]) -> None:
        cluster = self.cluster
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 5)
        self._stream_start("application/json")
        with cluster.lock:
            if since and cluster.expire_watches > 0:  # the version is older than the server keeps: an ERROR event
                cluster.expire_watches -= 1
                self._chunk(json.dumps({"type": "ERROR", "object": status_body(
                    410, "Expired", f"too old resource version: {since} ({cluster.version})")}).encode() + b"\n")
                return self._chunk(b"")
            if not since:  # no version: every pod as it is now, as ADDED
                for pod in cluster.pods():
                    if cluster._selected(pod, query):
                        self._chunk(json.dumps({"type": "ADDED", "object": pod}).encode() + b"\n")
                since = cluster.version
            while time.monotonic() < deadline:
                for version, kind, pod in [e for e in cluster.history if e[0] > since]:
                    since = version
                    if cluster._selected(pod, query):
                        self._chunk(json.dumps({"type": kind, "object": pod}).encode() + b"\n")
                cluster.lock.wait(max(0.0, min(0.05, deadline - time.monotonic())))
        self._chunk(b"")

    def _log(self, name: str, query: dict[str, str]) -> None:
        cluster = self.cluster
        with cluster.lock:
            pod = cluster.objects.get(("pods", name))
            if pod is None:
                return self._send(404, status_body(404, "NotFound", f'pods "{name}" not found'))
            waiting = cluster._container_started(pod, query.get("container", ""))
            if waiting is not None:
                return self._send(400, status_body(400, "BadRequest", waiting))
            lines = list(cluster.logs.get(name, []))
        since = time.time() - int(query["sinceSeconds"]) if query.get("sinceSeconds") else None

        def shown(entries: list[tuple[float, str]]) -> bytes:
            kept = [(t, line) for t, line in entries if since is None or t >= since]
            return b"".join(((f"{log_stamp(t)} " if query.get("timestamps") == "true" else "") + line + "\n").encode()
                            for t, line in kept)

        if query.get("tailLines"):
            lines = lines[-int(query["tailLines"]):] if int(query["tailLines"]) else []
        if query.get("follow") != "true":
            return self._send(200, shown(lines), "text/plain")
        self._stream_start("text/plain")
        sent = len(cluster.logs.get(name, [])) if query.get("tailLines") else 0
        if query.get("tailLines"):
            self._chunk(shown(lines))
        deadline = time.monotonic() + 30
        with cluster.lock:
            while time.monotonic() < deadline:
                entries = cluster.logs.get(name, [])
                if len(entries) > sent:
                    self._chunk(shown(entries[sent:]))
                    sent = len(entries)
                pod = cluster.objects.get(("pods", name))
                if pod is None or pod["status"]["phase"] in ("Succeeded", "Failed"):
                    break
                cluster.lock.wait(0.05)
        self._chunk(b"")


class QuietServer(ThreadingHTTPServer):
    """A loopback HTTP server whose handlers' errors (a client that hung up mid-stream, after its test ended) are
    kept in ``errors``, not printed: printed, they land in whatever stderr another test has redirected then."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.errors: list[BaseException] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if error is not None:
            self.errors.append(error)


class ApiServer:
    """The server on a loopback port, in a thread of its own, with a kubeconfig that points at it."""

    def __init__(self, folder: Path, namespace: str = "team-a") -> None:
        self.cluster = Cluster(namespace)
        handler = type("BoundHandler", (Handler,), {"cluster": self.cluster})
        self.server = QuietServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.kubeconfig = folder / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "orch", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "orch", "namespace": namespace}}]}))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
