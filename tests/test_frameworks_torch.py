"""PyTorch's framework, pure: the rendezvous environment of every rank, the rendered Compose file, the spec's
PyTorch defaults and refusals, the CPU-only index's download command, and gloo's interface."""
import json
import os
import socket

import pytest
import yaml

from orchestrator import frameworks
from orchestrator.errors import InvalidSpec
from orchestrator.frameworks.torch.build import index_download_args
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from tests.conftest import ROOT, run_orch
from tests.test_cli_inprocess import orch as orch_cli
from tests.test_trainer_reports import trainer  # noqa: F401 (a fixture)


def _paths(tmp_path):
    return Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results")


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_every_rank_gets_the_environment_rendezvous(workers, tmp_path):
    p = plan(make_spec(framework="torch", workers=workers, run_id="t"), _paths(tmp_path))
    for position, replica in enumerate(p.replicas):
        env = replica.env
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("worker-0", "29500")
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == (str(position), str(workers), "0")
        assert replica.image == "orch-torch:0.1.0"
        assert replica.rendezvous["torch"] == {"rank": position, "world_size": workers, "master": "worker-0",
                                               "master_port": 29500, "backend": "gloo", "init_method": "env://",
                                               "gradients": "gloo"}
        assert json.loads(env["ORCH_JOB"])["strategy"] == "ddp"


def test_one_worker_is_the_serial_baseline_with_no_process_group(tmp_path):
    (replica,) = plan(make_spec(framework="torch", run_id="t"), _paths(tmp_path)).replicas
    assert not {"MASTER_ADDR", "RANK", "WORLD_SIZE"} & set(replica.env)
    assert json.loads(replica.env["ORCH_JOB"])["strategy"] == "serial" and replica.rendezvous == {"torch": None}


def test_the_compose_file_is_locked_down_with_shared_memory_for_each_rank(tmp_path):
    p = plan(make_spec(framework="torch", workers=2, run_id="t"), _paths(tmp_path))
    services = yaml.safe_load(p.artifact)["services"]
    for name in ("worker-0", "worker-1"):
        s = services[name]
        assert s["shm_size"] == "512m" and s["read_only"] and s["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in s["security_opt"] and s["user"] == "1000:1000"
        assert s["networks"] == ["cluster"] and "ipc" not in s and "entrypoint" not in s
    swarm = plan(make_spec(framework="torch", workers=2, run_id="t", backend="swarm"), _paths(tmp_path))
    mounts = yaml.safe_load(swarm.artifact)["services"]["worker-0"]["volumes"]
    assert {"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": 512 * 2**20}} in mounts


