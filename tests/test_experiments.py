"""Experiment files: loading, grid expansion, quick mode, resume, the sweep with faked runs; and a live --quick sweep."""
import json
import os
import re
import time

import pytest
import yaml

from orchestrator.analysis import report
from orchestrator.errors import InvalidSpec, WorkerFailed
from orchestrator.experiments import sweep as experiments
from orchestrator.experiments import model as experiment_model
from orchestrator.experiments.cells import Cell, expand
from orchestrator.experiments.file import load, parse
from orchestrator.experiments.keys import cell_run_id
from orchestrator.experiments.model import NAMES as NAMES_OF_FILES
from orchestrator.experiments.sweep import DONE, ELSEWHERE, TO_RUN, load_cells, results_dir, status
from orchestrator.jobspec import RUN_ID_PATTERN
from orchestrator.paths import Paths
from orchestrator.safeio import FolderBusy
from tests.bounds import HANG_S
from tests.conftest import ROOT, run_orch
from tests.test_collect import _fake_run, _good, _tree, assert_whole, interrupt_replace

GRID = """
name: t
base: {dataset: synthetic, epochs: 2}
grid: {workers: [1, 2, 3], samples: [6000, 12000]}
repeats: 2
"""


def test_grid_times_repeats():
    cells = expand(parse(GRID))
    assert len(cells) == 12
    assert cells[0].key == "workers1-samples6000-r0" and cells[1].key == "workers1-samples6000-r1"
    assert cells[-1].fields == {"dataset": "synthetic", "epochs": 2, "workers": 3, "samples": 12000}
    assert len({c.key for c in cells}) == 12


def test_rotated_order_runs_one_repeat_of_every_point_a_round_each_round_starting_one_point_later():
    cells = expand(parse("name: t\nbase: {dataset: synthetic}\ngrid: {workers: [1, 3]}\nrepeats: 3\n"
                         "order: rotated\n"))
    assert [c.key for c in cells] == ["workers1-r0", "workers3-r0", "workers3-r1", "workers1-r1", "workers1-r2",
                                      "workers3-r2"]
    grouped = expand(parse(GRID))
    assert sorted(c.key for c in expand(parse(GRID + "order: rotated\n"))) == sorted(c.key for c in grouped)
    with pytest.raises(InvalidSpec, match="order"):
        parse(GRID + "order: shuffled\n")


def test_quick_uses_the_quick_section():
    exp = parse(GRID + "quick: {epochs: 1, samples: [3000], repeats: 1}\n")
    cells = expand(exp, quick=True)
    assert [c.key for c in cells] == ["workers1-samples3000-r0", "workers2-samples3000-r0", "workers3-samples3000-r0"]
    assert all(c.fields["epochs"] == 1 for c in cells)


def test_quick_default_scales_samples_and_epochs_down():
    cells = expand(parse(GRID.replace("[6000, 12000]", "[5000, 60000]")), quick=True)
    assert sorted({c.fields["samples"] for c in cells}) == [3000, 6000]
    assert {c.fields["epochs"] for c in cells} == {1} and {c.repeat for c in cells} == {0}


def test_committed_experiment_files_are_valid():
    for path in (ROOT / "experiments").glob("*.yaml"):
        exp = load(path)
        assert expand(exp) and expand(exp, quick=True)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("- a\n- b\n", "must be a mapping"),
        ("name: [unclosed\n", "not valid YAML"),
        ("name: t\ncolour: red\n", "colour"),
        ("name: Bad Name\n", "name"),
        ("name: t\ngrid: {run_id: [a]}\n", "cannot sweep run_id"),
        ("name: t\ngrid: {workers: []}\n", "needs at least one value"),
        ("name: t\ngrid: {workers: [1, 0]}\n", "cell workers0-r0: workers"),
        ("name: t\nbase: {wrokers: 2}\n", "unknown field wrokers"),
        ("name: t\nbase: {workers: \"two; rm -rf /\"}\n", "workers"),
        ("name: t\nrepeats: -1\n", "repeats"),
        ("name: t\nrepeats: 1000000\n", "repeats"),
        ("name: t\nbase: {dataset: mnist, samples: 70000}\n", "samples"),
        ("name: t\nbase: {run_id: x}\n", "unknown field run_id"),
    ],
)
def test_bad_experiment_files_name_the_problem(text, needle):
    with pytest.raises(InvalidSpec) as info:
        parse(text, "exp.yaml")
    assert needle in info.value.message and "\n" not in info.value.message


