"""Fuzzing the spec and experiment loader: any input gives a valid plan or an OrchError, never a traceback.

Experiment files, as documents and as raw YAML text (anchors, aliases, huge scalars, odd keys, deep nesting,
wrong types, float and negative grid values), give cells with distinct keys and valid, distinct run ids, or
one short line of InvalidSpec, in bounded time (tests/bounds.py; the times are in benchmarks/input_limits.py).
"""
import json
import math
import os
import re
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import backends, frameworks
from orchestrator.errors import InvalidSpec, OrchError
from orchestrator.experiments import cells as experiment_cells
from orchestrator.experiments import model as experiment_model
from orchestrator.experiments.cells import expand
from orchestrator.experiments.file import parse
from orchestrator.experiments.keys import cell_run_id
from orchestrator.images.venv_volume import volume_name
from orchestrator.jobspec import RUN_ID_PATTERN, JobSpec, flat_field_names, make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from tests.bounds import HANG_S

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
# `make test` (and so CI) fuzzes in full, ORCH_FUZZ=thorough from tools/test.sh, where the fast tier runs beside the
# images' build and costs no time; `make test-fast`, before each commit, tries a quarter of the examples.
THOROUGH = os.environ.get("ORCH_FUZZ") == "thorough"


def examples(n: int) -> int:
    """How many examples a fuzz test tries: ``n`` in full, a quarter before a commit."""
    return n if THOROUGH else max(n // 4, 50)


FUZZ = settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_plan(spec: JobSpec) -> None:
    doc = yaml.safe_load(plan(spec, PATHS).artifact)
    # The only volume is the one orch copies its image's Python environment into, made outside Compose.
    volumes = doc.pop("volumes", {})
    assert set(doc) == {"name", "services", "networks"}
    if spec.image or not backends.get(spec.backend).venv_volume:
        assert volumes == {}
    else:
        assert volumes == {volume_name(frameworks.get(spec.framework.name).image(spec)): {"external": True}}
    assert sorted(doc["services"]) == [f"worker-{i}" for i in range(spec.workers)]
    for service in doc["services"].values():
        assert set(service) <= {"image", "hostname", "networks", "network_mode", "depends_on", "user", "init",
                                "restart", "stop_grace_period", "environment", "labels", "volumes", "read_only",
                                "tmpfs", "cap_drop", "security_opt", "logging", "mem_limit", "pids_limit", "cpus", "cpuset",
                                "deploy", "ulimits"}


@pytest.mark.early
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


@pytest.mark.early
@FUZZ
@given(EXPERIMENT_DOCS)
def test_any_experiment_document_gives_cells_or_an_orch_error(doc):
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return
    experiment, cells = _cells_or_one_line(text)
    for cell in cells[:3]:
        _check_plan(make_spec(**cell.fields, run_id=cell_run_id(experiment.name, cell.key, cell.repeat, "ffff")))


@settings(FUZZ, max_examples=examples(1000))
@given(st.text(max_size=300))
def test_any_text_as_experiment_file(text):
    _cells_or_one_line(text)


# -- experiment files as YAML text ---------------------------------------------------------------------
def _cells_or_one_line(text: str) -> tuple:
    """parse and expand ``text`` in bounded time: (experiment, cells) with distinct keys and valid, distinct
    run ids; or (None, []) after one short line of InvalidSpec."""
    started = time.process_time()
    try:
        experiment = parse(text, "fuzz.yaml")
        cells = expand(experiment) + expand(experiment, quick=True)
    except InvalidSpec as exc:
        assert time.process_time() - started < HANG_S
        assert exc.exit_code == 2 and "\n" not in exc.message and "\r" not in exc.message
        assert exc.message.startswith("fuzz.yaml") and len(exc.message) <= experiment_model.MAX_MESSAGE
        return None, []
    assert time.process_time() - started < HANG_S
    for group in (cells[:len(expand(experiment))], cells[len(expand(experiment)):]):
        keys = [c.key for c in group]
        assert len(set(keys)) == len(keys)
        ids = [cell_run_id(experiment.name, c.key, c.repeat, "ffff") for c in group]
        assert len(set(ids)) == len(ids) and all(re.fullmatch(RUN_ID_PATTERN, i) for i in ids)
    return experiment, cells


def _anchor_text(depth: int, width: int) -> str:
    """Billion laughs: each level an anchored list of ``width`` aliases of the one before."""
    lines = ["name: laughs", "base:", "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


KEYS = st.one_of(st.sampled_from(FIELDS),
                 st.sampled_from(["", "1", "null", "true", "~", "[1]", "{a: 1}", "é", "é" * 40, "k" * 300, "? x",
                                  "'q'", "2021-02-30", "<<", "-1"]),
                 st.text(max_size=12).map(json.dumps))
def _rarely(rare, common, one_in: int = 10):
    """``rare`` one time in ``one_in``, else ``common``: hypothesis has no weights."""
    return st.integers(min_value=1, max_value=one_in).flatmap(lambda i: rare if i == 1 else common)


SCALARS = _rarely(st.one_of(
    st.sampled_from([1, 5000, 70_000]).map(lambda n: "1" * n),  # 5,000 digits is past Python's int limit
    st.sampled_from([1000, 60_000, 70_000]).map(lambda n: "x" * n),  # 70,000 is past the size limit
), st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats().map(repr),
    st.text(max_size=20).map(json.dumps),
    st.sampled_from(["0.001", "-1", "1e-5", "1.0e+3", ".inf", "-.nan", "0x1f", "0o17", "1_000", "12:30:00", "~", "yes",
                     "2021-02-30", "2021-01-01", "!!binary aGk=", "!!set {a}", "!!omap [a: 1]", "!!python/tuple [1]",
                     "!!float 1", "!!str 1", "ring", "RING", "synthetic", '"\\u2028"', "|\n  x"]),
))
NODES = st.recursive(
    _rarely(st.one_of(st.sampled_from(["&a 1", "*a", "&a [1, 2]", "[*a, *a]", "&b {x: *a}"]),
                      st.integers(min_value=1, max_value=80).map(lambda d: "[" * d + "1" + "]" * d)), SCALARS, 10),
    lambda inner: st.one_of(st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
                            st.lists(st.tuples(KEYS, inner), max_size=3).map(
                                lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}")),
    max_leaves=6,
)
GRID_VALUES = st.lists(_rarely(SCALARS, st.one_of(st.floats(allow_nan=False).map(repr),
                                                   st.integers(min_value=-3, max_value=3).map(str)), 3),
                       min_size=1, max_size=4)
TEXTS = st.builds(
    lambda name, base, grid, extra: "\n".join([f"name: {name}", "base: {dataset: synthetic, samples: 3000"
                                               + "".join(f", {k}: {v}" for k, v in base) + "}",
                                               "grid: {" + ", ".join(f"{k}: [{', '.join(v)}]" for k, v in grid) + "}",
                                               *(f"{k}: {v}" for k, v in extra)]) + "\n",
    _rarely(st.one_of(st.sampled_from(["a" * 24, "a" * 25, "Fuzz", "&n fuzz", "*n", "[fuzz]", '""']), SCALARS),
            st.just("fuzz"), 5),
    st.lists(st.tuples(_rarely(KEYS, st.sampled_from(FIELDS), 3), NODES), max_size=1),
    st.lists(st.tuples(_rarely(KEYS, st.sampled_from(["workers", "learning_rate", "prefetch", "seed", "collective",
                                                      "epochs", "threads"]), 5), GRID_VALUES), max_size=3),
    st.lists(st.tuples(st.sampled_from(["repeats", "quick", "report", "description", "grid", "base", "other", "1"]),
                       NODES), max_size=1),
)


@pytest.mark.early
@settings(FUZZ, max_examples=examples(400))
@given(TEXTS)
def test_any_experiment_text_gives_cells_or_one_short_line_fast(text):
    _cells_or_one_line(text)


NUMBER_GRIDS = st.dictionaries(
    st.sampled_from(["learning_rate", "prefetch", "seed", "workers", "shuffle_buffer", "epochs"]),
    st.lists(st.one_of(st.floats(min_value=1e-9, max_value=10), st.floats(), st.integers(-3, 3),
                       st.integers(min_value=0, max_value=2**40)), min_size=1, max_size=5),
    min_size=1, max_size=3,
)


@settings(FUZZ, max_examples=examples(200))
@given(NUMBER_GRIDS, st.integers(min_value=1, max_value=3))
def test_float_and_negative_grid_values_give_distinct_keys_or_one_line(grid, repeats):
    text = (f"name: fuzz\nrepeats: {repeats}\nbase: {{dataset: synthetic, samples: 3000, global_batch: 12}}\n"
            f"grid: {json.dumps(grid)}\n")
    experiment, _ = _cells_or_one_line(text)
    if experiment is not None:  # every point of the grid, times the repeats
        assert len(expand(experiment)) == repeats * math.prod(len(v) for v in grid.values())


@settings(FUZZ, max_examples=examples(200))
@given(NODES)
def test_any_yaml_node_as_an_experiment_file(text):
    _cells_or_one_line(text)


@pytest.mark.parametrize("depth, width", [(10, 9), (30, 2), (3, 1000)])
def test_billion_laughs_is_refused_fast(depth, width):
    started = time.process_time()
    with pytest.raises(InvalidSpec) as info:
        parse(_anchor_text(depth, width), "laughs.yaml")
    assert time.process_time() - started < HANG_S
    assert "anchors and aliases" in info.value.message and "line 3" in info.value.message


@pytest.mark.parametrize("text, needle", [
    ("name: t\nbase: &b {workers: 2}\n", "anchors and aliases"),
    ("name: t\nbase: {dataset: synthetic}\nquick: {<<: *x}\n", "anchors and aliases"),
    ("name: t\nbase: {workers: " + "[" * 10_000 + "]" * 10_000 + "}\n", f"deeper than {experiment_model.MAX_DEPTH}"),
    ("name: t\ndescription: " + "x" * (64 << 10) + "\n", "larger than 64 KiB"),
    ("name: t\nbase: {samples: " + "1" * 5000 + "}\n", "not valid YAML"),
    ("name: t\ndescription: 2021-02-30\n", "not valid YAML"),
    ("name: t\ndescription: " + "x" * 60_000 + "\n", "at most 2000 characters"),
    ("name: " + "x" * 60_000 + "\n", "name: must be lowercase letters"),
    ("name: t\nbase:\n  ? " + json.dumps("k" * 60_000) + "\n  : 1\n", "unknown field 'kkkk"),
    ("name: t\ngrid: {workers: [1, 2, " + "3" * 4000 + "]}\n", "cell workers"),
    ("name: t\nquick: {repeats: 1000000}\n", "quick: repeats: a whole number from 1 to 20"),
    ("name: t\nbase: {dataset: synthetic}\ngrid: {workers: [1, 2]}\nquick: {workers: [" + ", ".join(["1"] * 60)
     + "]}\n", "quick: workers: at most 50 values"),
])
def test_hostile_yaml_is_one_short_line_fast(text, needle):
    started = time.process_time()
    with pytest.raises(InvalidSpec) as info:
        parse(text, "fuzz.yaml")
    assert time.process_time() - started < HANG_S
    message = info.value.message
    assert needle in message and "\n" not in message and len(message) <= experiment_model.MAX_MESSAGE, message


def test_a_document_at_the_size_limit_is_read_to_the_end_in_bounded_time():
    """Pure-Python YAML is linear but slow; the size limit keeps the worst (a dense flow list) short. Its time is
    measured in benchmarks/input_limits.py."""
    text = ("name: t\nbase: {samples: [" + ",".join(["1"] * (experiment_model.MAX_BYTES // 2)))[:experiment_model.MAX_BYTES]
    started = time.process_time()
    with pytest.raises(InvalidSpec):
        parse(text, "fuzz.yaml")
    assert time.process_time() - started < HANG_S


# -- cell keys and run ids -------------------------------------------------------------------------------
def _ids(experiment, cells, token="0a1b"):
    return [cell_run_id(experiment.name, c.key, c.repeat, token) for c in cells]


def test_a_float_axis_gives_valid_distinct_run_ids():
    exp = parse("name: lr\nbase: {dataset: synthetic}\ngrid: {learning_rate: [0.001, 0.01, 0.0001, 1.0]}\n")
    cells = expand(exp)
    ids = _ids(exp, cells)
    assert len(set(ids)) == 4 and all(re.fullmatch(RUN_ID_PATTERN, i) for i in ids)
    assert cells[0].key.startswith("learningrate0p001_") and cells[0].fields["learning_rate"] == 0.001
    for cell, run_id in zip(cells, ids):
        make_spec(**cell.fields, run_id=run_id)


def test_negative_and_positive_values_get_distinct_keys():
    exp = parse("name: pf\nbase: {dataset: synthetic}\ngrid: {prefetch: [-1, 1]}\n")
    cells = expand(exp)
    assert [c.fields["prefetch"] for c in cells] == [-1, 1]
    assert cells[0].key != cells[1].key and cells[1].key == "prefetch1-r0" and cells[0].key.startswith("prefetchm1_")
    assert len(set(_ids(exp, cells))) == 2


def test_long_keys_keep_repeats_and_cells_apart():
    name = "a-long-experiment-name-x"  # 24, the most a name may have
    exp = parse(f"name: {name}\nbase: {{dataset: synthetic}}\nrepeats: 20\n"
                "grid: {steps_per_execution: [10, 20], shuffle_buffer: [1000, 2000], bytes_per_pack: [0, 1000000],"
                " collective_timeout: [60, 120], checkpoint_every: [0, 5]}\n")  # 640 cells, within MAX_TOTAL_CELLS
    cells = expand(exp)
    assert len(cells) == 32 * 20 and all(len(c.key) > 63 for c in cells)
    ids = _ids(exp, cells)
    assert len(set(ids)) == len(ids) and all(re.fullmatch(RUN_ID_PATTERN, i) for i in ids)
    assert ids[0].startswith(name + "-stepsperexecution10") and ids[0].endswith("-r0-0a1b")
    assert ids[19].endswith("-r19-0a1b")


@pytest.mark.parametrize("values, shown", [("[1, 2, 1]", "1"), ("[0.5, 0.5]", "0.5"), ("[ring, auto, ring]", "ring")])
def test_the_same_value_twice_on_an_axis_is_refused(values, shown):
    axis = "collective" if "ring" in values else "learning_rate" if "0.5" in values else "workers"
    with pytest.raises(InvalidSpec) as info:
        parse(f"name: t\nbase: {{dataset: synthetic}}\ngrid: {{{axis}: {values}}}\n", "dup.yaml")
    assert info.value.message == f"dup.yaml: grid: {axis}: the value {shown} appears more than once"


def test_expand_validates_the_run_id_the_sweep_will_use(monkeypatch):
    exp = parse("name: t\nbase: {dataset: synthetic}\ngrid: {workers: [1, 2]}\n")
    monkeypatch.setattr(experiment_cells, "cell_run_id", lambda name, key, repeat, token: f"{name}-{key}.{token}")
    with pytest.raises(InvalidSpec) as info:
        expand(exp)
    assert "cell workers1-r0: run_id" in info.value.message
