"""Live runs on a single-node Docker Swarm (`--backend swarm`). The swarm is this engine's: the fixture initialises
one only if the engine is in none, and then leaves it (and removes the docker_gwbridge network it made) afterwards,
even when a test fails. Each test removes its stack, containers and networks."""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import __version__
from tests.conftest import (ENGINE, ROOT, SMALL, made, made_once, orch_containers, orch_environment, orch_networks,
                            replica_events, run_orch, start_orch, wait_for)

pytestmark = pytest.mark.docker

LONG = ["--workers", "2", "--dataset", "synthetic", "--samples", "6000", "--epochs", "200",
        "--steps-per-execution", "1"]


def _docker(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=120)


def _swarm_state() -> str:
    return _docker("info", "--format", "{{.Swarm.LocalNodeState}}", check=True).stdout.strip()


@pytest.fixture(scope="module")
def swarm():
    """An active swarm on this engine for the module's tests; left as it was found afterwards. No other live test
    runs beside it (the engine held alone, from before the swarm is looked at until it is left)."""
    with ENGINE.hold(alone=True):
        info = json.loads(_docker("info", "--format", "{{json .Swarm}}", check=True).stdout)
        state = info.get("LocalNodeState")
        if state == "active" and not info.get("ControlAvailable"):
            pytest.skip("this engine is a swarm worker; these tests need a manager (or no swarm at all)")
        if state not in ("active", "inactive"):
            pytest.skip(f"the engine's swarm is {state!r}; these tests need it active or inactive")
        had_gwbridge = bool(_docker("network", "ls", "-q", "--filter", "name=^docker_gwbridge$").stdout.strip())
        try:
            if state == "inactive":
                _docker("swarm", "init", "--advertise-addr", "127.0.0.1", check=True)
            yield
        finally:
            if state == "inactive":  # ours, even half made: leave it, and the bridge it added
                _docker("swarm", "leave", "--force")
                if not had_gwbridge:
                    _docker("network", "rm", "docker_gwbridge")
                assert _swarm_state() == "inactive", "the test swarm was not left"


def _services(run_id: str) -> list[str]:
    return _docker("service", "ls", "-q", "--filter", f"label=com.docker.stack.namespace=orch-{run_id}").stdout.split()


def _gone(run_id: str) -> bool:
    return _services(run_id) == [] and orch_containers(run_id) == [] and orch_networks(run_id) == []


@pytest.fixture
def stacks(swarm):
    """Collects run ids; removes their stacks, containers and networks even when the test fails."""
    run_ids: list[str] = []
    yield run_ids
    for run_id in run_ids:
        try:
            _remove_stack(run_id)
        except (subprocess.SubprocessError, OSError) as exc:  # go on with the others; say which was left
            print(f"cleanup of stack orch-{run_id} failed: {exc}", file=sys.stderr)


