"""orch as a user installs it: a wheel built from the checkout's files, in a fresh venv, run from an empty folder.

Nothing of the checkout is on the path: the templates, the image recipes and locks, the trainer's code and the
bench scripts must all come out of the wheel.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.docker


def _checkout_copy(dest: Path) -> Path:
    """The checkout's tracked and new files, as a clean clone has them (no venv, caches or runs)."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    source = _checkout_copy(root / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(source)],
                   check=True, capture_output=True, timeout=600)
    return next((root / "dist").glob("orch-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory, images):
    """`orch` from the wheel in a fresh venv, and an empty working folder with no ORCH_* settings."""
    root = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    subprocess.run([str(root / "venv/bin/pip"), "install", "-q", str(wheel)], check=True, capture_output=True,
                   timeout=900)
    work = root / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"

    def orch(*args: str, timeout: float = 600, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(root / "venv/bin/orch"), *args], cwd=work, env={**env, **extra_env},
                              capture_output=True, text=True, timeout=timeout)

    return orch, work


def test_the_wheel_carries_every_asset_and_no_tests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("orchestrator/backends/templates/job.yml.j2", "orchestrator/frameworks/tensorflow/image/Dockerfile",
                   "orchestrator/frameworks/tensorflow/image/requirements.lock",
                   "orchestrator/frameworks/tensorflow/image/ops/mpi_allreduce.cc",
                   "orchestrator/frameworks/torch/image/install.sh", "orchestrator/trainer/train.py",
                   "orchestrator/bench_scripts/allreduce.py", "orchestrator/frameworks/mpi/allreduce_probe.py",
                   "orchestrator/schemas/summary.schema.json",
                   "orchestrator/py.typed"):
        assert needed in names, needed
    assert not any(name.startswith("tests/") for name in names)
    metadata = next(n for n in names if n.endswith("/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Provides-Extra: k8s" in text and "Requires-Dist: kubernetes" in text and "extra == \"k8s\"" in text


def test_an_installed_orch_checks_builds_renders_runs_collects_and_sweeps_from_an_empty_folder(installed):
    orch, work = installed
    assert orch("--version").stdout.startswith("orch, version")
    doctor = orch("doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    build = orch("build")
    assert build.returncode == 0, build.stderr
    assert "up to date" in build.stderr  # the wheel's recipes and trainer are the checkout's, byte for byte
    for backend in ("compose", "swarm", "k8s"):
        rendered = orch("render", "--backend", backend, "--workers", "2")
        assert rendered.returncode == 0, rendered.stderr
        assert list(yaml.safe_load_all(rendered.stdout)), backend
    run_id = "package-w2"
    try:
        up = orch("up", "--workers", "2", "--dataset", "synthetic", "--samples", "2000", "--epochs", "1",
                  "--run-id", run_id)
        assert up.returncode == 0, up.stderr
        result = json.loads((work / "runs" / run_id / "worker-0" / "result.json").read_text())
        assert result["test_accuracy"] > 0
        collect = orch("collect", run_id)
        assert collect.returncode == 0, collect.stderr
        assert (work / "results" / run_id).is_dir()
    finally:
        orch("down", run_id)
    (work / "tiny.yaml").write_text("name: tiny\nbase: {dataset: synthetic, samples: 2000, epochs: 1}\n"
                                    "grid: {workers: [1, 2]}\nrepeats: 1\n")
    try:
        sweep = orch("experiment", "run", "tiny.yaml")
        assert sweep.returncode == 0, sweep.stderr
        assert (work / "results" / "tiny" / "report.md").is_file()
    finally:
        (work / "tiny.yaml").unlink()
        for run in (work / "runs").iterdir():
            orch("down", run.name)
    assert sorted(p.name for p in work.iterdir()) == ["results", "runs"]


def test_the_kubernetes_client_is_an_extra_named_when_missing(installed):
    orch, work = installed
    (work / "kubeconfig").write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    proc = orch("up", "--backend", "k8s", "--workers", "2", "--run-id", "package-k8s",
                KUBECONFIG=str(work / "kubeconfig"))
    assert proc.returncode != 0
    assert "pip install 'orch[k8s]'" in proc.stderr, proc.stderr
    (work / "kubeconfig").unlink()
