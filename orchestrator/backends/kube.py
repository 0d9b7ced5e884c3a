"""The one boundary to a Kubernetes cluster: the official Python client, configured from the kubeconfig.

Only ``backends/k8s.py`` uses it, through the small interface below, so tests put a fake API in its place
(no cluster runs on this machine). Objects go in and come out as plain dicts, as the manifests are rendered.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Optional

from orchestrator.errors import OrchError

JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


def kubeconfig() -> Optional[Path]:
    """The kubeconfig the client would read (KUBECONFIG's first file, else ~/.kube/config), if it exists."""
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    path = Path(first).expanduser() if first else Path.home() / ".kube" / "config"
    return path if path.is_file() else None


class KubeApi:
    """Create, list, read the logs of and delete orch's objects in the kubeconfig's current namespace."""

    def __init__(self, config: Path) -> None:
        try:
            from kubernetes import client
            from kubernetes import config as loader
        except ImportError:
            raise OrchError("running on Kubernetes needs its Python client, an extra of orch: "
                            "pip install 'orch[k8s]'") from None

        loader.load_kube_config(config_file=str(config))
        _contexts, active = loader.list_kube_config_contexts(config_file=str(config))
        self.namespace = (active or {}).get("context", {}).get("namespace") or "default"
        self._client = client.ApiClient()
        self.core, self.batch = client.CoreV1Api(self._client), client.BatchV1Api(self._client)
        self.custom = client.CustomObjectsApi(self._client)
        self.networking = client.NetworkingV1Api(self._client)

    def check(self) -> None:
        """Raise unless the API server answers."""
        self.core.list_namespaced_pod(self.namespace, limit=1)

    def create(self, doc: dict[str, Any]) -> None:
        kind, ns = doc["kind"], self.namespace
        if kind == "Service":
            self.core.create_namespaced_service(ns, doc)
        elif kind == "Job":
            self.batch.create_namespaced_job(ns, doc)
        elif kind == "JobSet":
            self.custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL, doc)
        elif kind == "NetworkPolicy":
            self.networking.create_namespaced_network_policy(ns, doc)
        else:
            raise ValueError(f"orch renders no {kind}")

    def pods(self, selector: str) -> list[dict[str, Any]]:
        listed = self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        items: list[dict[str, Any]] = self._client.sanitize_for_serialization(listed).get("items", [])
        return items

    def log(self, pod: str, tail: Optional[int] = None, since_seconds: Optional[int] = None) -> str:
        return str(self.core.read_namespaced_pod_log(pod, self.namespace, timestamps=True, tail_lines=tail,
                                                     since_seconds=since_seconds, container="trainer"))

    def follow_log(self, pod: str, since_seconds: Optional[int] = None) -> Iterator[str]:
        """A pod's log lines as they come, until the pod's container ends."""
        response = self.core.read_namespaced_pod_log(pod, self.namespace, timestamps=True, follow=True,
                                                     since_seconds=since_seconds, container="trainer",
                                                     _preload_content=False)
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

    def delete(self, kind: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        body = {"propagationPolicy": "Background"}
        try:
            if kind == "Service":
                self.core.delete_namespaced_service(name, self.namespace)
            elif kind == "Job":
                self.batch.delete_namespaced_job(name, self.namespace, body=body)
            elif kind == "JobSet":
                self.custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, self.namespace,
                                                            JOBSET_PLURAL, name, body=body)
            elif kind == "NetworkPolicy":
                self.networking.delete_namespaced_network_policy(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:  # already gone is what was wanted
                raise
