"""Sizes as Docker writes them, one parser for every size flag and field (orchestrator/sizes.py)."""
import json

import pytest
import yaml

from orchestrator import sizes
from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import JobSpec, make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from tests.test_cli_inprocess import orch


@pytest.mark.parametrize("text, mib", [
    ("2g", 2048), ("2G", 2048), ("2gb", 2048), ("2GiB", 2048), ("2 g", 2048), ("512m", 512), ("200M", 200),
    ("1.5g", 1536), ("1t", 1 << 20), ("1048576k", 1024), ("1073741824b", 1024), ("2048", 2048), (" 64m ", 64),
    ("0", 0),
])
def test_docker_units_are_read_as_mib(text, mib):
    assert sizes.mib(text) == mib


@pytest.mark.parametrize("text, why", [
    ("2x", "is not a size"), ("-1g", "is not a size"), ("", "is not a size"), ("g", "is not a size"),
    ("2i", "is not a size"), ("1e3m", "is not a size"), ("100k", "is not a whole number of MiB"),
    ("0.1m", "is not a whole number of MiB"), ("1" * 40, "is not a size"),
])
def test_what_is_no_size_is_refused_in_one_line(text, why):
    with pytest.raises(ValueError, match=why) as caught:
        sizes.mib(text)
    assert "\n" not in str(caught.value) and "512m, 2g" in str(caught.value)


def test_a_size_is_shown_as_docker_writes_it():
    assert [sizes.shown(m) for m in (2048, 200, 10240, 1 << 20, 1536)] == ["2g", "200m", "10g", "1t", "1536m"]


def test_every_size_field_takes_docker_units_from_the_api_files_and_flags():
    size_fields = [name for name, info in JobSpec.model_fields.items() if sizes.SIZE in info.metadata]
    assert set(size_fields) == {"memory_mb", "shm_size_mb", "disk_limit_mb"}
    spec = make_spec(memory="2g", shm_size="512m", disk_limit="200M", run_id="s")
    assert (spec.memory_mb, spec.shm_size_mb, spec.disk_limit_mb) == (2048, 512, 200)
    assert make_spec(memory_mb=4096, run_id="s").memory_mb == 4096  # a number is MiB, as it always was
    with pytest.raises(InvalidSpec, match=r"^memory: '2x' is not a size"):
        make_spec(memory="2x", run_id="s")
    with pytest.raises(InvalidSpec, match=r"^memory: must be at least 256 \(got 128\)"):  # the bound, after the unit
        make_spec(memory="128m", run_id="s")


def test_the_cli_reads_sizes_and_names_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("ORCH_CACHE_DIR", str(tmp_path / "cache"))
    result = orch("render", "--workers", "2", "--memory", "2g", "--shm-size", "512m", "--disk-limit", "200M",
                  "--run-id", "s")
    assert result.code == 0, result
    services = yaml.safe_load(result.out)["services"]
    assert all(s["mem_limit"] == "2048m" for s in services.values())
    assert all(s["shm_size"] == "512m" for s in services.values())
    bad = orch("up", "--shm-size", "lots")
    assert bad.code == 2 and bad.err.strip() == ("orch: error: --shm-size: 'lots' is not a size; give MiB or a size "
                                                 "as Docker writes it, e.g. 512m, 2g or 2048 (MiB)")


def test_shm_size_reaches_every_backend_and_a_shared_memory_group(tmp_path):
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    for backend in ("compose", "swarm", "k8s"):
        p = plan(make_spec(workers=2, shm_size="1g", backend=backend, run_id="s"), paths)
        assert {r.shm_mb for r in p.replicas} == {1024}
    assert "1024Mi" in plan(make_spec(workers=2, shm_size="1g", backend="k8s", run_id="s"), paths).artifact
    mpi = plan(make_spec(framework="mpi", workers=2, shm_size="128m", run_id="s"), paths)  # one IPC namespace
    assert yaml.safe_load(mpi.artifact)["services"]["worker-0"]["shm_size"] == "128m"
    assert "shm_size" not in yaml.safe_load(plan(make_spec(workers=2, run_id="s"), paths).artifact)["services"][
        "worker-0"]  # unset: the engine's default, as before


