"""Bad input to every verb: one line on stderr naming what the user typed, nothing on stdout, and the exit code
(2 for bad input or environment, 130 for Ctrl-C). In-process and without an engine, but for Ctrl-C against an
engine that never answers."""
from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

from tests.conftest import start_orch
from tests.test_cli_inprocess import one_line_error, orch

CASES = [
    # build
    (["build", "--framework", "caffe"], "'--framework'"),
    (["build", "--requirements", "/nonexistent.txt"], "--requirements"),
    (["build", "--torch-index", "https://x.example/simple"], "--index"),
    # render: spec flags, each error naming the flag
    (["render", "--epochs", "0"], "--epochs: must be at least 1"),
    (["render", "--samples", "-5"], "--samples:"),
    (["render", "--learning-rate", "20"], "--learning-rate: must be at most 10"),
    (["render", "--script", "/nonexistent/train.py"], "--script: cannot use '/nonexistent/train.py'"),
    (["render", "--learning-rate", "nan"], "--learning-rate: must be a finite number"),
    (["render", "--memory", "10"], "--memory: must be at least 256 (got 10); e.g. --memory 2048"),
    (["render", "--workers", "20000"], "--workers: must be at most 32"),
    (["render", "--run-id", "A/B"], "--run-id: must be lowercase letters"),
    (["render", "--model", "text"], "--model:"),
    (["render", "--threads", "999"], "--threads:"),
    (["render", "--cpus", "0"], "--cpus: must be more than 0"),
    (["render", "--gpus", "99"], "--gpus:"),
    (["render", "--disk-limit", "-1"], "--disk-limit:"),
    (["render", "--stall-timeout", "1"], "--stall-timeout:"),
    (["render", "--max-restarts", "99"], "--max-restarts:"),
    (["render", "--image", "bad image!"], "--image:"),
    (["render", "--network", "host"], "--expose-ports-on-host"),
    (["render", "--source", "/tmp"], "--source"),
    (["render", "--script", "/etc/passwd"], "--script: must be a Python file ending in .py"),
    (["render", "-b", "100", "-n", "3"], "--batch-size: 100 is not divisible by 3 workers; use 99 or 102"),
    (["render", "-b", "2", "-n", "3"], "--batch-size: 2 is not divisible by 3 workers; use a multiple of 3"),
    (["render", "--", "--lr", "1"], "arguments after --"),
    # options of another framework or backend: refused, not ignored
    (["render", "--framework", "mpi", "--strategy", "ps"], "--strategy is an option of --framework tensorflow"),
    (["render", "--transport", "shm"], "--transport is an option of --framework mpi"),
    (["render", "--k8s-kind", "jobset"], "--k8s-kind is an option of --backend k8s"),
    (["render", "--registry", "r.example/ml"], "--registry is an option of --backend swarm or k8s"),
    (["render", "--backend", "k8s", "--overlay-mtu", "1400"], "--overlay-mtu is an option of --backend swarm"),
    (["render", "--framework", "torch", "--replicas", "2"], "--replicas is an option of --framework tensorflow"),
    # engines
    (["up", "--engine", "lxc"], "'--engine'"),
    (["render", "--engine", "podman", "--backend", "swarm"], "--engine is an option of --backend compose"),
    (["render", "--engine", "podman", "--gpus", "1"], "--gpus: orch asks for GPUs through Docker's NVIDIA runtime"),
    # up
    (["up", "--workers", "3", "--strategy", "single"], "--strategy: single runs in one container"),
    (["up", "--time-limit", "-1"], "--time-limit:"),
    (["up", "--stats-interval", "0"], "'--stats-interval'"),
    (["up", "--memory", "lots"], "--memory: 'lots' is not a size"),
    (["up", "--nonsense"], "--nonsense"),
    # reads
    (["ps", "--format", "xml"], "'--format'"),
    (["down"], "--all"),
    (["down", "--all", "some-run"], "--all"),
    (["stats", "--interval", "0"], "'--interval'"),
    (["stats", "no-such-run"], "no-such-run"),
    (["attach", "no-such-run"], "no-such-run"),
    (["attach", "--format", "yaml"], "'--format'"),
    (["collect", "no-such-run"], "no-such-run"),
    (["collect", "--format", "csv"], "'--format'"),
    (["logs", "no-such-run"], "no-such-run"),
    (["logs", "--since", "yesterday"], "'--since'"),
    (["logs", "--grep", "("], "--grep"),
    # experiment
    (["experiment", "run", "/nonexistent.yaml"], "/nonexistent.yaml"),
    (["experiment", "run", "{tmp}/binary.yaml"], "binary.yaml: not UTF-8 text"),
    (["experiment", "run", "{tmp}/typo.yaml"], "unknown field batchsize; did you mean batch_size?"),
    (["experiment", "run", "{tmp}/repeats.yaml"], "repeats: must be at least 1 (got 0); e.g. repeats: 3"),
    (["experiment", "run", "{tmp}/baseline.yaml"], "report.baseline: {workers: 4} is no cell of the grid"),
    (["experiment", "run", "{tmp}/spec-name.yaml"], "global_batch: experiment files name it as the flag does: "
                                                    "batch_size"),
    (["experiment", "run", "{tmp}"], "'FILE'"),
    (["experiment", "nope"], "'nope'"),
    (["experiment", "show", "no-such-sweep"], "no-such-sweep"),
    (["experiment", "list", "--format", "xml"], "'--format'"),
    # track
    (["track"], "'RUNS"),
    (["track", "no-such-run"], "no-such-run"),
    (["track", "some-run", "--to", "wandb"], "'--to'"),
    (["up", "--track", "wandb"], "'--track'"),
    (["experiment", "run", "{tmp}/typo.yaml", "--track", "wandb"], "'--track'"),
    # doctor, push, bench
    (["doctor", "--fix", "now"], "now"),
    (["push", "--context"], "'--context'"),
    (["push", "--context", "x", "--dataset", "imagenet"], "'--dataset'"),
    (["bench", "allreduce", "--ranks", "1"], "--ranks: an all-reduce needs 2 to 16 ranks"),
    (["bench", "allreduce", "--transports", "carrier-pigeon"], "--transports: 'carrier-pigeon'"),
    (["bench", "allreduce", "--sizes", "x"], "--sizes"),
    (["bench", "allreduce", "--iterations", "1"], "'--iterations'"),
    (["nosuchverb"], "nosuchverb"),
]

