"""Fuzzing the spec and experiment loader: any input gives a valid plan or an OrchError, never a traceback."""
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import OrchError
from orchestrator.experiments import expand, parse
from orchestrator.paths import Paths
from orchestrator.plan import plan
from orchestrator.spec import JobSpec, flat_field_names, make_spec

FIELDS = flat_field_names()  # as experiment files and make_spec name them
NASTY_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "a b", "x\ny: z", '"quoted"', "'q'", "$(reboot)", "`id`", "; rm -rf /", "${HOME}",
                     "../../etc", "-" * 70, "é", "\x00", "1e309", "NaN", "inf", "-1", "99999999999999999999"]),
)
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
              st.floats(allow_nan=True, allow_infinity=True), NASTY_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(NASTY_TEXT, inner, max_size=3)),
    max_leaves=8,
)
SPEC_FIELDS = st.dictionaries(st.one_of(st.sampled_from(FIELDS), NASTY_TEXT), VALUES, max_size=6)
PATHS = Paths(runs=Path("/srv/runs"), cache=Path("/srv/cache"))
FUZZ = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_plan(spec: JobSpec) -> None:
    doc = yaml.safe_load(plan(spec, PATHS).artifact)
    assert set(doc) == {"name", "services", "networks"}
    assert sorted(doc["services"]) == [f"worker-{i}" for i in range(spec.workers)]
    for service in doc["services"].values():
        assert set(service) <= {"image", "hostname", "networks", "network_mode", "depends_on", "user", "init",
                                "restart", "stop_grace_period", "environment", "labels", "volumes", "read_only",
                                "tmpfs", "cap_drop", "security_opt", "mem_limit", "pids_limit", "cpus", "cpuset"}


@FUZZ
@given(SPEC_FIELDS)
def test_any_spec_fields_give_a_plan_or_an_orch_error(fields):
    try:
        spec = make_spec(**{str(k): v for k, v in fields.items()})
    except OrchError as exc:
        assert exc.exit_code == 2 and "\n" not in exc.message
        return
    _check_plan(spec)


EXPERIMENT_DOCS = st.one_of(
    VALUES,
    st.fixed_dictionaries(
        {"name": st.one_of(st.just("fuzz"), NASTY_TEXT)},
        optional={"base": SPEC_FIELDS, "grid": st.dictionaries(st.one_of(st.sampled_from(FIELDS), NASTY_TEXT),
                                                              st.one_of(st.lists(VALUES, max_size=3), VALUES),
                                                              max_size=3),
                  "repeats": VALUES, "quick": SPEC_FIELDS, "report": VALUES, "description": VALUES},
    ),
)


@FUZZ
@given(EXPERIMENT_DOCS)
def test_any_experiment_document_gives_cells_or_an_orch_error(doc):
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return
    try:
        experiment = parse(text, "fuzz.yaml")
    except OrchError as exc:
        assert exc.exit_code == 2 and "\n" not in exc.message
        return
    for cell in expand(experiment)[:3]:
        _check_plan(make_spec(**cell.fields, run_id="fuzz"))


@FUZZ
@given(st.text(max_size=300))
def test_any_text_as_experiment_file(text):
    try:
        parse(text, "fuzz.yaml")
    except OrchError as exc:
        assert exc.exit_code == 2
