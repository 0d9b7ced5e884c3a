"""Every model on every data set it supports, inside the trainer image (TensorFlow lives there, not on the
host): the data's shapes and labels, the model's layers, parameter counts and output shapes. No job runs:
one container, no network, the data read-only."""
import json
import subprocess

import pytest

from orchestrator.data.prepare import dataset_dir, prepare
from orchestrator.frameworks.tensorflow import image_ref
from orchestrator.frameworks.torch import image_ref as torch_image_ref
from orchestrator.paths import default_paths
from tests.conftest import ENGINE

pytestmark = pytest.mark.docker

PROBE = r"""
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras
from orch_trainer import data, model
for case in sys.argv[1:]:  # dataset:model, each data set in its own folder under /probe
    dataset, name = case.split(":")
    root = f"/probe/{dataset}"
    train, validation, test = data.load(dataset, root, 3000, 42)
    vocabulary = data.vocabulary_size(dataset, root)
    net = model.build(name, keras, tf, train[0], vocabulary)
    out = net(data.floats(train[0][:5]), training=False)
    print(json.dumps({
        "case": case,
        "x": [list(train[0].shape), str(train[0].dtype)], "y": sorted(int(v) for v in np.unique(train[1])),
        "splits": [len(train[0]), len(validation[0]), len(test[0])], "vocabulary": vocabulary,
        "params": int(net.count_params()), "out": list(out.shape),
        "layers": [type(l).__name__ for l in net.layers],
        "local": list(model.local_logits(name, keras, net.get_weights(), test[0][:7], vocabulary).shape),
    }), flush=True)
"""

CASES = [("mnist", "mlp"), ("mnist", "cnn"), ("fashion-mnist", "mlp"), ("fashion-mnist", "cnn"),
         ("synthetic", "mlp"), ("synthetic", "cnn"), ("vader-reviews", "text")]
MLP_PARAMS = 784 * 25 + 25 + 25 * 15 + 15 + 15 * 10 + 10
CNN_PARAMS = (9 * 32 + 32) + (9 * 32 * 64 + 64) + (3136 * 128 + 128) + (128 * 10 + 10)


@pytest.fixture(scope="module")
def probed(images):
    """Every case of CASES probed in one container (TensorFlow imported once): each case's figures, by case."""
    paths = default_paths()
    mounts = []
    for dataset in sorted({dataset for dataset, _ in CASES}):
        prepare(paths.data, dataset, lambda _msg: None)
        mounts += ["-v", f"{dataset_dir(paths.data, dataset)}:/probe/{dataset}:ro"]
    with ENGINE.hold(alone=False):  # a module's fixture comes before the test's own hold
        proc = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp", "--user", "1000:1000",
             *mounts, "--entrypoint", "python3", image_ref("single"), "-c", PROBE,
             *(f"{dataset}:{name}" for dataset, name in CASES)], capture_output=True, text=True, timeout=300)
    got = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            case = json.loads(line)
            got[case.pop("case")] = case
    return got, proc


@pytest.mark.parametrize("dataset, name", CASES)
def test_each_model_builds_on_each_data_set_it_supports(probed, dataset, name):
    cases, proc = probed
    assert f"{dataset}:{name}" in cases and proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    got = cases[f"{dataset}:{name}"]
    assert got["splits"] == [1920, 480, 600]  # 64/16/20 of 3,000
    if name == "text":
        assert got["x"][1] == "int32" and got["x"][0] == [1920, 48] and got["y"] == [0, 1]
        # The 10,000 most frequent tokens, plus 0 (padding) and 1 (unknown).
        assert got["vocabulary"] == 10_002 and got["out"] == [5, 2] and got["local"] == [7, 2]
        assert got["params"] == 10_002 * 32 + (32 * 32 + 32) + (32 * 2 + 2)
        assert "Embedding" in got["layers"] and "GlobalAveragePooling1D" in got["layers"]
        return
    # Images are kept as their bytes until a batch is taken; synthetic ones are made as float32.
    assert got["x"] == [[1920, 784], "float32" if dataset == "synthetic" else "uint8"]
    assert got["y"] == list(range(10)) and got["out"] == [5, 10]
    assert got["local"] == [7, 10]
    assert got["params"] == (MLP_PARAMS if name == "mlp" else CNN_PARAMS)
    if name == "cnn":
        assert got["layers"].count("Conv2D") == 2 and "Dropout" in got["layers"]


SCALING_PROBE = r"""
import json, os, sys
import numpy as np
from orch_trainer import data
every_byte = np.tile(np.arange(256, dtype=np.uint8), 32 * 784 // 256).reshape(32, 784)  # a batch's shape
want = data.floats(every_byte).view(np.uint32)
if sys.argv[1] == "tensorflow":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    from orch_trainer.session import floats
    graph = tf.function(lambda x: floats(tf, x))(tf.constant(every_byte)).numpy()
    ds = tf.data.Dataset.from_tensor_slices((every_byte, np.zeros(32, np.int32))).batch(32)
    (piped, _), = ds.map(lambda x, y: (floats(tf, x), y))
    got = [graph, piped.numpy()]
else:
    import torch
    from orch_trainer.torch_loop import _floats
    got = [_floats(torch, torch.from_numpy(every_byte)).numpy()]
print(json.dumps([bool(np.array_equal(g.view(np.uint32), want)) and str(g.dtype) == "float32" for g in got]))
"""


@pytest.mark.parametrize("framework", ["tensorflow", "torch"])
def test_each_framework_scales_a_batch_of_bytes_bit_for_bit_as_numpy(images, request, framework):
    """The images reach the trainers as bytes; each framework's own division must give the float32 values NumPy's
    does, for every pixel value, or the figures would change with the framework."""
    if framework == "torch":
        request.getfixturevalue("torch_image")
    image = image_ref("single") if framework == "tensorflow" else torch_image_ref()
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp", "--user", "1000:1000",
         "--entrypoint", "python3", image, "-c", SCALING_PROBE, framework],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ([True, True] if framework == "tensorflow" else [True])
