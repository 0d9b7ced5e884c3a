import pytest

from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import JobSpec, flat_field_names, make_spec


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
        ({"workers": 0}, "workers: must be at least 1 (got 0)"),
        ({"workers": "three"}, "workers: input should be a valid integer"),
        ({"dataset": "cifar"}, "dataset: must be 'mnist', 'fashion-mnist', 'vader-reviews' or 'synthetic'"),
        ({"samples": 70000}, "samples: mnist has 60000 training samples, got 70000"),
        ({"workers": 3, "global_batch": 64}, "not divisible by 3 workers; use 63 or 66"),
        ({"samples": 100}, "fewer than one global batch"),
        ({"epochs": -1}, "epochs"),
        ({"run_id": "has space"}, "run_id"),
        ({"run_id": "a\nb: c"}, "run_id"),
        ({"image": "evil\nkey: value"}, "image"),
        ({"wrokers": 3}, "wrokers: unknown field; did you mean workers?"),
        ({"name": "torch"}, "name: unknown field;"),  # every framework's tag, no option of one
        ({"framework": "torch", "name": "mpi"}, "name: unknown field;"),
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


def test_ps_has_a_chief_servers_and_workers_and_only_the_chief_reports():
    spec = make_spec(run_id="r1", strategy="ps", workers=2, parameter_servers=2, global_batch=96)
    assert [(r.name, r.replicas) for r in spec.roles] == [("chief", 1), ("ps", 2), ("worker", 2)]
    assert spec.replica_keys() == [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]
    assert spec.reporting_keys() == [("chief", 0)]
    assert "roles" not in spec.flat() and spec.replace(workers=3).role_replicas("worker") == 3
    # Each step is one global batch on one worker: it need not divide among the workers.
    assert make_spec(run_id="r1", strategy="ps", workers=3, global_batch=64).global_batch == 64
    with pytest.raises(InvalidSpec, match="for each of 3 workers"):
        make_spec(run_id="r1", strategy="ps", workers=3, global_batch=512, samples=2000)


@pytest.mark.parametrize("fields, message", [
    ({"roles": [{"name": "worker", "replicas": 2}]}, "runs worker × 1, got worker × 2"),
    ({"roles": [{"name": "worker", "replicas": 1}, {"name": "ps", "replicas": 1}]}, "got worker × 1, ps × 1"),
    ({"strategy": "ps", "roles": [{"name": "worker", "replicas": 1}]}, "runs chief × 1, ps × 1, worker × 1"),
    ({"parameter_servers": 2}, "parameter_servers: --parameter-servers is for --strategy ps, not single"),
    ({"roles": [{"name": "Bad Role", "replicas": 1}]}, "roles.0.name"),
    ({"framework": "mxnet"}, "framework: mxnet is not one orch runs"),
    ({"collective": "nccl"}, "collective: must be 'ring' or 'auto'"),
])
def test_roles_and_framework_are_validated(fields, message):
    with pytest.raises(InvalidSpec) as info:
        make_spec(run_id="r1", **fields)
    assert message in info.value.message


def test_every_framework_option_has_a_description():
    from orchestrator.frameworks.tensorflow.options import TensorFlowOptions

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
    ({"strategy": "mirrored", "replicas": 5}, "batch_size: 96 is not divisible by 5 replicas; use 95 or 100"),
])
def test_strategy_misfits_are_one_line(fields, message):
    with pytest.raises(InvalidSpec) as info:
        make_spec(run_id="r1", **fields)
    assert message in info.value.message and "\n" not in info.value.message


