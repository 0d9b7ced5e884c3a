"""The Kubernetes backend, render-only: manifests validated offline against Kubernetes' own schemas, pinned
by golden files, and the trainer's start-up rendezvous checked against the one Compose sets literally."""
from __future__ import annotations

import copy
import dataclasses
import functools
import gzip
import json
import os
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from orchestrator import contract, frameworks
from orchestrator.backends.k8s import KubernetesBackend, object_name
from orchestrator.backends.k8s_manifests import documents_of
from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from tests.test_cli_inprocess import one_line_error, orch
from tests.test_trainer_reports import trainer  # noqa: F401 (a fixture)
from tests.goldens import golden

# kubernetes-validate reads its schemas (the definitions file is megabytes of JSON) at every call; read once here, as
# they never change within a run, its checks cost a few milliseconds a manifest instead of tens.
kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)
K8S_VERSION = "1.37.0"  # the newest schema kubernetes-validate ships (see pyproject.toml's pin)
PATHS = Paths(runs=Path("/srv/orch/runs"), cache=Path("/srv/orch/cache"))
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
KINDS = ("job", "jobset")


def k8s_plan(**fields):
    return plan(make_spec(backend="k8s", **{"run_id": "golden", **fields}), PATHS)


def documents(text: str, policy: bool = False) -> list[dict]:
    """The manifests of ``text``; without the job's NetworkPolicy (its own tests read it) unless ``policy``."""
    return [d for d in documents_of(text) if policy or d["kind"] != "NetworkPolicy"]


def job_templates(doc: dict) -> list[dict]:
    """Every batch/v1 Job in a document: the Job itself, or a JobSet's (or a TrainingRuntime's JobSet template's)
    replicated Jobs wrapped as Jobs."""
    if doc["kind"] == "Job":
        return [doc]
    if doc["kind"] in ("JobSet", "TrainingRuntime", "ClusterTrainingRuntime"):
        jobset = doc["spec"] if doc["kind"] == "JobSet" else doc["spec"]["template"]["spec"]
        return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{doc['metadata']['name']}-{r['name']}-0"},
                 **r["template"]} for r in jobset["replicatedJobs"]]
    return []


# JobSet's CRD (kubernetes-sigs/jobset v0.12.0, its openAPIV3Schema for v1alpha2), which kubernetes-validate does
# not ship. A CRD's schema prunes unknown fields; the API server refuses them under strict field validation (kubectl's
# default), and so does this check: every object with properties of its own allows no others.
CRDS = Path(__file__).parent / "fixtures" / "crds"


def _strict(node):
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        return node
    return [_strict(v) for v in node] if isinstance(node, list) else node


@functools.cache
def crd_validator(name: str) -> jsonschema.Draft7Validator:
    """A validator for the custom resource of fixture ``name`` (tests/fixtures/crds/NAME.json.gz)."""
    crd = json.loads(gzip.decompress((CRDS / f"{name}.json.gz").read_bytes()))
    return jsonschema.Draft7Validator(_strict(crd["openAPIV3Schema"]))


# Kubeflow Trainer v2.3.0's TrainJob, TrainingRuntime and ClusterTrainingRuntime (trainer.kubeflow.org/v1alpha1), from
# its manifests.
CUSTOM = {"JobSet": ("jobset.x-k8s.io/v1alpha2", "jobset-v0.12.0"),
          "TrainJob": ("trainer.kubeflow.org/v1alpha1", "trainjob-v2.3.0"),
          "TrainingRuntime": ("trainer.kubeflow.org/v1alpha1", "trainingruntime-v2.3.0"),
          "ClusterTrainingRuntime": ("trainer.kubeflow.org/v1alpha1", "clustertrainingruntime-v2.3.0")}


def validate_crd(doc: dict) -> None:
    """Raise jsonschema's ValidationError unless ``doc`` is a custom resource its CRD accepts."""
    api, fixture = CUSTOM[doc["kind"]]
    assert doc["apiVersion"] == api, doc["apiVersion"]
    crd_validator(fixture).validate(doc)


