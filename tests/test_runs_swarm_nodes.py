"""A two-node Docker Swarm on this one machine: a second engine in a network namespace of its own, joined to
this engine's swarm over a veth pair. The nodes share nothing but that network: orch's image (with the data
set inside) reaches the second node by `orch push`, and the replicas' records come back over the engine's log
API. The fixture restores everything it changed, even when a test fails: both engines leave the swarm, the
second engine stops, its namespace (and veth pair), context and files are removed."""
import json
import threading

import pytest

from tests.conftest import ENGINE, ROOT, load_file, orch_containers, orch_networks, run_orch

pytestmark = pytest.mark.docker


swarm_nodes = load_file("swarm_nodes", ROOT / "benchmarks" / "swarm_nodes.py")  # it makes the benchmark's nodes too
UNDERLAY_MTU = swarm_nodes.UNDERLAY_MTU


@pytest.fixture(scope="module")
def two_nodes():
    """This engine as the swarm's manager and a second engine as its worker; the Docker context naming it."""
    with ENGINE.hold(alone=True):  # no other live test beside a swarm and a second engine
        why = swarm_nodes.Nodes.available()
        if why:
            pytest.skip(why)
        with swarm_nodes.Nodes(prefix="orch-test-node") as nodes:
            yield nodes.contexts[0]


def test_a_job_runs_across_two_nodes_that_share_only_the_network(images, orch_env, tmp_path, two_nodes):
    pushed = run_orch(["push", "--context", two_nodes, "--dataset", "mnist", "--format", "json"], orch_env, timeout=900)
    assert pushed.returncode == 0, pushed.stderr
    assert [p["image"].endswith("-multi-mnist") for p in json.loads(pushed.stdout)] == [True]
    again = run_orch(["push", "--context", two_nodes, "--dataset", "mnist", "--format", "json"], orch_env)
    assert [p["copied"] for p in json.loads(again.stdout)] == [False]  # the node has it: nothing is copied

    run_id = "live-two-nodes"
    seen: dict[str, str] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=swarm_nodes.placements, args=(run_id, 2, seen, stop), daemon=True)
    watcher.start()
    try:
        proc = run_orch(["up", "--backend", "swarm", "--workers", "2", "--dataset", "mnist", "--samples", "6000",
                         "--epochs", "2", "--overlay-mtu", str(UNDERLAY_MTU - 50), "--run-id", run_id, "--format",
                         "json"], orch_env)
    finally:
        stop.set()
        watcher.join(timeout=10)
        run_orch(["down", run_id], orch_env)
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout)["workers"]
    assert len({w["test_accuracy"] for w in workers}) == 1 and workers[0]["test_accuracy"] > 0.6
    # One replica per node: the all-reduce crossed the overlay network between the two engines, and the
    # records of the replica on the other node came back through the swarm's log API.
    assert len(seen) == 2 and len(set(seen.values())) == 2, seen
    assert all((tmp_path / "runs" / run_id / f"worker-{i}" / "result.json").is_file() for i in range(2))
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []


def test_restarts_and_an_overlay_mtu_too_large_for_the_nodes_are_refused(images, orch_env, two_nodes):
    script = ["--script", str(ROOT / "examples" / "mnist_keras.py"), "--overlay-mtu", "1350"]
    for extra, needle in ((["--max-restarts", "1", "--overlay-mtu", "1350"], "this swarm has 2 nodes"),
                          (script, "script: this swarm has 2 nodes, and the other nodes cannot see the image"),
                          ([], f"whose MTU is {UNDERLAY_MTU}")):
        proc = run_orch(["up", "--backend", "swarm", "--workers", "2", "--dataset", "synthetic", *extra,
                         "--run-id", "live-two-nodes-refused"], orch_env)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], proc.stderr