def _remove_stack(run_id: str) -> None:
    _docker("stack", "rm", f"orch-{run_id}")
    deadline = time.monotonic() + 60
    while _services(run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    ids = orch_containers(run_id)
    if ids:
        _docker("rm", "-f", *ids)
    deadline = time.monotonic() + 30
    while orch_networks(run_id) and time.monotonic() < deadline:
        _docker("network", "rm", *orch_networks(run_id))
        time.sleep(0.5)


def test_a_users_script_runs_on_the_swarm_from_its_snapshot(images, orch_env, tmp_path, stacks):
    """--script on a single-node swarm: the snapshot of the script's folder as a layer on the run's image, and the
    replica's own folder, from this node, as its working folder; its report lines come back on stdout."""
    stacks.append("live-swarm-script")
    proc = run_orch(["up", "--backend", "swarm", "--script", str(ROOT / "examples" / "mnist_keras.py"), "--workers",
                     "2", "--run-id", "live-swarm-script", "--format", "json", "--", "--epochs", "2", "--samples",
                     "6000"], orch_env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["state"] == "succeeded" and info["source"]["files"] >= 1
    workers = info["workers"]
    assert [w["samples_per_epoch"] for w in workers] == [[2400, 2400]] * 2  # each its half of 4,800 per epoch
    assert len({w["test_accuracy"] for w in workers}) == 1
    assert _gone("live-swarm-script")
    # The run's image: the snapshot at /orch/script, read-only, on the trainer image with the data set.
    listing = subprocess.run(["docker", "run", "--rm", "--entrypoint", "ls", "orch-script:live-swarm-script", "-l",
                              "/orch/script"], capture_output=True, text=True)
    subprocess.run(["docker", "rmi", "orch-script:live-swarm-script"], capture_output=True)
    assert listing.returncode == 0 and "-r--r--r--" in listing.stdout and "mnist_keras.py" in listing.stdout


@pytest.fixture(scope="module")
def swarm_two(swarm, tmp_path_factory):
    """One 2-worker run on the swarm, on MNIST from the image, that two tests read: its `--format json`, its run
    folder, the environment that finds it, and whether the stack, its containers and networks were gone after."""
    env = orch_environment(tmp_path_factory.mktemp("swarm-two"))
    try:
        proc = run_orch(["up", "--backend", "swarm", "--workers", "2", "--dataset", "mnist", "--samples", "6000",
                         "--epochs", "2", "--run-id", "live-swarm", "--format", "json"], env)
        gone = _gone("live-swarm")
    finally:
        _remove_stack("live-swarm")
    assert proc.returncode == 0, proc.stderr
    return {"info": json.loads(proc.stdout), "dir": Path(env["ORCH_RUNS_DIR"]) / "live-swarm", "env": env,
            "gone": gone}


def test_two_workers_succeed_with_results_read_from_stdout(swarm_two, tmp_path):
    info = swarm_two["info"]
    assert info["state"] == "succeeded"
    workers = info["workers"]
    assert [w["replicas"] for w in workers] == [2, 2]
    assert len({w["test_accuracy"] for w in workers}) == 1 and 0.15 < workers[0]["test_accuracy"] <= 1.0  # chance is 0.1
    run_dir = swarm_two["dir"]
    for i in range(2):
        # Copied from the replica's stdout: the replica's own folder is not mounted on Swarm.
        assert json.loads((run_dir / f"worker-{i}" / "result.json").read_text())["worker"] == i
        assert [e["epoch"] for e in replica_events(run_dir, i) if e["event"] == "epoch"] == [1, 2]
        assert (run_dir / "logs" / f"worker-{i}.log").stat().st_size > 0
    stack_file = (run_dir / "stack.yml").read_text()
    assert '"endpoint_mode": "dnsrr"' in stack_file and '"condition": "none"' in stack_file
    assert swarm_two["gone"]
    collected = run_orch(["collect", "live-swarm", "--out", str(tmp_path / "collected"), "--format", "json"],
                         swarm_two["env"])
    assert collected.returncode == 0, collected.stderr
    summary = json.loads(collected.stdout)
    assert summary["state"] == "succeeded" and len(summary["workers"]) == 2


def test_killed_worker_fails_the_run_and_leaves_nothing(images, orch_env, tmp_path, stacks):
    stacks.append("live-swarm-kill")
    run_dir = tmp_path / "runs" / "live-swarm-kill"
    proc = start_orch(["up", "--backend", "swarm", *LONG, "--run-id", "live-swarm-kill"], orch_env)
    try:
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, 1)), 240, "worker 1's first epoch")
        victim = _docker("ps", "-q", "--filter", "label=orch.run=live-swarm-kill", "--filter",
                         "label=orch.index=1").stdout.split()
        assert victim, "no running container for worker 1"
        _docker("kill", *victim, check=True)
        _, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    assert "orch: error: worker-1 was killed by signal 9 (exit 137)" in stderr
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "failed" and "worker-1" in record["error"]
    assert _gone("live-swarm-kill")


