"""The frameworks' own data caches (data/loaders.py) and the images' hook that serves Keras' MNIST from them."""
import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from orchestrator.data import loaders
from orchestrator.data.idx import parse_idx
from orchestrator.data.prepare import LOADERS, is_ready, prepare, status, verify
from orchestrator.errors import DataError
from tests.bounds import HANG_S
from tests.test_data import _prepare_or_skip

PACKAGE = Path(loaders.__file__).resolve().parent.parent


def test_idx_files_round_trip_through_orchs_reader():
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = loaders.idx_bytes(images)
    assert raw[:4] == bytes([0, 0, 8, 3]) and raw[4:16] == b"\0\0\0\2\0\0\0\3\0\0\0\4"
    assert np.array_equal(parse_idx(raw, (2, 3, 4)), images)
    labels = loaders.idx_bytes(np.array([7, 2, 1], np.uint8))
    assert labels[:8] == bytes([0, 0, 8, 1, 0, 0, 0, 3]) and labels[8:] == bytes([7, 2, 1])


def test_loader_caches_are_not_a_data_set_a_job_can_name(tmp_path):
    assert LOADERS not in {s.name for s in status(tmp_path)}
    assert not is_ready(tmp_path, LOADERS)


@pytest.mark.network  # the data set's real source
def test_loader_caches_made_from_the_verified_sources(tmp_path):
    """Real downloads (pip and apt-get), real checks, and the layout each framework's loader reads."""
    target = _prepare_or_skip(tmp_path, LOADERS)
    with np.load(target / "keras" / loaders.KERAS_MNIST) as f:
        arrays = {k: f[k] for k in f.files}
    assert {k: (v.shape, v.dtype.name) for k, v in arrays.items()} == {
        "x_train": ((60000, 28, 28), "uint8"), "y_train": ((60000,), "uint8"),
        "x_test": ((10000, 28, 28), "uint8"), "y_test": ((10000,), "uint8")}
    # MNIST's published figures: class counts, first labels, pixel mean and deviation of each set.
    assert np.bincount(arrays["y_train"]).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert np.bincount(arrays["y_test"]).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert arrays["y_train"][:5].tolist() == [5, 0, 4, 1, 9] and arrays["y_test"][:5].tolist() == [7, 2, 1, 0, 4]
    assert round(arrays["x_train"].mean() / 255, 4) == 0.1307 and round(arrays["x_train"].std() / 255, 4) == 0.3081
    assert round(arrays["x_test"].mean() / 255, 4) == 0.1325 and round(arrays["x_test"].std() / 255, 4) == 0.3105
    # The hook's check: the sha256 recorded beside the file.
    recorded = (target / "keras" / (loaders.KERAS_MNIST + ".sha256")).read_text().strip()
    assert recorded == hashlib.sha256((target / "keras" / loaders.KERAS_MNIST).read_bytes()).hexdigest()
    assert recorded != loaders.KERAS_MNIST_SHA256
    # torchvision reads the raw IDX files; they hold the same arrays.
    raw = target / "torchvision" / "MNIST" / "raw"
    assert np.array_equal(parse_idx((raw / "t10k-images-idx3-ubyte").read_bytes(), (10000, 28, 28)),
                          arrays["x_test"])
    assert np.array_equal(parse_idx((raw / "train-labels-idx1-ubyte").read_bytes(), (60000,)), arrays["y_train"])
    fashion = target / "torchvision" / "FashionMNIST" / "raw"
    labels = parse_idx((fashion / "train-labels-idx1-ubyte").read_bytes(), (60000,))
    assert np.bincount(labels).tolist() == [6000] * 10
    assert sorted(p.name for p in (target / "keras" / "datasets" / "fashion-mnist").iterdir()) == [
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz"]
    record = json.loads((target / "source.json").read_text())
    assert len(record["files"]) == 15 and "torchvision/MNIST/raw/train-images-idx3-ubyte" in record["files"]
    assert prepare(tmp_path, LOADERS) == target  # ready: checked, not made again
    (raw / "t10k-labels-idx1-ubyte").write_bytes(b"\0\0\x08\x01")  # a nested file damaged is caught
    with pytest.raises(DataError, match="corrupt"):
        verify(tmp_path, LOADERS)


def _fake_keras(root, name="tf_keras"):
    """A package with Keras' layout: get_file in its utils module, and a mnist loader that imports it by name."""
    utils = root / name / "src" / "utils"
    utils.mkdir(parents=True)
    for folder in (root / name, root / name / "src"):
        (folder / "__init__.py").write_text("")
    module = "data_utils" if name == "tf_keras" else "file_utils"
    (utils / "__init__.py").write_text("")
    (utils / f"{module}.py").write_text(textwrap.dedent("""
        def get_file(fname=None, origin=None, file_hash=None, **kwargs):
            raise OSError("URL fetch failure on " + str(origin))
    """))
    (root / name / "src" / "mnist.py").write_text(textwrap.dedent(f"""
        from {name}.src.utils.{module} import get_file
        def load_data():
            return get_file("mnist.npz", origin="https://example.invalid/mnist.npz",
                            file_hash="{loaders.KERAS_MNIST_SHA256}")
        def other():
            return get_file("other.npz", origin="https://example.invalid/other.npz", file_hash="00")
    """))


def _run(tmp_path, code, served):
    """Run ``code`` in an interpreter laid out as the images are: sitecustomize beside orch_trainer on PYTHONPATH."""
    image = tmp_path / "opt-orch-trainer"
    (image / "orch_trainer").mkdir(parents=True, exist_ok=True)
    (image / "orch_trainer" / "__init__.py").write_text("")
    (image / "orch_trainer" / "loaders.py").write_text((PACKAGE / "trainer" / "loaders.py").read_text())
    (image / "sitecustomize.py").write_text((PACKAGE / "images" / "sitecustomize.py").read_text())
    env = {"PYTHONPATH": f"{image}:{tmp_path}", "PATH": "/usr/bin:/bin",
           **({"ORCH_KERAS_MNIST": str(served)} if served else {})}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_S)