def test_resume_skips_only_succeeded_cells_with_the_same_spec_on_this_machine():
    cell = Cell(key="k", params={"workers": 1}, repeat=0, fields={"workers": 1, "epochs": 2})
    here = {"machine": {"id": "m1"}}
    assert status({"state": "succeeded", "fields": {"workers": 1, "epochs": 2}, **here}, cell, "m1") == DONE
    assert status({"state": "failed", "fields": {"workers": 1, "epochs": 2}, **here}, cell, "m1") == TO_RUN
    assert status({"state": "succeeded", "fields": {"workers": 1, "epochs": 3}, **here}, cell, "m1") == TO_RUN
    assert status(None, cell, "m1") == TO_RUN
    # Measured elsewhere, or by an orch that did not record the machine: run again, and say why.
    assert status({"state": "succeeded", "fields": {"workers": 1, "epochs": 2}, **here}, cell, "m2") == ELSEWHERE
    assert status({"state": "succeeded", "fields": {"workers": 1, "epochs": 2}}, cell, "m1") == ELSEWHERE
    assert status({"state": "failed", "fields": {"workers": 1, "epochs": 2}}, cell, "m1") == TO_RUN


def test_a_cell_names_the_engine_it_runs_on_where_it_is_not_docker(monkeypatch):
    monkeypatch.delenv("ORCH_ENGINE", raising=False)
    exp = parse("name: t\nbase: {dataset: synthetic}\ngrid: {workers: [1, 3]}\nrepeats: 2\n")
    assert all("engine" not in c.fields for c in expand(exp))  # Docker's cells: as every sweep recorded them
    assert all("engine" not in c.fields for c in expand(exp, engine="docker"))
    assert [c.fields["engine"] for c in expand(exp, engine="podman")] == ["podman"] * 4
    monkeypatch.setenv("ORCH_ENGINE", "podman")  # `orch experiment run --engine podman`
    on_podman = expand(exp)
    assert all(c.fields["engine"] == "podman" for c in on_podman)
    # A cell done on Docker is run again on Podman, not skipped as done (and the other way round).
    done = {"state": "succeeded", "fields": {"dataset": "synthetic", "workers": 1}, "machine": {"id": "m"}}
    assert status(done, on_podman[0], "m") == TO_RUN
    assert status({**done, "fields": on_podman[0].fields}, on_podman[0], "m") == DONE
    # The file's own engine stands; a backend without an engine gets none.
    named = parse("name: t\nbase: {dataset: synthetic, engine: docker}\ngrid: {workers: [1]}\n")
    assert expand(named, engine="podman")[0].fields["engine"] == "docker"
    assert expand(exp, engine="docker")[0].fields["engine"] == "docker"  # not $ORCH_ENGINE's, when the sweep runs it
    swarm = parse("name: t\nbase: {dataset: synthetic, backend: swarm}\ngrid: {workers: [2]}\n")
    assert "engine" not in expand(swarm, engine="podman")[0].fields and "engine" not in expand(swarm)[0].fields


def test_the_estimate_counts_the_cells_left_and_says_nothing_once_they_are_done():
    progress = experiments.Progress(total=3)
    assert progress.eta_seconds is None  # no cell has run: nothing to go by
    progress.done, progress.durations = 1, [10.0]
    assert progress.eta_seconds == 20.0
    progress.done, progress.durations = 3, [10.0, 20.0, 30.0]
    assert progress.eta_seconds is None  # e.g. the transport floors after the cells: not "about 0 s to go"


