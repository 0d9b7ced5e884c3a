"""Shared fixtures. Live tests (marked `docker`) use the real engine and remove what they create."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.tiers"]  # the tiers' rules: a live test that skips in CI fails

# `make test` runs the tests in two processes (pytest-xdist, each test file whole in one of them). They share this
# engine: live tests of their own runs go side by side, and a test that changes or observes the engine as a whole
# (a swarm, a second engine, a hidden image, a bound on seconds) runs alone. The locks are files in the folder
# every process of one pytest run shares; one process alone takes none.
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID")
SWARM_FIXTURES = {"swarm", "stacks", "two_nodes"}


SHARED: list[Path] = []  # the folder every process of the run shares: its base temporary folder's parent


@pytest.fixture(scope="session", autouse=True)
def _shared_folder(tmp_path_factory):
    if RUN_ID is not None:
        SHARED.append(tmp_path_factory.getbasetemp().parent)


def _lock_path(name: str) -> Path:
    return SHARED[0] / f"{name}.lock"


@contextlib.contextmanager
def _flock(name: str, mode: int):
    with open(_lock_path(name), "a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class EngineLock:
    """The engine shared (SH) by live tests of their own runs, or held alone (EX). A turnstile makes a process that
    waits to be alone keep new shared holders out, so it is not starved. Counted within one process: a module that
    holds the engine alone (the swarm's fixture) covers its tests, and the file is unlocked at the last release."""

    def __init__(self) -> None:
        self.mode = 0
        self.count = 0
        self.file = None

    @contextlib.contextmanager
    def hold(self, alone: bool):
        if RUN_ID is None:
            yield
            return
        want = fcntl.LOCK_EX if alone else fcntl.LOCK_SH
        if self.count == 0:
            with _flock("turnstile", fcntl.LOCK_EX):
                self.file = open(_lock_path("engine"), "a")
                fcntl.flock(self.file, want)
            self.mode = want
        elif want == fcntl.LOCK_EX and self.mode != fcntl.LOCK_EX:
            raise RuntimeError("a test that shares the engine asked to have it alone: mark it engine_alone")
        self.count += 1
        try:
            yield
        finally:
            self.count -= 1
            if self.count == 0:
                fcntl.flock(self.file, fcntl.LOCK_UN)
                self.file.close()
                self.mode, self.file = 0, None


ENGINE = EngineLock()


def _alone(item) -> bool:
    """Whether a live test must have the engine to itself."""
    callspec = getattr(item, "callspec", None)
    return (item.get_closest_marker("engine_alone") is not None or bool(SWARM_FIXTURES & set(item.fixturenames))
            or (callspec is not None and "swarm" in callspec.params.values()))


NO_ENGINE = "unix:///nonexistent"  # where a test of the fast tier finds the Docker engine: nowhere


@pytest.fixture(autouse=True)
def _engine(request, monkeypatch):
    """Every live test holds the engine, shared or alone (see ENGINE). Every other test runs with DOCKER_HOST pointing
    nowhere, it and what it starts: a test that reaches for the engine without its `docker` mark fails, in `make
    test` as in `make test-fast`, so the fast tier needs no engine by construction."""
    if request.node.get_closest_marker("docker") is None:
        monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
        yield
        return
    with ENGINE.hold(_alone(request.node)):
        yield



@contextlib.contextmanager
def once(name: str):
    """One process of the run at a time (building the images, making the shared runs)."""
    if RUN_ID is None:
        yield
        return
    with _flock(name, fcntl.LOCK_EX):
        yield


@pytest.fixture(scope="session")
def images():
    """Build (or find up to date) the trainer images once per test session."""
    from orchestrator import frameworks

    with ENGINE.hold(alone=False), once("build"):
        return frameworks.get("tensorflow").build(frameworks.BuildOptions(bootstrap=True), None, None,
                                                  lambda msg: print(f"[build] {msg}", file=sys.stderr))


@pytest.fixture(scope="session")
def torch_image(images):
    """orch's PyTorch image, built (or found up to date) once per test session, after the base image. Its
    wheels (3.2 GB) are downloaded once per machine."""
    from orchestrator import frameworks

    with ENGINE.hold(alone=False), once("build"):
        return frameworks.get("torch").build(frameworks.BuildOptions(), None, None,
                                             lambda msg: print(f"[build] {msg}", file=sys.stderr))


@pytest.fixture(scope="session")
def vision(torch_image, tmp_path_factory):
    """torchvision for the PyTorch image's torch, through the documented one-liner (the tutorials' tests, on Compose
    and on Swarm): the requirements file that names its image."""
    requirements = tmp_path_factory.mktemp("vision") / "vision.txt"
    requirements.write_text("torchvision==0.24.1\n")
    with ENGINE.hold(alone=False), once("build"):  # the same tag as test_runs_torch's torchvision build
        built = run_orch(["build", "--framework", "torch", "--requirements", str(requirements)], dict(os.environ),
                         timeout=900)
    assert built.returncode == 0, built.stderr
    return requirements


def _image_ids() -> dict[str, str]:
    """Every orch image the engine has: its tag -> its id."""
    out = subprocess.run(["docker", "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split() for line in out.splitlines() if line.startswith("orch-"))


@pytest.fixture(scope="session")
def jax_image(images):
    """orch's JAX image, built (or found up to date) once per test session, after the base image; and the ids of
    every other orch image before and after the build, which building one framework's image must not change."""
    from orchestrator import frameworks

    with ENGINE.hold(alone=False), once("build"):
        before = _image_ids()
        built = frameworks.get("jax").build(frameworks.BuildOptions(), None, None,
                                            lambda msg: print(f"[build] {msg}", file=sys.stderr))
        return built, before, _image_ids()


def load_file(name: str, path: Path):
    """The Python file ``path`` as a module called ``name`` (a benchmark's or a tool's, which is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def orch_environment(root: Path) -> dict[str, str]:
    """Environment for an `orch` subprocess whose runs go to ``root``/runs and whose results (collect's default)
    to ``root``/results, not the checkout's results/."""
    return dict(os.environ, ORCH_RUNS_DIR=str(root / "runs"), ORCH_RESULTS_DIR=str(root / "results"), COLUMNS="200")


@pytest.fixture
def orch_env(tmp_path):
    """Environment for an `orch` subprocess whose runs go to a fresh folder."""
    return orch_environment(tmp_path)


def run_orch(args, env, timeout=600, **kwargs):
    """Run the `orch` command as a user would; return the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kwargs)


def start_orch(args, env, cwd=ROOT) -> subprocess.Popen:
    """Start the `orch` command in the background, as from a terminal: SIGINT at its default, so that a Ctrl-C
    (``send_signal(SIGINT)``) reaches it even when the tests themselves run with SIGINT ignored, as every command
    started with ``&`` from a non-interactive shell does, and Python then never installs its handler."""
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def replica_events(run_dir: Path, index: int, role: str = "worker") -> list[dict]:
    """The events replica ``role``-``index`` of a run has written so far ([] before its first)."""
    path = run_dir / f"{role}-{index}" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def orch_containers(run_id: str, running: bool = False) -> list[str]:
    """Ids of every container labelled with ``run_id``, in any state, or (``running``) those started and running: a
    container created but not started yet cannot be paused."""
    state = ["--filter", "status=running"] if running else ["-a"]
    proc = subprocess.run(["docker", "ps", "-q", *state, "--filter", f"label=orch.run={run_id}"], capture_output=True,
                          text=True, check=True)
    return proc.stdout.split()


def orch_networks(run_id: str) -> list[str]:
    """Networks labelled with ``run_id``."""
    proc = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=orch.run={run_id}"],
                          capture_output=True, text=True, check=True)
    return proc.stdout.split()


@pytest.fixture
def cleanup():
    """Collects run ids; removes their containers and networks even when the test fails."""
    run_ids: list[str] = []
    yield run_ids
    for run_id in run_ids:
        remove_run(run_id)


def supervisors(run_id: str) -> list[int]:
    """The PIDs of the supervisor processes (run/supervise.py) of every run named ``run_id`` on this host."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"orchestrator.run.supervise" in argv and any(a.rstrip(b"/").endswith(b"/" + run_id.encode()) for a in argv):
            pids.append(int(entry.name))
    return pids


def run_mounts(run_id: str) -> list[str]:
    """The mount points inside a run directory named ``run_id`` (its --disk-limit file system: run/volume.py)."""
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    return [p for p in points if f"/{run_id}/" in p]


def remove_run(run_id: str) -> None:
    """Remove the supervisors, file systems, containers and networks of run ``run_id``, whatever their state."""
    for pid in supervisors(run_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for point in sorted(run_mounts(run_id), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    ids = orch_containers(run_id)
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    nets = orch_networks(run_id)
    if nets:
        subprocess.run(["docker", "network", "rm", *nets], capture_output=True)


def made_once(name: str, runs: dict[str, list[str]], tmp_path_factory) -> dict:
    """`orch up` runs that several tests read and none changes, made once for every process of the pytest run: the
    first process to ask makes them, the others wait and read. Returns {"env": the environment that finds them,
    "root": their folder, and per run id: "dir", "returncode", "stdout", "stderr", "info" (its `--format json`),
    "left" (the containers and networks orch left once it returned, removed after)}. A run that failed is not made
    again: each test that reads it fails, with the run's stderr."""
    root = SHARED[0] / name if SHARED else tmp_path_factory.getbasetemp() / name
    env = orch_environment(root)
    record = root / "made.json"
    with ENGINE.hold(alone=False), once(name):
        if not record.is_file():
            root.mkdir(parents=True, exist_ok=True)
            made = {}
            try:
                for run_id, args in runs.items():
                    proc = run_orch(["up", *args, "--run-id", run_id, "--format", "json"], env)
                    made[run_id] = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                                    "left": orch_containers(run_id) + orch_networks(run_id)}
            finally:
                for run_id in runs:
                    remove_run(run_id)
            record.write_text(json.dumps(made))
    made = json.loads(record.read_text())
    for run_id, m in made.items():
        m["dir"] = root / "runs" / run_id
        m["info"] = json.loads(m["stdout"]) if m["returncode"] == 0 else None
    return {"env": env, "root": root, **made}


def made(runs: dict, run_id: str) -> dict:
    """One run of ``made_once``'s, which the test needs to have succeeded."""
    run = runs[run_id]
    assert run["returncode"] == 0, f"the shared run {run_id} failed: {run['stderr']}"
    return run


@pytest.fixture(scope="session")
def observed_runs(images, tmp_path_factory):
    """A 1-worker and a 3-worker run with stats, shared by the logs, stats and collect tests (made once for every
    process of the run: the tests only read them)."""
    shape = ["--dataset", "synthetic", "--samples", "12000", "--epochs", "3", "--steps-per-execution", "1"]
    runs = made_once("observed", {"observed-w1": ["--workers", "1", *shape], "observed-w3": ["--workers", "3", *shape]},
                     tmp_path_factory)
    return {"env": runs["env"], "root": runs["root"], "w1": made(runs, "observed-w1")["dir"],
            "w3": made(runs, "observed-w3")["dir"]}


# A small job of orch's trainer: a few seconds of training, whose runs the live tests of several files compare.
SMALL = ["--dataset", "synthetic", "--samples", "6000", "--epochs", "2", "--steps-per-execution", "10"]


@pytest.fixture(scope="session")
def small_runs(images, tmp_path_factory):
    """Runs of the trainer on small synthetic data that several tests read (made once): 3 workers (the Compose twin
    of the swarm's), and 2 under MultiWorkerMirroredStrategy with orch's own steps (against Keras' steps, and
    against the custom loop)."""
    return made_once("small", {"live-w3": ["--workers", "3", *SMALL],
                               "live-mwms-2": ["--workers", "2", "--strategy", "mwms", *SMALL, "--log-reduction",
                                               "epoch"]}, tmp_path_factory)
