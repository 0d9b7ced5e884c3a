"""The images orch builds. Live (marked docker): present, tagged with the version, not rebuilt when up to
date. Without docker: the wheelhouse lock and its checks, and the root-only debootstrap step."""
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from orchestrator import __version__, frameworks
from orchestrator.errors import BuildError, InvalidSpec, OrchError
from orchestrator.images.recipe import BuildOptions, ImageRecipe
from orchestrator.images import bootstrap as bootstrap_mod
from orchestrator.images import builder as images_mod
from orchestrator.images import pins, wheels
from orchestrator.paths import recipe_dir

docker = pytest.mark.docker


@docker
def test_images_are_tagged_with_the_version(images):
    assert sorted(r.tag for r in images) == [f"orch-trainer:{__version__}-multi", f"orch-trainer:{__version__}-single"]


@docker
def test_up_to_date_images_are_not_rebuilt(images):
    again = frameworks.get("tensorflow").build(frameworks.BuildOptions(), None, None, None)
    assert [r.built for r in again] == [False, False]


@docker
def test_image_has_tf_keras_and_no_network_install():
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", f"orch-trainer:{__version__}-multi",
         "-c", "import os, tf_keras, tensorflow as tf; print(tf.__version__, tf_keras.__version__, "
               "os.environ['TF_USE_LEGACY_KERAS'])"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2.21.0", "2.21.0", "1"]


@docker
def test_the_image_has_orch_s_mpi_op_and_no_compiler(images):
    """The op the MPI loop all-reduces with is in the image and sums (over one rank here, MPI started alone), and
    the image carries neither the compiler nor the headers it was built with."""
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", f"orch-trainer:{__version__}-multi",
         "-c", "import glob, shutil, tensorflow as tf; from mpi4py import MPI; import orch_trainer.mpi_loop as m; "
               "summed, seconds = m.allreduce_op(tf)(tf.constant([1.5, -2.0])); "
               "print(summed.numpy().tolist(), float(seconds) >= 0, shutil.which('g++'), shutil.which('cc'), "
               "glob.glob('/opt/venv/lib/python3*/site-packages/tensorflow/include'))"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[1.5, -2.0] True None None []"


def _inspect(ref: str) -> dict:
    import json

    proc = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)[0]


@docker
@pytest.mark.parametrize("kind", ["single", "multi"])
def test_trainer_image_is_the_runtime_image_plus_one_layer(images, kind):
    runtime, trainer = _inspect(f"orch-tensorflow-runtime:{__version__}"), _inspect(f"orch-trainer:{__version__}-{kind}")
    assert trainer["RootFS"]["Layers"][:-1] == runtime["RootFS"]["Layers"]
    for key in ("Env", "Entrypoint", "WorkingDir", "Cmd", "User"):
        assert trainer["Config"][key] == runtime["Config"][key], key
    labels = trainer["Config"]["Labels"]
    assert labels["orch.kind"] == kind and len(labels["orch.inputs"]) == 64
    assert "orch.build" not in labels and labels.keys() >= {"orch.kind", "orch.inputs"}


@docker
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


def _recipe(name):
    return frameworks.get(name).image_recipe()


def test_trainer_archive_is_root_owned_and_readable_by_anyone():
    with tarfile.open(fileobj=io.BytesIO(images_mod.trainer_archive(_recipe("tensorflow")))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "orch/trainer/orch_trainer/contract.py" in members
    assert "orch/trainer/orch_trainer/train.py" in members
    # the trainer modules of the frameworks that run in this image, flat, and the entries that name them; no other's
    assert {"orch/trainer/orch_trainer/mpi_loop.py", "orch/trainer/orch_trainer/session.py",
            "orch/trainer/orch_trainer/entries.py"} <= set(members)
    assert "orch/trainer/orch_trainer/torch_loop.py" not in members
    assert {m.mode for m in members.values() if m.isdir()} == {0o755}
    assert {m.mode for m in members.values() if m.isfile()} == {0o644}
    assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, 0)}