@pytest.mark.parametrize("fields, message", [
    ({"strategy": "custom", "log_reduction": "sum"}, "log_reduction: --log-reduction chooses Keras' steps"),
    ({"strategy": "ps", "log_reduction": "first"}, "log_reduction: --log-reduction chooses Keras' steps"),
    ({"strategy": "ps", "collective": "auto"}, "collective: --collective sets MultiWorkerMirroredStrategy's"),
    ({"strategy": "single", "workers": 1, "bytes_per_pack": 0, "collective_timeout": 5},
     "collective: --bytes-per-pack, --collective-timeout set"),
    ({"strategy": "mirrored", "workers": 1, "replicas": 2, "collective": "auto"}, "mirrored has none"),
    ({"strategy": "custom", "checkpoint_every": 100}, "checkpoint_every: custom checkpoints after every epoch"),
    ({"strategy": "ps", "checkpoint_every": 100}, "checkpoint_every: ps checkpoints after every epoch"),
    ({"strategy": "mirrored", "workers": 1, "replicas": 4, "gpus": 2}, "replicas: 4 replicas need as many GPUs"),
])
def test_options_a_strategy_would_ignore_are_refused_in_one_line(fields, message):
    with pytest.raises(InvalidSpec) as exc:
        make_spec(**{"workers": 2, "run_id": "r", **fields})
    assert message in exc.value.message and "\n" not in exc.value.message


def test_options_are_kept_where_they_apply():
    make_spec(workers=2, strategy="custom", collective="auto", bytes_per_pack=0, run_id="r")
    make_spec(workers=2, strategy="mwms", log_reduction="sum", checkpoint_every=100, run_id="r")
    make_spec(workers=1, collective="auto", run_id="r")  # auto on one worker: a sweep's baseline, nothing to tune
    make_spec(workers=1, strategy="mirrored", replicas=2, gpus=2, run_id="r")


def test_under_ps_only_the_chief_validates_so_the_validation_split_is_not_sharded():
    # 1,000 samples leave 160 for validation: one global batch of 96 for the chief, though not 96 for each of 3.
    make_spec(workers=3, strategy="ps", samples=1000, global_batch=96, run_id="r")
    with pytest.raises(InvalidSpec, match="leave 80 validation samples, fewer than one global batch of 96"):
        make_spec(workers=3, strategy="ps", samples=500, global_batch=96, run_id="r")


@pytest.mark.parametrize("value", [True, 3, "stack", [1]])
def test_backend_options_that_are_not_a_mapping_are_a_spec_error_not_a_crash(value):
    # Found by test_spec_fuzz: `backend_options: true` in an experiment file raised TypeError.
    with pytest.raises(InvalidSpec, match="backend_options"):
        make_spec(backend_options=value, run_id="a")


def test_backend_options_nest_under_their_backend_and_flatten_back():
    spec = make_spec(run_id="r", backend="k8s", k8s_kind="jobset", registry="registry.example/ml")
    assert type(spec.backend_options).__name__ == "KubernetesOptions"
    assert spec.backend_options.k8s_kind == "jobset" and spec.backend_options.image_registry() == "registry.example/ml"
    assert spec.flat()["k8s_kind"] == "jobset" and "backend_options" not in spec.flat()
    assert make_spec(**spec.flat()) == spec
    assert JobSpec.model_validate(spec.model_dump()) == spec
    swarm = spec.replace(backend="swarm", overlay_mtu=1400)  # the old backend's own options go with it
    assert swarm.backend_options.overlay_mtu == 1400 and swarm.backend_options.registry is None
    assert make_spec(run_id="r").backend_options.image_registry() is None


@pytest.mark.parametrize("fields, message", [
    ({"k8s_kind": "jobset"}, "k8s_kind: --k8s-kind is an option of --backend k8s, not compose"),
    ({"registry": "registry.example"}, "registry: --registry is an option of --backend swarm or k8s, not compose"),
    ({"backend": "k8s", "overlay_mtu": 1400}, "overlay_mtu: --overlay-mtu is an option of --backend swarm, not k8s"),
    ({"backend": "swarm", "k8s_checkpoint_claim": "c"}, "is an option of --backend k8s, not swarm"),
    ({"backend": "swarm", "registry": "Bad Registry"}, "registry: 'Bad Registry' is not HOST[:PORT][/PATH]"),
    ({"backend": "swarm", "overlay_mtu": 100}, "overlay_mtu: 100 is below IPv4's minimum of 576"),
    ({"backend": "k8s", "k8s_kind": "deployment"}, "k8s_kind: must be 'job', 'jobset' or 'trainjob'"),
])
def test_a_backend_option_is_checked_by_its_backend_and_refused_elsewhere(fields, message):
    with pytest.raises(InvalidSpec) as exc:
        make_spec(run_id="r", **fields)
    assert message in exc.value.message and "\n" not in exc.value.message