def validate(text: str) -> list[dict]:
    """Validate every manifest of ``text`` against the Kubernetes schemas, and a custom resource (JobSet, TrainJob,
    a Trainer runtime) against its CRD and, through its Job templates, against Kubernetes' own; return the
    documents."""
    for doc in documents(text, policy=True):
        if doc["kind"] in CUSTOM:
            validate_crd(doc)
        for part in job_templates(doc) if doc["kind"] in CUSTOM else [doc]:
            kubernetes_validate.validate(part, K8S_VERSION, strict=True)
    return documents(text)


@pytest.mark.parametrize("path, value", [
    (("spec", "failurePolicy", "maxRestart"), 1),  # a typo of maxRestarts
    (("spec", "successPolicy", "operator"), "Every"),  # not All or Any
    (("spec", "replicatedJobs", 0, "replica"), 3),  # a typo of replicas
    (("spec", "failurePolicy", "maxRestarts"), "1"),  # a string, not an integer
])
def test_a_jobset_that_its_crd_refuses_is_caught(path, value):
    rendered = k8s_plan(workers=3, k8s_kind="jobset", max_restarts=1, k8s_checkpoint_claim="ckpt").artifact
    doc = next(d for d in documents(rendered) if d["kind"] == "JobSet")
    validate_crd(doc)
    broken = copy.deepcopy(doc)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(broken)


# -- validation and golden files ----------------------------------------------------------------------
@pytest.mark.parametrize("framework", sorted(frameworks.BUILTIN))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("workers", range(1, 9))
def test_manifests_validate_and_matchgolden(framework, kind, workers):
    p = k8s_plan(framework=framework, workers=workers, k8s_kind=kind, global_batch=840)
    validate(p.artifact)
    # Regenerate after an intended change with ORCH_UPDATE_GOLDEN=1, and review the diff.
    assert p.artifact == golden(f"k8s-{kind}-{framework}-{workers}-workers.yml", p.artifact)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fields", [
    {"gpus": 2, "cpus": 0.5, "memory_mb": 8192},
    {"max_restarts": 3, "k8s_checkpoint_claim": "checkpoints", "time_limit": 7200.5},
    {"registry": "registry.example:5000/ml", "dataset": "synthetic", "threads": 2},
    {"image": "example.org/team/trainer:1", "run_id": "a" * 63},
    {"run_id": "ends_with_underscore_"},
])
def test_every_variant_validates(kind, fields):
    validate(k8s_plan(workers=3, k8s_kind=kind, **fields).artifact)


@pytest.mark.parametrize("kind", KINDS)
def test_parameter_servers_succeed_with_the_chief(kind):
    # The servers and workers of ps never exit: success is the chief's alone, and the cluster stops the rest.
    p = k8s_plan(workers=2, strategy="ps", parameter_servers=2, k8s_kind=kind)
    (doc,) = [d for d in validate(p.artifact) if d["kind"] != "Service"]
    if kind == "job":
        assert doc["spec"]["completions"] == 5 and doc["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    else:
        assert [r["name"] for r in doc["spec"]["replicatedJobs"]] == ["chief", "ps", "worker"]
        assert doc["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief"]}
    assert "successPolicy" not in next(d for d in documents(k8s_plan(workers=2, k8s_kind="job").artifact)
                                       if d["kind"] == "Job")["spec"]


# -- what the manifests say ---------------------------------------------------------------------------
def pod_specs(docs: list[dict]) -> list[dict]:
    return [job["spec"]["template"]["spec"] for doc in docs for job in job_templates(doc)]


def env_of(container: dict) -> dict[str, str]:
    """The container's variables; one set from a field of the pod shows as ``fieldRef:<path>``."""
    return {e["name"]: e["value"] if "value" in e else f"fieldRef:{e['valueFrom']['fieldRef']['fieldPath']}"
            for e in container["env"]}