@docker
def test_image_holds_exactly_the_locked_packages(images):
    """Every package of the lock at its locked version, and nothing else (pip, setuptools and wheel are removed)."""
    script = ("import importlib.metadata as m\n"
              "for d in m.distributions(): print(d.metadata['Name'], d.version)\n")
    proc = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3",
                           f"orch-trainer:{__version__}-multi", "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    installed = {wheels.canonical(name): version
                 for name, version in (line.split() for line in proc.stdout.splitlines())}
    lock = wheels.read_lock(recipe_dir("tensorflow") / wheels.LOCK_NAME)
    expected = {name: p.version for name, p in lock.packages.items() if name not in {"pip", "setuptools", "wheel"}}
    assert installed == expected


# -- the lock ---------------------------------------------------------------------------------------------------
IMAGES = recipe_dir("tensorflow")


def _requirement_pins(images: Path) -> dict[str, str]:
    pins = {}
    for name in wheels.REQUIREMENTS:
        for line in (images / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                project, _, version = line.partition("==")
                pins[wheels.canonical(project)] = version
    return pins


def test_the_committed_lock_parses_and_pins_every_requirement():
    lock = wheels.read_lock(IMAGES / wheels.LOCK_NAME)
    pins = _requirement_pins(IMAGES)
    assert pins.keys() >= {"tensorflow-cpu", "tf-keras"}
    for project, version in pins.items():
        assert lock.packages[project].version == version, project
    for package in lock.packages.values():
        assert package.hashes and all(len(h) == 64 for h in package.hashes), package.name
        assert package.version and "*" not in package.version
    wheels.check_fresh(lock, IMAGES)  # generated from the requirements as they are now


@docker
def test_the_committed_lock_is_the_whole_closure(images):
    """Each locked wheel's own requirements (for the image's Python) are locked too: --no-deps is safe.
    Reads the wheels' metadata in the wheelhouse the build downloaded (the live tier's, after ``images``: in the
    fast tier the wheelhouse is there only where something built before, and a check that skips where it is not
    would never fail in a clean clone)."""
    import zipfile

    from packaging import requirements as markers

    from orchestrator.paths import default_paths

    lock = wheels.read_lock(IMAGES / wheels.LOCK_NAME)
    folder = default_paths().wheelhouse / lock.digest
    assert (folder / ".complete").is_file(), f"the build left no wheelhouse for this lock in {folder}"
    env = {"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "platform_python_implementation": "CPython", "implementation_name": "cpython", "extra": ""}
    for wheel in wheels.select(folder, lock):
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            lines = z.read(meta).decode().splitlines()
        for line in lines:
            if line.startswith("Requires-Dist:"):
                req = markers.Requirement(line.split(":", 1)[1].strip())
                if req.marker is None or req.marker.evaluate(env):
                    name = wheels.canonical(req.name)
                    if (wheels.wheel_id(wheel.name)[0], name) == ("tf-keras", "tensorflow"):
                        continue  # tensorflow-cpu provides it
                    assert name in lock.packages, f"{wheel.name} requires {req}, which the lock lacks"
                    assert req.specifier.contains(lock.packages[name].version, prereleases=True), (wheel.name, req)


def _fake_images(tmp_path: Path) -> Path:
    """A copy of the TensorFlow image recipe (Dockerfile, requirements, lock) to change without touching the checkout."""
    images = tmp_path / "images"
    shutil.copytree(IMAGES, images, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return images


def test_a_changed_lock_changes_the_inputs_digest_and_the_cache_key(tmp_path):
    images = _fake_images(tmp_path)
    lock_path = images / wheels.LOCK_NAME
    trainer = images_mod.trainer_files(_recipe("tensorflow"))
    before = (images_mod._inputs_digest(images, "sha256:base", trainer),
              images_mod._inputs_digest(images, "sha256:base"),
              wheels.read_lock(lock_path).digest)
    text = lock_path.read_text()
    first_hash = wheels._HASH.search(text)[1]
    lock_path.write_text(text.replace(first_hash, "0" * 64, 1))
    after = (images_mod._inputs_digest(images, "sha256:base", trainer),
             images_mod._inputs_digest(images, "sha256:base"),
             wheels.read_lock(lock_path).digest)
    assert all(b != a for b, a in zip(before, after))
    assert ("requirements.lock", lock_path) in images_mod._runtime_files(images)


def test_requirements_edited_without_a_new_lock_are_refused(tmp_path):
    images = _fake_images(tmp_path)
    lock = wheels.read_lock(images / wheels.LOCK_NAME)
    req = images / "requirements.txt"
    req.write_text("# a comment changes nothing\n" + req.read_text() + "\n")
    wheels.check_fresh(lock, images)
    req.write_text(req.read_text() + "numpy==2.0.0\n")
    with pytest.raises(BuildError) as err:
        wheels.check_fresh(lock, images)
    assert "out of date" in err.value.message and "make lock" in err.value.message


# -- the wheelhouse's checks, on small fake wheels ------------------------------------------------------------
def _fake_wheelhouse(folder: Path) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {"alpha_pkg-1.0-py3-none-any.whl": b"alpha", "beta-2.1-cp311-cp311-manylinux_2_17_x86_64.whl": b"beta"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def _fake_lock(path: Path, files: dict[str, bytes], wrong: str = "") -> wheels.Lock:
    lines = ["# a fake lock", "# inputs: " + "f" * 64]
    for name, data in files.items():
        project, version = wheels.wheel_id(name)
        digest = "0" * 64 if project == wrong else hashlib.sha256(data).hexdigest()
        lines.append(f"{project}=={version} \\\n    --hash=sha256:{digest}")
    path.write_text("\n".join(lines) + "\n")
    return wheels.read_lock(path)


def test_verify_accepts_the_locked_wheels_and_ships_only_them(tmp_path):
    files = _fake_wheelhouse(tmp_path / "wh")
    lock = _fake_lock(tmp_path / "requirements.lock", files)
    assert set(lock.packages) == {"alpha-pkg", "beta"}
    (tmp_path / "wh" / "stray-9.9-py3-none-any.whl").write_bytes(b"not locked")
    (tmp_path / "wh" / "beta-2.0-py3-none-any.whl").write_bytes(b"another version")
    assert [p.name for p in wheels.verify(tmp_path / "wh", lock)] == sorted(files)


def test_a_wheel_with_a_wrong_hash_is_refused_in_one_line(tmp_path):
    files = _fake_wheelhouse(tmp_path / "wh")
    lock = _fake_lock(tmp_path / "requirements.lock", files, wrong="beta")
    with pytest.raises(BuildError) as err:
        wheels.verify(tmp_path / "wh", lock)
    message = err.value.message
    assert "\n" not in message
    assert "beta-2.1-cp311-cp311-manylinux_2_17_x86_64.whl" in message
    assert "the lock and the package index" in message and "disagree" in message and "make lock" in message


def test_a_tampered_cache_is_refused_before_use(tmp_path, monkeypatch):
    files = _fake_wheelhouse(tmp_path / "wh")
    lock = _fake_lock(tmp_path / "requirements.lock", files)
    (tmp_path / "wh" / ".complete").write_text("ok\n")
    monkeypatch.setattr(wheels, "download", lambda *a, **k: pytest.fail("a complete cache is not downloaded again"))
    assert len(wheels.fetch(tmp_path / "wh", lock, lambda _m: None)) == 2
    (tmp_path / "wh" / "alpha_pkg-1.0-py3-none-any.whl").write_bytes(b"alpha, changed")
    with pytest.raises(BuildError, match="disagree"):
        wheels.fetch(tmp_path / "wh", lock, lambda _m: None)


def test_a_missing_locked_wheel_is_refused(tmp_path):
    files = _fake_wheelhouse(tmp_path / "wh")
    lock = _fake_lock(tmp_path / "requirements.lock", files)
    (tmp_path / "wh" / "alpha_pkg-1.0-py3-none-any.whl").unlink()
    with pytest.raises(BuildError, match="no wheel for alpha-pkg==1.0"):
        wheels.verify(tmp_path / "wh", lock)


def test_the_download_uses_the_lock_with_hashes_and_no_deps_as_the_user(tmp_path, monkeypatch):
    files = _fake_wheelhouse(tmp_path / "src")
    lock = _fake_lock(tmp_path / "requirements.lock", files)
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        target = Path(cmd[cmd.index("-d") + 1])
        for name in files:
            shutil.copy(tmp_path / "src" / name, target / name)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(wheels.subprocess, "run", fake_run)
    got = wheels.fetch(tmp_path / "wh", lock, lambda _m: None)
    assert [p.name for p in got] == sorted(files) and (tmp_path / "wh" / ".complete").is_file()
    (cmd,) = calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"] and "sudo" not in cmd
    assert {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(cmd)
    assert cmd[cmd.index("-r") + 1] == str(lock.path)
    assert cmd[cmd.index("--python-version") + 1] == "3.11"


def test_the_index_serving_another_wheel_is_a_one_line_error(tmp_path, monkeypatch):
    stderr = ("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated ...\n"
              "    beta==2.1 from https://files.example/beta-2.1-py3-none-any.whl (from -r lock (line 3)):\n"
              "        Expected sha256 " + "0" * 64 + "\n             Got        " + "1" * 64 + "\n")
    monkeypatch.setattr(wheels.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 1, "", stderr))
    with pytest.raises(BuildError) as err:
        wheels.download(tmp_path, ["-r", "lock"], "lock")
    assert "\n" not in err.value.message
    assert "beta==2.1" in err.value.message and "the lock and the package index disagree" in err.value.message
    assert "make lock" in err.value.message


def test_generating_a_lock_hashes_every_wheel_and_seeds_the_cache(tmp_path, monkeypatch):
    images = _fake_images(tmp_path)
    files = _fake_wheelhouse(tmp_path / "src")
    seen = []

    def fake_download(target, args, what):
        seen.append(args)
        for name in files:
            shutil.copy(tmp_path / "src" / name, target / name)

    monkeypatch.setattr(pins, "download", fake_download)
    lock = pins.generate_lock(images, tmp_path / "cache", lambda _m: None)
    assert seen == [["-r", str(images / "requirements.txt")],
                    ["--no-deps", "-r", str(images / "requirements-nodeps.txt")]]
    assert {n: p.hashes for n, p in lock.packages.items()} == {
        "alpha-pkg": {hashlib.sha256(b"alpha").hexdigest()}, "beta": {hashlib.sha256(b"beta").hexdigest()}}
    wheels.check_fresh(lock, images)
    assert len(wheels.fetch(tmp_path / "cache" / lock.digest, lock, lambda _m: None)) == 2


def test_the_build_context_has_the_lock_and_only_its_wheels(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(IMAGES / "Dockerfile", images / "Dockerfile")
    files = _fake_wheelhouse(tmp_path / "wh")
    _fake_lock(images / wheels.LOCK_NAME, files)
    (tmp_path / "wh" / "stray-9.9-py3-none-any.whl").write_bytes(b"not locked")
    buffer = io.BytesIO()
    images_mod._runtime_context(buffer, images, tmp_path / "wh", images / wheels.LOCK_NAME)
    with tarfile.open(fileobj=buffer) as tar:
        names = tar.getnames()
    assert names == ["Dockerfile", "requirements.lock", *[f"wheelhouse/{n}" for n in sorted(files)]]
    assert "--require-hashes --no-deps -r /tmp/req/requirements.lock" in (IMAGES / "Dockerfile").read_text()


def test_the_recipe_s_ops_are_inputs_of_the_image_and_so_is_the_build_base(tmp_path):
    images = _fake_images(tmp_path)
    assert images_mod.compiles(images)
    assert ("ops/mpi_allreduce.cc", images / "ops" / "mpi_allreduce.cc") in images_mod._runtime_files(images)
    digests = [images_mod._inputs_digest(images, "sha256:base", build_base_id="sha256:cc")]
    digests.append(images_mod._inputs_digest(images, "sha256:base", build_base_id="sha256:cc2"))
    (images / "ops" / "mpi_allreduce.cc").write_text("// changed\n")
    digests.append(images_mod._inputs_digest(images, "sha256:base", build_base_id="sha256:cc"))
    assert len(set(digests)) == 3
    dockerfile = (IMAGES / "Dockerfile").read_text()
    assert "FROM ${BUILD_BASE} AS deps" in dockerfile and "FROM ${BASE} AS runtime" in dockerfile


class _Images:
    """An engine with some images present; records what it was asked to build."""

    def __init__(self, present):
        self.present, self.built = set(present), []

    def ping(self):
        pass

    def image_labels(self, ref):
        return {} if ref in self.present else None

    def image_id(self, ref):
        return f"sha256:{ref}"

    def build(self, context, tag, target, args, labels):
        self.built.append(args)
        return iter([{"error": "stop here"}])


def _toy_recipe():
    return ImageRecipe("toy", IMAGES, {"multi": "x:multi"}, (), {})


def test_a_missing_build_base_is_a_one_line_error_that_says_how_to_make_it():
    engine = _Images({images_mod.DEFAULT_BASE})
    with pytest.raises(OrchError) as err:
        images_mod.build_image(_toy_recipe(), engine=engine)
    assert "\n" not in err.value.message and images_mod.DEFAULT_BUILD_BASE in err.value.message
    assert "--bootstrap-base" in err.value.message and engine.built == []


@pytest.mark.parametrize("build_base, expected", [(None, "python:3.11"), ("python:3.11-cc", "python:3.11-cc")])
def test_with_a_base_of_yours_the_build_stage_runs_on_it_or_on_build_base(build_base, expected, monkeypatch):
    engine = _Images({"python:3.11", "python:3.11-cc"})
    monkeypatch.setattr(images_mod, "wheelhouse", lambda *_a: None)  # no download: the context is not the point
    monkeypatch.setattr(images_mod, "_runtime_context", lambda *_a: None)
    with pytest.raises(BuildError, match="stop here"):
        images_mod.build_image(_toy_recipe(), BuildOptions(base="python:3.11", build_base=build_base), engine=engine)
    assert engine.built == [{"BASE": "python:3.11", "BUILD_BASE": expected}]


def test_a_recipe_s_own_refusal_is_the_one_line_error():
    records = [{"stream": "Step 6/15 : RUN { command -v g++ ... }\n"},
               {"stream": "\x1b[91morch: the build base has no g++; pass orch build --build-base IMAGE\n"},
               {"stream": "\x1b[0m\n"}, {"error": "The command '/bin/sh -c { command -v g++ ...' returned 1"}]
    with pytest.raises(BuildError) as err:
        images_mod._stream_build(iter(records), lambda _m: None)
    assert err.value.message == "image build failed: the build base has no g++; pass orch build --build-base IMAGE"


def test_another_failure_of_that_step_is_not_taken_for_the_recipe_s_refusal():
    step = 'Step 6/15 : RUN { command -v g++ || { echo "orch: the build base has no g++"; exit 1; }; } && pip install'
    records = [{"stream": step + "\n"}, {"stream": "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES\n"},
               {"error": "The command '/bin/sh -c ...' returned a non-zero code: 1"}]
    with pytest.raises(BuildError) as err:
        images_mod._stream_build(iter(records), lambda _m: None)
    assert err.value.message == "image build failed: The command '/bin/sh -c ...' returned a non-zero code: 1"


def test_the_build_base_is_the_base_with_a_compiler():
    cmd = bootstrap_mod.debootstrap_command("/usr/sbin/debootstrap", Path("/tmp/x/rootfs"), bootstrap_mod.DEFAULT_MIRROR,
                                         packages=bootstrap_mod.BUILD_BASE_PACKAGES)
    assert "--include=python3,python3-venv,g++" in cmd and "--force-check-gpg" in cmd


# -- debootstrap: signatures checked, and only it runs as root -------------------------------------------------
class _FakeEngine:
    def __init__(self):
        self.imported = []

    def import_image(self, stream, repository, tag):
        self.imported.append((stream.read(), repository, tag))


class _FakeProcesses:
    """Records subprocess.run and Popen calls in orchestrator.images.builder; every command succeeds."""

    def __init__(self, monkeypatch, euid: int, tty: bool = False, sudo: bool = True, probe_ok: bool = True):
        self.commands = []
        monkeypatch.setattr(bootstrap_mod.os, "geteuid", lambda: euid)
        monkeypatch.setattr(bootstrap_mod.sys, "stdin", type("Stdin", (), {"isatty": lambda self: tty})())
        real_which = shutil.which
        monkeypatch.setattr(bootstrap_mod.shutil, "which", lambda name, path=None: (
            None if name == "sudo" and not sudo else f"/usr/sbin/{name}" if name == "debootstrap" else
            f"/usr/bin/{name}" if name in ("sudo", "gpgv") else real_which(name, path=path)))
        probe_rc = 0 if probe_ok else 1
        monkeypatch.setattr(bootstrap_mod.subprocess, "run", lambda cmd, **k: self._run(cmd, probe_rc))
        monkeypatch.setattr(bootstrap_mod.subprocess, "Popen", lambda cmd, **k: self._popen(cmd))

    def _run(self, cmd, probe_rc):
        self.commands.append(cmd)
        rc = probe_rc if cmd[-1] in ("true", "-v") else 0
        return subprocess.CompletedProcess(cmd, rc, "", "")

    def _popen(self, cmd):
        self.commands.append(cmd)
        return type("Proc", (), {"stdout": io.BytesIO(b"rootfs tar"), "wait": lambda self: 0})()


def test_debootstrap_checks_the_archive_signatures():
    cmd = bootstrap_mod.debootstrap_command("/usr/sbin/debootstrap", Path("/tmp/x/rootfs"), bootstrap_mod.DEFAULT_MIRROR)
    assert cmd[cmd.index("--keyring") + 1] == "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert "--force-check-gpg" in cmd and "--no-check-gpg" not in cmd
    assert cmd[-3:] == ["bookworm", "/tmp/x/rootfs", bootstrap_mod.DEFAULT_MIRROR]


def test_the_tar_leaves_out_the_pruned_parts():
    cmd = bootstrap_mod.tar_command(Path("/tmp/x/rootfs"))
    assert cmd[:3] == ["tar", "-C", "/tmp/x/rootfs"] and cmd[-2:] == ["-c", "."] and "--anchored" in cmd
    assert {f"--exclude=./{rel}" for rel in bootstrap_mod.BASE_PRUNE} <= set(cmd)


def test_a_missing_keyring_is_refused_before_anything_runs(tmp_path, monkeypatch):
    procs = _FakeProcesses(monkeypatch, euid=0)
    monkeypatch.setattr(bootstrap_mod, "KEYRING", tmp_path / "debian-archive-keyring.gpg")
    with pytest.raises(OrchError) as err:
        bootstrap_mod.bootstrap_base(_FakeEngine(), "orch-base:bookworm", bootstrap_mod.DEFAULT_MIRROR, lambda _m: None)
    assert "\n" not in err.value.message
    assert "debian-archive-keyring" in err.value.message and "--base IMAGE" in err.value.message
    assert procs.commands == []


@pytest.mark.parametrize("tty, prefix, probe", [(False, ["sudo", "-n"], ["sudo", "-n", "true"]),
                                                (True, ["sudo"], ["sudo", "-v"])])
def test_only_the_root_step_runs_through_sudo(monkeypatch, tty, prefix, probe):
    procs = _FakeProcesses(monkeypatch, euid=1000, tty=tty)
    monkeypatch.setattr(bootstrap_mod, "KEYRING", IMAGES / "Dockerfile")  # any file: the keyring's presence
    engine = _FakeEngine()
    bootstrap_mod.bootstrap_base(engine, "orch-base:bookworm", bootstrap_mod.DEFAULT_MIRROR, lambda _m: None)
    assert procs.commands[0] == probe
    debootstrap, tar, rm = procs.commands[1:]
    n = len(prefix)
    assert debootstrap[:n + 1] == [*prefix, "/usr/sbin/debootstrap"] and "--force-check-gpg" in debootstrap
    assert tar[:n + 1] == [*prefix, "tar"] and rm[:n + 2] == [*prefix, "rm", "-rf"]
    rootfs = debootstrap[debootstrap.index("bookworm") + 1]
    assert tar[tar.index("-C") + 1] == rootfs == rm[-1] and rootfs.endswith("/rootfs")
    assert engine.imported == [(b"rootfs tar", "orch-base", "bookworm")]  # the import: in-process, as the user


def test_the_base_and_the_build_base_bootstrap_side_by_side_and_sudo_is_asked_once(monkeypatch):
    procs = _FakeProcesses(monkeypatch, euid=1000)
    monkeypatch.setattr(bootstrap_mod, "KEYRING", IMAGES / "Dockerfile")
    engine = _FakeEngine()
    bootstrap_mod.bootstrap_bases(engine, [("orch-base:bookworm", bootstrap_mod.BASE_PACKAGES),
                                        ("orch-build-base:bookworm", bootstrap_mod.BUILD_BASE_PACKAGES)],
                               bootstrap_mod.DEFAULT_MIRROR, lambda _m: None)
    assert [cmd for cmd in procs.commands if cmd[-1] == "true"] == [["sudo", "-n", "true"]]
    debootstraps = [cmd for cmd in procs.commands if cmd[2] == "/usr/sbin/debootstrap"]
    assert sorted(next(a for a in cmd if a.startswith("--include=")) for cmd in debootstraps) == [
        "--include=python3,python3-venv", "--include=python3,python3-venv,g++"]
    roots = {cmd[cmd.index("bookworm") + 1] for cmd in debootstraps}
    assert len(roots) == 2 and roots == {cmd[-1] for cmd in procs.commands if cmd[2:4] == ["rm", "-rf"]}
    assert sorted(image[1:] for image in engine.imported) == [("orch-base", "bookworm"),
                                                              ("orch-build-base", "bookworm")]


def test_as_root_the_root_step_runs_directly(monkeypatch):
    procs = _FakeProcesses(monkeypatch, euid=0)
    monkeypatch.setattr(bootstrap_mod, "KEYRING", IMAGES / "Dockerfile")
    bootstrap_mod.bootstrap_base(_FakeEngine(), "orch-base:bookworm", bootstrap_mod.DEFAULT_MIRROR, lambda _m: None)
    assert [cmd[0] for cmd in procs.commands] == ["/usr/sbin/debootstrap", "tar", "rm"]


@pytest.mark.parametrize("sudo, probe_ok", [(False, True), (True, False)])
def test_no_usable_sudo_is_a_one_line_error(monkeypatch, sudo, probe_ok):
    procs = _FakeProcesses(monkeypatch, euid=1000, sudo=sudo, probe_ok=probe_ok)
    monkeypatch.setattr(bootstrap_mod, "KEYRING", IMAGES / "Dockerfile")
    with pytest.raises(OrchError) as err:
        bootstrap_mod.bootstrap_base(_FakeEngine(), "orch-base:bookworm", bootstrap_mod.DEFAULT_MIRROR, lambda _m: None)
    message = err.value.message
    assert "\n" not in message and "as root" in message and "--base IMAGE" in message
    assert all(cmd[:2] != ["sudo", "-n"] or cmd[-1] == "true" for cmd in procs.commands)  # nothing else ran


def _pin(name):
    from orchestrator.images.wheels import Locked

    return Locked(name, "1.0", frozenset({"0" * 64}), "index https://pypi.org/simple")


def test_extra_packages_are_what_the_files_packages_need_not_what_the_images_own_packages_bring():
    """torchvision on orch's PyTorch image adds torchvision and pillow: torch is the image's, and the CUDA wheels
    pip resolves for torch are torch's dependencies, which the CPU image chose not to carry."""
    from orchestrator.images.user import added
    from orchestrator.images.pins import Resolution

    resolution = Resolution(
        pins=[_pin(n) for n in ("torchvision", "numpy", "torch", "pillow", "nvidia-cublas-cu12", "triton", "sympy")],
        requires={"torchvision": {"numpy": frozenset(), "torch": frozenset(), "pillow": frozenset()},
                  "torch": {"nvidia-cublas-cu12": frozenset(), "triton": frozenset(), "sympy": frozenset()}},
        requested={"torchvision": frozenset()})
    installed = {"torch", "numpy", "sympy"}
    assert [p.name for p in added(resolution, installed, "vision.txt")] == ["torchvision", "pillow"]
    gpu = Resolution(pins=[_pin("cupy-cuda12x"), _pin("nvidia-cuda-runtime-cu12"), _pin("fastrlock")],
                     requires={"cupy-cuda12x": {"fastrlock": frozenset(), "nvidia-cuda-runtime-cu12": frozenset()}},
                     requested={"cupy-cuda12x": frozenset()})
    with pytest.raises(InvalidSpec, match=r"^requirements: gpu.txt would add GPU libraries \(cupy-cuda12x, "
                                          r"nvidia-cuda-runtime-cu12\) to orch's CPU image, through cupy-cuda12x; "):
        added(gpu, installed, "gpu.txt")


def test_a_packages_requirements_are_read_with_the_images_markers_and_its_extras():
    from orchestrator.images.pins import _requires

    meta = {"name": "Pkg_One", "provides_extra": ["fast"],
            "requires_dist": ["numpy>=1", "pywin32; sys_platform == 'win32'", "tomli; python_version < '3.11'",
                              "typing-extensions; python_version >= '3.10'", "Cython; extra == 'fast'",
                              "rich[jupyter]>=13", "not a requirement ("]}
    got = _requires(meta)
    assert got["pkg-one"] == {"numpy": frozenset(), "typing-extensions": frozenset(), "rich": frozenset({"jupyter"})}
    assert "cython" in got["pkg-one[fast]"] and "pywin32" not in str(got) and "tomli" not in str(got)