@pytest.mark.parametrize("name", ["tf_keras", "keras"])
def test_the_hook_serves_kerass_mnist_and_nothing_else(tmp_path, name):
    _fake_keras(tmp_path, name)
    served = tmp_path / "mnist.npz"
    served.write_bytes(b"orch's arrays")
    (tmp_path / "mnist.npz.sha256").write_text(hashlib.sha256(b"orch's arrays").hexdigest() + "\n")
    out = _run(tmp_path, f"import {name}.src.mnist as m; print(m.load_data())\n"
                         "try:\n    m.other()\nexcept OSError as e:\n    print('other:', e)", served)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str(served), "other: URL fetch failure on https://example.invalid/other.npz"]


def test_without_the_variable_nothing_is_served(tmp_path):
    _fake_keras(tmp_path)
    out = _run(tmp_path, "import tf_keras.src.mnist as m; m.load_data()", None)
    assert out.returncode != 0 and "URL fetch failure" in out.stderr


def test_a_served_file_that_is_not_orchs_is_refused(tmp_path):
    _fake_keras(tmp_path)
    served = tmp_path / "mnist.npz"
    served.write_bytes(b"something else")
    (tmp_path / "mnist.npz.sha256").write_text(hashlib.sha256(b"orch's arrays").hexdigest() + "\n")
    out = _run(tmp_path, "import tf_keras.src.mnist as m; m.load_data()", served)
    assert out.returncode != 0 and "it is not orch's file" in out.stderr


