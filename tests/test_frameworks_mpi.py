"""MPI's plan: the rendezvous environment and launch command of every rank, the rendered Compose file, and the
spec's rules. Pure: no engine."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan

LAUNCHER = ("python3", "-m", "orch_trainer.mpi_launch")


def mpi_plan(tmp_path, **fields):
    fields = {"framework": "mpi", "workers": 3, "dataset": "synthetic", "run_id": "r",
              **({} if "script" in fields else {"samples": 6000}), **fields}  # a script's own arguments size it
    return plan(make_spec(**fields), Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results"))


@pytest.mark.parametrize("workers", [2, 3, 4, 8])
def test_every_rank_gets_the_hosts_in_rank_order_and_runs_the_trainer_under_the_launcher(tmp_path, workers):
    p = mpi_plan(tmp_path, workers=workers)
    hosts = ",".join(f"worker-{i}" for i in range(workers))
    for rank, r in enumerate(p.replicas):
        assert r.env["ORCH_MPI_HOSTS"] == hosts and r.env["ORCH_MPI_LAUNCH_PORT"] == "7470"
        assert r.env["ORCH_WORKER_INDEX"] == str(rank) and r.env["ORCH_NUM_WORKERS"] == str(workers)
        assert r.command == (*LAUNCHER, "python3", "-m", "orch_trainer")
        assert r.rendezvous["mpi"] == {"rank": rank, "world_size": workers, "hosts": hosts.split(","),
                                       "launcher": "worker-0", "transport": "shm"}
        assert json.loads(r.env["ORCH_JOB"])["strategy"] == "mpi"
        assert "TF_CONFIG" not in r.env


def test_one_worker_is_the_plain_loop_with_no_mpi(tmp_path):
    (r,) = mpi_plan(tmp_path, workers=1).replicas
    assert r.command == ("python3", "-m", "orch_trainer") and "ORCH_MPI_HOSTS" not in r.env
    assert r.image.endswith("-single") and r.rendezvous == {"mpi": None}


def test_shared_memory_puts_the_replicas_on_one_host_and_tcp_does_not(tmp_path):
    services = yaml.safe_load(mpi_plan(tmp_path).artifact)["services"]
    first, *others = (services[f"worker-{i}"] for i in range(3))
    assert {s["hostname"] for s in services.values()} == {"worker-0-host"}  # none of the services' own names
    assert first["ipc"] == "shareable" and first["shm_size"] == "256m" and "pid" not in first
    for s in others:
        assert s["ipc"] == s["pid"] == "service:worker-0" and s["depends_on"] == ["worker-0"]
    for s in services.values():  # the rest of the lock-down stays
        assert s["cap_drop"] == ["ALL"] and s["read_only"] is True and s["user"] == "1000:1000"
        assert s["security_opt"] == ["no-new-privileges:true"]
        assert "cap_add" not in s and "privileged" not in s
        assert s["environment"]["UCX_TLS"] == "self,posix,sysv,tcp"
    tcp = yaml.safe_load(mpi_plan(tmp_path, transport="tcp").artifact)["services"]
    assert [s["hostname"] for s in tcp.values()] == ["worker-0", "worker-1", "worker-2"]
    assert not any("ipc" in s or "pid" in s for s in tcp.values())
    assert {s["environment"]["UCX_TLS"] for s in tcp.values()} == {"self,tcp"}


def test_a_users_script_is_the_rank_command(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    p = mpi_plan(tmp_path, script=str(script), script_args=("--epochs", "2"))
    assert p.replicas[1].command == (*LAUNCHER, "python3", "-u", "/orch/script/train.py", "--epochs", "2")


def test_a_users_script_on_one_container_runs_under_hydra_as_at_every_n(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    (r,) = mpi_plan(tmp_path, workers=1, script=str(script)).replicas
    assert r.command == (*LAUNCHER, "python3", "-u", "/orch/script/train.py")  # mpiexec gives it PMI_RANK...
    assert r.env["ORCH_MPI_HOSTS"] == "worker-0" and r.rendezvous["mpi"]["world_size"] == 1


@pytest.mark.parametrize("fields, message", [
    ({"strategy": "mwms"}, "strategy: --strategy is an option of --framework tensorflow, not mpi"),
    ({"steps_per_execution": 10}, "--steps-per-execution is an option of --framework tensorflow"),
    ({"network": "shared"}, "network: --framework mpi meets on the cluster network"),
    ({"backend": "swarm", "transport": "shm"}, "transport: shm makes the containers share one host's IPC and PID namespaces"),
    ({"checkpoint_every": 10}, "checkpoint_every: mpi checkpoints after every epoch"),
    ({"transport": "udp"}, "transport"),
    ({"gpus": 1}, "gpus: orch's MPI ranks compute on CPUs"),
])
def test_mpi_misfits_are_one_line_errors(tmp_path, fields, message):
    with pytest.raises(InvalidSpec) as exc:
        mpi_plan(tmp_path, **fields)
    assert message in exc.value.message and "\n" not in exc.value.message


def test_tensorflow_refuses_mpis_options(tmp_path):
    with pytest.raises(InvalidSpec, match="transport: --transport is an option of --framework mpi or torch or jax, not tensorflow"):
        make_spec(workers=2, transport="tcp", run_id="r")


# -- the launcher's check of a launch line (replica 0's answer is input to every other replica) --------------
@pytest.fixture
def launch(monkeypatch):
    import importlib.util

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("mpi_launch", ROOT / "orchestrator/trainer/mpi_launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.shutil, "which", lambda name: f"/opt/venv/bin/{name}")
    return module


GOOD = ("/opt/venv/bin/hydra_pmi_proxy --control-port worker-0:36297 --rmk user --launcher manual --demux poll "
        "--pgid 0 --retries 10 --usize -1 --pmi-port 0 --gpus-per-proc -2 --gpu-subdevs-per-proc -2 --proxy-id 1")


def test_a_launch_line_is_run_only_if_it_is_hydras_proxy_for_this_replica_calling_replica_0(launch):
    assert launch.proxy_argv(GOOD, 1, "worker-0")[0] == "/opt/venv/bin/hydra_pmi_proxy"
    bad = {
        GOOD.replace("/opt/venv/bin/hydra_pmi_proxy", "/bin/sh"): "not /opt/venv/bin/hydra_pmi_proxy",
        GOOD.replace("--proxy-id 1", "--proxy-id 2"): "for proxy ['2'], not 1",
        GOOD + " --proxy-id 1": "for proxy ['1', '1'], not 1",
        GOOD.replace("worker-0:36297", "evil:36297"): "calls back to ['evil:36297'], not to worker-0",
        GOOD + " --control-port worker-0:1": "calls back to",
        GOOD + " ; rm -rf /": "not a plain word",
        GOOD + " $(id)": "not a plain word",
        "x" * 5000: "too long",
        "": "launch line runs 'nothing'",
    }
    for line, message in bad.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            launch.proxy_argv(line, 1, "worker-0")


def test_several_ranks_per_container_are_hydras_ppn_with_torchruns_names(tmp_path):
    from orchestrator.trainer import mpi_launch

    script = tmp_path / "sum.py"
    script.write_text("")
    p = plan(make_spec(framework="mpi", workers=2, procs_per_worker=2, run_id="t", script=str(script)),
             Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results"))
    for node, replica in enumerate(p.replicas):
        assert replica.env["ORCH_MPI_PROCS_PER_HOST"] == "2" and replica.env["MPIR_CVAR_CH4_CMA_ENABLE"] == "0"
        assert replica.rendezvous["mpi"]["ranks"] == [2 * node, 2 * node + 1]
        assert replica.rendezvous["mpi"]["world_size"] == 4
    one_each = plan(make_spec(framework="mpi", workers=2, run_id="t", script=str(script)),
                    Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results"))
    assert "ORCH_MPI_PROCS_PER_HOST" not in one_each.replicas[0].env  # one rank per container: as before
    assert mpi_launch.rank_env({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}) == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
