import pytest

from orchestrator.errors import InvalidSpec
from orchestrator.spec import JobSpec, make_spec


def test_defaults_are_seed_000_workload():
    spec = make_spec(run_id="r1")
    assert (spec.workers, spec.dataset, spec.samples, spec.epochs, spec.global_batch) == (1, "mnist", 60000, 5, 96)
    assert spec.model == "mlp" and spec.learning_rate == 1e-3


def test_spec_is_frozen_and_replace_revalidates():
    spec = make_spec(run_id="r1", workers=3)
    with pytest.raises(Exception):
        spec.workers = 2
    assert spec.replace(workers=2).workers == 2 and spec.workers == 3
    with pytest.raises(InvalidSpec, match="workers"):
        spec.replace(workers=0)


def test_fresh_run_ids_are_valid_and_distinct():
    a, b = make_spec(workers=3), make_spec(workers=3)
    assert a.run_id != b.run_id and "-w3-" in a.run_id


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"workers": 0}, "workers: input should be greater than or equal to 1"),
        ({"workers": "three"}, "workers: input should be a valid integer"),
        ({"dataset": "cifar"}, "dataset: Input should be 'mnist', 'fashion-mnist', 'vader-reviews' or 'synthetic'"),
        ({"samples": 70000}, "samples: mnist has 60000 training images, got 70000"),
        ({"workers": 3, "global_batch": 64}, "not divisible by 3 workers; use 63 or 66"),
        ({"samples": 100}, "fewer than one global batch"),
        ({"epochs": -1}, "epochs"),
        ({"run_id": "has space"}, "run_id"),
        ({"run_id": "a\nb: c"}, "run_id"),
        ({"image": "evil\nkey: value"}, "image"),
        ({"wrokers": 3}, "wrokers: unknown field; allowed fields are"),
        ({"network": "host"}, "network: host exposes every worker's unauthenticated gRPC server"),
    ],
)
def test_invalid_fields_are_named(fields, message):
    with pytest.raises(InvalidSpec) as info:
        make_spec(**{"run_id": "r1", **fields})
    assert message in info.value.message
    assert "\n" not in info.value.message


def test_every_field_has_a_description():
    assert all(field.description for field in JobSpec.model_fields.values())


def test_framework_options_nest_and_flatten_back():
    spec = make_spec(run_id="r1", workers=3, collective="auto", steps_per_execution=7)
    assert spec.framework.name == "tensorflow" and spec.framework.collective == "auto"
    assert spec.flat()["collective"] == "auto" and "framework" in spec.flat() and "roles" not in spec.flat()
    assert make_spec(**spec.flat()) == spec
    assert spec.replace(steps_per_execution=9).framework.steps_per_execution == 9
    assert JobSpec.model_validate(spec.model_dump(mode="json")) == spec


def test_roles_default_to_the_workers_and_follow_replace():
    spec = make_spec(run_id="r1", workers=3)
    assert [(r.name, r.replicas) for r in spec.roles] == [("worker", 3)]
    assert spec.replica_keys() == [("worker", 0), ("worker", 1), ("worker", 2)]
    assert spec.replace(workers=2).replica_keys() == [("worker", 0), ("worker", 1)]


@pytest.mark.parametrize("fields, message", [
    ({"roles": [{"name": "worker", "replicas": 2}]}, "the role worker must have `workers` (1) replicas"),
    ({"roles": [{"name": "worker", "replicas": 1}, {"name": "ps", "replicas": 1}]}, "runs only the role worker"),
    ({"roles": [{"name": "Bad Role", "replicas": 1}]}, "roles.0.name"),
    ({"framework": "torch"}, "framework: torch is not one orch runs"),
    ({"collective": "nccl"}, "collective: Input should be 'ring' or 'auto'"),
])
def test_roles_and_framework_are_validated(fields, message):
    with pytest.raises(InvalidSpec) as info:
        make_spec(run_id="r1", **fields)
    assert message in info.value.message


def test_every_framework_option_has_a_description():
    from orchestrator.framework_options import TensorFlowOptions

    assert all(field.description for field in TensorFlowOptions.model_fields.values())


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_image_models_train_on_image_data(model):
    assert make_spec(run_id="r1", model=model, dataset="synthetic").model == model


def test_the_text_model_needs_a_text_data_set():
    with pytest.raises(InvalidSpec, match="model: text cannot train on mnist"):
        make_spec(run_id="r1", model="text")


def test_strategies_resolve_and_fit_the_job():
    assert make_spec(run_id="r1").training_fields()["strategy"] == "single"
    assert make_spec(run_id="r1", workers=3).training_fields()["strategy"] == "mwms"
    assert make_spec(run_id="r1", workers=3, strategy="custom").training_fields()["strategy"] == "custom"
    mirrored = make_spec(run_id="r1", strategy="mirrored", replicas=4)
    assert mirrored.training_fields()["strategy"] == "mirrored" and mirrored.training_fields()["replicas"] == 4


@pytest.mark.parametrize("fields, message", [
    ({"strategy": "mirrored", "workers": 2, "global_batch": 96}, "strategy: mirrored runs in one container"),
    ({"strategy": "single", "workers": 3}, "strategy: single runs in one container"),
    ({"replicas": 2}, "replicas: --replicas 2 is for --strategy mirrored"),
    ({"strategy": "mirrored", "replicas": 5}, "global_batch: 96 is not divisible by 5 replicas; use 95 or 100"),
])
def test_strategy_misfits_are_one_line(fields, message):
    with pytest.raises(InvalidSpec) as info:
        make_spec(run_id="r1", **fields)
    assert message in info.value.message and "\n" not in info.value.message