def test_the_machine_is_its_processor_its_vector_extensions_and_cores(tmp_path, monkeypatch):
    from orchestrator.analysis import machine

    info = tmp_path / "cpuinfo"
    block = ("processor\t: {n}\nmodel name\t: Xeon\ncpu family\t: 6\nmodel\t\t: 143\nstepping\t: 8\n"
             "flags\t\t: fpu sse2 avx2{extra}\n\n")
    info.write_text(block.format(n=0, extra="") + block.format(n=1, extra=" avx512f"))  # the first block counts
    monkeypatch.setattr(machine, "CPUINFO", info)
    first = machine.identity()
    assert (first["cpu"], first["cpu_id"]) == ("Xeon", "family 6 model 143 stepping 8")
    assert "Xeon (family 6 model 143 stepping 8)" in machine.describe(first)
    info.write_text(block.format(n=0, extra=" hypervisor md_clear"))  # the kernel's and hypervisor's flags: same
    assert machine.identity()["id"] == first["id"]
    info.write_text(block.format(n=0, extra=" avx512f amx_tile"))  # another instruction set: another machine
    assert machine.identity()["id"] != first["id"]
    info.write_text(block.format(n=0, extra="").replace("stepping\t: 8", "stepping\t: 9"))
    assert machine.identity()["id"] != first["id"]
    info.unlink()  # no /proc: the platform's name, no family, and still the same identity twice
    assert machine.identity()["cpu_id"] == "" and machine.identity()["id"] == machine.identity()["id"] != first["id"]


def test_only_compose_on_a_local_engine_is_checked(monkeypatch):
    from orchestrator.analysis import machine

    here = machine.where_cells_run("compose", "unix:///var/run/docker.sock")
    assert here == machine.identity() and not here.get("unchecked")
    remote = machine.where_cells_run("compose", "ssh://lab-box")
    swarm = machine.where_cells_run("swarm", "unix:///var/run/docker.sock")
    assert remote["id"].startswith("unchecked-") and remote["id"] != swarm["id"] != here["id"]
    assert remote == machine.where_cells_run("compose", "ssh://lab-box")  # stable: a resume skips its cells
    assert machine.describe(swarm) == "not checked: the containers ran on Swarm nodes at unix:///var/run/docker.sock"
    assert "Kubernetes nodes" in machine.describe(machine.where_cells_run("k8s", "unix:///x"))


def test_a_report_names_the_machine_its_cells_were_measured_on():
    from orchestrator.analysis import report

    one = {"cores": 2, "memory_gib": 24, "cpu": "Xeon", "cpu_id": "family 6", "id": "aaa"}
    ok = {"state": "succeeded"}
    assert report._measured_on({"a": {"machine": one, **ok}, "b": {"machine": one, **ok}}) == (
        "- Measured on: 2 cores, 24 GiB, Xeon (family 6), machine aaa")
    assert report._measured_on({"a": {"machine": one, **ok}, "f": {"state": "failed"}}).startswith(
        "- Measured on: 2 cores")  # a failed cell adds no figures
    mixed = report._measured_on({"a": {"machine": one, **ok}, "b": {"machine": {**one, "id": "bbb"}, **ok},
                                 "c": {"machine": "junk", **ok}})
    assert mixed.startswith("- **Measured on 3 machines**") and "1 cell on an unrecorded one" in mixed
    assert "not comparable" in mixed
    assert "do not record" in report._measured_on({"a": ok, "b": {"machine": None, **ok}})


def test_experiment_files_name_fields_exactly_as_the_flags_do():
    """What `orch up --help` lists is what a file may set, by the same names; the spec-only names are refused."""
    from orchestrator.cli.options import spec_flags
    from orchestrator.experiments.model import NAMES

    flags = {f.flag.removeprefix("--").replace("-", "_") for f in spec_flags()} - {"run_id"}  # a cell's own
    assert flags <= set(NAMES)
    no_flag = {"pids_limit", "script_args"}  # spec fields without a flag: the API's and files' only
    assert set(NAMES) - flags == no_flag
    for spec_only in ("global_batch", "memory_mb", "disk_limit_mb"):
        with pytest.raises(InvalidSpec, match="experiment files name it as the flag does"):
            parse(f"name: t\nbase: {{dataset: synthetic, {spec_only}: 512}}\n")