def test_a_spec_of_an_older_orch_with_top_level_backend_options_still_loads():
    old = make_spec(run_id="r", backend="swarm", overlay_mtu=1400).model_dump()
    old.update(old.pop("backend_options"), k8s_kind="job", k8s_checkpoint_claim=None)  # as run.json had them
    loaded = JobSpec.model_validate(old)
    assert loaded.backend == "swarm" and loaded.backend_options.overlay_mtu == 1400
    old_compose = {**make_spec(run_id="r").model_dump(), "overlay_mtu": 0, "k8s_kind": "job", "registry": None}
    del old_compose["backend_options"]
    assert JobSpec.model_validate(old_compose) == make_spec(run_id="r")
    with pytest.raises(InvalidSpec, match="registry"):  # a value the backend has no place for is not dropped silently
        JobSpec.model_validate({**old_compose, "registry": "registry.example"})


def test_every_backend_option_has_a_description_and_a_flag():
    from orchestrator.backends.options import OPTIONS
    from orchestrator.cli.options import spec_flags

    flags = {f.field for f in spec_flags()}
    for model in OPTIONS.values():
        assert all(info.description for info in model.model_fields.values())
        assert set(model.model_fields) <= flags


@pytest.mark.parametrize("fields, message", [
    ({"memory_mb": 10}, "memory: must be at least 256 (got 10)"),
    ({"workers": 20000}, "workers: must be at most 32 (got 20000)"),  # and nothing of the roles that follow
    ({"run_id": "BAD!"}, "run_id: must be lowercase letters, digits, - and _, starting with a letter or digit"),
    ({"learning_rate": float("nan")}, "learning_rate: must be a finite number (got nan)"),
    ({"cpus": float("inf")}, "cpus: must be a finite number (got inf)"),
    ({"time_limit": float("inf")}, "time_limit: must be a finite number"),
])
def test_errors_say_what_is_allowed_in_words(fields, message):
    with pytest.raises(InvalidSpec) as exc:
        make_spec(**{"run_id": "r", **fields})
    assert message in exc.value.message and "pattern" not in exc.value.message and "roles" not in exc.value.message


def test_every_pattern_of_the_spec_is_said_in_words():
    from orchestrator.jobspec import fields, messages

    assert {fields.RUN_ID_PATTERN, fields.ROLE_PATTERN} <= set(messages.PATTERNS)


def test_a_field_may_be_given_by_its_flags_name_as_experiment_files_do():
    from orchestrator.cli.options import spec_flags

    spec = make_spec(run_id="r", batch_size=192, memory=4096, disk_limit=100)
    assert (spec.global_batch, spec.memory_mb, spec.disk_limit_mb) == (192, 4096, 100)
    names = set(flat_field_names())
    for f in spec_flags():  # every flag's own name is a name the spec takes: the docs and the code agree
        assert f.flag.removeprefix("--").replace("-", "_") in names, f.flag
    with pytest.raises(InvalidSpec, match="batch_size: batch_size and global_batch are the same field"):
        make_spec(run_id="r", batch_size=192, global_batch=96)


