"""An image's Python environment copied into a volume of the engine's (images/venv_volume.py), live: made once
per build of the image, made again after an interrupted copy or a rebuild, and never swapped under a running
container."""
from __future__ import annotations

import io
import subprocess
import tarfile
import uuid

import pytest

from orchestrator.docker.engine import Engine
from orchestrator.errors import DockerError
from orchestrator.images import venv_volume
from orchestrator.images.builder import DEFAULT_BASE

docker = pytest.mark.docker


def _layer(text: str) -> bytes:
    """A tar of ``venv/marker`` holding ``text``."""
    data = text.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folder = tarfile.TarInfo("venv")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        member = tarfile.TarInfo("venv/marker")
        member.size, member.mode = len(data), 0o644
        tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def _read(volume: str) -> str:
    proc = subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{volume}:/v:ro", DEFAULT_BASE,
                           "cat", "/v/marker"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@docker
def test_the_copy_is_made_once_per_build_and_never_under_a_running_container(images, tmp_path):
    engine = Engine()
    tag = f"orch-test-venv-{uuid.uuid4().hex[:8]}:1"
    name = venv_volume.volume_name(tag)
    user = None
    said: list[str] = []
    made: list[str] = []

    def build(text: str) -> None:
        engine.add_layer(DEFAULT_BASE, "/opt", _layer(text), tag, {})
        made.append(engine.image_id(tag))

    try:
        build("first")
        venv_volume.ensure(engine, name, tag, tmp_path, said.append)
        assert _read(name) == "first" and said[0].startswith(f"copying {tag}'s Python environment into volume {name}")
        labels = engine.volume_labels(name + venv_volume.DONE)
        assert labels == {"orch.cache": "venv", "orch.image-id": engine.image_id(tag), "orch.image": tag}

        said.clear()  # the same build: nothing to do
        venv_volume.ensure(engine, name, tag, tmp_path, said.append)
        assert said == []

        # A copy that was interrupted left no mark, and perhaps its helper container, which the engine made once
        # the copy ended and which holds the volume: the helper is removed and the copy made again.
        engine.remove_volume(name + venv_volume.DONE)
        subprocess.run(["docker", "create", "--name", f"{name}.copy", "-v", f"{name}:/opt/venv", DEFAULT_BASE,
                        "true"], capture_output=True, check=True)
        venv_volume.ensure(engine, name, tag, tmp_path, said.append)
        assert len(said) == 2 and engine.volume_labels(name + venv_volume.DONE) is not None
        assert subprocess.run(["docker", "inspect", f"{name}.copy"], capture_output=True).returncode != 0
        assert _read(name) == "first"

        # A rebuild (another id under the same tag) gets a fresh copy.
        build("second")
        venv_volume.ensure(engine, name, tag, tmp_path, said.append)
        assert _read(name) == "second"

        # A container still reading the old copy keeps it: a one-line error says what to do, and it stays whole.
        user = subprocess.run(["docker", "run", "-d", "--network", "none", "-v", f"{name}:/opt/venv:ro", DEFAULT_BASE,
                               "sleep", "300"], capture_output=True, text=True, check=True).stdout.strip()
        build("third")
        with pytest.raises(DockerError) as caught:
            venv_volume.ensure(engine, name, tag, tmp_path, said.append)
        assert "was rebuilt, but a container still uses the copy" in caught.value.message
        assert "\n" not in caught.value.message and _read(name) == "second"
        with pytest.raises(DockerError):  # and again: the mark of the old copy stays until the copy goes
            venv_volume.ensure(engine, name, tag, tmp_path, said.append)
        assert engine.volume_labels(name + venv_volume.DONE)["orch.image-id"] == made[1]
        engine.remove_container(user)
        user = None
        venv_volume.ensure(engine, name, tag, tmp_path, said.append)  # once it has gone, the copy is made again
        assert _read(name) == "third"
    finally:
        if user:
            engine.remove_container(user)
        engine.remove_volume(name + venv_volume.DONE)
        engine.remove_volume(name)
        subprocess.run(["docker", "rmi", "-f", *made], capture_output=True)
    assert engine.volume_labels(name) is None