def test_the_docs_and_the_committed_files_use_the_flags_names():
    """Every experiment in experiments/ and every YAML example in docs/experiments.md loads; their fields are the
    flags' names."""
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        load(path)
    text = (ROOT / "docs" / "experiments.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        doc = yaml.safe_load(block.replace("...", ""))
        for section in ("base", "grid"):
            for key in (doc.get(section) or {}):
                assert key in NAMES_OF_FILES, (section, key)
        for setup in doc.get("setups") or []:
            assert set(setup) <= set(NAMES_OF_FILES), setup


def test_a_baseline_outside_the_grid_is_refused():
    with pytest.raises(InvalidSpec, match=r"report.baseline: \{workers: 4\} is no cell of the grid"):
        parse("name: t\nbase: {dataset: synthetic, samples: 600}\ngrid: {workers: [1, 2]}\n"
              "report: {baseline: {workers: 4}}\n")
    parse("name: t\nbase: {dataset: synthetic, samples: 600}\ngrid: {workers: [1, 2]}\nreport: {baseline: {workers: 2}}\n")


def test_an_unknown_field_names_the_closest_one():
    with pytest.raises(InvalidSpec, match="did you mean batch_size"):
        parse("name: t\nbase: {dataset: synthetic, batchsize: 96}\n")


def test_framework_options_sweep_as_flat_fields():
    exp = parse("name: t\nbase: {dataset: synthetic, steps_per_execution: 10}\n"
                "grid: {collective: [ring, auto], workers: [1, 2]}\n")
    cells = expand(exp)
    assert [c.key for c in cells][:2] == ["collectivering-workers1-r0", "collectivering-workers2-r0"]
    assert cells[-1].fields == {"dataset": "synthetic", "steps_per_execution": 10, "collective": "auto", "workers": 2}


def test_results_dir_defaults_to_the_results_root(monkeypatch, tmp_path):
    exp = parse(GRID)
    monkeypatch.setenv("ORCH_RESULTS_DIR", str(tmp_path / "res"))
    assert results_dir(exp, False) == tmp_path / "res" / "t"
    assert results_dir(exp, True, tmp_path / "other") == tmp_path / "other" / "t-quick"


def _summary(spec, seconds):
    return {"run_id": spec.run_id, "state": "succeeded", "failed": False, "spec": spec.model_dump(mode="json"),
            "train_seconds": seconds, "test_accuracy": 0.9, "wall_seconds": seconds + 5, "cpu_mean_percent": 90.0,
            "net_bytes": 1_000_000 * spec.workers, "workers": [{"steps_per_epoch": 10}], "files": []}


def test_run_records_cells_writes_the_report_and_resumes(monkeypatch, tmp_path):
    """The sweep's plumbing with runner.up and collect faked: no engine."""
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    started, specs = [], {}

    def fake_up(spec, paths=None, say=None, **_kwargs):
        started.append(spec.run_id)
        specs[spec.run_id] = spec
        if spec.workers == 3:
            raise WorkerFailed(0, 137, "worker-0 was killed")

    def fake_collect(run_ids, out_root=None, paths=None):
        spec = specs[run_ids[0]]
        return [_summary(spec, 10.0 * spec.workers)]

    monkeypatch.setattr(experiments.start, "up", fake_up)
    monkeypatch.setattr(experiments, "collect", fake_collect)
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")
    exp = parse("name: fake\nbase: {dataset: synthetic, epochs: 1, samples: 6000}\ngrid: {workers: [1, 2, 3]}\n")
    out, cells = experiments.run(exp, paths=paths)
    assert out == tmp_path / "results" / "fake" and len(started) == 3
    assert load_cells(out) == json.loads(json.dumps(cells, default=str))
    assert [c["state"] for c in cells.values()] == ["succeeded", "succeeded", "failed"]
    assert json.loads((out / "experiment.json").read_text())["name"] == "fake"
    text = (out / "report.md").read_text()
    assert "a test machine" in text and "## Failed cells" in text and "## Why" in text
    rows = [line for line in text.splitlines() if line.startswith("| 2 |")]
    assert rows and "2.00x" in rows[0] and "0.500" in rows[0]  # T(2)/T(1) = 20 s / 10 s; speedup 0.5
    assert (out / "time-vs-workers.png").is_file()
    out_again, _ = experiments.run(exp, paths=paths)
    assert out_again == out and len(started) == 4  # only the failed cell ran again
    assert "- Measured on: " in (out / "report.md").read_text()
    # Resumed on another machine: every cell runs again, and the sweep says why.
    other = {"cpu": "another", "id": "elsewhere"}
    monkeypatch.setattr(experiments.machine, "where_cells_run", lambda backend, engine: other)
    said = []
    experiments.run(exp, paths=paths, say=said.append)
    assert len(started) == 7 and {c["machine"]["id"] for c in load_cells(out).values()} == {"elsewhere"}
    assert sum("was measured on another machine" in line for line in said) == 2  # the third had failed


# -- reading experiment files ------------------------------------------------------------------------------
def test_load_follows_a_link_the_user_made(tmp_path):
    (tmp_path / "real.yaml").write_text(GRID)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "real.yaml")
    assert load(tmp_path / "link.yaml").name == "t"