def test_detach_ps_and_down(images, orch_env, tmp_path, stacks):
    stacks.append("live-swarm-detach")
    proc = run_orch(["up", "--backend", "swarm", *LONG, "--run-id", "live-swarm-detach", "--detach"], orch_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "live-swarm-detach"
    wait_for(lambda: len(orch_containers("live-swarm-detach")) == 2, 120, "both task containers")
    listed = json.loads(run_orch(["ps", "live-swarm-detach", "--format", "json"], orch_env).stdout)
    assert listed[0]["state"] == "running"
    # No orch watches a detached run: `orch ps` copies the records its replicas printed into the run folder.
    run_dir = tmp_path / "runs" / "live-swarm-detach"
    wait_for(lambda: run_orch(["ps", "live-swarm-detach"], orch_env).returncode == 0
             and any(e["event"] == "epoch" for e in replica_events(run_dir, 0)), 240, "worker 0's first epoch")
    down = run_orch(["down", "live-swarm-detach"], orch_env)
    assert down.returncode == 0, down.stderr
    assert _gone("live-swarm-detach")
    assert json.loads((run_dir / "run.json").read_text())["state"] == "stopped"
    epochs = [e["epoch"] for e in replica_events(run_dir, 0) if e["event"] == "epoch"]
    assert epochs == list(range(1, len(epochs) + 1))  # each once, though ps and down both copied them


def test_a_worker_that_cannot_run_says_why(images, orch_env, tmp_path, stacks):
    # --image of a name no node has: the task is rejected, and orch reports the swarm's reason at once.
    stacks.append("live-swarm-reject")
    proc = run_orch(["up", "--backend", "swarm", "--workers", "1", *SMALL, "--registry", "registry.invalid/ml",
                     "--run-id", "live-swarm-reject", "--startup-timeout", "120"], orch_env, timeout=300)
    assert proc.returncode != 0
    assert "worker-0 failed: the swarm rejected it" in proc.stderr, proc.stderr
    assert _gone("live-swarm-reject")


def test_the_data_set_travels_inside_the_image(swarm_two):
    # Nodes see no folder of this host: orch adds MNIST to the trainer image as one layer, and mounts no data.
    info = swarm_two["info"]
    assert {w["test_accuracy"] for w in info["workers"]} == {info["workers"][0]["test_accuracy"]}
    assert info["workers"][0]["test_accuracy"] > 0.6
    stack_file = (swarm_two["dir"] / "stack.yml").read_text()
    assert '-multi-mnist"' in stack_file and '"target": "/orch/data"' not in stack_file
    labels = json.loads(_docker("image", "inspect", "--format", "{{json .Config.Labels}}",
                                f"orch-trainer:{__version__}-multi-mnist", check=True).stdout)
    assert labels["orch.kind"] == "data"
    assert swarm_two["gone"]


def test_a_killed_worker_restarts_the_group_on_one_node(images, orch_env, tmp_path, stacks):
    run_id = "live-swarm-restart"
    stacks.append(run_id)
    run_dir = tmp_path / "runs" / run_id
    args = ["--workers", "2", "--dataset", "synthetic", "--samples", "30000", "--epochs", "3",
            "--steps-per-execution", "1", "--max-restarts", "1"]
    proc = start_orch(["up", "--backend", "swarm", *args, "--run-id", run_id], orch_env)
    try:
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, 1)), 240, "worker 1's first epoch")
        victim = _docker("ps", "-q", "--filter", f"label=orch.run={run_id}", "--filter",
                         "label=orch.index=1").stdout.split()
        _docker("kill", *victim, check=True)
        _, stderr = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "worker-1 was killed by signal 9" in stderr and "(restart 1 of 1)" in stderr
    events = replica_events(run_dir, 1)
    # From a checkpoint on this host, not from the start: on a fast host epoch 2 may end before the kill lands
    # (and the events the test reads here may lag the container's), so the epoch it resumes from is 2 or later.
    resumed = [e["epoch"] for e in events if e["event"] == "resumed"]
    assert len(resumed) == 1 and 2 <= resumed[0] <= 3, resumed
    assert json.loads((run_dir / "run.json").read_text())["state"] == "succeeded"
    assert _gone(run_id)