FILES = {
    "binary.yaml": b"\x00\xff\xfe binary",
    "typo.yaml": b"name: t\nbase: {dataset: synthetic, batchsize: 96}\n",
    "repeats.yaml": b"name: t\nbase: {dataset: synthetic, samples: 600}\ngrid: {workers: [1, 2]}\nrepeats: 0\n",
    "baseline.yaml": b"name: t\nbase: {dataset: synthetic, samples: 600}\ngrid: {workers: [1, 2]}\n"
                     b"report: {baseline: {workers: 4}}\n",
    "spec-name.yaml": b"name: t\nbase: {dataset: synthetic, samples: 600, global_batch: 96}\n",
}


def test_there_are_at_least_40_cases_covering_every_verb():
    from orchestrator.cli import cli

    assert len(CASES) >= 40
    verbs = {args[0] for args, _ in CASES}
    assert set(cli.commands) <= verbs, set(cli.commands) - verbs


@pytest.fixture(params=["docker", "podman"])
def engine(request, monkeypatch):
    """Each engine, as $ORCH_ENGINE chooses it, at an address where nothing answers: nothing here may need one."""
    monkeypatch.setenv("ORCH_ENGINE", request.param)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("CONTAINER_HOST", "unix:///nonexistent/podman.sock")
    return request.param


@pytest.mark.parametrize("args, needle", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_line_naming_what_was_typed_and_exits_2(args, needle, engine, tmp_path, monkeypatch):
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCH_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("ORCH_RESULTS_DIR", str(tmp_path / "results"))
    one_line_error(orch(*(a.replace("{tmp}", str(tmp_path)) for a in args)), 2, needle)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing was started


def test_global_options_work_in_any_position(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_RUNS_DIR", str(tmp_path / "default"))
    monkeypatch.setenv("ORCH_RESULTS_DIR", str(tmp_path / "results"))
    result = orch("ps", "--runs-dir", str(tmp_path / "elsewhere"), "--format", "json", "--debug")
    assert result.code == 0, result
    assert os.environ["ORCH_RUNS_DIR"] == str(tmp_path / "elsewhere")  # the verb's folder is the one given after it


@pytest.fixture
def silent_engine(tmp_path):
    """A Docker socket that accepts connections and never answers: an engine too slow to reply. It yields its address
    and an event set once a request has reached it."""
    path = str(tmp_path / "docker.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(64)
    held: list[socket.socket] = []
    asked = threading.Event()

    def read(conn: socket.socket) -> None:
        try:
            if conn.recv(1 << 16):
                asked.set()
        except OSError:
            return

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return
            threading.Thread(target=read, args=(held[-1],), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"unix://{path}", asked
    server.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("verb", [["down", "--all"], ["doctor"],
                                  ["up", "--dataset", "synthetic", "--samples", "600", "--epochs", "1"]])
@pytest.mark.parametrize("engine_name", ["docker", "podman"])
def test_ctrl_c_while_the_engine_is_slow_exits_130(verb, engine_name, silent_engine, tmp_path):
    address, asked = silent_engine
    env = {**os.environ, "DOCKER_HOST": address, "CONTAINER_HOST": address, "ORCH_ENGINE": engine_name,
           "ORCH_RUNS_DIR": str(tmp_path / "runs")}
    proc = start_orch(verb, env, cwd=tmp_path)
    assert asked.wait(30), "orch never asked the engine"
    time.sleep(0.2)  # into the engine call, which would wait minutes
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "orch: interrupted", err