@pytest.mark.parametrize("kind, needle", [("fifo", "not a regular file"), ("device", "not a regular file"),
                                          ("folder", "not a regular file"), ("large", "larger than"),
                                          ("missing", "no such file"), ("binary", "not UTF-8 text")])
def test_load_refuses_what_is_not_a_small_text_file_at_once(tmp_path, kind, needle):
    path = tmp_path / "exp.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "large":
        path.write_text("name: t\n" + "#" * experiment_model.MAX_BYTES)
    elif kind == "binary":
        path.write_bytes(b"name: \xff\xfe\n")
    started = time.monotonic()
    with pytest.raises(InvalidSpec) as info:
        load(path)
    assert time.monotonic() - started < HANG_S
    assert needle in info.value.message and "\n" not in info.value.message


# -- the sweep: run ids, the folder lock, crashes, hostile results ----------------------------------------
def _paths(tmp_path) -> Paths:
    return Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")


def _fake_sweep(monkeypatch, started=None, on_up=None):
    """runner.up and collect faked: cells succeed with a made-up summary; ``on_up(spec)`` runs inside up."""
    specs = {}

    def fake_up(spec, paths=None, say=None, **_kwargs):
        specs[spec.run_id] = spec
        if started is not None:
            started.append(spec.run_id)
        if on_up is not None:
            on_up(spec)

    def fake_collect(run_ids, out_root=None, paths=None):
        return [_summary(specs[run_ids[0]], 10.0 * specs[run_ids[0]].workers)]

    monkeypatch.setattr(experiments.start, "up", fake_up)
    monkeypatch.setattr(experiments, "collect", fake_collect)
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")