def test_orch_build_data_makes_both_data_images(images, orch_env):
    built = run_orch(["build", "--data", "mnist", "--format", "json"], orch_env, timeout=600)
    assert built.returncode == 0, built.stderr
    tags = {image["tag"] for image in json.loads(built.stdout)}
    assert {f"orch-trainer:{__version__}-multi-mnist", f"orch-data:{__version__}-mnist"} <= tags
    # What Kubernetes' init container does with it: copy the files, as a non-root user, into an empty folder.
    copied = _docker("run", "--rm", "--user", "1000:1000", "--read-only", "--tmpfs", "/orch/data:uid=1000",
                     "--network", "none", f"orch-data:{__version__}-mnist", "sh", "-c",
                     "cp -R /orch-data/. /orch/data/ && ls /orch/data", check=True).stdout.split()
    assert "mnist-train-60k.npz" in copied


def test_an_experiment_runs_its_cells_on_the_swarm(images, orch_env, tmp_path, stacks):
    experiment = tmp_path / "on-swarm.yaml"
    experiment.write_text("name: on-swarm\nbase: {backend: swarm, dataset: synthetic, samples: 6000, epochs: 1, "
                          "steps_per_execution: 10}\ngrid: {workers: [1, 2]}\n")
    proc = run_orch(["experiment", "run", str(experiment), "--out", str(tmp_path / "results")], orch_env, timeout=600)
    cells_file = tmp_path / "results" / "on-swarm" / "cells.json"
    cells = json.loads(cells_file.read_text()) if cells_file.exists() else {}
    stacks.extend(c["run_id"] for c in cells.values())  # removed afterwards, should the sweep have left one
    assert proc.returncode == 0, proc.stderr
    assert sorted(c["state"] for c in cells.values()) == ["succeeded", "succeeded"]
    report = (tmp_path / "results" / "on-swarm" / "report.md").read_text()
    assert "| 2 |" in report and "T(N)/T(1)" in report
    assert all(_gone(c["run_id"]) for c in cells.values())


def test_three_workers_finish_with_the_same_figures_as_on_compose(images, small_runs, orch_env, stacks):
    stacks.append("live-swarm-w3")
    on_swarm = run_orch(["up", "--backend", "swarm", "--workers", "3", *SMALL, "--run-id", "live-swarm-w3",
                         "--format", "json"], orch_env)
    assert on_swarm.returncode == 0, on_swarm.stderr
    # The Compose twin: the same job, made once for the tests that read it (tests/conftest.py).
    swarm_workers = json.loads(on_swarm.stdout)["workers"]
    compose_workers = made(small_runs, "live-w3")["info"]["workers"]
    # The same shards of the same data, the same steps: the same samples and the same model.
    assert [w["samples_per_epoch"] for w in swarm_workers] == [w["samples_per_epoch"] for w in compose_workers] \
        == [[1280, 1280]] * 3
    swarm_acc, compose_acc = ({w["test_accuracy"] for w in ws} for ws in (swarm_workers, compose_workers))
    assert len(swarm_acc) == len(compose_acc) == 1 and abs(swarm_acc.pop() - compose_acc.pop()) < 0.02


TWINS = {  # 2-rank jobs run on Swarm and on Compose, per framework
    "mpi": ["--framework", "mpi", "--workers", "2", "--dataset", "synthetic", "--samples", "3000", "--epochs", "2"],
    "torch": ["--framework", "torch", "--model", "mlp", "--workers", "2", "--dataset", "synthetic", "--samples",
              "3000", "--epochs", "2"],
    "jax": ["--framework", "jax", "--workers", "2", "--dataset", "synthetic", "--samples", "3000", "--epochs", "2"],
}


