"""The Engine API's stats JSON read into orch's shape, against captured records, and the sampler on real runs."""
import csv
import json
from pathlib import Path

import pytest

from orchestrator.docker.stats import usage_of
from orchestrator.run.stats import STATS_FIELDS, sample_of

FIXTURES = Path(__file__).parent / "fixtures"
STREAM = json.loads((FIXTURES / "stats_stream.json").read_text())  # 3 records of a container busy on one core


def test_busy_container_uses_about_one_core():
    sample = sample_of(usage_of(STREAM[2]), worker=1, container="w1", now=100.0)
    assert 90 <= sample.cpu_percent <= 105  # 100 = one core
    assert sample.worker == 1 and sample.container == "w1" and sample.time == 100.0


def test_memory_excludes_inactive_page_cache():
    raw = STREAM[2]
    sample = usage_of(raw)
    stats = raw["memory_stats"]["stats"]
    assert sample.mem_used_bytes == raw["memory_stats"]["usage"] - stats["total_inactive_file"]
    assert sample.mem_limit_bytes == raw["memory_stats"]["limit"]


def test_network_and_block_io_are_summed():
    raw = json.loads(json.dumps(STREAM[2]))
    raw["networks"] = {"eth0": {"rx_bytes": 10, "tx_bytes": 20}, "eth1": {"rx_bytes": 1, "tx_bytes": 2}}
    raw["blkio_stats"]["io_service_bytes_recursive"] = [
        {"op": "Read", "value": 100}, {"op": "Write", "value": 7}, {"op": "read", "value": 1}, {"op": "Total", "value": 108}]
    sample = usage_of(raw)
    assert (sample.net_rx_bytes, sample.net_tx_bytes, sample.blk_read_bytes, sample.blk_write_bytes) == (11, 22, 101, 7)


def test_record_of_a_stopped_container_is_skipped():
    stopped = {"read": "0001-01-01T00:00:00Z", "cpu_stats": {"cpu_usage": {"total_usage": 0}}, "precpu_stats": {},
               "memory_stats": {}}
    assert usage_of(stopped) is None


def _record(cpu_ns: int, system_ns: int) -> dict:
    """A one-off record as Podman's service gives it: this sample's counters, none of the sample before."""
    raw = json.loads(json.dumps(STREAM[2]))
    raw["cpu_stats"]["cpu_usage"]["total_usage"], raw["cpu_stats"]["system_cpu_usage"] = cpu_ns, system_ns
    raw["cpu_stats"]["online_cpus"] = 2
    raw["precpu_stats"] = {"cpu_usage": {"total_usage": 0}}
    return raw


class _OneOffRecords:
    """An engine client whose stats call gives one-off records, then fails as for a container that stopped."""

    def __init__(self, records):
        self.records, self.asked = list(records), []
        self.api = self

    def stats(self, container_id, stream=True, decode=False):
        self.asked.append(stream)
        if not self.records:
            raise ValueError("Expecting value: line 1 column 1 (char 0)")  # Podman, for a stopped container
        record = self.records.pop(0)
        if isinstance(record, Exception):
            raise record
        return record


# A container busy on one of 2 cores: 1 s of its CPU time in each 2 s of the host's (both cores' time).
BUSY = [_record(1_000_000_000 * i, 2_000_000_000 * i) for i in range(1, 5)]


def test_a_one_off_record_without_the_sample_before_is_measured_against_the_next(monkeypatch):
    from orchestrator.docker import containers
    from orchestrator.docker.engine import Engine

    monkeypatch.setattr(containers, "POLL_SECONDS", 0.0)
    client = _OneOffRecords(BUSY[:2])
    usage = Engine(client=client, kind="podman").stats_once("w0")
    assert usage.cpu_percent == pytest.approx(100.0) and client.asked == [False, False]  # not 0: one core busy
    stopped = Engine(client=_OneOffRecords(BUSY[:1]), kind="podman").stats_once("w0")
    assert stopped.mem_used_bytes > 0 and stopped.cpu_percent == 0.0  # the first record, where no second came


def test_an_engine_whose_stream_is_slow_is_read_a_record_a_second_each_against_the_one_before(monkeypatch):
    from orchestrator.docker import containers
    from orchestrator.docker.engine import Engine

    monkeypatch.setattr(containers, "POLL_SECONDS", 0.0)
    client = _OneOffRecords([BUSY[0], BUSY[1], OSError("read timed out"), BUSY[2], BUSY[3]])
    usages = list(Engine(client=client, kind="podman").stats_stream("w0"))
    # The first record only starts the count; a passing failure skips a second; then the container stopped.
    assert [u.cpu_percent for u in usages] == [pytest.approx(100.0)] * 3 and client.asked == [False] * 6
    import docker

    gone = _OneOffRecords([BUSY[0], docker.errors.NotFound("no such container")])
    assert list(Engine(client=gone, kind="podman").stats_stream("w0")) == [] and len(gone.asked) == 2
    docker = _OneOffRecords([])
    docker.stats = lambda container_id, stream=True, decode=False: iter(STREAM) if stream else None
    assert len(list(Engine(client=docker, kind="docker").stats_stream("w0"))) == len(STREAM)  # Docker's own stream


@pytest.mark.docker
def test_three_workers_are_sampled_and_talk(observed_runs):
    run_dir = observed_runs["w3"]
    with open(run_dir / "stats.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and list(rows[0]) == STATS_FIELDS
    by_worker = {w: [r for r in rows if int(r["worker"]) == w] for w in range(3)}
    assert all(len(samples) >= 2 for samples in by_worker.values()), {w: len(s) for w, s in by_worker.items()}
    for samples in by_worker.values():
        last = samples[-1]
        assert int(last["net_rx_bytes"]) > 100_000 and int(last["net_tx_bytes"]) > 100_000  # all-reduce traffic
        assert int(last["mem_limit_bytes"]) == 2048 * 2**20
    assert max(float(r["cpu_percent"]) for r in rows) > 10
    with open(run_dir / "host.csv", newline="") as f:
        host = list(csv.DictReader(f))
    assert host and float(host[-1]["mem_total_bytes"]) > 0


@pytest.mark.docker
def test_one_worker_moves_almost_no_network_bytes(observed_runs):
    with open(observed_runs["w1"] / "stats.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    assert max(int(r["net_rx_bytes"]) + int(r["net_tx_bytes"]) for r in rows) < 50_000


def test_a_row_cut_by_a_crash_is_skipped(tmp_path):
    from orchestrator.run.stats import read_samples

    path = tmp_path / "stats.csv"
    path.write_text(",".join(STATS_FIELDS) + "\n1.5,0,c0,12.5,100,200,1,2,3,4,5\n2.5,0,c0,1")
    rows = read_samples(path)
    assert len(rows) == 1 and rows[0]["cpu_percent"] == 12.5 and rows[0]["pids"] == 5