def test_a_users_script_runs_under_the_interface_launcher(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text("print('hi')\n")
    p = plan(make_spec(framework="torch", workers=2, run_id="t", script=str(script), script_args=("--x", "1")),
             _paths(tmp_path))
    assert p.replicas[1].command == ("python3", "-m", "orch_trainer.torch_env", "python3", "-u",
                                     "/orch/script/ddp.py", "--x", "1")
    assert p.replicas[1].env["RANK"] == "1"
    one = plan(make_spec(framework="torch", run_id="t", script=str(script)), _paths(tmp_path))
    assert one.replicas[0].command == ("python3", "-m", "orch_trainer.torch_env", "python3", "-u",
                                       "/orch/script/ddp.py")


@pytest.mark.parametrize("workers", [1, 3])
def test_a_script_gets_torchruns_environment_at_every_n_one_included(tmp_path, workers):
    script = tmp_path / "ddp.py"
    script.write_text("print('hi')\n")
    p = plan(make_spec(framework="torch", workers=workers, run_id="t", script=str(script)), _paths(tmp_path))
    for i, replica in enumerate(p.replicas):
        env = replica.env
        # what `torchrun --nnodes N --nproc-per-node 1` gives rank i
        assert {k: env[k] for k in ("RANK", "GROUP_RANK", "ROLE_RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_WORLD_SIZE",
                                    "ROLE_WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_PORT", "ROLE_NAME",
                                    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")} == {
            "RANK": str(i), "GROUP_RANK": str(i), "ROLE_RANK": str(i), "LOCAL_RANK": "0", "WORLD_SIZE": str(workers),
            "GROUP_WORLD_SIZE": str(workers), "ROLE_WORLD_SIZE": str(workers), "LOCAL_WORLD_SIZE": "1",
            "MASTER_PORT": "29500", "ROLE_NAME": "default", "TORCHELASTIC_RUN_ID": "t",
            "TORCHELASTIC_RESTART_COUNT": "0"}
        assert env["MASTER_ADDR"] == "worker-0"
    own = plan(make_spec(framework="torch", run_id="t"), _paths(tmp_path))  # orch's serial baseline: no group
    assert "RANK" not in own.replicas[0].env and own.replicas[0].rendezvous == {"torch": None}


def test_pytorch_defaults_are_seed_002s():
    spec = make_spec(framework="torch", workers=2)
    assert (spec.model, spec.learning_rate, spec.global_batch) == ("cnn", 0.01, 96)
    assert make_spec(framework="torch", model="mlp", learning_rate=0.1).model == "mlp"
    assert make_spec(workers=2).learning_rate == 1e-3  # TensorFlow's stay
    assert spec.training_fields()["batch_per_worker"] == 0


def test_batch_per_worker_makes_the_global_batch_grow_with_the_ranks():
    spec = make_spec(framework="torch", workers=4, batch_per_worker=64)
    assert spec.global_batch == 256 and spec.replace(workers=8).global_batch == 512
    assert make_spec(framework="torch", workers=4, batch_per_worker=64, global_batch=256).global_batch == 256
    with pytest.raises(InvalidSpec, match="--batch-per-worker 64 with 4 workers is a global batch of 256, got "
                                          "--batch-size 96; leave --batch-size out"):
        make_spec(framework="torch", workers=4, batch_per_worker=64, global_batch=96)
    with pytest.raises(InvalidSpec, match="batch_per_worker: --batch-per-worker is an option of --framework torch"):
        make_spec(workers=2, batch_per_worker=64)


@pytest.mark.parametrize("fields, message", [
    ({"model": "text", "dataset": "vader-reviews"}, "model: --framework torch trains the cnn or the mlp"),
    ({"gpus": 1}, "gpus: orch's PyTorch image is built for CPUs"),
    ({"network": "host", "expose_ports_on_host": True}, "network: --framework torch meets on the cluster network"),
    ({"checkpoint_every": 10}, "checkpoint_every: ddp checkpoints after every epoch"),
    ({"strategy": "mwms"}, "strategy: --strategy is an option of --framework tensorflow, not torch"),
])
def test_what_pytorch_does_not_do_is_refused_in_one_line(fields, message):
    with pytest.raises(InvalidSpec) as info:
        make_spec(framework="torch", workers=2, **fields)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_cpu_only_index_is_asked_for_the_locked_torch_alone():
    assert index_download_args("https://download.pytorch.org/whl/cpu") == [
        "--index-url", "https://download.pytorch.org/whl/cpu", "--no-deps", "torch==2.9.1"]
    for bad in ("download.pytorch.org/whl/cpu", "file:///etc", "https://x y", "ftp://mirror/simple"):
        with pytest.raises(InvalidSpec, match="is not an http\\(s\\) URL of a package index"):
            index_download_args(bad)


def test_the_cli_refuses_a_bad_index_before_building(orch_env):
    proc = run_orch(["build", "--framework", "torch", "--torch-index", "not a url"], orch_env)
    assert proc.returncode == 2 and "is not an http(s) URL of a package index" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_orch(["build", "--torch-index", "https://example.org/simple"], orch_env)
    assert proc.returncode == 2 and "is for an image whose wheels come from an index; add --framework torch" in proc.stderr


def test_the_lock_pins_torch_and_the_libraries_it_links():
    from orchestrator.images.wheels import check_fresh, read_lock

    lock = read_lock(ROOT / "orchestrator/frameworks/torch/image/requirements.lock")
    check_fresh(lock, ROOT / "orchestrator/frameworks/torch/image")
    assert lock.packages["torch"].version == "2.9.1"
    assert {"nvidia-cudnn-cu12", "nvidia-nccl-cu12", "nvidia-cublas-cu12"} <= set(lock.packages)
    assert not {"triton", "nvidia-cusolver-cu12", "tensorflow-cpu"} & set(lock.packages)
    assert frameworks.get("torch").build_command() == "orch build --framework torch"


def test_kubernetes_pods_derive_the_rank_compose_sets(trainer, tmp_path):  # noqa: F811
    """Each pod of the rendered Job gets, as Kubernetes expands its template, the RANK that the host writes
    literally for Compose, and derives the same with the trainer's copy of the shared rendezvous."""
    from orchestrator.backends.k8s import documents_of
    from tests.test_backends_k8s import kubelet_env

    compose = plan(make_spec(framework="torch", workers=3, run_id="ranks", dataset="synthetic"), _paths(tmp_path))
    k8s = plan(make_spec(framework="torch", workers=3, run_id="ranks", dataset="synthetic", backend="k8s"),
               _paths(tmp_path))
    (job,) = [d for d in documents_of(k8s.artifact) if d["kind"] == "Job"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    for index, replica in enumerate(compose.replicas):
        pod = {**kubelet_env(container, index), "JOB_COMPLETION_INDEX": str(index)}
        assert pod["ORCH_RENDEZVOUS"] == "rank" and pod["RANK"] == replica.env["RANK"] == str(index)
        env = trainer.rendezvous.env_from_index(pod)
        assert env["RANK"] == replica.env["RANK"] and "TF_CONFIG" not in env


def test_gloo_is_bound_to_the_interface_that_reaches_the_master():
    import importlib.util

    spec = importlib.util.spec_from_file_location("torch_env", ROOT / "orchestrator/frameworks/torch/trainer/torch_env.py")
    torch_env = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(torch_env)  # standard library only, as in the image

    assert torch_env.cluster_interface("127.0.0.1") == "lo"
    env = {"MASTER_ADDR": "127.0.0.1"}
    assert torch_env.set_interface(env) == "lo" and env["GLOO_SOCKET_IFNAME"] == "lo"
    mine = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "eth9"}
    assert torch_env.set_interface(mine) == "eth9"  # the user's choice stands
    assert torch_env.set_interface({}) is None  # the serial baseline has no master
    assert torch_env.cluster_interface("no-such-host.invalid") is None
    # A name that never resolves is a replica that never came or already left, not an interface to name.
    with pytest.raises(RuntimeError, match=r"MASTER_ADDR no-such-host.invalid did not resolve within 1 s: no replica "
                                           r"of that name is on the job's network \(not started, or already exited\)"):
        torch_env.set_interface({"MASTER_ADDR": "no-such-host.invalid"}, wait=1.0)
    assert socket.if_nameindex()


def test_review_edges_of_the_spec():
    # A per-worker batch given as text in an experiment file is still the one the global batch follows.
    assert make_spec(framework="torch", workers=4, batch_per_worker="64").global_batch == 256
    spec = make_spec(framework="torch", workers=4, batch_per_worker=64)
    assert spec.replace(batch_per_worker=0).global_batch == 256  # off again: the global batch it had stays
    # The PyTorch refusal comes first, not advice (--expose-ports-on-host) that would only lead to it.
    with pytest.raises(InvalidSpec, match="^network: --framework torch meets on the cluster network"):
        make_spec(framework="torch", workers=2, network="host")
    # A user's script may train on text; orch's own PyTorch trainer may not. The script picks its own model.
    assert make_spec(framework="torch", dataset="vader-reviews", script="/x/train.py").dataset == "vader-reviews"
    with pytest.raises(InvalidSpec, match="^model: orch's own trainer reads it, and --script runs your script"):
        make_spec(framework="torch", model="text", dataset="vader-reviews", script="/x/train.py")


def test_requirements_go_on_the_pytorch_image_for_a_pytorch_job(orch_env, tmp_path):
    from orchestrator.images.user import image_for

    (tmp_path / "requirements.txt").write_text("torchvision==0.24.1\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    proc = run_orch(["render", "--framework", "torch", "--script", str(tmp_path / "src" / "train.py"), "--requirements",
                     str(tmp_path / "requirements.txt"), "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    tag = image_for(b"torchvision==0.24.1\n", "torch")
    assert tag.startswith("orch-torch:") and "-user-" in tag and json.loads(proc.stdout)["image"] == tag
    assert image_for(b"six\n", "torch") != image_for(b"six\n", "tensorflow") == image_for(b"six\n", "mpi")


def test_several_ranks_per_container_run_under_torchrun_with_its_environment(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text("print('hi')\n")
    p = plan(make_spec(framework="torch", workers=2, procs_per_worker=3, run_id="t", script=str(script),
                       script_args=("--x", "1")), _paths(tmp_path))
    for node, replica in enumerate(p.replicas):
        env = replica.env
        assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
            "MASTER_ADDR": "worker-0", "MASTER_PORT": "29500", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "3"}
        # torchrun's own flags, from its PET_ variables; it sets RANK and LOCAL_RANK per process
        assert {k: env[k] for k in env if k.startswith("PET_")} == {
            "PET_NNODES": "2", "PET_NPROC_PER_NODE": "3", "PET_NODE_RANK": str(node), "PET_MASTER_ADDR": "worker-0",
            "PET_MASTER_PORT": "29500"}
        assert "RANK" not in env and "LOCAL_RANK" not in env
        assert replica.command == ("python3", "-m", "orch_trainer.torch_env", "python3", "-m", "torch.distributed.run",
                                   "--max-restarts", "0", "--rdzv-id", "t", "--log-dir", "ranks", "--tee", "3",
                                   "/orch/script/ddp.py", "--x", "1")
        assert replica.rendezvous["torch"]["node_rank"] == node and replica.rendezvous["torch"]["world_size"] == 6
    # One container of several ranks still has a process group, its master itself.
    (one,) = plan(make_spec(framework="torch", procs_per_worker=2, run_id="t", script=str(script)),
                  _paths(tmp_path)).replicas
    assert one.env["MASTER_ADDR"] == "worker-0" and one.env["WORLD_SIZE"] == "2" and "torch.distributed.run" in one.command


@pytest.mark.parametrize("args, message", [
    (["--procs-per-worker", "2"], "orch's own trainer runs one rank per container; --procs-per-worker is for a "
                                  "--script's ranks (use --workers 2)"),
    (["--framework", "tensorflow", "--script", "x.py", "-j", "2x2"], "TensorFlow runs one process per container"),
    (["-j", "2x2", "--workers", "2", "--script", "x.py"], "-j 2x2 sets the containers and the ranks in each; leave "
                                                          "out --workers"),
    (["-j", "2by2"], "'2by2' is not NxP, e.g. 2x2"),
    (["-j", "2x17", "--script", "x.py"], "--procs-per-worker"),
])
def test_procs_per_worker_and_j_are_refused_in_one_line_where_they_do_not_fit(args, message, tmp_path):
    (tmp_path / "x.py").write_text("")
    args = [str(tmp_path / a) if a == "x.py" else a for a in args]
    result = orch_cli("render", "--framework", "torch", *args)
    assert result.code == 2 and message in result.err and len(result.err.strip().splitlines()) == 1, result.err


def test_j_sets_the_containers_and_the_ranks_in_each(tmp_path):
    (tmp_path / "x.py").write_text("")
    result = orch_cli("render", "--framework", "torch", "-j", "3x2", "--script", str(tmp_path / "x.py"), "--format",
                      "json")
    assert result.code == 0, result.err
    spec = json.loads(result.out)["spec"]
    assert (spec["workers"], spec["procs_per_worker"]) == (3, 2)


def test_the_ddp_communication_hook_carries_no_annotation_ddp_would_refuse():
    """DDP's register_comm_hook refuses a hook whose bucket or return is annotated with anything but torch's own
    classes; with postponed annotations any annotation is a string, so the hook has none (a live run found it)."""
    import ast

    source = (ROOT / "orchestrator" / "frameworks" / "torch" / "trainer" / "torch_loop.py").read_text()
    (hook,) = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef) and node.name == "hook"]
    assert hook.returns is None and all(arg.annotation is None for arg in hook.args.args)
