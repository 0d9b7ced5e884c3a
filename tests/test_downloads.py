"""Downloads from indexes a user names (`--torch-index`, `--requirements`), against small local indexes (PEP 503
folders, one served on 127.0.0.1, one as file://): resolved first, locked with sha256 and each package's one
index, downloaded with --require-hashes from that index alone, https only unless allowed, credentials never shown.
The host's real pip runs; nothing reaches the internet."""
import functools
import hashlib
import http.server
import json
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from orchestrator.errors import BuildError, InvalidSpec
from orchestrator.frameworks.torch import build as torch_build
from orchestrator.images import pins, user, wheels
from orchestrator.paths import Paths, recipe_dir
from tests.conftest import run_orch
from tests.kube_cluster import QuietServer

SECRET = "s3cret-t0ken"


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), note: str = "") -> Path:
    """A small valid wheel: metadata (with its requirements) and one module."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}/__init__.py", f"NOTE = {note!r}\n")
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def _index(root: Path, wheel_files: list[Path], hashes: bool = True) -> Path:
    """A PEP 503 index of ``wheel_files`` in ``root``: a page per project, with sha256 fragments if ``hashes``."""
    root.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[Path]] = {}
    for wheel in wheel_files:
        projects.setdefault(wheels.wheel_id(wheel.name)[0], []).append(wheel)
    for project, files in projects.items():
        (root / project).mkdir(parents=True, exist_ok=True)
        links = []
        for wheel in files:
            (root / project / wheel.name).write_bytes(wheel.read_bytes())
            fragment = f"#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}" if hashes else ""
            links.append(f'<a href="{wheel.name}{fragment}">{wheel.name}</a>')
        (root / project / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
    (root / "index.html").write_text("".join(f'<a href="{p}/">{p}</a>' for p in projects))
    return root


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D401 - no request log on the test's stderr
        pass


@pytest.fixture
def served(tmp_path):
    """A folder served over http on 127.0.0.1 (no TLS here: the tests allow plain http for it); yields (folder, URL)."""
    root = tmp_path / "served"
    root.mkdir()
    server = QuietServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def no_pip_cache(monkeypatch):
    """The fake wheels stay out of the host's pip cache."""
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")


@pytest.fixture
def no_engine(orch_env, tmp_path):
    """`orch` with no Docker engine and a cache of its own: a refusal that failed to happen cannot build anything."""
    return {**orch_env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "ORCH_CACHE_DIR": str(tmp_path / "cache"),
            "PIP_NO_CACHE_DIR": "1"}


@pytest.fixture
def pip_calls(monkeypatch):
    """Every command orch runs, recorded, then run for real."""
    calls, real = [], subprocess.run

    def spy(cmd, *args, **kwargs):
        calls.append(list(cmd))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(wheels.subprocess, "run", spy)
    return calls


def _host_index(tmp_path: Path, monkeypatch, wheel_files: list[Path]) -> str:
    """The host's own index (PyPI's stand-in): a file:// index named by PIP_INDEX_URL."""
    url = _index(tmp_path / "host-index", wheel_files, hashes=False).as_uri()
    monkeypatch.setenv("PIP_INDEX_URL", url)
    return url


def _downloads(calls: list[list[str]]) -> list[list[str]]:
    return [cmd[3:] for cmd in calls if cmd[:4] == [sys.executable, "-m", "pip", "download"]]


