"""`orch up`, `logs`, `stats`, `down` and `collect` on Kubernetes, through the real ``kubernetes`` client: a kubeconfig
points it at a local API server (``tests/kube_cluster.py``) that answers in the API's JSON and with its status codes.
What is tested is what orch asks of the API and what it makes of the answers, failures included."""
from __future__ import annotations

import json
import threading
import time

import pytest

from orchestrator import contract
from orchestrator.backends import Status, kube
from orchestrator.backends.k8s import KubernetesBackend, documents_of, object_name, pod_state
from orchestrator.errors import ClusterError, ClusterRefused, EngineUnreachable, InvalidSpec, RenderOnlyBackend, WorkerFailed
from orchestrator.run.rundir import RunDir, RunState
from tests.fakes import FakeClock
from tests.kube_cluster import ApiServer, Cluster
from tests.test_cli_inprocess import one_line_error, orch
from tests.test_runner import Harness

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture
def server(tmp_path, monkeypatch):
    api = ApiServer(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig))
    for name in ("runs", "cache", "results"):  # the folders Harness uses, for the CLI too
        monkeypatch.setenv(f"ORCH_{name.upper()}_DIR", str(tmp_path / name))
    yield api
    api.close()


def report_lines(index: int, accuracy: float = 0.9) -> list[str]:
    """What a worker prints: its records as @orch lines."""
    events = [{"v": contract.CONTRACT_VERSION, "event": "start", "worker": index, "time": 1.0, "stage": "training"},
              {"v": contract.CONTRACT_VERSION, "event": "done", "worker": index, "time": 2.0, "train_seconds": 1.5,
               "test_accuracy": accuracy}]
    result = {"v": contract.CONTRACT_VERSION, "worker": index, "train_seconds": 1.5, "test_accuracy": accuracy,
              "samples_per_epoch": [1920]}
    lines = [f"{contract.STDOUT_PREFIX} {contract.EVENTS_FILE} 1/1 {json.dumps(e)}" for e in events]
    return ["training starts", *lines, f"{contract.STDOUT_PREFIX} {contract.RESULT_FILE} 1/1 {json.dumps(result)}"]


def index_of(pod: dict) -> int:
    return int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])


def lifecycle(start_at: int = 2, end_at: int = 4, codes: dict | None = None, evict: dict | None = None):
    """The pods' lives, by the number of listings: pending, then running and printing their records, then ended
    with their exit code (``codes`` by index, else 0) or evicted with the kubelet's message (``evict`` by index)."""
    def advance(cluster: Cluster) -> None:
        for pod in cluster.pods():
            name, phase, i = pod["metadata"]["name"], pod["status"]["phase"], index_of(pod)
            if phase == "Pending" and cluster.lists >= start_at:
                cluster.start(name)
                cluster.write(name, *report_lines(i))
            elif phase == "Running" and cluster.lists >= end_at:
                if evict and i in evict:
                    cluster.evict(name, evict[i])
                else:
                    cluster.finish(name, (codes or {}).get(i, 0))
    return advance


def up(h: Harness, p, **kwargs):
    """`orch up` of plan ``p`` with the backend the CLI would make: the real client, from the kubeconfig."""
    return h.apply(p, KubernetesBackend(), **kwargs)


