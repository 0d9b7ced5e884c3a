"""The rendezvous shared by the host and the trainer (orchestrator/rendezvous.py), exactly: which replica a completion
index is, its TF_CONFIG and RANK, and what a pod derives from its environment. No engine.

The frameworks' tests check it through a plan; these pin each function's edges, which mutation testing
(benchmarks/mutation.py) found they left open."""
from __future__ import annotations

import json

import pytest

from orchestrator import contract, rendezvous

PS = [["chief", ["c:1"]], ["ps", ["p:1", "p:2"]], ["worker", ["w:1", "w:2", "w:3"]]]


def test_the_cluster_keeps_roles_and_addresses_in_the_order_given():
    addresses = {("chief", 0): "c:1", ("ps", 0): "p:1", ("ps", 1): "p:2", ("worker", 0): "w:1"}
    assert rendezvous.cluster_of(addresses) == [["chief", ["c:1"]], ["ps", ["p:1", "p:2"]], ["worker", ["w:1"]]]


def test_a_completion_index_counts_across_the_roles_in_order():
    got = [rendezvous.replica_of(PS, i) for i in range(6)]
    assert got == [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1), ("worker", 2)]


@pytest.mark.parametrize("index", [-1, 6])
def test_a_completion_index_outside_the_cluster_is_refused(index):
    with pytest.raises(ValueError, match=rf"^completion index {index} is outside the cluster {{'chief': 1, 'ps': 2, "
                                         r"'worker': 3}$"):
        rendezvous.replica_of(PS, index)


def test_a_completion_index_within_one_roles_job_counts_within_that_role():
    assert rendezvous.replica_of(PS, 2, "worker") == ("worker", 2)
    assert rendezvous.replica_of(PS, 0, "worker") == ("worker", 0)
    for index, role in ((3, "worker"), (-1, "worker"), (0, "evaluator")):
        with pytest.raises(ValueError, match=rf"^{role} index {index} is outside the cluster {{'chief': 1, 'ps': 2, "
                                             r"'worker': 3}$"):
            rendezvous.replica_of(PS, index, role)


def test_tf_config_names_the_whole_cluster_and_this_task():
    assert rendezvous.tf_config(PS, "ps", 1) == {
        "cluster": {"chief": ["c:1"], "ps": ["p:1", "p:2"], "worker": ["w:1", "w:2", "w:3"]},
        "task": {"type": "ps", "index": 1}}
    assert rendezvous.tf_config([["worker", ["w:1"]]], "worker", 0) is None  # a cluster of one has none
    assert rendezvous.tf_config([["worker", ["w:1", "w:2"]]], "worker", 0) is not None


@pytest.mark.parametrize("role, index", [("worker", 3), ("worker", -1), ("evaluator", 0)])
def test_tf_config_of_a_task_outside_the_cluster_is_refused(role, index):
    with pytest.raises(ValueError, match=rf"{role} index {index} outside 0\.\.{2 if role == 'worker' else -1}$"):
        rendezvous.tf_config(PS, role, index)


def test_the_rank_is_the_place_across_the_roles():
    assert [rendezvous.rank(PS, role, i) for role, i in
            (("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 2))] == [0, 1, 2, 3, 5]


def test_each_kind_of_rendezvous_derives_its_own_variables():
    config = rendezvous.derived(rendezvous.TF_CONFIG, PS, "worker", 1)
    assert config == {"TF_CONFIG": json.dumps(rendezvous.tf_config(PS, "worker", 1), separators=(",", ":"),
                                              sort_keys=True)}
    assert " " not in config["TF_CONFIG"]
    assert rendezvous.derived(rendezvous.TF_CONFIG, [["worker", ["w:1"]]], "worker", 0) == {}
    assert rendezvous.derived(rendezvous.RANK, PS, "worker", 2) == {"RANK": "5"}
    assert rendezvous.derived("", PS, "worker", 2) == {}
    with pytest.raises(ValueError, match="unknown rendezvous 'nccl'; orch knows tf_config, rank$"):
        rendezvous.derived("nccl", PS, "worker", 0)


def test_a_pod_derives_its_role_index_and_rank_from_its_completion_index():
    environ = {contract.ENV_CLUSTER: json.dumps(PS), contract.ENV_COMPLETION_INDEX: "4",
               contract.ENV_RENDEZVOUS: rendezvous.RANK}
    rendezvous.derive(environ)
    assert {k: environ[k] for k in (contract.ENV_ROLE, contract.ENV_WORKER_INDEX, contract.ENV_NUM_WORKERS, "RANK")} \
        == {contract.ENV_ROLE: "worker", contract.ENV_WORKER_INDEX: "1", contract.ENV_NUM_WORKERS: "3", "RANK": "4"}


def test_a_pod_whose_engine_set_its_variables_derives_nothing():
    assert rendezvous.env_from_index({}) == {}
    assert rendezvous.env_from_index({contract.ENV_CLUSTER: "", contract.ENV_COMPLETION_INDEX: "0"}) == {}
    one_role = {contract.ENV_CLUSTER: json.dumps(PS), contract.ENV_COMPLETION_INDEX: "1", contract.ENV_ROLE: "ps"}
    assert rendezvous.env_from_index(one_role) == {contract.ENV_ROLE: "ps", contract.ENV_WORKER_INDEX: "1",
                                                   contract.ENV_NUM_WORKERS: "2"}
