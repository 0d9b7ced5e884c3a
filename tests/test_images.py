"""Live: the images orch builds are present, tagged with the version, and not rebuilt when up to date."""
import subprocess

import pytest

from orchestrator import __version__
from orchestrator.images import build

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