# -- a field the job would ignore is refused ---------------------------------------------------------------------
def _other_value(info):
    """A valid value of a field other than its default."""
    import typing

    default = info.default
    if typing.get_origin(info.annotation) is typing.Literal:
        return next(v for v in typing.get_args(info.annotation) if v != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    return (default or 0.5) * 2


def _trainer_fields():
    """(framework, field, info) of every field only orch's own trainer reads, in the spec and each framework's."""
    from orchestrator import frameworks
    from orchestrator.jobspec.fields import TRAINER, metadata

    for name, info in JobSpec.model_fields.items():
        if metadata(JobSpec, name).get("jobs") == TRAINER:
            yield "tensorflow", name, info
    for framework in frameworks.names():
        for name, info in frameworks.options_model(framework).model_fields.items():
            if (info.json_schema_extra or {}).get("jobs") == TRAINER:
                yield framework, name, info


def test_every_field_only_the_trainer_reads_is_refused_with_a_script():
    checked = set()
    for framework, name, info in _trainer_fields():
        value = _other_value(info)
        with pytest.raises(InvalidSpec) as caught:
            make_spec(framework=framework, script="/x/train.py", run_id="s", **{name: value})
        shown = {"global_batch": "batch_size"}.get(name, name)
        assert caught.value.message.startswith(f"{shown}: orch's own trainer reads it, and --script runs your script "
                                               "instead"), (name, caught.value.message)
        checked.add(name)
    assert {"epochs", "model", "samples", "global_batch", "learning_rate", "seed", "checkpoint_every",
            "steps_per_execution", "batch_per_worker"} <= checked


def test_a_trainer_field_at_its_default_is_no_error_with_a_script():
    spec = make_spec(script="/x/train.py", epochs=5, run_id="s")  # what the job does anyway: nothing is lost
    assert spec.script == "/x/train.py"
    assert make_spec(framework="torch", script="/x/train.py", model="cnn", run_id="s")  # torch's own default
    assert make_spec(**spec.flat()) == spec  # a spec's fields, flattened, are a valid spec again


def test_every_refusal_of_a_script_job_is_one_line_naming_each_field():
    with pytest.raises(InvalidSpec) as caught:
        make_spec(script="/x/train.py", epochs=3, batch_size=10, steps_per_execution=3, run_id="s")
    assert caught.value.message == ("epochs: orch's own trainer reads it, and --script runs your script instead, which "
                                    "never sees it; give your script its own arguments after `--`; batch_size: the "
                                    "same; steps_per_execution: the same")
    assert [p.field for p in caught.value.problems] == ["epochs", "global_batch", "steps_per_execution"]


def test_a_script_job_is_not_held_to_the_trainers_batch_and_data_checks():
    spec = make_spec(script="/x/train.py", workers=5, dataset="vader-reviews", run_id="s")  # 96 % 5, mlp on text
    assert spec.workers == 5
    with pytest.raises(InvalidSpec, match="not divisible by 5 workers"):
        make_spec(workers=5, run_id="s")


def test_a_flag_that_needs_another_is_refused_without_it():
    with pytest.raises(InvalidSpec, match="^expose_ports_on_host: it does nothing without --network host; leave it"):
        make_spec(expose_ports_on_host=True, run_id="s")
    assert make_spec(expose_ports_on_host=True, network="host", run_id="s").network == "host"
    assert make_spec(expose_ports_on_host=False, run_id="s")  # at its default: nothing to ignore


def test_replace_refuses_what_the_new_job_would_ignore():
    trained = make_spec(epochs=3, run_id="s")
    with pytest.raises(InvalidSpec, match="^epochs: orch's own trainer reads it"):
        trained.replace(script="/x/train.py")
    assert trained.replace(script="/x/train.py", epochs=5).script == "/x/train.py"


def test_a_record_of_a_script_run_that_set_trainer_fields_still_loads():
    from orchestrator.run.info import spec_of as _spec_of

    old = {"run_id": "old", "workers": 2, "script": "/x/train.py", "epochs": 7, "global_batch": 64}  # a flat record
    assert _spec_of(old).epochs == 7


def test_jobspec_itself_raises_orchs_error_naming_each_field():
    spec = JobSpec(workers=3)
    assert spec.workers == 3 and "-w3-" in spec.run_id
    with pytest.raises(InvalidSpec) as caught:
        JobSpec(workers=0, epochs=0)
    assert caught.value.exit_code == 2 and "\n" not in caught.value.message
    assert [p.field for p in caught.value.problems] == ["workers", "epochs"]
    assert caught.value.message == ("workers: must be at least 1 (got 0); e.g. workers: 1; epochs: must be at least 1 "
                                    "(got 0); e.g. epochs: 5")  # as make_spec and experiment files say it


def test_script_fields_drop_what_only_the_trainer_reads():
    from orchestrator.jobspec import script_fields

    workload = {"dataset": "synthetic", "samples": 6000, "epochs": 2, "batch_size": 96, "model": "mlp",
                "framework": "torch", "batch_per_worker": 8}
    assert script_fields(workload) == {"dataset": "synthetic", "framework": "torch"}
    assert make_spec(**script_fields(workload), script="/x/probe.py", workers=3, run_id="s").workers == 3
