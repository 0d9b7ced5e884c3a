"""Scripts in the frameworks' tutorial shapes, unchanged, in real containers with no network: Keras' MNIST and
torchvision's MNIST(download=True) find their data where they look, and torchrun's environment is set for several
ranks per container. Each test removes what it started, even on failure."""
import json
import re

import pytest

from tests.conftest import ROOT, orch_containers, orch_networks, run_orch

pytestmark = pytest.mark.docker

TUTORIALS = ROOT / "examples" / "tutorials"


@pytest.mark.parametrize("workers", [1, 3])
def test_the_two_file_keras_multi_worker_tutorial_runs_unchanged_on_1_and_on_3_containers(images, orch_env, tmp_path,
                                                                                        cleanup, workers):
    """The tutorial reads TF_CONFIG and builds MultiWorkerMirroredStrategy: on one container it gets a cluster of one
    worker, as its launcher would give it, so the baseline of a 1-vs-N comparison runs the same script."""
    run_id = f"live-keras-tutorial-{workers}"
    cleanup.append(run_id)
    proc = run_orch(["up", "--script", str(TUTORIALS / "keras_mwms" / "main.py"), "--workers", str(workers),
                     "--run-id", run_id, "--format", "json"], orch_env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["state"] == "succeeded" and [w["exit_code"] for w in info["workers"]] == [0] * workers
    run = tmp_path / "runs" / run_id
    for name in ("main.py", "mnist_setup.py"):  # the replicas ran the tutorial's two files as they are
        assert (run / "source" / name).read_bytes() == (TUTORIALS / "keras_mwms" / name).read_bytes()
    for i in range(workers):
        log = (run / "logs" / f"worker-{i}.log").read_text()
        assert "Keras' mnist.npz served from orch's copy of MNIST" in log and "URL fetch failure" not in log
        assert "Epoch 3/3" in log and "KeyError" not in log
        last = re.findall(r"70/70 \[=+\] - \S+ \S+ - loss: ([0-9.]+) - accuracy: ([0-9.]+)", log)[-1]
        assert float(last[1]) > 0.2, last  # 3 short epochs of SGD at 0.001: it learns, slowly
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_a_torchrun_ddp_script_with_torchvision_download_runs_unchanged_on_2_containers_of_2_ranks(
        vision, orch_env, tmp_path, cleanup):
    run_id = "live-ddp-tutorial"
    cleanup.append(run_id)
    proc = run_orch(["up", "--framework", "torch", "--script", str(TUTORIALS / "torch_ddp" / "main.py"),
                     "--requirements", str(vision), "-j", "2x2", "--run-id", run_id, "--format", "json", "--",
                     "--batch-size", "128"], orch_env)  # the script's own flag: half the all-reduces of its 64
    assert proc.returncode == 0, proc.stderr
    assert [w["exit_code"] for w in json.loads(proc.stdout)["workers"]] == [0, 0]
    run = tmp_path / "runs" / run_id
    logs = {i: (run / "logs" / f"worker-{i}.log").read_text() for i in range(2)}
    for node, log in logs.items():
        for local in range(2):
            rank = 2 * node + local
            # torchrun's environment: RANK, LOCAL_RANK and WORLD_SIZE; each line prefixed with its rank
            assert f"[rank{rank}]:rank {rank} of 4 (local rank {local}), master worker-0" in log
            # the DistributedSampler shards MNIST's 60,000 training images once: a quarter each
            assert f"[rank{rank}]:epoch 1: 15000 samples on this rank" in log
            accuracy = float(re.search(rf"\[rank{rank}\]:rank {rank}: test accuracy ([0-9.]+) on 10000", log)[1])
            assert accuracy > 0.9
        # and each rank's own files, kept in its container's folder
        assert len(list((run / f"worker-{node}" / "ranks").glob("*/attempt_0/[01]/stdout.log"))) == 2
    assert "Failed to download" not in logs[0] + logs[1]
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_torchvision_adds_itself_to_the_pytorch_image_not_a_second_cuda(vision):
    """The requirements are resolved against the image's own torch: torchvision and pillow come in, and none of the
    CUDA wheels pip resolves for torch (the CPU image carries what it chose of them)."""
    from orchestrator.docker.engine import Engine
    from orchestrator.frameworks.torch import image_ref
    from orchestrator.images.user import image_for

    engine = Engine()
    tag = image_for(vision.read_bytes(), "torch")
    grown = engine.image_size(tag) - engine.image_size(image_ref())
    assert 0 < grown < 300 * 10**6, f"torchvision added {grown / 1e6:.0f} MB"


@pytest.mark.parametrize("workers", [1, 3])
def test_a_torchrun_ddp_script_runs_unchanged_on_1_and_on_3_containers(vision, orch_env, tmp_path, cleanup, workers):
    """torchrun's environment at every N, 1 included: the script reads RANK, LOCAL_RANK and WORLD_SIZE, meets its
    group (of one, or three) and shards MNIST once. The script's own --batch-size 128 (64 by default) halves its
    all-reduces, which bound its time on 3 containers; one epoch still reaches the accuracy asserted."""
    run_id = f"live-ddp-n{workers}"
    cleanup.append(run_id)
    proc = run_orch(["up", "--framework", "torch", "--script", str(TUTORIALS / "torch_ddp" / "main.py"),
                     "--requirements", str(vision), "--workers", str(workers), "--run-id", run_id, "--format", "json",
                     "--", "--batch-size", "128"], orch_env)
    assert proc.returncode == 0, proc.stderr
    assert [w["exit_code"] for w in json.loads(proc.stdout)["workers"]] == [0] * workers
    for rank in range(workers):
        log = (tmp_path / "runs" / run_id / "logs" / f"worker-{rank}.log").read_text()
        assert f"rank {rank} of {workers} (local rank 0), master worker-0" in log and "KeyError" not in log
        assert f"epoch 1: {60000 // workers} samples on this rank" in log
        assert float(re.search(rf"rank {rank}: test accuracy ([0-9.]+) on 10000", log)[1]) > 0.9
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_one_failing_rank_of_several_in_a_container_fails_the_run_and_leaves_nothing(torch_image, orch_env,
                                                                                      tmp_path, cleanup):
    run_id = "live-ranks-fail"
    cleanup.append(run_id)
    script = tmp_path / "src" / "fail.py"
    script.parent.mkdir()
    script.write_text("import os, sys, time\nrank = int(os.environ['RANK'])\nprint('rank', rank, flush=True)\n"
                      "sys.exit(3) if rank == 3 else time.sleep(120)\n")
    proc = run_orch(["up", "--framework", "torch", "--script", str(script), "-j", "2x2", "--run-id", run_id],
                    orch_env)
    assert proc.returncode == 1 and "worker-1 exited with code 1; the other workers were stopped" in proc.stderr
    log = (tmp_path / "runs" / run_id / "logs" / "worker-1.log").read_text()
    assert "rank      : 3 (local_rank: 1)" in log and "exitcode  : 3" in log  # torchrun names the rank
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_an_mpi4py_script_runs_2_ranks_in_each_of_2_containers(images, orch_env, tmp_path, cleanup):
    run_id = "live-mpi-2x2"
    cleanup.append(run_id)
    proc = run_orch(["up", "--framework", "mpi", "--script", str(ROOT / "examples" / "mpi_sum.py"), "-j", "2x2",
                     "--run-id", run_id], orch_env)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "runs" / run_id
    for node in range(2):
        log = (run / "logs" / f"worker-{node}.log").read_text()
        for rank in (2 * node, 2 * node + 1):  # 1 + 2 + 3 + 4 = 10, each line prefixed, each rank's own file
            assert f"[rank{rank}]:rank {rank} of 4 on worker-0-host: sum 10" in log
            assert (run / f"worker-{node}" / "ranks" / f"rank-{rank}.log").read_text() == (
                f"rank {rank} of 4 on worker-0-host: sum 10\n")
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def _one_container(script_text, tmp_path, orch_env, run_id, *flags):
    source = tmp_path / "src" / run_id
    source.mkdir(parents=True)
    (source / "load.py").write_text(script_text)
    proc = run_orch(["up", "--script", str(source / "load.py"), "--run-id", run_id, *flags], orch_env)
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "runs" / run_id / "logs" / "worker-0.log").read_text()