# -- up -------------------------------------------------------------------------------------------------
def test_without_a_kubeconfig_up_says_to_apply_the_rendered_manifests(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert kube.kubeconfig() is None
    with pytest.raises(RenderOnlyBackend, match="no kubeconfig"):
        KubernetesBackend().preflight(Harness(tmp_path).plan(backend="k8s", workers=2))
    result = orch("up", "--backend", "k8s", "-n", "2", "--run-id", "r")
    one_line_error(result, 2, "`orch render --backend k8s | kubectl apply -f -`")


def test_a_run_is_applied_watched_through_its_pods_logs_and_removed(tmp_path, server):
    cluster = server.cluster
    cluster.on_list = lifecycle()
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2)
    info = up(h, p)
    assert info.state == RunState.SUCCEEDED
    created = cluster.asked("POST")
    assert [r.path.rsplit("/", 1)[-1] for r in created] == ["networkpolicies", "services", "jobs"]  # in order
    assert all("/namespaces/team-a/" in r.path for r in created)  # the kubeconfig context's namespace
    assert [r.body for r in created] == documents_of(p.artifact)  # exactly what `orch render` prints
    assert [w["test_accuracy"] for w in info.workers] == [0.9, 0.9]  # copied from each pod's log
    assert [w["exit_code"] for w in info.workers] == [0, 0]
    # Deleted in reverse order, each the very object created (its uid), each cascading to what it owns.
    deletes = cluster.asked("DELETE")
    name = object_name(p.spec.run_id)
    assert [r.path.rsplit("/", 2)[-2:] for r in deletes] == [["jobs", name], ["services", name],
                                                               ["networkpolicies", name]]
    assert all(r.body["propagationPolicy"] == "Background" and r.body["preconditions"]["uid"] for r in deletes)
    assert cluster.pods() == [] and not cluster.objects
    # The saved log has each line at the time the kubelet stamped it.
    saved = RunDir(p.run_dir).saved_log(("worker", 1)).read_text().splitlines()
    assert saved[0].endswith("stdout training starts") and len(saved) == 4


def test_a_pod_read_back_by_the_client_has_its_finish_time(server):
    """The client turns the API's ``...Z`` into a datetime and writes it back as ``+00:00``."""
    cluster = server.cluster
    cluster.create(documents_of(Harness_plan().artifact)[-1])
    (pod,) = cluster.pods()
    cluster.finish(pod["metadata"]["name"], 3, at=1_795_000_000.0)
    (listed,) = kube.KubeApi(server.kubeconfig).pods("orch.run")
    finished = listed["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    assert finished.endswith("+00:00")
    state = pod_state(listed, None)
    assert (state.run, state.status, state.exit_code, state.finished_at) == ("r", Status.FAILED, 3, 1_795_000_000.0)


def Harness_plan(**fields):
    import tempfile
    from pathlib import Path

    return Harness(Path(tempfile.mkdtemp())).plan(**{"backend": "k8s", "workers": 1, "run_id": "r", **fields})


def test_a_failed_pod_fails_the_run_with_its_last_lines(tmp_path, server):
    server.cluster.on_list = lifecycle(codes={1: 3})
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2, max_restarts=1, k8s_checkpoint_claim="ckpt")
    with pytest.raises(WorkerFailed) as caught:
        up(h, p)
    assert caught.value.message == "worker-1 exited with code 3; the other workers were stopped"
    assert "training starts" in caught.value.details  # the pod's log, read through the API
    assert len(server.cluster.asked("POST", "/jobs$")) == 1  # the program's own exit code: never retried


def test_a_signal_restarts_the_group_by_recreating_its_job(tmp_path, server):
    cluster = server.cluster
    first, second = lifecycle(codes={0: 137}), lifecycle(start_at=0, end_at=0)

    def attempts(c: Cluster) -> None:
        (second if len(c.asked("POST", "/jobs$")) > 1 else first)(c)
    cluster.on_list = attempts
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2, max_restarts=1, k8s_checkpoint_claim="ckpt")
    info = up(h, p)
    assert info.state == RunState.SUCCEEDED and len(info.restarts) == 1
    posts = [r.path.rsplit("/", 1)[-1] for r in cluster.asked("POST")]
    assert posts == ["networkpolicies", "services", "jobs"] * 2


def test_a_pod_evicted_for_its_empty_dir_is_reported_as_its_disk_limit(tmp_path, server):
    server.cluster.on_list = lifecycle(evict={1: 'Usage of EmptyDir volume "run" exceeds the limit "1Gi". '})
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2, max_restarts=1, k8s_checkpoint_claim="ckpt")
    with pytest.raises(WorkerFailed) as caught:
        up(h, p)
    assert caught.value.message == ("worker-1 failed: evicted for writing more than its disk limit on the node: 1Gi in "
                                    "its folder 'run' (the emptyDir's sizeLimit); the other workers were stopped")
    assert not caught.value.retryable and len(server.cluster.asked("POST", "/jobs$")) == 1  # would only happen again


