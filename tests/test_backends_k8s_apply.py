"""`orch up --backend k8s` against a fake API at the client boundary (kube.KubeApi's interface): no cluster
runs on this machine, so what is tested is what orch asks of the API and what it makes of the answers."""
from __future__ import annotations

import json

import pytest

from orchestrator import contract
from orchestrator.backends import Status, kube
from orchestrator.backends.k8s import COMPLETION_INDEX, KubernetesBackend, documents_of, object_name, pod_state
from orchestrator.errors import DockerError, InvalidSpec, RenderOnlyBackend
from orchestrator.run.rundir import RunState
from tests.test_cli_inprocess import one_line_error, orch
from tests.test_runner import Harness

STAMP = "2026-11-22T07:00:0{}.000000000Z"


class FakeKubeApi:
    """The cluster as KubeApi shows it: objects created and deleted, pods listed, logs read."""

    def __init__(self, pods=None, logs=None, linger=0) -> None:
        self.created: list[dict] = []
        self.deleted: list[tuple[str, str]] = []
        self._pods, self._logs = pods or [], logs or {}
        self.followed: list[str] = []
        self.linger = linger  # listings that still show the pods of a deleted Job

    def check(self) -> None:
        pass

    def create(self, doc: dict) -> None:
        self.created.append(doc)

    def pods(self, selector: str) -> list[dict]:
        self.listed_after_delete()
        return [p for p in self._pods if selector.split("=")[-1] in (p["metadata"]["labels"].get("orch.run"), "orch.run")]

    def log(self, pod: str, tail=None, since_seconds=None) -> str:
        return self._logs.get(pod, "")

    def follow_log(self, pod: str, since_seconds=None):
        self.followed.append(pod)
        yield from self._logs.get(pod, "").splitlines()

    def delete(self, kind: str, name: str) -> None:
        self.deleted.append((kind, name))
        if kind in ("Job", "JobSet"):  # its pods go too, after ``linger`` more listings
            self.doomed = True

    def listed_after_delete(self) -> None:
        if getattr(self, "doomed", False):
            if self.linger:
                self.linger -= 1
            else:
                self._pods = []


def pod(run_id: str, index: int, phase: str, cluster: list, exit_code=None, reason=None, role=None) -> dict:
    labels = {"orch.run": object_name(run_id), **({"orch.role": role} if role else {})}
    terminated = {"exitCode": exit_code, "reason": reason, "finishedAt": "2026-11-22T07:00:09Z"} \
        if exit_code is not None else None
    return {"metadata": {"name": f"{object_name(run_id)}-{index}", "labels": labels,
                         "annotations": {COMPLETION_INDEX: str(index)}},
            "spec": {"containers": [{"name": "trainer", "env": [{"name": contract.ENV_CLUSTER,
                                                                  "value": json.dumps(cluster)}]}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": (
                {"terminated": terminated} if terminated else {"running": {}})}]}}


def records(index: int) -> str:
    """What a worker prints: its records as @orch lines, each with the timestamp Kubernetes adds."""
    events = [{"v": contract.CONTRACT_VERSION, "event": "start", "worker": index, "time": 1.0, "stage": "training"},
              {"v": contract.CONTRACT_VERSION, "event": "done", "worker": index, "time": 2.0, "train_seconds": 1.5,
               "test_accuracy": 0.9}]
    result = {"v": contract.CONTRACT_VERSION, "worker": index, "train_seconds": 1.5, "test_accuracy": 0.9,
              "samples_per_epoch": [1920]}
    lines = [f"{contract.STDOUT_PREFIX} {contract.EVENTS_FILE} 1/1 {json.dumps(e)}" for e in events]
    lines.append(f"{contract.STDOUT_PREFIX} {contract.RESULT_FILE} 1/1 {json.dumps(result)}")
    return "\n".join(f"{STAMP.format(i)} {line}" for i, line in enumerate(lines)) + "\n"