def _all_text(folder: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


def _no_second_source(calls: list[list[str]]) -> None:
    """Every pip command that reaches an index names exactly one, with no extra index and no extra links."""
    for cmd in calls:
        if cmd[3] in ("download", "install"):
            assert "--extra-index-url" not in cmd and "--find-links" not in cmd and "-f" not in cmd
            assert cmd.count("--index-url") + cmd.count("--no-index") == 1, cmd


# -- 1 and 4: resolve, lock, then download with hashes, one index per package ---------------------------------------
@pytest.mark.early
def test_torch_comes_from_its_index_alone_and_the_rest_from_the_hosts_locked_before_download(
        tmp_path, monkeypatch, served, pip_calls):
    root, base = served
    src = tmp_path / "src"
    cpu = _wheel(src / "cpu", "torch", "2.9.1+cpu", ("filelock", "numpy"), note="cpu")
    # The torch index also serves a filelock of a higher version: it must not stand in for the host's.
    _index(root / "torch", [cpu, _wheel(src / "evil", "filelock", "99.0", note="evil")])
    host = _host_index(tmp_path, monkeypatch, [
        _wheel(src / "host", "filelock", "3.0"), _wheel(src / "host", "numpy", "2.4.6"),
        _wheel(src / "host-cuda", "torch", "2.9.1", ("nvidia-cublas",), note="cuda")])
    index = f"http://user:{SECRET}@127.0.0.1:{base.rpartition(':')[2]}/torch/"
    paths, said = Paths(tmp_path / "runs", tmp_path / "cache"), []
    with wheels.insecure_allowed(True):
        folder = torch_build._index_wheelhouse(index, paths, said.append)

    lock = wheels.read_lock(folder / wheels.LOCK_NAME)
    shown = f"index http://***@127.0.0.1:{base.rpartition(':')[2]}/torch/"
    assert {n: (p.version, p.source) for n, p in lock.packages.items()} == {
        "torch": ("2.9.1+cpu", shown), "filelock": ("3.0", f"index {host}"), "numpy": ("2.4.6", f"index {host}")}
    on_disk = {wheels.wheel_id(w.name): w for w in folder.glob("*.whl")}
    assert set(on_disk) == {("torch", "2.9.1+cpu"), ("filelock", "3.0"), ("numpy", "2.4.6")}
    for (name, _), wheel in on_disk.items():
        assert lock.packages[name].hashes == {wheels.sha256(wheel)}
    # Resolved first; every download exact: hashes required, no dependencies, wheels only, its own index alone.
    assert pip_calls[1][3:5] == ["install", "--dry-run"] and _downloads(pip_calls)
    for cmd in _downloads(pip_calls):
        assert {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(cmd)
    _no_second_source(pip_calls)
    # Every later build only checks the wheels against the lock.
    pip_calls.clear()
    assert torch_build._index_wheelhouse(index, paths, said.append) == folder and not pip_calls
    on_disk[("filelock", "3.0")].write_bytes(b"swapped")
    with pytest.raises(BuildError, match="disagree"):
        torch_build._index_wheelhouse(index, paths, said.append)


@pytest.mark.early
def test_requirements_come_from_the_hosts_index_alone_locked_before_download(
        tmp_path, monkeypatch, pip_calls):
    src = tmp_path / "src"
    image_numpy = wheels.read_lock(recipe_dir("tensorflow") / wheels.LOCK_NAME).packages["numpy"].version
    host = _host_index(tmp_path, monkeypatch, [
        _wheel(src / "host", "alpha", "1.0", ("beta", "numpy")), _wheel(src / "host", "beta", "1.0"),
        _wheel(src / "host", "numpy", image_numpy), _wheel(src / "host", "numpy", "99.0")])
    # A second source in the host's settings (as the environment or pip's configuration can add one) is not used.
    evil = _index(tmp_path / "evil-index", [_wheel(src / "evil", "beta", "9.0", note="evil")])
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", evil.as_uri())
    monkeypatch.setenv("PIP_FIND_LINKS", str(src / "evil"))
    paths = Paths(tmp_path / "runs", tmp_path / "cache")
    got = user.wheelhouse(b"alpha\n", "requirements.txt", paths, lambda _m: None)

    assert sorted(wheels.wheel_id(w.name) for w in got) == [("alpha", "1.0"), ("beta", "1.0")]
    lock = wheels.read_lock(got[0].parent / wheels.LOCK_NAME)
    assert {n: (p.version, p.source) for n, p in lock.packages.items()} == {
        "alpha": ("1.0", f"index {host}"), "beta": ("1.0", f"index {host}")}  # numpy: the image's, not downloaded
    assert not list(got[0].parent.glob("numpy*"))
    assert pip_calls[1][3:5] == ["install", "--dry-run"]
    for cmd in _downloads(pip_calls):
        assert {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(cmd)
    _no_second_source(pip_calls)
    pip_calls.clear()
    assert user.wheelhouse(b"alpha\n", "requirements.txt", paths, lambda _m: None) == got and not pip_calls
    # A wheelhouse an older orch finished with a GPU library in its lock (it took every wheel pip resolved) is
    # resolved again, not reused.
    folder = got[0].parent
    lock_file = folder / wheels.LOCK_NAME
    lock_file.write_text(lock_file.read_text().replace("alpha==", "nvidia-cublas-cu12=="))
    assert user.wheelhouse(b"alpha\n", "requirements.txt", paths, lambda _m: None) == got and pip_calls
    assert "nvidia" not in (folder / wheels.LOCK_NAME).read_text()
    pip_calls.clear()
    got[0].write_bytes(b"swapped")
    with pytest.raises(BuildError, match="disagree"):
        user.wheelhouse(b"alpha\n", "requirements.txt", paths, lambda _m: None)


@pytest.mark.parametrize("line", ["--extra-index-url https://mirror.example/simple", "-i https://mirror.example/simple",
                                  "--index-url=https://mirror.example/simple", "--find-links /srv/wheels",
                                  "-f/srv/wheels", "--trusted-host mirror.example", "--no-index", "-r other.txt",
                                  "-c constraints.txt", "alpha==1.0 --extra-index-url https://mirror.example/simple"])
def test_a_requirements_file_naming_its_own_source_is_refused_in_one_line(tmp_path, line):
    req = tmp_path / "requirements.txt"
    req.write_text(f"# extras\nbeta==1.0 \\\n    --hash=sha256:{'0' * 64}\n{line}\n")
    with pytest.raises(InvalidSpec) as err:
        user.read_requirements(req)
    assert "\n" not in err.value.message and "line 4" in err.value.message and "list packages only" in err.value.message


def test_the_cli_refuses_a_requirements_file_with_options_before_building(tmp_path, no_engine):
    req = tmp_path / "requirements.txt"
    req.write_text(f"--extra-index-url https://user:{SECRET}@mirror.example/simple\nalpha\n")
    proc = run_orch(["build", "--requirements", str(req)], no_engine, timeout=60)
    assert proc.returncode == 2 and "--extra-index-url is not taken" in proc.stderr and SECRET not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# -- 2: https only, unless --allow-insecure-index ----------------------------------------------------------------------
def test_plain_http_is_refused_unless_allowed(tmp_path, monkeypatch):
    with pytest.raises(InvalidSpec, match="plain http.*--allow-insecure-index"):
        torch_build.index_download_args("http://mirror.example/whl/cpu")
    with wheels.insecure_allowed(True):
        args = torch_build.index_download_args("http://mirror.example/whl/cpu")
    assert args[:4] == ["--index-url", "http://mirror.example/whl/cpu", "--trusted-host", "mirror.example"]
    req = tmp_path / "requirements.txt"
    req.write_text("alpha @ http://files.example/alpha-1.0-py3-none-any.whl\n")
    with pytest.raises(InvalidSpec, match="plain http"):
        user.check(req)
    assert user.check(req, allow_insecure=True) == req.read_bytes()
    # The host's own index too, before pip runs.
    monkeypatch.setenv("PIP_INDEX_URL", "http://mirror.example/simple")
    monkeypatch.setattr(pins, "resolve", lambda *a, **k: pytest.fail("nothing is resolved over plain http"))
    with pytest.raises(InvalidSpec, match="plain http"):
        user.wheelhouse(b"alpha\n", "requirements.txt", Paths(tmp_path / "r", tmp_path / "c"), lambda _m: None)


def test_a_wheel_the_index_links_over_plain_http_or_without_a_hash_is_refused(tmp_path, monkeypatch):
    def report(url, hashes):
        def fake_run(cmd, **kwargs):
            item = {"metadata": {"name": "alpha", "version": "1.0"}, "is_direct": False,
                    "download_info": {"url": url, "archive_info": {"hashes": hashes}}}
            Path(cmd[cmd.index("--report") + 1]).write_text(json.dumps({"install": [item]}))
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return fake_run

    monkeypatch.setattr(wheels.subprocess, "run", report("http://files.example/alpha-1.0-py3-none-any.whl",
                                                         {"sha256": "0" * 64}))
    with pytest.raises(InvalidSpec, match="alpha==1.0's wheel.*plain http"):
        pins.resolve([], "https://index.example/simple", {}, "requirements.txt")
    monkeypatch.setattr(wheels.subprocess, "run", report("https://files.example/alpha-1.0-py3-none-any.whl", {}))
    with pytest.raises(BuildError, match="no sha256 for alpha==1.0"):
        pins.resolve([], "https://index.example/simple", {}, "requirements.txt")


def test_the_cli_refuses_a_plain_http_torch_index_in_one_line(no_engine):
    proc = run_orch(["build", "--framework", "torch", "--torch-index", f"http://me:{SECRET}@mirror.example/cpu"],
                    no_engine, timeout=60)
    assert proc.returncode == 2 and "--allow-insecure-index" in proc.stderr and SECRET not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    # With the flag the URL is taken, and the build goes on as far as the engine (none here).
    proc = run_orch(["build", "--framework", "torch", "--torch-index", "http://mirror.example/cpu",
                     "--allow-insecure-index"], no_engine, timeout=60)
    assert proc.returncode == 2 and "cannot reach the Docker engine" in proc.stderr and "plain http" not in proc.stderr


# -- 3: credentials are never printed or written -----------------------------------------------------------------------
@pytest.mark.early
def test_credentials_never_reach_a_message_a_lock_or_a_progress_line(tmp_path, monkeypatch, served):
    root, base = served
    _index(root / "torch", [_wheel(tmp_path / "src", "torch", "2.9.1+cpu")])
    _host_index(tmp_path, monkeypatch, [_wheel(tmp_path / "src", "numpy", "2.4.6")])
    port = base.rpartition(":")[2]
    paths, said = Paths(tmp_path / "runs", tmp_path / "cache"), []
    # An index that lists no torch: pip's error (its stderr's tail too) names the URL, never the token.
    with wheels.insecure_allowed(True), pytest.raises(BuildError) as err:
        torch_build._index_wheelhouse(f"http://{SECRET}@127.0.0.1:{port}/nothing-here/", paths, said.append)
    assert SECRET not in err.value.message + err.value.details + "".join(said)
    assert "***@127.0.0.1" in err.value.message
    # A URL that is not one is quoted without its credentials.
    with pytest.raises(InvalidSpec) as bad:
        torch_build.index_download_args(f"https://user:{SECRET}@mirror.example/a b")
    assert SECRET not in bad.value.message
    # The lock of a wheelhouse that was made names the index redacted (a torch with dependencies on the host's).
    with wheels.insecure_allowed(True):
        folder = torch_build._index_wheelhouse(f"http://user:{SECRET}@127.0.0.1:{port}/torch/", paths, said.append)
    text = _all_text(folder)
    assert SECRET not in text + "".join(said) and f"http://***@127.0.0.1:{port}/torch/" in text
    assert wheels.redact(f"x https://u:{SECRET}@h/s and git+https://{SECRET}@h/r.git") == \
        "x https://***@h/s and git+https://***@h/r.git"


def test_a_requirement_url_with_credentials_is_downloaded_with_them_and_written_without(
        tmp_path, monkeypatch, served):
    root, base = served
    wheel = _wheel(tmp_path / "src", "alpha", "1.0")
    (root / wheel.name).write_bytes(wheel.read_bytes())
    _host_index(tmp_path, monkeypatch, [])
    url = f"http://me:{SECRET}@127.0.0.1:{base.rpartition(':')[2]}/{wheel.name}"
    said = []
    got = user.wheelhouse(f"alpha @ {url}\n".encode(), "requirements.txt", Paths(tmp_path / "r", tmp_path / "c"),
                          said.append, allow_insecure=True)
    assert [w.name for w in got] == [wheel.name]
    lock = wheels.read_lock(got[0].parent / wheels.LOCK_NAME)
    assert lock.packages["alpha"].hashes == {wheels.sha256(wheel)} and lock.packages["alpha"].source.startswith("url ")
    assert SECRET not in _all_text(got[0].parent) + "".join(said)