def test_every_keras_loader_orch_serves_loads_offline(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-keras-loaders")
    log = _one_container(
        "import tensorflow as tf\nimport keras\n"
        "for name, load in [('tf.keras mnist', tf.keras.datasets.mnist.load_data),\n"
        "                   ('tf.keras fashion_mnist', tf.keras.datasets.fashion_mnist.load_data),\n"
        "                   ('keras 3 mnist', keras.datasets.mnist.load_data),\n"
        "                   ('keras 3 fashion_mnist', keras.datasets.fashion_mnist.load_data)]:\n"
        "    (x, y), (xt, yt) = load()\n"
        "    print(name, x.shape, x.dtype, y.shape, xt.shape, int(y[:10].sum()), flush=True)\n",
        tmp_path, orch_env, "live-keras-loaders")
    assert "tf.keras mnist (60000, 28, 28) uint8 (60000,) (10000, 28, 28) 30" in log  # 5+0+4+1+9+2+1+3+1+4
    assert "keras 3 mnist (60000, 28, 28) uint8 (60000,) (10000, 28, 28) 30" in log
    assert "tf.keras fashion_mnist (60000, 28, 28) uint8 (60000,) (10000, 28, 28)" in log
    assert "keras 3 fashion_mnist (60000, 28, 28) uint8 (60000,) (10000, 28, 28)" in log


def test_every_torchvision_root_orch_serves_loads_offline(vision, orch_env, tmp_path, cleanup):
    cleanup.append("live-vision-loaders")
    log = _one_container(
        "from torchvision import datasets\n"
        "for root in ('../data', './data', 'data'):\n"
        "    for kind in (datasets.MNIST, datasets.FashionMNIST):\n"
        "        for train in (True, False):\n"
        "            d = kind(root, train=train, download=True)\n"
        "            print(root, kind.__name__, train, len(d), tuple(d.data.shape), int(d.targets[:10].sum()), flush=True)\n",
        tmp_path, orch_env, "live-vision-loaders", "--framework", "torch", "--requirements", str(vision))
    for root in ("../data", "./data", "data"):
        assert f"{root} MNIST True 60000 (60000, 28, 28) 30" in log
        assert f"{root} MNIST False 10000 (10000, 28, 28)" in log
        assert f"{root} FashionMNIST True 60000 (60000, 28, 28)" in log
        assert f"{root} FashionMNIST False 10000 (10000, 28, 28)" in log
    assert "Downloading" not in log
