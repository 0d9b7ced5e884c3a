"""The TensorFlow framework: a TF_CONFIG per replica from the backend's addresses, and its images."""
import json

import pytest

from orchestrator import __version__, backends
from orchestrator.frameworks import tensorflow
from orchestrator.jobspec import make_spec

TF = tensorflow.FRAMEWORK


def _addresses(spec):
    return backends.get(spec.backend).addresses(spec, spec.replica_keys(), TF.port)


def test_single_worker_has_no_tf_config():
    spec = make_spec(run_id="r", workers=1)
    assert tensorflow.tf_config(spec, ("worker", 0), _addresses(spec)) is None
    assert TF.env(spec, ("worker", 0), _addresses(spec)) == {}


def test_a_users_script_on_one_container_gets_a_one_worker_tf_config(tmp_path):
    script = tmp_path / "main.py"
    script.write_text("print('hi')\n")
    spec = make_spec(run_id="r", workers=1, script=str(script))
    config = json.loads(TF.env(spec, ("worker", 0), _addresses(spec))["TF_CONFIG"])
    # what MultiWorkerMirroredStrategy takes for a cluster of one
    assert config == {"cluster": {"worker": ["worker-0:12345"]}, "task": {"type": "worker", "index": 0}}
    assert TF.describe(spec, ("worker", 0), _addresses(spec)) == {"tf_config": config}


@pytest.mark.parametrize("index", [0, 1, 2])
def test_every_worker_sees_the_same_cluster_and_its_own_index(index):
    spec = make_spec(run_id="r", workers=3)
    config = json.loads(TF.env(spec, ("worker", index), _addresses(spec))["TF_CONFIG"])
    assert config == {
        "cluster": {"worker": ["worker-0:12345", "worker-1:12345", "worker-2:12345"]},
        "task": {"type": "worker", "index": index},
    }


def test_shared_network_uses_loopback_ports():
    spec = make_spec(run_id="r", workers=4, network="shared")
    config = tensorflow.tf_config(spec, ("worker", 3), _addresses(spec))
    assert config["cluster"]["worker"] == [f"localhost:{12345 + i}" for i in range(4)]


def test_index_out_of_range():
    spec = make_spec(run_id="r", workers=2)
    with pytest.raises(ValueError):
        tensorflow.tf_config(spec, ("worker", 2), _addresses(spec))


@pytest.mark.parametrize("key", [("chief", 0), ("ps", 1), ("worker", 0), ("worker", 1)])
def test_ps_groups_the_cluster_by_role_and_each_replica_knows_its_own(key):
    spec = make_spec(run_id="r", workers=2, strategy="ps", parameter_servers=2)
    config = json.loads(TF.env(spec, key, _addresses(spec))["TF_CONFIG"])
    assert config == {
        "cluster": {"chief": ["chief-0:12345"], "ps": ["ps-0:12345", "ps-1:12345"],
                    "worker": ["worker-0:12345", "worker-1:12345"]},
        "task": {"type": key[0], "index": key[1]},
    }
    assert TF.image(spec) == TF.image(make_spec(run_id="r", workers=1, strategy="ps")) == tensorflow.image_ref("multi")


def test_images_single_for_one_worker_multi_for_more_or_the_users():
    assert TF.image(make_spec(run_id="r", workers=1)) == f"orch-trainer:{__version__}-single"
    assert TF.image(make_spec(run_id="r", workers=2)) == f"orch-trainer:{__version__}-multi"
    assert TF.image(make_spec(run_id="r", workers=2, image="mine:1")) == "mine:1"
