"""Live: the images orch builds are present, tagged with the version, and not rebuilt when up to date."""
import subprocess

import pytest

from orchestrator import __version__
from orchestrator.images import RUNTIME_TAG, build

pytestmark = pytest.mark.docker


def test_images_are_tagged_with_the_version(images):
    assert sorted(r.tag for r in images) == [f"orch-trainer:{__version__}-multi", f"orch-trainer:{__version__}-single"]


def test_up_to_date_images_are_not_rebuilt(images):
    again = build()
    assert [r.built for r in again] == [False, False]


def test_image_has_tf_keras_and_no_network_install():
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", f"orch-trainer:{__version__}-multi",
         "-c", "import os, tf_keras, tensorflow as tf; print(tf.__version__, tf_keras.__version__, "
               "os.environ['TF_USE_LEGACY_KERAS'])"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2.21.0", "2.21.0", "1"]


def _inspect(ref: str) -> dict:
    import json

    proc = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)[0]


@pytest.mark.parametrize("kind", ["single", "multi"])
def test_trainer_image_is_the_runtime_image_plus_one_layer(images, kind):
    runtime, trainer = _inspect(RUNTIME_TAG), _inspect(f"orch-trainer:{__version__}-{kind}")
    assert trainer["RootFS"]["Layers"][:-1] == runtime["RootFS"]["Layers"]
    for key in ("Env", "Entrypoint", "WorkingDir", "Cmd", "User"):
        assert trainer["Config"][key] == runtime["Config"][key], key
    labels = trainer["Config"]["Labels"]
    assert labels["orch.kind"] == kind and len(labels["orch.inputs"]) == 64
    assert "orch.build" not in labels and labels.keys() >= {"orch.kind", "orch.inputs"}


def test_every_module_in_the_image_has_bytecode(images):
    """Containers run read-only without writing bytecode, so it must be in the image."""
    script = ("import os, importlib.util\n"
              "missing = [p for d, _, fs in os.walk('/opt/venv/lib') for f in fs if f.endswith('.py')\n"
              "           for p in [os.path.join(d, f)] if not os.path.exists(importlib.util.cache_from_source(p))]\n"
              "print(len(missing), missing[:3])\n")
    proc = subprocess.run(["docker", "run", "--rm", "--read-only", "--network", "none", "--entrypoint", "python3",
                           f"orch-trainer:{__version__}-multi", "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("0 "), proc.stdout


def test_trainer_archive_is_root_owned_and_readable_by_anyone():
    import io
    import tarfile

    from orchestrator.images import _trainer_archive
    from orchestrator.paths import asset_dir

    with tarfile.open(fileobj=io.BytesIO(_trainer_archive(asset_dir("images")))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "orch/trainer/orch_trainer/contract.py" in members
    assert "orch/trainer/orch_trainer/train.py" in members
    assert {m.mode for m in members.values() if m.isdir()} == {0o755}
    assert {m.mode for m in members.values() if m.isfile()} == {0o644}
    assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, 0)}
