"""The suite's benchmark scripts run (on tiny data): CI checks that they work, not what they measure. The
investigations' scripts (benchmarks/investigations/) are records of one question each, and CI runs none of them."""
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.docker


def test_sampler_overhead_benchmark_runs(images):
    proc = subprocess.run([sys.executable, "benchmarks/sampler_overhead.py", "--containers", "2", "--seconds", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["results"]
    assert row["containers"] == 2 and row["samples_per_second"] > 0


def test_targets_benchmark_prints_every_figure_on_tiny_data(images, orch_env):
    proc = subprocess.run([sys.executable, "benchmarks/targets.py", "--tiny"], cwd=ROOT, env=orch_env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines()
            if line.startswith("| ") and "---" not in line}
    assert {"T(2)/T(1)", "sync cost per step", "orchestration overhead (`orch up` wall - slowest train)",
            "orch over bare `docker compose up`"} <= rows.keys(), proc.stdout
    ratio = float(rows["T(2)/T(1)"].split("|")[5].split()[0])
    assert ratio > 0


@pytest.mark.engine_alone  # its split of T(N) must add up, which another test's load skews
def test_floor_benchmark_prints_t_n_against_the_floor_and_the_start_up_split_on_tiny_data(images, orch_env):
    proc = subprocess.run([sys.executable, "benchmarks/floor.py", "--tiny"], cwd=ROOT, env=orch_env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| mpi |")]
    by_n = {int(r[1]): r for r in rows if len(r) == 16}
    assert set(by_n) == {1, 2}, proc.stdout
    # A measured all-reduce, T(N)/floor, and the host's floor with T(N) against it.
    assert float(by_n[2][7]) > 0 and float(by_n[2][10]) > 0 and float(by_n[2][11]) > 0 and float(by_n[2][12]) > 0
    # The start-up's stages, and its floors read both ways, then the floor of importing the package alone.
    def section(start: str, end: str) -> list[list[str]]:
        text = proc.stdout.split(start)[1].split(end)[0]
        return [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| mpi |")]

    # Create, start, import, data, rendezvous, train and test, results and teardown, wall − train: each measured.
    [split] = section("Where the wall time beyond training goes", "The start ladder,")
    assert all(float(x) >= 0 for x in split[1:]), split
    assert float(split[11]) == pytest.approx(float(split[8]) / float(split[10]), abs=0.01), split
    assert 0 < float(split[12]) and "mpi: tensorflow, tf_keras, mpi4py" in proc.stdout, split
    [cpu] = section("The CPU behind it", "\n\n#")  # the start-up's CPU, from its events, data and rendezvous apart
    assert len(cpu) == 9 and all(float(x) > 0 for x in cpu[1:]), cpu
    # The start ladder: the floor, orch runs of the probe importing, then also joining the group, and the trainer's
    # run; each rung's step beside them.
    [ladder] = [r for r in section("The start ladder,", "The CPU behind it") if len(r) == 9]
    floor, alone, joined, trainer = (float(x) for x in ladder[1:5])
    assert floor > 0 and alone > 0 and joined > 0 and trainer > 0, ladder  # seconds each; no order between them
    # The cells are rounded to 0.01 s, and each step from the unrounded seconds: within two roundings.
    assert float(ladder[5]) == pytest.approx(alone - floor, abs=0.02), ladder
    assert float(ladder[6]) == pytest.approx(joined - alone, abs=0.02), ladder
    assert float(ladder[8]) == pytest.approx(trainer / joined, abs=0.02), ladder
    [ranges] = [r for r in rows if len(r) == 5]  # each rung's range over its repeats (one, in a tiny run)
    assert [float(x.split("–")[0]) for x in ranges[1:]] == [float(x) for x in ladder[1:5]], (ranges, ladder)
    # Each rank's step as it measured it in place (compute, the blocking all-reduce), and T(2) split into its
    # steps and the rest, each beside its floor.
    [step] = [r for r in rows if len(r) == 8 and r[1].strip() == "2"]
    assert all(float(x) > 0 for x in step[2:5]) and float(step[4]) == float(step[5]), step
    [epochs] = [r for r in rows if len(r) == 13 and r[1].strip() == "2"]
    t, steps, rest = float(epochs[2]), float(epochs[3]), float(epochs[9])
    # The parts are the workers' medians, T(N) the slowest worker's: they add up to about T(N). Each epoch's end
    # (validation, metrics, checkpoint) takes time, so the steps are less than T(N).
    assert 0 < steps < t and float(epochs[4]) > 0 and float(epochs[7]) > 0, epochs
    assert steps + rest == pytest.approx(t, rel=0.1), epochs


def test_processes_benchmark_runs_the_same_ranks_as_containers_and_as_processes_of_one_on_tiny_data(images, orch_env):
    proc = subprocess.run([sys.executable, "benchmarks/processes.py", "--tiny"], cwd=ROOT, env=orch_env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r[0].strip(): r for r in (line.split("|")[1:-1] for line in proc.stdout.splitlines())
            if len(r) == 7 and r[1].strip() == "2"}
    assert set(rows) == {"mpi", "mwms"}, proc.stdout
    # T(2) as 2 containers on the bridge, on one shared network (TensorFlow only: orch refuses it for MPI) and as 2
    # processes of one container: each a trainer's own measure, and their ratios.
    for name, row in rows.items():
        bridge, processes = float(row[2].split()[0]), float(row[4].split()[0])
        # The cells are rounded to 0.01 s, and tiny runs are short: the ratio of the rounded cells within 5%.
        assert bridge > 0 and processes > 0 and float(row[5]) == pytest.approx(bridge / processes, rel=0.05), row
    assert rows["mpi"][3].strip() == "—" and float(rows["mwms"][3].split()[0]) > 0, rows
    # MPI's ranks measure their steps in place, in the containers and as processes alike.
    [step] = [line for line in proc.stdout.splitlines() if line.startswith("| mpi | 2 |") and line.count("/") == 6]
    assert all(float(x) > 0 for x in step.split("|")[3].replace("—", "").split("/") if x.strip()), step
