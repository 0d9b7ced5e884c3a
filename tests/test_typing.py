"""Types a user's checker sees: the API's keywords generated from the spec, mypy --strict over the package and over the
trainer as the images assemble it, and a user's file checked against the built wheel as pip installs it."""
from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import orchestrator
from orchestrator import contract, frameworks
from orchestrator.backends import options as backend_options
from orchestrator.jobspec import SpecFields, flat_field_names, signature
from orchestrator.jobspec.fields import BackendName, DatasetName, flag_aliases
from tests.conftest import ROOT

MYPY_CACHE = ROOT / ".mypy_cache"  # kept between runs: a checked module is checked again only when it changes
TYPED = ["make_spec", "job_spec", "render", "dry_run", "up"]


def _mypy(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=env)


# -- the keywords, generated from the spec ----------------------------------------------------------------------
def test_the_committed_keywords_are_the_ones_the_spec_makes():
    assert signature.keywords_source() == signature.KEYWORDS_FILE.read_text(), "run `python tools/generate.py`"


def test_the_written_out_choices_are_the_registries():
    assert typing.get_args(BackendName) == tuple(backend_options.OPTIONS)
    assert typing.get_args(DatasetName) == tuple(contract.DATASET_KINDS)


def test_the_keywords_are_the_fields_make_spec_takes_named_as_the_flags_are():
    aliased = set(flag_aliases(orchestrator.JobSpec).values())  # global_batch is given as batch_size
    assert set(SpecFields.__annotations__) == set(flat_field_names()) - {"roles"} - aliased
    assert {"batch_size", "memory", "disk_limit", "shm_size"} <= set(SpecFields.__annotations__)
    assert set(frameworks.options_model("tensorflow").model_fields) - {"name"} <= set(SpecFields.__annotations__)


@pytest.mark.parametrize("name", TYPED)
def test_each_function_shows_every_field_with_its_default(name):
    fn = getattr(orchestrator, name)
    params = inspect.signature(fn).parameters
    for k in signature.keywords():
        assert params[k.name].kind is inspect.Parameter.KEYWORD_ONLY, (name, k.name)
        assert params[k.name].default == k.default and params[k.name].annotation == k.annotation, (name, k.name)
        assert f"    {k.name} ({k.annotation}, default " in fn.__doc__, (name, k.name)
    assert "workers: 'int' = 1" in str(inspect.signature(fn)) and "memory: 'Union[int, str]' = <2g>" in str(
        inspect.signature(fn))


def test_a_field_passed_by_keyword_reaches_the_spec_and_a_left_out_one_keeps_its_default():
    spec = orchestrator.job_spec(workers=2, batch_size=64, memory="4g", framework="torch", run_id="typed")
    assert (spec.workers, spec.global_batch, spec.memory_mb, spec.model) == (2, 64, 4096, "cnn")  # torch's model


# -- mypy --strict ------------------------------------------------------------------------------------------------
@pytest.mark.early
def test_the_package_passes_mypy_strict():
    """[tool.mypy] in pyproject.toml: strict over orchestrator/, the trainer's modules aside (checked below)."""
    proc = _mypy("--cache-dir", str(MYPY_CACHE / "package"), cwd=ROOT)
    assert proc.returncode == 0 and "Success" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.early
def test_the_trainer_as_the_images_assemble_it_passes_mypy_strict(tmp_path):
    """orch_trainer as `orch build` lays it out (its modules flat, contract.py and rendezvous.py beside them), where
    its relative imports resolve: every image's modules at once (one mypy run; each image holds the shared ones and
    its own, and test_the_shared_trainer_imports_no_frameworks_module keeps the shared ones to themselves); the
    frameworks' libraries are Any on the host."""
    from orchestrator.images.builder import trainer_files

    files = {name: data for n in frameworks.names() if (recipe := frameworks.get(n).image_recipe()) is not None
             for name, data in trainer_files(recipe) if not name.endswith("/entries.py")}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    (tmp_path / "orch/trainer/orch_trainer/entries.py").write_text("ENTRIES: dict[str, str] = {}\n")
    proc = _mypy("--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(MYPY_CACHE / "trainer"),
                 "-p", "orch_trainer", "-m", "sitecustomize", cwd=tmp_path / "orch" / "trainer")
    assert proc.returncode == 0 and "Success" in proc.stdout, proc.stdout + proc.stderr