def test_another_eviction_is_a_signal_and_retryable(server):
    cluster = server.cluster
    cluster.create(documents_of(Harness_plan().artifact)[-1])
    (pod,) = cluster.pods()
    cluster.evict(pod["metadata"]["name"], "The node was low on resource: memory. ")
    (state,) = KubernetesBackend().states("r")
    assert (state.status, state.exit_code, state.reason) == (Status.FAILED, 137, None)


# -- refusals -------------------------------------------------------------------------------------------
def test_a_run_id_the_cluster_has_is_refused_before_anything_is_made(tmp_path, server):
    cluster = server.cluster
    p = Harness(tmp_path).plan(backend="k8s", workers=2)
    cluster.create(documents_of(p.artifact)[-1])  # an earlier `kubectl apply` of the same run id
    result = orch("up", "--backend", "k8s", "-n", "2", "--run-id", "fake-run", "--samples", "6000", "--epochs", "2",
                  "--stall-timeout", "5", "--startup-timeout", "5")
    one_line_error(result, 2, "the cluster already has a Job orch-fake-run (run fake-run, from an earlier `orch up` "
                              "or `kubectl apply`); `orch down fake-run` or `kubectl delete -f` removes it")
    assert cluster.asked("POST") == [] and cluster.asked("DELETE") == []
    assert not (tmp_path / "runs" / "fake-run").exists()


def test_a_run_id_taken_meanwhile_leaves_the_others_objects_alone(tmp_path, server):
    """Between the check and the create another orch made the Job: the 409 stops this run, which removes what it
    made itself (by uid) and nothing of the other's."""
    cluster = server.cluster
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2)
    theirs = documents_of(p.artifact)[-1]

    original = cluster._create

    def create_then_race(resource, doc):
        answer = original(resource, doc)
        if resource == "services":
            original("jobs", json.loads(json.dumps(theirs)))
        return answer
    cluster._create = create_then_race
    with pytest.raises(ClusterRefused, match="the cluster already has a Job orch-fake-run"):
        up(h, p)
    assert ("jobs", "orch-fake-run") in cluster.objects and len(cluster.pods()) == 2  # the other run's
    assert ("services", "orch-fake-run") not in cluster.objects  # ours, removed
    assert ("networkpolicies", "orch-fake-run") not in cluster.objects
    assert h.record(p).state == RunState.FAILED


@pytest.mark.parametrize("code, reason, message, needle", [
    (403, "Forbidden", 'jobs.batch is forbidden: User "orch" cannot create resource "jobs"',
     'the cluster forbids orch to create Job orch-fake-run in namespace team-a: jobs.batch is forbidden: User "orch" '
     'cannot create resource "jobs"; the kubeconfig\'s user needs a role that allows it'),
    (422, "Invalid", 'Job.batch "orch-fake-run" is invalid: spec.template.spec.containers[0].image: Required value',
     "the cluster refused to create Job orch-fake-run as invalid: Job.batch \"orch-fake-run\" is invalid"),
    (500, "InternalError", "etcdserver: request timed out\nretry",
     "the Kubernetes API server answered 500 to create Job orch-fake-run: etcdserver: request timed out\\nretry"),
])
def test_a_refused_create_is_one_line_quoting_the_server_and_removes_what_was_made(tmp_path, server, code, reason,
                                                                                    message, needle):
    cluster = server.cluster
    cluster.fail("POST", "/jobs$", code, reason, message)
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2)
    with pytest.raises(ClusterError) as caught:
        up(h, p)
    assert needle in caught.value.message and "\n" not in caught.value.message
    assert caught.value.exit_code == (1 if code == 500 else 2)
    assert not cluster.objects  # the policy and the Service it had made are deleted again
    assert h.record(p).error == caught.value.message


def test_the_cli_says_what_the_cluster_forbade(tmp_path, server):
    server.cluster.fail("GET", "/pods$", 403, "Forbidden", 'pods is forbidden: User "orch" cannot list resource "pods"')
    one_line_error(orch("up", "--backend", "k8s", "-n", "2", "--run-id", "r"), 2,
                   "the cluster forbids orch to list pods in namespace team-a: pods is forbidden")


