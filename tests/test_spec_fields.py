"""The spec's field vocabulary (orchestrator/jobspec/fields.py), exactly: flag aliases, examples and defaults, flat
fields nested, and the whole text of each refusal. No engine.

tests/test_spec.py checks specs end to end; these pin what mutation testing (benchmarks/mutation.py) found it left
open."""
from __future__ import annotations

import pytest

from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import JobSpec, make_spec
from orchestrator.jobspec.fields import default, example, flag_aliases


def refusal(**fields) -> str:
    with pytest.raises(InvalidSpec) as caught:
        make_spec(run_id="s", **fields)
    return caught.value.message


def test_the_flags_own_names_of_fields_named_otherwise_are_the_aliases():
    assert flag_aliases(JobSpec) == {"batch_size": "global_batch", "memory": "memory_mb", "shm_size": "shm_size_mb",
                                     "disk_limit": "disk_limit_mb"}


def test_an_example_is_a_fields_default_or_a_known_good_value_never_a_flags_bool():
    assert example(JobSpec, "strategy") == "auto"  # a framework option's default
    assert example(JobSpec, "script") == "train.py"  # no default of its own: EXAMPLES
    assert example(JobSpec, "pin_cpus") is None  # a bool is no example
    assert example(JobSpec, "no_such_field") is None


def test_a_field_made_by_a_factory_has_no_default_to_compare_with():
    assert default(JobSpec, "run_id") is None and default(JobSpec, "backend_options") is None
    assert default(JobSpec, "network") == "bridge" and default(JobSpec, "strategy") == "auto"
    assert default(JobSpec, "no_such_field") is None


def test_a_field_given_twice_by_its_name_and_its_flags_name_is_refused_whole():
    assert refusal(batch_size=192, global_batch=96) == \
        "batch_size: batch_size and global_batch are the same field (--batch-size); give one"


def test_an_option_of_another_framework_is_refused_naming_its_flag_and_framework():
    assert refusal(framework="mpi", batch_per_worker=4) == \
        "batch_per_worker: --batch-per-worker is an option of --framework torch, not mpi"
    assert refusal(framework="torch", steps_per_execution=3) == \
        "steps_per_execution: --steps-per-execution is an option of --framework tensorflow, not torch"
    assert make_spec(run_id="s", framework="torch", batch_per_worker=4).framework.batch_per_worker == 4


def test_name_is_no_flat_field_that_chooses_the_framework():
    assert refusal(name="torch").startswith("name: ")


def test_a_framework_given_as_a_mapping_is_held_to_its_own_defaults():
    assert make_spec(framework={"name": "torch"}, script="/x/train.py", model="cnn", run_id="s").script


def test_the_first_trainer_field_a_script_ignores_is_said_in_full_after_another_problem():
    assert refusal(script="/x/train.py", expose_ports_on_host=True, epochs=3) == (
        "expose_ports_on_host: it does nothing without --network host; leave it out; epochs: orch's own trainer "
        "reads it, and --script runs your script instead, which never sees it; give your script its own arguments "
        "after `--`")


def test_a_flat_backend_option_keeps_its_value_and_a_non_mapping_is_named_as_given():
    assert make_spec(run_id="s", backend="k8s", k8s_kind="jobset").backend_options.k8s_kind == "jobset"
    assert refusal(backend_options=5).startswith("backend_options: input should be a valid dictionary")


def test_a_flag_named_as_its_field_is_no_alias():
    from pydantic import BaseModel, Field

    from orchestrator.jobspec.fields import flag

    class Spec(BaseModel):
        workers: int = Field(1, json_schema_extra=flag("--workers"))
        run_name: str = Field("r", json_schema_extra=flag("--run-name"))
        global_batch: int = Field(96, json_schema_extra=flag("--batch-size"))

    aliases = flag_aliases(Spec)
    assert aliases["batch_size"] == "global_batch"
    assert "workers" not in aliases and "run_name" not in aliases and "__workers" not in aliases