def test_without_a_kubeconfig_up_says_to_apply_the_rendered_manifests(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert kube.kubeconfig() is None
    with pytest.raises(RenderOnlyBackend, match="no kubeconfig"):
        KubernetesBackend().preflight(Harness(tmp_path).plan(backend="k8s", workers=2))
    result = orch("up", "--backend", "k8s", "-n", "2", "--run-id", "r")
    one_line_error(result, 2, "`orch render --backend k8s | kubectl apply -f -`")


def test_a_run_is_applied_watched_through_its_pods_logs_and_removed(tmp_path):
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2)
    cluster = [["worker", ["a:1", "b:1"]]]
    api = FakeKubeApi(pods=[pod(p.spec.run_id, i, "Succeeded", cluster, exit_code=0) for i in range(2)],
                      logs={f"{object_name(p.spec.run_id)}-{i}": records(i) for i in range(2)})
    info = h.apply(p, KubernetesBackend(api=api))
    assert info.state == RunState.SUCCEEDED
    assert [d["kind"] for d in api.created] == ["NetworkPolicy", "Service", "Job"]  # as rendered, in order
    assert api.created == documents_of(p.artifact)
    assert [w["test_accuracy"] for w in info.workers] == [0.9, 0.9]  # copied from each pod's log
    assert [w["exit_code"] for w in info.workers] == [0, 0]
    assert api.deleted == [("Job", object_name(p.spec.run_id)), ("Service", object_name(p.spec.run_id)),
                           ("NetworkPolicy", object_name(p.spec.run_id))]


def test_pods_map_to_replicas_of_each_role():
    cluster = [["chief", ["c:1"]], ["ps", ["p:1"]], ["worker", ["w0:1", "w1:1"]]]
    plain = [pod("r", i, "Running", cluster) for i in range(4)]
    assert [(s.role, s.index) for s in map(lambda x: pod_state(x, "r"), plain)] == [
        ("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    # A JobSet's pods carry their role, and their index counts within it.
    jobset = pod("r", 1, "Failed", cluster, exit_code=137, reason="OOMKilled", role="worker")
    state = pod_state(jobset, "r")
    assert (state.role, state.index, state.status, state.exit_code, state.oom_killed) == (
        "worker", 1, Status.FAILED, 137, True)
    assert state.finished_at is not None
    assert pod_state({"metadata": {"name": "x", "labels": {}}}, "r") is None  # not an indexed pod of orch's


def Harness_plan():
    import tempfile
    from pathlib import Path

    return Harness(Path(tempfile.mkdtemp())).plan(backend="k8s", workers=1, run_id="r")


def test_cancel_waits_for_the_pods_to_go_and_says_when_they_do_not():
    from tests.fakes import FakeClock

    cluster = [["worker", ["a:1"]]]
    h_pods = [pod("r", 0, "Failed", cluster, exit_code=137)]
    backend = KubernetesBackend(api=FakeKubeApi(pods=list(h_pods), linger=3))
    p = Harness_plan()
    p.artifact_file.parent.mkdir(parents=True)
    p.artifact_file.write_text(p.artifact)
    clock = FakeClock()
    backend.cancel(p.spec.run_id, p.artifact_file, grace=5, clock=clock)
    assert backend.api._pods == [] and 1 <= clock.elapsed < 5  # waited for the pods of the deleted Job
    stuck = KubernetesBackend(api=FakeKubeApi(pods=list(h_pods), linger=10**6))
    with pytest.raises(DockerError, match=r"the pods of run r were not gone within 65 s; `orch down r` tries again"):
        stuck.cancel(p.spec.run_id, p.artifact_file, grace=5, clock=FakeClock())


def test_up_refuses_a_jobset_that_would_be_restarted_twice(tmp_path):
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2, k8s_kind="jobset", max_restarts=1, k8s_checkpoint_claim="ckpt")
    with pytest.raises(InvalidSpec, match="a JobSet restarts its group itself"):
        KubernetesBackend(api=FakeKubeApi()).preflight(p)
    KubernetesBackend(api=FakeKubeApi()).preflight(h.plan(backend="k8s", workers=2, max_restarts=1,
                                                          k8s_checkpoint_claim="ckpt"))


def test_following_a_pods_log_streams_it():
    api = FakeKubeApi(logs={"orch-r-0": "line 1\nline 2\n"})
    state = pod_state(pod("r", 0, "Running", [["worker", ["a:1"]]]), "r")
    assert list(KubernetesBackend(api=api).log_lines(state, "stdout", follow=True)) == ["line 1", "line 2"]
    assert api.followed == ["orch-r-0"]