@pytest.fixture(scope="session", autouse=True)
def compose_twins(images, torch_image, jax_image, vision, small_runs, tmp_path_factory):
    """The Compose runs of TWINS, made (once) before this module's swarm holds the engine alone, and so are the
    images this module needs and the 3-worker twin (small_runs): a session fixture comes before a module's, so the
    other test process goes on beside them."""
    return made_once("twins", {f"live-compose-{name}": args for name, args in TWINS.items()}, tmp_path_factory)


def _same_figures_on_swarm_and_compose(name: str, compose_twins, orch_env, stacks) -> None:
    """TWINS[name] on Swarm and on Compose: the same shares and, the same global batches split between the same
    ranks, the same model to the last digit."""
    stacks.append(f"live-swarm-{name}")
    on_swarm = run_orch(["up", "--backend", "swarm", *TWINS[name], "--run-id", f"live-swarm-{name}", "--format",
                         "json"], orch_env)
    assert on_swarm.returncode == 0, on_swarm.stderr
    swarm_workers = json.loads(on_swarm.stdout)["workers"]
    compose_workers = made(compose_twins, f"live-compose-{name}")["info"]["workers"]
    assert [w["samples_per_epoch"] for w in swarm_workers] == [w["samples_per_epoch"] for w in compose_workers] \
        == [[960, 960]] * 2
    assert {w["test_accuracy"] for w in swarm_workers} == {w["test_accuracy"] for w in compose_workers}
    assert _gone(f"live-swarm-{name}")


def test_a_two_rank_mpi_job_finishes_with_the_same_figures_as_on_compose(compose_twins, orch_env, stacks):
    # On Swarm the ranks meet over TCP on the overlay (--transport auto); on Compose over shared memory.
    _same_figures_on_swarm_and_compose("mpi", compose_twins, orch_env, stacks)


def test_a_two_rank_pytorch_job_finishes_with_the_same_figures_as_on_compose(compose_twins, orch_env, stacks):
    # gloo on the stack's overlay network: each rank binds the interface that reaches worker-0.
    _same_figures_on_swarm_and_compose("torch", compose_twins, orch_env, stacks)


@pytest.fixture
def registry(tmp_path):
    """A registry on this host's loopback, which Docker trusts without TLS: Debian's docker-registry (the
    Distribution project's), its binary taken from the package apt-get downloads. Stopped and removed afterwards."""
    import shutil
    import socket
    import urllib.request

    from orchestrator.data.fetch import apt_deb, deb_members
    from orchestrator.errors import DataError

    try:
        deb = apt_deb("docker-registry", "2.8.2+ds1-1", tmp_path)
    except DataError as exc:
        pytest.skip(f"no docker-registry package here: {exc.message}")
    binary = tmp_path / "docker-registry"
    binary.write_bytes(deb_members(deb, {"bin": "usr/bin/docker-registry"})["bin"])
    binary.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'store'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen([str(binary), "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/v2/", urllib.request), 30, "the registry")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp_path / "store", ignore_errors=True)


