"""`orch bench allreduce`: the arithmetic and the checks of what a container wrote (pure), and the --tiny run
against real containers and bare host processes (live)."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from orchestrator.bench import Row, _compare_to_host, known_transports, parse_measurement, summarize
from orchestrator.bench.report import markdown
from orchestrator.errors import InvalidSpec, OrchError
from tests.conftest import orch_containers, run_orch
from tests.test_cli_inprocess import one_line_error, orch


def test_percentiles_and_bus_bandwidth():
    p50, p99, bus = summarize([100e-6] * 98 + [1e-3, 2e-3], 80 << 10, 3)
    assert p50 == pytest.approx(100) and 990 <= p99 <= 2000
    assert bus == pytest.approx((80 << 10) / 100e-6 * 2 * 2 / 3 / 1e9)  # NCCL's bus bandwidth: 2(n-1)/n
    assert summarize([1e-3], 4096, 2)[2] == pytest.approx(4096 / 1e-3 / 1e9)


@pytest.mark.parametrize("raw", [
    None, [], {"ranks": 3, "rows": []}, {"ranks": 2, "rows": "x"},
    {"ranks": 2, "rows": [{"bytes": 4096, "samples": []}]},
    {"ranks": 2, "rows": [{"bytes": 4096, "samples": [float("nan")]}]},
    {"ranks": 2, "rows": [{"bytes": 4096, "samples": [-1.0]}]},
    {"ranks": 2, "rows": [{"bytes": "4096", "samples": [1e-4]}]},
    {"ranks": 2, "rows": [{"bytes": 4096, "samples": ["1e-4"]}]},
])
def test_what_a_container_wrote_is_checked(raw):
    with pytest.raises(OrchError):
        parse_measurement(raw, 2, [4096])


def test_a_good_measurement_reads_back():
    assert parse_measurement({"ranks": 2, "rows": [{"bytes": 4096, "samples": [1e-4, 2e-4]}]}, 2, [4096]) == {
        4096: [1e-4, 2e-4]}


def test_containers_are_compared_with_the_host_of_the_same_api_ranks_and_size():
    rows = [Row("mpi-shm", "containers", 3, 81920, 150.0, 300.0, 0.7, 100),
            Row("mpi-host", "host", 3, 81920, 100.0, 200.0, 1.0, 100),
            Row("tf-ring-bridge", "containers", 3, 81920, 3000.0, 4000.0, 0.03, 10),
            Row("mpi-shm", "containers", 2, 81920, 9.0, 10.0, 9.0, 100),
            Row("gloo", "containers", 3, 81920, note="needs a PyTorch image")]
    _compare_to_host(rows, list(known_transports()))
    assert [r.vs_host for r in rows] == [1.5, None, None, None, None]
    text = markdown(rows, "# t")
    assert "| mpi-shm | containers | 3 | 80 KB | 150 |" in text and "1.50x" in text
    assert "| gloo | containers | 3 | 80 KB | - | - | - | needs a PyTorch image |" in text


@pytest.mark.parametrize("args, message", [
    (["--sizes", "4Q"], "'4Q' is not a size"),
    (["--ranks", "two"], "is not a comma-separated list"),
    (["--ranks", "1"], "ranks: an all-reduce needs 2 to 16 ranks"),
    (["--transports", "carrier-pigeon"], "transports: 'carrier-pigeon' is not one orch has"),
    (["--iterations", "2"], "--iterations"),
])
def test_bad_flags_are_one_line_errors(args, message):
    one_line_error(orch("bench", "allreduce", *args), 2, message)


def test_the_run_refuses_bad_shapes_before_anything_starts():
    from orchestrator.bench import run

    with pytest.raises(InvalidSpec, match="sizes: each message is 4 bytes to 1 GiB"):
        run([2], [2], ["mpi-shm"], 10, 1)


@pytest.mark.docker
def test_tiny_measures_every_transport_and_the_host_reference(images, torch_image, orch_env, tmp_path):
    proc = run_orch(["bench", "allreduce", "--tiny", "--out", str(tmp_path / "bench"), "--format", "json"], orch_env,
                    timeout=900)
    assert proc.returncode == 0, proc.stderr
    rows = {(r["transport"], r["placement"]): r for r in json.loads(proc.stdout)}
    for name in ("tf-ring-bridge", "tf-ring-loopback", "mpi-tcp", "mpi-shm", "gloo"):
        row = rows[(name, "containers")]
        assert row["ranks"] == 2 and row["bytes"] == 4096 and 0 < row["p50_us"] <= row["p99_us"] < 1e6
        assert row["vs_host"] > 0  # compared with the bare processes of its API
    for api in ("mpi", "tensorflow", "gloo"):
        assert rows[(f"{api}-host", "host")]["p50_us"] > 0
    assert {p.name for p in (tmp_path / "bench").iterdir()} >= {"allreduce.json", "allreduce.md",
                                                                   "allreduce-latency.png"}
    assert (tmp_path / "bench" / "allreduce-latency.png").stat().st_size > 10_000
    # Every measurement's containers are gone (each run by the id its progress line names: the engine may hold
    # other runs' containers beside these).
    run_ids = re.findall(r"starting run (bench-[a-z0-9-]+):", proc.stderr)
    # One run per transport measured in containers: the five above, and JAX's where its image (built on demand) is.
    in_containers = [name for name, placement in rows if placement == "containers"]
    assert len(in_containers) in (5, 6) and set(in_containers) - {"jax-gloo"} == {
        "tf-ring-bridge", "tf-ring-loopback", "mpi-tcp", "mpi-shm", "gloo"}
    assert ("jax-gloo" in in_containers) == (("jax-host", "host") in rows)  # its own API's host reference beside it
    assert len(run_ids) == len(in_containers) and all(orch_containers(run_id) == [] for run_id in run_ids), proc.stderr


@pytest.mark.parametrize("ranks", range(2, 17))
def test_every_rank_count_the_flag_accepts_makes_a_valid_job_for_every_transport(ranks):
    from orchestrator.bench import job_spec

    for transport in known_transports():
        if not transport.unavailable:
            spec = job_spec(transport, ranks, [4096], 10, 1)
            assert spec.workers == ranks and spec.script is not None


def test_a_transports_job_runs_on_the_engine_asked_for(monkeypatch):
    from orchestrator.bench import job_spec

    monkeypatch.delenv("ORCH_ENGINE", raising=False)
    transport = next(t for t in known_transports() if t.name == "mpi-shm")
    assert job_spec(transport, 2, [4096], 10, 1).backend_options.engine == "docker"
    assert job_spec(transport, 2, [4096], 10, 1, engine="podman").backend_options.engine == "podman"


def test_a_transport_whose_image_is_absent_is_skipped_in_one_line(monkeypatch):
    from orchestrator import bench

    said = []
    kept = bench._skip_absent_images(list(known_transports()), lambda ref: "torch" not in ref, said.append)
    assert "gloo" not in {t.name for t in kept} and {"mpi-shm", "tf-ring-bridge"} <= {t.name for t in kept}
    assert said == ["skipping gloo: its image is not built (add with `orch build --framework torch`)"]
    with pytest.raises(InvalidSpec, match=r"nothing to measure: gloo needs an image that is not built; run `orch "
                                          r"build --framework torch` first"):
        bench._skip_absent_images([t for t in known_transports() if t.name == "gloo"], lambda ref: False, said.append)


@pytest.mark.docker
@pytest.mark.engine_alone  # it hides the PyTorch image that other live tests run
def test_an_absent_image_is_skipped_live_and_nothing_is_built(images, orch_env, tmp_path):
    """The PyTorch image, if this engine has it, is hidden under another tag for the test and put back after."""
    from orchestrator import frameworks

    ref = frameworks.get("torch").main_image()
    hidden = "orch-test-hidden:torch"
    had = subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode == 0
    if had:
        subprocess.run(["docker", "tag", ref, hidden], check=True, capture_output=True)
        subprocess.run(["docker", "rmi", ref], check=True, capture_output=True)  # only untags: `hidden` keeps it
    try:
        args = ["bench", "allreduce", "--tiny", "--no-host", "--out", str(tmp_path / "bench"), "--format", "json"]
        proc = run_orch([*args, "--transports", "mpi-shm,gloo"], orch_env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert {r["transport"] for r in json.loads(proc.stdout)} == {"mpi-shm"}
        assert "skipping gloo: its image is not built (add with `orch build --framework torch`)" in proc.stderr
        proc = run_orch([*args, "--transports", "gloo"], orch_env, timeout=120)
        assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
        assert "nothing to measure: gloo needs an image that is not built" in proc.stderr
        assert subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0  # not built
    finally:
        if had:
            subprocess.run(["docker", "tag", hidden, ref], check=True, capture_output=True)
            subprocess.run(["docker", "rmi", hidden], check=True, capture_output=True)