def test_credentials_the_server_does_not_accept_are_said_in_one_line(tmp_path, server):
    config = server.kubeconfig.read_text().replace("test-token", "stale")
    server.kubeconfig.write_text(config)
    with pytest.raises(ClusterRefused, match="did not accept the kubeconfig's credentials .*; log in again"):
        KubernetesBackend().preflight(Harness(tmp_path).plan(backend="k8s", workers=2))


def test_a_server_that_does_not_answer_is_unreachable(tmp_path, server):
    server.close()
    api = kube.KubeApi(server.kubeconfig)
    api._client.configuration.retries = 0
    with pytest.raises(EngineUnreachable, match=f"cannot reach the Kubernetes API server at {server.url} to list pods"):
        api.check()


def test_a_kubeconfig_the_client_cannot_read_is_refused(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    with pytest.raises(ClusterRefused, match="cannot use the kubeconfig"):
        kube.KubeApi(bad)


# -- load -----------------------------------------------------------------------------------------------
def test_a_server_under_load_is_asked_again_after_the_wait_it_says(tmp_path, server):
    cluster = server.cluster
    cluster.on_list = lifecycle()
    cluster.fail("POST", "/jobs$", 429, "TooManyRequests", "too many requests, please try again later", times=2,
                 headers={"Retry-After": "1"})
    cluster.fail("GET", "/pods$", 429, "TooManyRequests", "too many requests", times=1)
    slept: list[float] = []
    api = kube.KubeApi(server.kubeconfig, sleep=slept.append)
    h = Harness(tmp_path)
    info = h.apply(h.plan(backend="k8s", workers=2), KubernetesBackend(api=api))
    assert info.state == RunState.SUCCEEDED
    assert len(cluster.asked("POST", "/jobs$")) == 3 and slept[:3] == [1.0, 1.0, 1.0]
    # No Retry-After: a growing wait, capped.
    assert [kube.retry_after(type("E", (), {"headers": {}})(), n) for n in range(5)] == [1, 2, 4, 8, 8]


def test_a_server_that_stays_overloaded_stops_the_run_in_one_line(tmp_path, server):
    server.cluster.fail("GET", "/pods$", 429, "TooManyRequests", "too many requests", times=kube.TRIES)
    slept: list[float] = []
    api = kube.KubeApi(server.kubeconfig, sleep=slept.append)
    with pytest.raises(ClusterError, match=r"overloaded \(429\) and still refused to list pods after 6 tries"):
        api.check()
    assert len(slept) == kube.TRIES - 1


# -- logs -----------------------------------------------------------------------------------------------
def started_run(tmp_path, server, workers=2, **fields):
    """A run applied and left running (`orch up --detach`), its pods pending."""
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=workers, **fields)
    info = h.apply(p, KubernetesBackend(), detach=True)
    assert info.state == RunState.RUNNING
    return h, p


def test_a_pending_pods_log_is_empty_until_it_starts(tmp_path, server):
    cluster = server.cluster
    h, p = started_run(tmp_path, server)
    backend = KubernetesBackend()
    states = backend.states(p.spec.run_id)
    assert [s.status for s in states] == [Status.PENDING] * 2
    assert backend.logs(states[0]) == "" and list(backend.log_lines(states[0], "stdout")) == []  # the server said 400
    assert cluster.asked("GET", "/log$")[-1].query["container"] == "trainer"
    cluster.start(states[0].id)
    cluster.write(states[0].id, "hello")
    assert backend.logs(states[0]).endswith("Z hello\n")
    cluster.delete("pods", states[0].id)
    assert backend.logs(states[0]) == ""  # gone: 404


def test_following_a_pod_waits_while_it_starts(tmp_path, server):
    cluster = server.cluster
    h, p = started_run(tmp_path, server, workers=1)
    (state,) = KubernetesBackend().states(p.spec.run_id)

    def later() -> None:
        time.sleep(0.3)
        cluster.start(state.id)
        cluster.write(state.id, "line 1", "line 2")
        time.sleep(0.2)
        cluster.finish(state.id, 0)
    threading.Thread(target=later, daemon=True).start()
    lines = list(KubernetesBackend().log_lines(state, "stdout", follow=True))
    assert [line.split(" ", 1)[1] for line in lines] == ["line 1", "line 2"]
    assert cluster.asked("GET", "/pods$")[-1].query["watch"] == "true"  # it watched the pod start
    assert list(KubernetesBackend().log_lines(state, "stderr", follow=True)) == []  # a pod's log is one stream