@pytest.mark.parametrize("kind", KINDS)
def test_pods_are_locked_down(kind):
    docs = validate(k8s_plan(workers=2, k8s_kind=kind, cpus=2, gpus=1, memory_mb=4096).artifact)
    for pod in pod_specs(docs):
        assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
        assert pod["restartPolicy"] == "Never"
        assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                          "seccompProfile": {"type": "RuntimeDefault"}}
        for c in pod["initContainers"] + pod["containers"]:
            assert c["securityContext"] == {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                            "privileged": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
            assert c["resources"]["requests"] == c["resources"]["limits"]
        (trainer,) = pod["containers"]
        assert trainer["resources"]["limits"] == {"cpu": "2", "memory": "4096Mi", "nvidia.com/gpu": 1}
        mounts = {m["mountPath"]: m for m in trainer["volumeMounts"]}
        assert mounts[contract.DATA_MOUNT]["readOnly"] is True
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["tmp"]["emptyDir"]["medium"] == volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        assert {"/tmp", "/dev/shm"} <= set(mounts)


@pytest.mark.parametrize("kind", KINDS)
def test_jobs_fail_whole_by_orchs_exit_code_rules(kind):
    docs = validate(k8s_plan(workers=4, k8s_kind=kind, time_limit=90.2).artifact)
    for job in (j for d in docs for j in job_templates(d)):
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed" and spec["backoffLimit"] == 0
        assert spec["activeDeadlineSeconds"] == 91
        disrupted, program = spec["podFailurePolicy"]["rules"]
        assert disrupted == {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        assert program["action"] == "FailJob"
        assert program["onExitCodes"] == {"containerName": "trainer", "operator": "In", "values": list(range(1, 129))}
    assert "activeDeadlineSeconds" not in json.dumps(documents(k8s_plan(workers=2, k8s_kind=kind).artifact))


def test_plain_job_is_one_indexed_job_behind_a_headless_service():
    service, job = validate(k8s_plan(workers=3).artifact)
    name = object_name("golden")
    assert service["kind"] == "Service" and service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    pod = job["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["subdomain"] == name
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3


def test_jobset_restarts_the_whole_group_from_the_claim():
    (jobset,) = documents(k8s_plan(workers=3, k8s_kind="jobset", max_restarts=2,
                                   k8s_checkpoint_claim="ckpt").artifact)
    name = object_name("golden")
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and jobset["kind"] == "JobSet"
    spec = jobset["spec"]
    assert spec["network"] == {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True}
    policy = spec["failurePolicy"]
    assert policy["maxRestarts"] == 2 and policy["restartStrategy"] == "BlockingRecreate"
    assert [(r["action"], r["onJobFailureReasons"]) for r in policy["rules"]] == [
        ("FailJobSet", ["PodFailurePolicy"]), ("FailJobSet", ["DeadlineExceeded"])]
    assert all(re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", r["name"]) for r in policy["rules"])
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["worker"]}
    (replicated,) = spec["replicatedJobs"]
    assert replicated["name"] == "worker" and replicated["replicas"] == 1
    pod = replicated["template"]["spec"]["template"]["spec"]
    assert "subdomain" not in pod  # the JobSet sets its own
    (trainer,) = pod["containers"]
    shared = next(m for m in trainer["volumeMounts"] if m["name"] == "shared")
    assert shared == {"name": "shared", "mountPath": "/orch/run/shared", "subPath": "golden"}
    assert {"name": "shared", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod["volumes"]


def test_registry_prefixes_orchs_images_only():
    pod = pod_specs(documents(k8s_plan(workers=2, registry="reg.example/ml").artifact))[0]
    assert pod["containers"][0]["image"].startswith("reg.example/ml/orch-trainer:")
    assert pod["initContainers"][0]["image"].startswith("reg.example/ml/orch-data:")
    own = pod_specs(documents(k8s_plan(workers=2, registry="reg.example/ml", image="ex.org/t:1").artifact))[0]
    assert own["containers"][0]["image"] == "ex.org/t:1"
    assert "--registry" in k8s_plan(workers=2).artifact.splitlines()[1]  # the note says what to pass


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("run_id", ["golden", "a" * 63, "x_y", "x-y", "ends-", "9" * 40])
def test_host_names_are_dns_labels(kind, run_id):
    p = k8s_plan(workers=8, k8s_kind=kind, run_id=run_id)
    addresses = KubernetesBackend().addresses(p.spec, p.spec.replica_keys(), 12345)
    for address in addresses.values():
        host, subdomain = address.removesuffix(":12345").split(".")
        assert DNS_LABEL.fullmatch(host) and DNS_LABEL.fullmatch(subdomain), address
    assert len(set(addresses.values())) == 8


def test_distinct_run_ids_get_distinct_names():
    ids = ["x_y", "x-y", "a" * 63, "a" * 62 + "b", "ends-", "ends_"]
    assert len({object_name(i) for i in ids}) == len(ids)


# -- injection ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_hostile_values_stay_values(kind):
    hostile = 'x"\n---\nkind: Secret\nmetadata: {name: pwned}\n# '
    spec = make_spec(backend="k8s", k8s_kind=kind, run_id="r", workers=2)
    spec = spec.model_copy(update={"run_id": "r\n" + hostile, "image": hostile})  # past validation, on purpose
    p = plan(spec, PATHS)
    docs = documents(p.artifact)
    assert [d["kind"] for d in docs] == (["JobSet"] if kind == "jobset" else ["Service", "Job"])
    assert all(d["metadata"]["annotations"]["orch.run-id"] == "r\n" + hostile for d in docs)
    for pod in pod_specs(docs):
        assert pod["containers"][0]["image"] == hostile
        assert env_of(pod["containers"][0])[contract.ENV_RUN_ID] == "r\n" + hostile


# -- the trainer's rendezvous at start-up -------------------------------------------------------------
def kubelet_env(container: dict, index: int) -> dict[str, str]:
    """The environment the kubelet gives the container of the pod with completion ``index``: the index annotation
    read through the downward API, and each $(NAME) expanded from the variables defined before it."""
    env: dict[str, str] = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        else:
            assert e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            env[e["name"]] = str(index)
    return env


def pods(p) -> list[tuple[dict, int]]:
    """(the environment Kubernetes gives the pod, its completion index) of every pod the manifests make."""
    result = []
    for doc in documents(p.artifact):
        for job in job_templates(doc):
            container = job["spec"]["template"]["spec"]["containers"][0]
            result += [({**kubelet_env(container, i), contract.ENV_COMPLETION_INDEX: str(i)}, i)
                       for i in range(job["spec"]["completions"])]
    return result


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("workers", range(1, 9))
def test_each_pod_derives_the_tf_config_compose_would_set(trainer, kind, workers):
    p = k8s_plan(workers=workers, k8s_kind=kind, global_batch=840)
    keys = p.spec.replica_keys()
    tf = frameworks.get("tensorflow")
    addresses = KubernetesBackend().addresses(p.spec, keys, tf.port)
    derived = [trainer.rendezvous.env_from_index(env) for env, _i in pods(p)]
    assert len(derived) == len(keys)
    for env, key, replica in zip(derived, keys, p.replicas):
        expected = tf.replica_env(p.spec, key, addresses)  # as Compose sets it, with the pods' addresses
        assert env.get("TF_CONFIG") == expected.get("TF_CONFIG")
        assert (env[contract.ENV_ROLE], int(env[contract.ENV_WORKER_INDEX])) == key
        # and exactly the per-replica values the plan holds for it
        for name in contract.DERIVED_FROM_INDEX:
            if name in replica.env:
                assert env[name] == replica.env[name], name
    # Any image finds TF_CONFIG as Kubernetes gives it, before orch's trainer derives anything; orch's own index not.
    for (pod_env, _i), replica in zip(pods(p), p.replicas):
        assert pod_env.get("TF_CONFIG") == replica.env.get("TF_CONFIG") and contract.ENV_WORKER_INDEX not in pod_env


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("workers", [1, 2, 5])
def test_any_image_finds_torchruns_variables_in_each_pod(kind, workers):
    """RANK from the completion index, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and LOCAL_RANK: what a DDP script
    reads, in the manifests themselves, so `--image` of any image works without orch's trainer."""
    p = k8s_plan(framework="torch", workers=workers, k8s_kind=kind, image="my-ddp:1", global_batch=840)
    validate(p.artifact)
    envs = [env for env, _i in pods(p)]
    assert [env.get("RANK") for env in envs] == [str(i) for i in range(workers)] if workers > 1 else [None]
    for env, replica in zip(envs, p.replicas):
        for name in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
            assert env.get(name) == replica.env.get(name), name


def test_tf_config_of_a_job_of_several_roles_is_derived_in_the_pod():
    """One Indexed Job of chief, servers and workers cannot write each pod's TF_CONFIG: its pods derive it (and
    a JobSet, one Job per role, writes it)."""
    job = k8s_plan(workers=2, strategy="ps", parameter_servers=1, k8s_kind="job")
    assert all("TF_CONFIG" not in env for env, _i in pods(job))
    jobset = k8s_plan(workers=2, strategy="ps", parameter_servers=1, k8s_kind="jobset")
    assert [json.loads(env["TF_CONFIG"])["task"] for env, _i in pods(jobset)] == [
        {"type": "chief", "index": 0}, {"type": "ps", "index": 0}, {"type": "worker", "index": 0},
        {"type": "worker", "index": 1}]


def test_job_from_env_derives_before_it_reads(trainer, monkeypatch):
    p = k8s_plan(workers=3)
    env, _i = pods(p)[2]
    environ = dict(env)  # the pod's whole environment, and nothing of this process's
    monkeypatch.setattr(os, "environ", environ)
    _job, worker, num_workers, _data, _out = trainer.reporter.job_from_env()
    assert (worker, num_workers) == (2, 3)
    assert json.loads(environ["TF_CONFIG"])["task"] == {"type": "worker", "index": 2}


# -- refusals and the CLI -----------------------------------------------------------------------------
@pytest.mark.parametrize("fields, needle", [
    ({"max_restarts": 1}, "--k8s-checkpoint-claim NAME"),
    ({"network": "shared"}, "--network shared is for --backend compose"),
    ({"k8s_checkpoint_claim": "Bad_Claim"}, "k8s_checkpoint_claim: 'Bad_Claim' is not"),
    ({"registry": "reg.example/ml/"}, "registry: 'reg.example/ml/' is not"),
])
def test_refusals_are_one_line_naming_the_flag(fields, needle):
    with pytest.raises(InvalidSpec) as exc:
        make_spec(backend="k8s", run_id="r", workers=2, **fields)
    assert needle in exc.value.message and "\n" not in exc.value.message


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("framework, workers, extra", [("tensorflow", 2, {}), ("torch", 3, {}), ("mpi", 2, {}),
                                                       ("torch", 2, {"procs_per_worker": 2})])
def test_a_script_job_runs_its_own_image_and_validates(kind, framework, workers, extra):
    """A script's snapshot is a layer on the run's image (orch-script:<run id>), pulled from --registry; the
    manifests name it, mount nothing of this host, and carry the variables Compose sets."""
    p = k8s_plan(framework=framework, workers=workers, k8s_kind=kind, script="/home/me/train.py",
                 registry="reg.example/ml", **extra)
    validate(p.artifact)
    assert p.loaders_on == ("orch-torch:0.1.0" if framework == "torch" else "orch-trainer:0.1.0-multi")
    assert p.script_on.startswith("orch-trainer:0.1.0-multi-loaders" if framework != "torch" else "orch-data:")
    specs = pod_specs(documents(p.artifact))
    trainers = [c for spec in specs for c in spec["containers"]]
    assert {c["image"] for c in trainers} == {"reg.example/ml/orch-script:golden"}
    assert all(c["command"][-1] == "/orch/script/train.py" for c in trainers)
    assert all(m["mountPath"] != "/orch/script" for c in trainers for m in c.get("volumeMounts", []))
    assert not any("hostPath" in v for spec in specs for v in spec.get("volumes", []))
    for (pod_env, _i), replica in zip(pods(p), p.replicas):
        for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "TF_CONFIG", "PET_NODE_RANK", "PET_NNODES",
                     "ORCH_LOADERS_DIR", "ORCH_KERAS_MNIST"):
            assert pod_env.get(name) == replica.env.get(name), name


def test_a_script_job_without_a_registry_renders_and_up_says_to_pass_one(tmp_path, monkeypatch):
    p = k8s_plan(workers=2, script="/home/me/train.py")
    assert "orch-script:golden" in p.artifact and "hostPath" not in p.artifact  # no folder of this host is mounted


def test_cli_render_prints_the_manifests(tmp_path):
    result = orch("render", "--backend", "k8s", "--k8s-kind", "jobset", "-n", "2", "--run-id", "golden")
    assert result.code == 0 and result.err == "", result
    assert result.out == k8s_plan(workers=2, k8s_kind="jobset").artifact
    validate(result.out)
    plan_json = json.loads(orch("render", "--backend", "k8s", "-n", "2", "--run-id", "r", "--format", "json").out)
    assert plan_json["backend"] == "k8s" and plan_json["project"] == "orch-r"
    assert [r["tf_config"]["cluster"]["worker"] for r in plan_json["replicas"]] == [
        ["orch-r-0.orch-r:12345", "orch-r-1.orch-r:12345"]] * 2


def test_cli_up_says_to_apply_the_rendered_manifests(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    result = orch("up", "--backend", "k8s", "-n", "2", "--run-id", "r")
    one_line_error(result, 2, "`orch render --backend k8s | kubectl apply -f -`")
    assert not (tmp_path / "runs" / "r").exists()


def test_cli_refuses_restarts_without_a_claim():
    one_line_error(orch("render", "--backend", "k8s", "--max-restarts", "1", "--run-id", "r"), 2,
                   "--k8s-checkpoint-claim NAME")


def test_the_plan_keeps_the_backend():
    p = k8s_plan(workers=2)
    assert p.backend == "k8s" and p.artifact_name == "k8s.yml"
    assert dataclasses.replace(p, artifact="").engine_name == "orch-golden"


@pytest.mark.parametrize("kind", KINDS)
def test_a_network_policy_lets_the_jobs_pods_reach_each_other_and_dns_only(kind):
    p = k8s_plan(workers=3, k8s_kind=kind, framework="torch")
    validate(p.artifact)
    docs = documents(p.artifact, policy=True)
    assert docs[0]["kind"] == "NetworkPolicy"  # applied before any pod can start, deleted last
    spec = docs[0]["spec"]
    own = {"podSelector": {"matchLabels": {"orch.run": "orch-golden"}}}
    assert spec["podSelector"] == own["podSelector"] and spec["policyTypes"] == ["Ingress", "Egress"]
    assert [rule["from"] for rule in spec["ingress"]] == [[own]]
    assert [rule["to"] for rule in spec["egress"]] == [[own], [{"namespaceSelector": {},
                                                              "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]]
    assert {port["port"] for port in spec["egress"][1]["ports"]} == {53}
    for job in (d for d in docs if d["kind"] in ("Job", "JobSet")):  # every pod carries the label selected
        text = json.dumps(job)
        assert '"orch.run": "orch-golden"' in text


def test_every_empty_dir_has_a_size_limit():
    for kind in KINDS:
        for pod in pod_specs(documents(k8s_plan(workers=2, k8s_kind=kind, dataset="mnist").artifact)):
            dirs = [v for v in pod["volumes"] if "emptyDir" in v]
            assert dirs and all(v["emptyDir"].get("sizeLimit") for v in dirs), dirs


# -- Kubeflow Trainer v2 ------------------------------------------------------------------------------
RUNTIMES = {"torch": ("TrainingRuntime", {"torch": {}}), "mpi": ("TrainingRuntime", {}),
            "tensorflow": ("ClusterTrainingRuntime", {}), "jax": ("TrainingRuntime", {"jax": {}})}


def test_every_framework_says_which_runtime_its_trainjob_takes():
    assert set(RUNTIMES) == set(frameworks.BUILTIN)  # a new framework: its TrainJob is tested here


@pytest.mark.parametrize("framework", sorted(RUNTIMES))
@pytest.mark.parametrize("workers", range(1, 9))
def test_a_trainjob_and_its_runtime_validate_against_trainers_crds(framework, workers):
    p = k8s_plan(framework=framework, workers=workers, k8s_kind="trainjob", global_batch=840)
    docs = validate(p.artifact)
    kind, policy = RUNTIMES[framework]
    assert [d["kind"] for d in docs] == [kind, "TrainJob"]
    runtime, job = docs
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": kind,
                                         "name": runtime["metadata"]["name"]}
    assert job["spec"]["trainer"] == {"numNodes": workers, **({"numProcPerNode": 1} if policy else {})}
    assert runtime["spec"]["mlPolicy"] == {"numNodes": workers, **policy}
    assert runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"] == framework
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    # Trainer finds the job to scale and the container to give a policy's variables by these names.
    assert node["name"] == "node"
    assert node["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    (container,) = node["template"]["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "node"
    rules = node["template"]["spec"]["podFailurePolicy"]["rules"]
    assert rules[1]["onExitCodes"]["containerName"] == "node"
    if workers == 3:
        assert p.artifact == golden(f"k8s-trainjob-{framework}-3-workers.yml", p.artifact)


def test_each_trainjob_pod_meets_its_peers_where_trainer_names_them():
    """Trainer's JobSet names pods <trainjob>-node-0-<i>.<trainjob>, its PET_MASTER_ADDR the first of them."""
    p = k8s_plan(framework="torch", workers=3, k8s_kind="trainjob", global_batch=840)
    name = object_name(p.spec.run_id)
    envs = [env for env, _i in pods(p)]
    assert [env["RANK"] for env in envs] == ["0", "1", "2"]
    assert {(env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"]) for env in envs} == {
        (f"{name}-node-0-0.{name}", "29500", "3")}
    assert "Kubeflow Trainer v2" in p.artifact.split("---")[0]


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_each_tensorflow_trainjob_pod_writes_the_tf_config_compose_would_set(trainer, workers):
    p = k8s_plan(framework="tensorflow", workers=workers, k8s_kind="trainjob", global_batch=840)
    tf = frameworks.get("tensorflow")
    addresses = KubernetesBackend().addresses(p.spec, p.spec.replica_keys(), tf.port)
    name = object_name(p.spec.run_id)
    assert list(addresses.values()) == [f"{name}-node-0-{i}.{name}:{tf.port}" for i in range(workers)]
    for (env, _i), key in zip(pods(p), p.spec.replica_keys()):
        assert env.get("TF_CONFIG") == tf.replica_env(p.spec, key, addresses).get("TF_CONFIG")


def test_each_mpi_trainjob_pod_knows_every_host_and_the_launcher_is_the_first():
    p = k8s_plan(framework="mpi", workers=3, k8s_kind="trainjob", global_batch=840)
    name = object_name(p.spec.run_id)
    for env, _i in pods(p):
        assert env["ORCH_MPI_HOSTS"] == ",".join(f"{name}-node-0-{i}.{name}" for i in range(3))


def test_a_trainjob_of_several_roles_is_refused_and_any_is_rendered_not_supervised():
    from orchestrator.backends.k8s import KubernetesBackend

    one_line_error(orch("render", "--backend", "k8s", "--k8s-kind", "trainjob", "--strategy", "ps", "--workers", "2"),
                   2, "--k8s-kind: a TrainJob runs one Job of like nodes, and this job has the roles chief, ps, worker; "
                      "use --k8s-kind jobset")
    p = k8s_plan(framework="torch", workers=2, k8s_kind="trainjob")
    with pytest.raises(InvalidSpec, match="Kubeflow Trainer supervises a TrainJob itself"):
        KubernetesBackend().preflight(p)


def test_a_trainjob_of_several_ranks_per_node_asks_trainer_for_them():
    p = k8s_plan(framework="torch", workers=2, k8s_kind="trainjob", script="/home/me/train.py", procs_per_worker=4,
                 registry="reg.example/ml")
    runtime, job = validate(p.artifact)
    assert job["spec"]["trainer"] == {"numNodes": 2, "numProcPerNode": 4}  # Trainer's PET_NPROC_PER_NODE
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    (container,) = node["template"]["spec"]["template"]["spec"]["containers"]
    assert "torch.distributed.run" in container["command"] and container["image"] == "reg.example/ml/orch-script:golden"