@pytest.mark.docker
def test_a_replica_gets_the_memory_and_shm_given_in_dockers_units(images, orch_env, tmp_path, cleanup):
    from tests.conftest import orch_containers, run_orch

    run_id = "live-sizes"
    cleanup.append(run_id)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "limits.py").write_text(
        "import json, os\n"
        "shm = os.statvfs('/dev/shm')\n"
        "memory = open('/sys/fs/cgroup/memory.max').read().strip() if os.path.exists('/sys/fs/cgroup/memory.max') "
        "else open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip()\n"
        "out = os.path.join(os.environ['ORCH_OUTPUT_DIR'], 'limits.json')\n"
        "json.dump({'shm': shm.f_blocks * shm.f_frsize, 'memory': int(memory)}, open(out, 'w'))\n")
    proc = run_orch(["up", "--script", str(tmp_path / "src" / "limits.py"), "--dataset", "synthetic", "--memory",
                     "1536m", "--shm-size", "512m", "--disk-limit", "200M", "--run-id", run_id], orch_env)
    assert proc.returncode == 0, proc.stderr
    limits = json.loads((tmp_path / "runs" / run_id / "worker-0" / "limits.json").read_text())
    assert limits == {"shm": 512 << 20, "memory": 1536 << 20}
    assert orch_containers(run_id) == []


def test_message_sizes_are_read_in_bytes_a_number_alone_as_bare_bytes():
    assert [sizes.size_bytes(t) for t in ("4K", "80k", "1M", "16m", " 1.5k ", "10", "1p")] == \
        [4096, 80 << 10, 1 << 20, 16 << 20, 1536, 10, 1 << 50]
    assert sizes.size_bytes("10", bare=1024) == 10240
    assert type(sizes.size_bytes("1.5k")) is int and type(sizes.mib("1.5g")) is int


@pytest.mark.parametrize("text, why", [("0.5b", "^'0.5b' is not a whole number of bytes$"),
                                       ("lots", "^'lots' is not a size; e.g. 4K, 80K, 1M or 16M$")])
def test_a_message_size_that_is_no_whole_number_of_bytes_is_refused_in_one_line(text, why):
    with pytest.raises(ValueError, match=why):
        sizes.size_bytes(text)


def test_a_size_has_at_most_fifteen_digits_before_and_after_its_point():
    assert sizes.mib("9" * 15) == int("9" * 15)
    assert sizes.mib("1." + "0" * 15 + "g") == 1024
    for text in ("9" * 16, "1." + "0" * 16 + "g"):
        with pytest.raises(ValueError, match="is not a size"):
            sizes.mib(text)


def test_every_unit_is_its_power_of_1024():
    assert [sizes.mib(t) for t in ("1m", "3", "1025m")] == [1, 3, 1025]  # an odd number of MiB is whole too
    assert [sizes.mib(f"1{u}") for u in "gtp"] == [1024, 1 << 20, 1 << 30]
    assert sizes.mib("1024k") == 1 and sizes.mib(str(1 << 20) + "b") == 1


def test_a_refused_size_shows_at_most_forty_of_its_characters():
    with pytest.raises(ValueError) as caught:
        sizes.mib("x" * 50)
    assert "x" * 40 in str(caught.value) and "x" * 41 not in str(caught.value)


def test_a_value_that_is_no_string_is_left_for_the_fields_own_check():
    assert sizes.mib(2048) == 2048 and sizes.mib(None) is None


def test_no_size_is_shown_in_a_unit_that_would_make_zero_of_it():
    assert sizes.shown(0) == "0m"
    assert repr(sizes.SIZE) == "SIZE"  # as the spec's field metadata shows it


def test_a_refused_size_says_what_sizes_look_like():
    for text, message in (("2x", "'2x' is not a size; give MiB or a size as Docker writes it, e.g. 512m, 2g or 2048 "
                                 "(MiB)"),
                          ("100k", "'100k' is not a whole number of MiB; e.g. 512m, 2g or 2048 (MiB)")):
        with pytest.raises(ValueError) as caught:
            sizes.mib(text)
        assert str(caught.value) == message