def test_following_a_pod_whose_watch_expired_lists_it_again(tmp_path, server):
    cluster = server.cluster
    h, p = started_run(tmp_path, server, workers=1)
    (state,) = KubernetesBackend().states(p.spec.run_id)
    cluster.expire_watches = 1
    threading.Timer(0.3, lambda: (cluster.start(state.id), cluster.write(state.id, "up"),
                                  cluster.finish(state.id, 0))).start()
    lines = list(KubernetesBackend().log_lines(state, "stdout", follow=True))
    assert [line.split(" ", 1)[1] for line in lines] == ["up"]
    assert len([r for r in cluster.asked("GET", "/pods$") if r.query.get("watch") == "true"]) >= 1


def test_a_jobset_on_a_cluster_without_its_controller_says_what_to_install(tmp_path, server):
    server.cluster.fail("POST", "/jobsets$", 404, "NotFound", "the server could not find the requested resource")
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2, k8s_kind="jobset")
    with pytest.raises(ClusterRefused, match="answered 404 to create JobSet orch-fake-run: the server could not find "
                                             r"the requested resource; where it has no JobSet \(jobset.x-k8s.io/v1alpha2\), "
                                             "install its controller and CRD first"):
        up(h, p)
    assert not server.cluster.objects  # the policy made before it is deleted again


def test_following_a_pod_that_goes_before_it_starts_ends(tmp_path, server):
    cluster = server.cluster
    h, p = started_run(tmp_path, server, workers=1)
    (state,) = KubernetesBackend().states(p.spec.run_id)
    threading.Timer(0.2, lambda: cluster.delete("pods", state.id)).start()
    assert list(KubernetesBackend().log_lines(state, "stdout", follow=True)) == []


def test_cli_logs_reads_the_pods_then_the_saved_logs(tmp_path, server):
    cluster = server.cluster
    h, p = started_run(tmp_path, server)
    for pod in cluster.pods():
        cluster.start(pod["metadata"]["name"])
        cluster.write(pod["metadata"]["name"], f"hello from {index_of(pod)}")
    result = orch("logs", p.spec.run_id)
    assert result.code == 0, result
    assert "hello from 0" in result.out and "hello from 1" in result.out

    def more_then_end() -> None:
        for pod in cluster.pods():
            cluster.write(pod["metadata"]["name"], f"bye from {index_of(pod)}", at=time.time() + 1)
            cluster.finish(pod["metadata"]["name"], 0)
    threading.Timer(0.5, more_then_end).start()
    followed = orch("logs", p.spec.run_id, "--follow")
    assert followed.code == 0, followed
    assert "bye from 0" in followed.out and "bye from 1" in followed.out
    assert orch("down", p.spec.run_id).code == 0
    saved = orch("logs", p.spec.run_id)
    assert "hello from 1" in saved.out


# -- down, collect, stats ---------------------------------------------------------------------------------
def test_down_copies_the_records_saves_the_logs_and_deletes_the_objects(tmp_path, server):
    cluster = server.cluster
    h, p = started_run(tmp_path, server)
    for pod in cluster.pods():
        name = pod["metadata"]["name"]
        cluster.start(name)
        cluster.write(name, *report_lines(index_of(pod), accuracy=0.8))
    cluster.finish(cluster.pods()[0]["metadata"]["name"], 0)
    result = orch("down", p.spec.run_id)
    assert result.code == 0 and result.out.strip() == f"{p.spec.run_id} down", result
    assert not cluster.objects  # the Job, its pods, the Service and the policy
    assert all(r.body == {"propagationPolicy": "Background"} for r in cluster.asked("DELETE"))  # by name: not this orch's
    info = h.record(p)
    assert info.state == RunState.STOPPED and [w["test_accuracy"] for w in info.workers] == [0.8, 0.8]
    collected = orch("collect", p.spec.run_id, "--format", "json")
    assert collected.code == 0, collected
    summary = json.loads(collected.out)
    assert summary["run_id"] == p.spec.run_id
    assert orch("down", p.spec.run_id).code == 0  # again: nothing left, nothing refused