def test_a_report_is_written_again_from_the_recorded_cells_running_none(monkeypatch, tmp_path):
    paths = _paths(tmp_path)
    exp = parse("name: again\nbase: {dataset: synthetic, epochs: 1, samples: 6000}\ngrid: {workers: [1, 3]}\n")
    with pytest.raises(InvalidSpec, match="holds no recorded cell of again; run it first"):
        experiments.rewrite_report(exp, paths=paths)
    started = []
    _fake_sweep(monkeypatch, started=started)
    out, _cells = experiments.run(exp, paths=paths)
    (out / "report.md").write_text("stale\n")
    (out / "time-vs-workers.png").unlink()
    said = []
    again, cells = experiments.rewrite_report(exp, paths=paths, say=said.append)
    assert again == out and len(cells) == 2 and len(started) == 2  # nothing ran again
    assert "| 3 |" in (out / "report.md").read_text() and (out / "time-vs-workers.png").is_file()
    # the collected runs are not beside the cells (as in a committed sweep): report.html is drawn again from the
    # runs it holds and the cells' figures
    from orchestrator.analysis import html as report_html

    assert "report.html drawn again from the runs it holds" in said[0]
    data = report_html.embedded(out / "report.html")
    assert [s["title"] for s in data["sections"]] == ["Against the number of containers"]
    # and a page that holds no data to draw again stays as it was
    (out / "report.html").write_text("<p>not a report</p>")
    experiments.rewrite_report(exp, paths=paths, say=said.append)
    assert (out / "report.html").read_text() == "<p>not a report</p>" and "report.html left as it was" in said[-1]


def test_the_sweep_gives_each_cell_the_run_id_expand_validated(monkeypatch, tmp_path):
    started = []
    _fake_sweep(monkeypatch, started)
    exp = parse("name: lr\nbase: {dataset: synthetic}\nrepeats: 2\n"
                "grid: {learning_rate: [0.001, 0.01], prefetch: [-1, 1]}\n")
    _, cells = experiments.run(exp, paths=_paths(tmp_path))
    assert len(cells) == len(started) == 8 == len(set(started))
    for cell in expand(exp):
        run_id = cells[cell.key]["run_id"]
        assert re.fullmatch(RUN_ID_PATTERN, run_id) and run_id in started
        assert run_id[:-4] == cell_run_id(exp.name, cell.key, cell.repeat, "0000")[:-4]


def test_a_second_sweep_of_the_same_folder_fails_at_once_and_changes_nothing(monkeypatch, tmp_path):
    paths = _paths(tmp_path)
    exp = parse("name: race\nbase: {dataset: synthetic, epochs: 1, samples: 6000}\ngrid: {workers: [1, 2]}\n")
    out = results_dir(exp, False, paths.results)
    seen = []

    def second_sweep(spec):  # the first sweep holds the folder while its cells run
        if seen:
            return
        before = _tree(out)
        started = time.monotonic()
        with pytest.raises(FolderBusy) as info:
            experiments.run(exp, paths=paths, force=True)
        seen.append((time.monotonic() - started, info.value.message))
        assert _tree(out) == before

    _fake_sweep(monkeypatch, on_up=second_sweep)
    experiments.run(exp, paths=paths)  # the first runs every cell
    [(elapsed, message)] = seen
    assert elapsed < HANG_S and str(out) in message and "\n" not in message
    cells = load_cells(out)
    assert [c["state"] for c in cells.values()] == ["succeeded", "succeeded"]
    experiments.run(exp, paths=paths)  # and the folder is free again


def test_a_crash_at_each_write_of_a_sweep_leaves_every_earlier_result_whole(monkeypatch, tmp_path):
    paths = _paths(tmp_path)
    exp = parse("name: crash\nbase: {dataset: synthetic, epochs: 1, samples: 6000}\ngrid: {workers: [1, 2, 3]}\n")
    out = results_dir(exp, False, paths.results)
    _fake_sweep(monkeypatch)
    with monkeypatch.context() as patch:
        writes = interrupt_replace(patch, paths.results, 0)
        experiments.run(exp, paths=paths)
    names = {"experiment.json", "cells.json", "report.md", "time-vs-workers.png", "accuracy-vs-workers.png",
             "report.html"}
    assert set(_tree(out)) == names
    assert len(writes) == 1 + 3 + 3 + 1  # experiment.json, cells.json after each cell, two plots, report.md and .html
    for n in range(1, len(writes) + 1):
        before = _tree(out)
        with monkeypatch.context() as patch:
            interrupt_replace(patch, paths.results, n)
            with pytest.raises(KeyboardInterrupt):
                experiments.run(exp, paths=paths, force=True)
        assert set(_tree(out)) == names
        assert_whole(out, before)
        assert len(load_cells(out)) == 3
    experiments.run(exp, paths=paths, force=True)  # the lock went with the crash


