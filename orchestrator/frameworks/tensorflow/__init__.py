"""TensorFlow: a TF_CONFIG per replica (cluster grouped by role), and orch's TensorFlow images."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from orchestrator import __version__, macros, rendezvous
from orchestrator.frameworks.base import BenchTransport, Framework, Job
from orchestrator.frameworks.tensorflow.options import TensorFlowOptions


Key = tuple[str, int]
IMAGE_REPO = "orch-trainer"
IMAGE_KINDS = ("single", "multi")


def image_ref(kind: str) -> str:
    """The tag of orch's own trainer image of ``kind`` (single or multi) for this version."""
    return f"{IMAGE_REPO}:{__version__}-{kind}"


def tf_config(spec: Job, key: Key, addresses: dict[Key, str]) -> Optional[dict[str, Any]]:
    """TF_CONFIG of replica ``key``, or None for a single worker (no cluster at all)."""
    return rendezvous.tf_config(rendezvous.cluster_of(addresses), *key)


class TensorFlow(Framework):
    """TensorFlow's strategies: one container for single and mirrored; one worker per container for mwms and
    custom (worker 0 is the chief); a chief, parameter servers and workers, each in its own container, for ps."""

    name = "tensorflow"
    title = "TensorFlow"
    rendezvous_kind = rendezvous.TF_CONFIG
    # Trainer v2 has no TensorFlow plugin: its plain policy counts the nodes and each pod writes its TF_CONFIG from
    # its index, in a runtime of the cluster's (as Trainer's own runtimes are) that orch renders.
    trainer_runtime = "ClusterTrainingRuntime"
    trainer_entry = "tensorflow_entry"
    options = TensorFlowOptions
    port = 12345
    takes_requirements = True
    # TensorFlow's C++ noise: absl-formatted info and warning lines, and the CPU feature banners. Error and
    # fatal lines (E..., F...) stay: a failing collective explains itself there.
    log_noise = (r"[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\]",
                 r"WARNING: All log messages before absl::InitializeLog\(\) is called",
                 r".*oneDNN custom operations are on", r".*cpu_feature_guard",
                 r"To enable the following instructions:.*rebuild TensorFlow",
                 r"This TensorFlow binary is optimized to use available CPU instructions")
    bench_transports = (
        BenchTransport("tf-ring-bridge", {"network": "bridge"}, "TensorFlow's gRPC ring (MultiWorkerMirroredStrategy), "
                       "one container per rank on the run's bridge"),
        BenchTransport("tf-ring-loopback", {"network": "shared"},
                       "the same, every container in rank 0's network namespace, on loopback"),
    )

    def image(self, spec: Job) -> str:
        return spec.image or image_ref("single" if len(spec.replica_keys()) == 1 else "multi")

    def env(self, spec: Job, role: str, addresses: dict[Key, str]) -> dict[str, str]:
        # One container: orch's own trainer runs its single strategy with no cluster at all, while a script written
        # for MultiWorkerMirroredStrategy reads TF_CONFIG, and a cluster of one worker is what it takes there.
        if len(addresses) == 1 and not spec.script:
            return {}
        cluster = {name: members for name, members in rendezvous.cluster_of(addresses)}
        # The task as rendezvous.tf_config writes it, its type and index the replica's: placeholders.
        config = json.dumps({"cluster": cluster, "task": {"type": macros.ROLE, "index": -1}},
                            separators=(",", ":"), sort_keys=True, allow_nan=False)
        return {"TF_CONFIG": config.replace('"index":-1', f'"index":{macros.INDEX}')}

    def describe(self, spec: Job, key: Key, addresses: dict[Key, str]) -> dict[str, Any]:
        raw = self.replica_env(spec, key, addresses).get("TF_CONFIG")
        return {"tf_config": json.loads(raw) if raw else None}

    def floor_transport(self, spec: Job) -> Optional[str]:
        if spec.framework.resolved_strategy(spec.workers) not in ("mwms", "custom"):
            return None  # one container, or a parameter server: no gradients all-reduced between containers
        return "tf-ring-bridge" if spec.network == "bridge" else "tf-ring-loopback"

    def image_tags(self) -> dict[str, str]:
        return {kind: image_ref(kind) for kind in IMAGE_KINDS}

    def main_image(self) -> str:
        return image_ref("multi")

    def build_command(self) -> str:
        return "orch build"

    def host_processes(self, ranks: int, argv: list[str], env: dict[str, str], venv: Path,
                       free_ports: Any) -> list[tuple[list[str], dict[str, str]]]:
        hosts = [f"localhost:{p}" for p in free_ports(ranks)]
        configs = [{"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}} for i in range(ranks)]
        return [([str(venv / "bin" / "python"), *argv], {**env, "TF_CONFIG": json.dumps(c, allow_nan=False)}) for c in configs]



FRAMEWORK = TensorFlow()