def test_a_script_job_mounts_the_caches_read_only_where_the_loaders_look(tmp_path):
    from orchestrator.jobspec import make_spec
    from orchestrator.paths import Paths
    from orchestrator.plan import plan

    paths = Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results")
    script = tmp_path / "main.py"
    script.write_text("")
    p = plan(make_spec(workers=2, run_id="t", script=str(script)), paths)
    assert p.loaders_dir == paths.data / LOADERS
    for replica in p.replicas:
        mounts = {m.target: (m.source, m.read_only) for m in replica.mounts}
        own = f"/orch/run/{replica.role}-{replica.index}"
        assert mounts["/tmp/.keras"] == (str(paths.data / LOADERS / "keras"), True)  # Keras' fallback cache
        assert mounts["/orch/run/data"] == mounts[f"{own}/data"] == (str(paths.data / LOADERS / "torchvision"), True)
        assert replica.env["ORCH_KERAS_MNIST"] == "/tmp/.keras/datasets/mnist.npz"
        assert replica.working_dir == own  # so "./data" and "../data" are the two torchvision mounts
    trainer = plan(make_spec(workers=2, run_id="t"), paths)  # orch's own trainer reads its data set only
    assert trainer.loaders_dir is None and not any("ORCH_KERAS_MNIST" in r.env for r in trainer.replicas)
    assert all(m.target != "/tmp/.keras" for r in trainer.replicas for m in r.mounts)


def test_where_the_caches_are_in_the_image_the_loaders_places_are_linked_to_them():
    import importlib.util

    spec = importlib.util.spec_from_file_location("image_loaders", PACKAGE / "trainer" / "loaders.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.links({}) == []  # mounted (Compose): nothing to link
    assert module.links({"ORCH_LOADERS_DIR": "/orch-loaders", "ORCH_OUTPUT_DIR": "/orch/run/worker-1/"}) == [
        ("/tmp/.keras", "/orch-loaders/keras"), ("/orch/run/data", "/orch-loaders/torchvision"),
        ("/orch/run/worker-1/data", "/orch-loaders/torchvision")]


def test_a_host_that_cannot_make_the_caches_runs_scripts_with_empty_ones_and_says_so(tmp_path, monkeypatch):
    from orchestrator.paths import Paths
    from orchestrator.run.preflight import _prepare_loaders

    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    paths = Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results")
    said = []
    folder = paths.data / LOADERS
    _prepare_loaders(paths, folder, said.append)
    assert (folder / "keras").is_dir() and (folder / "torchvision").is_dir() and not is_ready(paths.data, LOADERS)
    assert "data caches could not be made (" in said[-1] and "will find nothing offline" in said[-1]


@pytest.mark.network  # the data set's real source
def test_caches_that_no_longer_match_their_record_stop_the_run(tmp_path):
    from orchestrator.paths import Paths
    from orchestrator.run.preflight import _prepare_loaders

    paths = Paths(tmp_path / "runs", tmp_path / "cache", tmp_path / "results")
    target = _prepare_or_skip(paths.data, LOADERS)
    (target / "keras" / "datasets" / "mnist.npz").write_bytes(b"not orch's")
    with pytest.raises(DataError, match="corrupt"):
        _prepare_loaders(paths, target, lambda _msg: None)


@pytest.mark.network  # the data set's real source
def test_a_host_without_debians_package_still_gets_mnists_caches(tmp_path, monkeypatch):
    from orchestrator.data import idx

    def no_apt(*_args):
        raise DataError("apt-get is not on PATH; Fashion-MNIST comes from Debian's package")

    monkeypatch.setattr(idx, "read_files", no_apt)
    said = []
    try:
        target = prepare(tmp_path, LOADERS, said.append)
    except DataError as exc:
        if "could not download" in exc.message:
            pytest.skip(f"cannot download MNIST here: {exc.message}")
        raise
    assert (target / "keras" / loaders.KERAS_MNIST).is_file() and (target / "torchvision" / "MNIST" / "raw").is_dir()
    assert not (target / "torchvision" / "FashionMNIST").exists()
    assert any("Fashion-MNIST's caches are left out: apt-get is not on PATH" in line for line in said)
    record = json.loads((target / "source.json").read_text())
    assert record["fashion-mnist"] == {"left out": "apt-get is not on PATH; Fashion-MNIST comes from Debian's package"}
    verify(tmp_path, LOADERS)  # what was made is checked as ever