def test_the_shared_trainer_imports_no_frameworks_module():
    """The shared trainer (orchestrator/trainer/) is in every image, a framework's trainer modules only in that
    framework's image: a shared module's static import of one would fail in every other image."""
    import ast

    shared = {p.stem for p in (ROOT / "orchestrator" / "trainer").glob("*.py")} | {"contract", "rendezvous", "entries"}
    for path in (ROOT / "orchestrator" / "trainer").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                assert set(names) <= shared, f"{path.name} imports {names} from outside the shared trainer"


USERS_GOOD = """\
import orchestrator
from orchestrator import JobSpec
from orchestrator.api import Run, RunResult
from orchestrator.plan import Plan

plan: Plan = orchestrator.render(workers=3)
spec: JobSpec = orchestrator.job_spec(workers=2, memory="2g", batch_size=64, framework="torch")
JobSpec(workers=3)


def train(n: int) -> int:
    return n


def typed_only() -> None:  # checked, never called
    result: RunResult = orchestrator.run(train, args=(1,), workers=2, memory="2g")
    handle: Run = orchestrator.submit(train, workers=2)
    started: Run = orchestrator.start(workers=2)
    print(result.returns, handle.status(), started.wait(timeout=1.0).returns)
"""
USERS_BAD = """\
import orchestrator

orchestrator.render(wrkers=3)
orchestrator.render(workers="three")
orchestrator.render(framework="pytorch")
"""


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory) -> tuple[Path, Path]:
    """orch's wheel, built from the checkout's files offline, installed without its dependencies into a fresh venv
    that sees the test interpreter's packages (pydantic, numpy, ...) through a .pth file, as pip would put them."""
    root = tmp_path_factory.mktemp("wheel")
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", "orchestrator", "pyproject.toml",
                            "README.md"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (root / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / "src" / name)
    offline = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    offline.pop("PYTHONPATH", None)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(root / "dist"), str(root / "src")], check=True, capture_output=True, timeout=600, env=offline)
    wheel = next((root / "dist").glob("orch-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=600, env=offline)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, env=offline).stdout.strip())
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "zz-orch-test-deps.pth").write_text("\n".join(deps) + "\n")  # after the wheel's own, never before
    return python, site


@pytest.mark.early
def test_mypy_strict_on_a_users_file_checks_the_calls_against_the_installed_wheel(installed_wheel, tmp_path):
    python, site = installed_wheel
    (tmp_path / "good.py").write_text(USERS_GOOD)
    (tmp_path / "bad.py").write_text(USERS_BAD)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    args = ["--strict", "--python-executable", str(python), "--cache-dir", str(MYPY_CACHE / "user")]
    good = _mypy(*args, "-v", "good.py", cwd=tmp_path, env=env)
    assert good.returncode == 0 and "Success" in good.stdout, good.stdout + good.stderr[-3000:]
    found = [line for line in good.stderr.splitlines() if "orchestrator/__init__.py" in line]
    assert found and all(str(site) in line for line in found), found  # the wheel's copy, with its py.typed
    assert (site / "orchestrator" / "py.typed").is_file()
    bad = _mypy(*args, "bad.py", cwd=tmp_path, env=env)
    assert bad.returncode == 1, bad.stdout
    errors = [line for line in bad.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 3, bad.stdout
    assert 'bad.py:3: error: Unexpected keyword argument "wrkers" for "render"' in errors[0]
    assert 'bad.py:4: error: Argument "workers" to "render" has incompatible type "str"; expected "int"' in errors[1]
    assert 'bad.py:5: error: Argument "framework" to "render" has incompatible type' in errors[2]
