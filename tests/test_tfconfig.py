import json

import pytest

from orchestrator.spec import make_spec
from orchestrator.tfconfig import tf_config, tf_config_json


def test_single_worker_has_no_tf_config():
    assert tf_config(make_spec(run_id="r", workers=1), 0) is None


@pytest.mark.parametrize("index", [0, 1, 2])
def test_every_worker_sees_the_same_cluster_and_its_own_index(index):
    spec = make_spec(run_id="r", workers=3)
    config = json.loads(tf_config_json(spec, index))
    assert config == {
        "cluster": {"worker": ["worker-0:12345", "worker-1:12345", "worker-2:12345"]},
        "task": {"type": "worker", "index": index},
    }


def test_shared_network_uses_loopback_ports():
    spec = make_spec(run_id="r", workers=4, network="shared")
    assert tf_config(spec, 3)["cluster"]["worker"] == [f"localhost:{12345 + i}" for i in range(4)]


def test_index_out_of_range():
    with pytest.raises(ValueError):
        tf_config(make_spec(run_id="r", workers=2), 2)