def test_a_hostile_predictions_file_does_not_stop_the_sweep(monkeypatch, tmp_path):
    """Real collect into <out>/runs while the sweep holds <out>: its own lock, no deadlock; a truncated
    predictions.npz becomes a warning in the cell's summary."""
    paths = _paths(tmp_path)

    def fake_up(spec, paths=None, say=None, **_kwargs):
        run = _fake_run(paths, spec.run_id, workers=spec.workers)
        (run.path / "stats.csv").unlink()
        run.predictions(("worker", 0)).write_bytes(_good()[:200])

    monkeypatch.setattr(experiments.start, "up", fake_up)
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")
    exp = parse("name: hostile\nbase: {dataset: synthetic, epochs: 2, samples: 6000, collective: auto}\n"
                "grid: {workers: [1, 2]}\n")
    out, cells = experiments.run(exp, paths=paths)
    assert [c["state"] for c in cells.values()] == ["succeeded", "succeeded"]
    for cell in cells.values():
        assert "collect_error" not in cell
        assert [w.split(":")[0] for w in cell["summary"]["warnings"]] == ["worker-0"]
        assert (out / "runs" / cell["run_id"] / "summary.json").is_file()
    assert (out / "runs" / cells["workers2-r0"]["run_id"] / "predictions-worker-1.png").is_file()