def _answers(url: str, request) -> bool:
    try:
        with request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_with_a_registry_the_scripts_image_is_pushed_and_the_nodes_pull_it(images, orch_env, tmp_path, stacks,
                                                                          registry):
    """What a swarm of several nodes needs: orch pushes the run's script image to --registry, and the stack's
    services pull it from there (pinned by digest); the replicas' own folders are their containers'. On orch's
    base image (`--image`), so that the push is small: the script reads its TF_CONFIG and writes to its folder."""
    run_id = "live-swarm-registry"
    stacks.append(run_id)
    source = tmp_path / "src"
    source.mkdir()
    (source / "hello.py").write_text(
        "import json, os\ntask = json.loads(os.environ['TF_CONFIG'])['task']\n"
        "open(os.path.join(os.environ['ORCH_OUTPUT_DIR'], 'note.txt'), 'w').write('written')\n"
        "print('hello from', task['type'], task['index'], 'in', os.getcwd(), flush=True)\n")
    proc = run_orch(["up", "--backend", "swarm", "--image", "orch-base:bookworm", "--workers", "2", "--dataset",
                     "synthetic", "--script", str(source / "hello.py"), "--registry", f"{registry}/orch", "--run-id",
                     run_id], orch_env, timeout=900)
    remote = f"{registry}/orch/orch-script:{run_id}"
    try:
        assert proc.returncode == 0, proc.stderr
        assert f"pushing orch-script:{run_id} to {registry}/orch" in proc.stderr
        services = yaml.safe_load((tmp_path / "runs" / run_id / "stack.yml").read_text())["services"]
        assert {s["image"] for s in services.values()} == {remote}
        assert not any(v["target"] == "/orch/script" or v["type"] == "bind" for s in services.values()
                       for v in s["volumes"])  # nothing of this host's folders
        for i in range(2):
            assert f"hello from worker {i} in /orch/run/worker-{i}" in (tmp_path / "runs" / run_id / "logs" /
                                                                       f"worker-{i}.log").read_text()
        assert _gone(run_id)
    finally:
        _docker("rmi", remote, f"orch-script:{run_id}")


def test_the_tutorials_run_unchanged_on_the_swarm_from_their_layer_with_the_frameworks_caches(
        images, vision, orch_env, tmp_path, stacks):
    """The Keras tutorial (TF_CONFIG, a sibling module, load_data()) on 2 replicas, and the DDP one (torchrun's
    environment, torchvision's MNIST(download=True)) on 2 replicas of 2 ranks: their caches come in the image."""
    tutorials = ROOT / "examples" / "tutorials"
    stacks.extend(["live-swarm-keras", "live-swarm-ddp"])
    keras = run_orch(["up", "--backend", "swarm", "--script", str(tutorials / "keras_mwms" / "main.py"), "--workers",
                      "2", "--run-id", "live-swarm-keras"], orch_env)
    ddp = run_orch(["up", "--backend", "swarm", "--framework", "torch", "--script",
                    str(tutorials / "torch_ddp" / "main.py"), "--requirements", str(vision), "-j", "2x2", "--run-id",
                    "live-swarm-ddp", "--", "--batch-size", "128"], orch_env)  # half the all-reduces of its 64
    try:
        assert keras.returncode == 0, keras.stderr
        assert ddp.returncode == 0, ddp.stderr
        runs = tmp_path / "runs"
        for i in range(2):
            log = (runs / "live-swarm-keras" / "logs" / f"worker-{i}.log").read_text()
            assert "Keras' mnist.npz served from orch's copy of MNIST (/orch-loaders/" in log and "Epoch 3/3" in log
            log = (runs / "live-swarm-ddp" / "logs" / f"worker-{i}.log").read_text()
            for rank in (2 * i, 2 * i + 1):
                assert f"[rank{rank}]:epoch 1: 15000 samples on this rank" in log
                assert float(re.search(rf"\[rank{rank}\]:rank {rank}: test accuracy ([0-9.]+)", log)[1]) > 0.9
        assert _gone("live-swarm-keras") and _gone("live-swarm-ddp")
    finally:
        _docker("rmi", "orch-script:live-swarm-keras", "orch-script:live-swarm-ddp")


def test_a_two_process_jax_job_finishes_with_the_same_figures_as_on_compose(compose_twins, orch_env, stacks):
    # jax.distributed's coordinator on worker-0 and gloo between the processes, on the stack's overlay network.
    _same_figures_on_swarm_and_compose("jax", compose_twins, orch_env, stacks)