def test_down_waits_for_the_pods_and_says_when_they_do_not_go(tmp_path, server):
    cluster = server.cluster
    p = Harness_plan()
    p.artifact_file.parent.mkdir(parents=True)
    p.artifact_file.write_text(p.artifact)
    for doc in documents_of(p.artifact):
        cluster.create(doc)
    cluster.linger = 3
    clock = FakeClock()
    KubernetesBackend().cancel("r", p.artifact_file, grace=5, clock=clock)
    assert cluster.pods() == [] and 1 <= clock.elapsed < 5  # waited for the pods of the deleted Job
    cluster.create(documents_of(p.artifact)[-1])
    cluster.linger = 10**6
    with pytest.raises(ClusterError, match=r"the pods of run r were not gone within 65 s; `orch down r` tries again"):
        KubernetesBackend().cancel("r", p.artifact_file, grace=5, clock=FakeClock())


def test_a_delete_without_a_propagation_policy_would_orphan_the_pods(server):
    """The server as the API behaves: a Job deleted without ``propagationPolicy`` leaves its pods running."""
    cluster = server.cluster
    cluster.create(documents_of(Harness_plan().artifact)[-1])
    cluster.delete("jobs", "orch-r")
    assert len(cluster.pods()) == 1


def test_stats_of_a_run_on_kubernetes_say_where_to_look(tmp_path, server):
    cluster = server.cluster
    h, p = started_run(tmp_path, server)
    for pod in cluster.pods():
        cluster.start(pod["metadata"]["name"])
    one_line_error(orch("stats", p.spec.run_id), 1, f"kubectl top pod -l orch.run={object_name(p.spec.run_id)}")


def test_up_refuses_a_jobset_that_would_be_restarted_twice(tmp_path, server):
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2, k8s_kind="jobset", max_restarts=1, k8s_checkpoint_claim="ckpt")
    with pytest.raises(InvalidSpec, match="a JobSet restarts its group itself"):
        KubernetesBackend().preflight(p)
    KubernetesBackend().preflight(h.plan(backend="k8s", workers=2, max_restarts=1, k8s_checkpoint_claim="ckpt"))


def test_a_jobset_run_is_created_as_a_custom_object_and_its_pods_map_to_roles(tmp_path, server):
    cluster = server.cluster
    cluster.on_list = lifecycle()
    h = Harness(tmp_path)
    p = h.plan(backend="k8s", workers=2, k8s_kind="jobset")
    info = up(h, p)
    assert info.state == RunState.SUCCEEDED
    (jobset,) = cluster.asked("POST", "/jobsets$")
    assert jobset.path == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets"
    assert cluster.asked("DELETE", "/jobsets/")[0].body["propagationPolicy"] == "Background"


def test_pods_map_to_replicas_of_each_role():
    cluster = [["chief", ["c:1"]], ["ps", ["p:1"]], ["worker", ["w0:1", "w1:1"]]]

    def pod(index, role=None, **terminated):
        return {"metadata": {"name": f"p{index}", "labels": {"orch.run": "orch-r", **({"orch.role": role} if role else {})},
                             "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
                "spec": {"containers": [{"name": "trainer", "env": [
                    {"name": contract.ENV_CLUSTER, "value": json.dumps(cluster)}]}]},
                "status": {"phase": "Failed" if terminated else "Running", "containerStatuses": [
                    {"name": "trainer", "state": {"terminated": terminated} if terminated else {"running": {}}}]}}
    assert [(s.role, s.index) for s in (pod_state(pod(i), "r") for i in range(4))] == [
        ("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    # A JobSet's pods carry their role, and their index counts within it.
    state = pod_state(pod(1, "worker", exitCode=137, reason="OOMKilled", finishedAt="not a time"), "r")
    assert (state.role, state.index, state.status, state.exit_code, state.oom_killed, state.finished_at) == (
        "worker", 1, Status.FAILED, 137, True, None)
    assert pod_state({"metadata": {"name": "x", "labels": {}}}, "r") is None  # not an indexed pod of orch's
    broken = pod(0)
    broken["spec"]["containers"][0]["env"][0]["value"] = "{"
    assert pod_state(broken, "r") is None