@pytest.mark.docker
def test_quick_two_cell_experiment_writes_a_report_and_resumes(images, orch_env, tmp_path):
    exp = tmp_path / "two.yaml"
    exp.write_text("name: two-cells\nbase: {dataset: synthetic, epochs: 2, steps_per_execution: 10}\n"
                   "grid: {workers: [1, 2]}\nquick: {samples: 6000}\n")
    out = tmp_path / "results"
    proc = run_orch(["experiment", "run", str(exp), "--quick", "--out", str(out)], orch_env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    report = (out / "two-cells-quick" / "report.md").read_text()
    table = [line for line in report.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(table) == 2, report
    for line in table:
        cols = [c.strip() for c in line.strip("|").split("|")]
        assert cols[1] == "1/1" and float(cols[2]) > 0 and float(cols[3]) > 0  # real accuracy and time
    assert "1.00x" in table[0]
    cells = json.loads((out / "two-cells-quick" / "cells.json").read_text())
    assert {c["state"] for c in cells.values()} == {"succeeded"}
    assert (out / "two-cells-quick" / "time-vs-workers.png").stat().st_size > 5000
    again = run_orch(["experiment", "run", str(exp), "--quick", "--out", str(out), "--dry-run"], orch_env)
    assert again.stdout.count("done, skipped") == 2
    resumed = run_orch(["experiment", "run", str(exp), "--quick", "--out", str(out)], orch_env)
    assert resumed.returncode == 0 and "2/2 cells done (0 failed, 2 skipped)" in resumed.stderr
    assert json.loads((out / "two-cells-quick" / "cells.json").read_text()) == cells


SETUPS = """
name: s
base: {dataset: synthetic, epochs: 1, samples: 6000}
setups:
  - {strategy: single}
  - {strategy: mirrored, replicas: 2}
  - {strategy: mwms, workers: 2}
grid: {batch_size: [32, 64]}
report: {baseline: {strategy: single}}
"""


def test_setups_are_cells_of_every_grid_point():
    cells = expand(parse(SETUPS))
    assert [c.key for c in cells[:3]] == ["strategysingle-globalbatch32-r0", "strategysingle-globalbatch64-r0",
                                          "replicas2-strategymirrored-globalbatch32-r0"]
    assert cells[2].params == {"strategy": "mirrored", "replicas": 2, "global_batch": 32}
    assert len(cells) == 6 and parse(SETUPS).report.baseline == {"strategy": "single"}


@pytest.mark.parametrize("text, needle", [
    ("name: s\nsetups: [{strategy: single}, {strategy: single}]\n", "appears twice"),
    ("name: s\nsetups: [{nonsense: 1}]\n", "unknown field nonsense in a setup"),
    ("name: s\nsetups: [{}]\n", "got none"),
    ("name: s\nsetups: [{workers: 2}]\ngrid: {workers: [1, 2]}\n", "both in a setup and on the grid"),
    ("name: s\nsetups: [{strategy: single, workers: 2}]\n", "strategy: single runs in one container"),
])
def test_bad_setups_name_the_problem(text, needle):
    with pytest.raises(InvalidSpec) as exc:
        expand(parse(text))
    assert needle in exc.value.message and "\n" not in exc.value.message


# -- bounds and bad cells ---------------------------------------------------------------------------------
def _many_cells(setups: int, values: int, repeats: int) -> str:
    """An experiment file of setups × values × repeats cells, each setup a seed and each value a learning rate."""
    return ("name: big\nbase: {dataset: synthetic}\n"
            f"setups: [{', '.join(f'{{seed: {i}}}' for i in range(setups))}]\n"
            f"grid: {{learning_rate: [{', '.join(f'0.{i + 1:04d}' for i in range(values))}], "
            f"prefetch: [{', '.join(str(i) for i in range(1, 11))}]}}\nrepeats: {repeats}\n")


@pytest.mark.parametrize("setups, values, repeats", [(3, 40, 1), (50, 50, 20)])  # 1,200 and 500,000 cells
def test_the_cells_of_a_file_are_bounded_before_any_work_in_one_line(setups, values, repeats):
    text = _many_cells(setups, values, repeats)
    assert len(text) < 2048
    started = time.monotonic()
    with pytest.raises(InvalidSpec) as info:
        parse(text, "big.yaml")
    total = setups * values * 10 * repeats
    message = info.value.message
    assert f"{total:,} cells" in message and f"at most {experiment_model.MAX_TOTAL_CELLS:,}" in message, message
    assert message.startswith("big.yaml: ") and "\n" not in message and time.monotonic() - started < HANG_S


def test_the_bound_holds_in_quick_mode_too_and_a_file_at_the_bound_is_valid():
    at_bound = _many_cells(10, 10, 1)  # 10 × 100 = 1,000 cells
    assert len(expand(parse(at_bound))) == experiment_model.MAX_TOTAL_CELLS
    with pytest.raises(InvalidSpec, match="quick: .*2,000 cells"):
        parse(at_bound.replace("repeats: 1", "repeats: 1\nquick: {repeats: 2}"))


def test_an_unexpected_error_in_a_cell_fails_that_cell_and_the_sweep_goes_on(monkeypatch, tmp_path):
    started, said = [], []

    def on_up(spec):
        if spec.workers == 2:
            raise RecursionError("maximum recursion depth exceeded\nwhile removing shared/")

    _fake_sweep(monkeypatch, started, on_up=on_up)
    faked = experiments.collect

    def collect(run_ids, out_root=None, paths=None):
        if "workers3" in run_ids[0]:
            raise OverflowError("int too large to convert to float")
        return faked(run_ids, out_root=out_root, paths=paths)

    monkeypatch.setattr(experiments, "collect", collect)
    exp = parse("name: bad\nbase: {dataset: synthetic, epochs: 1, samples: 6000}\ngrid: {workers: [1, 2, 3]}\n")
    out, cells = experiments.run(exp, paths=_paths(tmp_path), say=said.append)
    assert len(started) == 3 and [c["state"] for c in cells.values()] == ["succeeded", "failed", "succeeded"]
    failed = cells["workers2-r0"]
    assert failed["error"] == "internal error: RecursionError: maximum recursion depth exceeded\\nwhile removing shared/"
    assert cells["workers3-r0"]["collect_error"] == "internal error: OverflowError: int too large to convert to float"
    assert any(line.startswith("cell workers2-r0 failed: internal error: RecursionError") for line in said)
    assert "## Failed cells" in (out / "report.md").read_text()
