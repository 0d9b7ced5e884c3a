"""The figures of orch's README and manual, drawn from the committed result files.

Every measured figure in README.md and docs/ (a table, a number in a sentence, a plot) is the output of a function
here, called from a cog block in the page:

    <!-- [[[cog figures.headline_table() ]]] -->
    ...what the function prints...
    <!-- [[[end]]] -->

`make figures` runs the blocks and writes their output into the pages (and draws the plots); `make docs` runs them
again and fails, naming the page and the figure, where the committed text is not what the data gives
(tools/docs_check.py). A function prints Markdown and names every result file it reads through ``data()``, so a
failure can say which file the figure comes from.

Each figure says what kind of ratio it is: the headline's T(N)/T(1) is a training-time ratio (the training loop
alone, the same work at every N), a wall ratio counts start-up and teardown too, T(N)/floor(N) compares with what
this machine allows (floor.py), and start-up is wall − train.
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.analysis import machine as machines  # noqa: E402
from orchestrator.analysis import metrics  # noqa: E402

READ: list[str] = []  # the result files the current block read, for the check's message
WRITE = True  # False while checking: plots are compared with their data, not drawn
PAGE = "README.md"  # the page whose block runs now, from the repository's root
TRACE = False  # True while only the files each figure reads are wanted: plots neither drawn nor checked

HEADLINE = "experiments/results/headline/cells.json"
HEADLINE_FILE = "experiments/headline.yaml"
FLOOR = "benchmarks/results/floor.json"
# JAX's floor.py run, its own: its image is built on demand (benchmarks/suite.py's floor-jax).
FLOOR_JAX = "benchmarks/results/floor-jax/floor.json"
FRAMEWORK_TITLES = {"tensorflow": "TensorFlow, MultiWorkerMirrored", "mwms": "TensorFlow, MultiWorkerMirrored",
                    "mpi": "MPI (mpi4py), shared memory", "torch": "PyTorch DDP (gloo)", "jax": "JAX (gloo)"}


class FigureError(Exception):
    """A figure cannot be drawn from its data, or a plot was drawn from other data than its file holds."""


# -- reading ---------------------------------------------------------------------------------------------
def data(rel: str) -> Any:
    """The committed JSON file ``rel`` (from the repository's root), noted as read by this block."""
    READ.append(rel)
    path = ROOT / rel
    if not path.is_file():
        raise FigureError(f"{rel} is missing: the figure is drawn from it (benchmarks/README.md says what writes it)")
    return json.loads(path.read_text())


def emit(text: str) -> None:
    """The block's output: printed, cog takes it (tools/docs_check.py runs cog with print output)."""
    print(text.rstrip("\n"))


# -- formatting ------------------------------------------------------------------------------------------
def num(value: Optional[float], spec: str = ".2f", suffix: str = "") -> str:
    """``value`` formatted, or an em dash where there is none."""
    return "—" if value is None else f"{value:{spec}}{suffix}"


def span(values: Sequence[float], spec: str = ".2f", suffix: str = "") -> str:
    """The min–max of ``values``, or one value where they agree to the format."""
    low, high = num(min(values), spec), num(max(values), spec)
    return f"{low}{suffix}" if low == high else f"{low}–{high}{suffix}"


def median_range(values: Sequence[float], spec: str = ".2f", suffix: str = "") -> str:
    """The median, and the min–max in brackets where there are several values that differ."""
    if not values:
        return "—"
    middle = num(statistics.median(values), spec, suffix)
    return middle if len(values) == 1 or span(values, spec) == num(values[0], spec) else \
        f"{middle} ({span(values, spec, suffix)})"


def table(heads: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """A Markdown table; columns in ``right`` aligned right."""
    align = ["---:" if i in right else "---" for i in range(len(heads))]
    lines = ["| " + " | ".join(heads) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line(records: Iterable[dict]) -> str:
    """The machine a set of cells was measured on, named as orch's reports name it."""
    found = {json.dumps(r["machine"], sort_keys=True) for r in records if isinstance(r.get("machine"), dict)}
    if len(found) != 1:
        raise FigureError(f"the cells were measured on {len(found)} machines; a figure names one")
    return machines.describe(json.loads(found.pop()))


# -- the headline: one container against N, per framework ------------------------------------------------
def _headline() -> dict[str, Any]:
    """The headline experiment, per framework: each repeat's T(1), T(N), their ratio, the floor and accuracies."""
    cells = data(HEADLINE)
    by: dict[str, dict[str, Any]] = {}
    for record in cells.values():
        if record.get("state") != "succeeded":
            raise FigureError(f"{HEADLINE}: cell {record.get('run_id')} did not succeed; run the headline again")
        fields = record["fields"]
        f = by.setdefault(fields["framework"], {"runs": {}, "fields": fields, "records": []})
        f["records"].append(record)
        f["runs"].setdefault(record["repeat"], {})[int(fields["workers"])] = record
    out = {}
    for name, f in by.items():
        ns = sorted({n for runs in f["runs"].values() for n in runs})
        if len(ns) != 2 or ns[0] != 1:
            raise FigureError(f"{HEADLINE}: {name} has workers {ns}; the headline compares 1 with one N")
        n = ns[1]
        pairs = [(runs[1]["summary"], runs[n]["summary"]) for runs in f["runs"].values() if set(runs) == {1, n}]
        floors = [runs[n]["floor"]["floor"] for runs in f["runs"].values()
                  if isinstance(runs.get(n, {}).get("floor"), dict) and metrics.is_seconds(runs[n]["floor"].get("floor"))]
        out[name] = {
            "n": n, "repeats": len(pairs), "fields": f["fields"], "records": f["records"],
            "t1": [a["train_seconds"] for a, _ in pairs], "tn": [b["train_seconds"] for _, b in pairs],
            "ratio": [b["train_seconds"] / a["train_seconds"] for a, b in pairs],
            "wall_ratio": [b["wall_seconds"] / a["wall_seconds"] for a, b in pairs],
            "acc1": [a["test_accuracy"] for a, _ in pairs], "accn": [b["test_accuracy"] for _, b in pairs],
            "floor": floors, "vs_floor": [t / statistics.median(floors) for t in [b["train_seconds"] for _, b in pairs]]
            if floors else [],
        }
    return out


def _order(names: Iterable[str]) -> list[str]:
    known = list(FRAMEWORK_TITLES)
    return sorted(names, key=lambda n: known.index(n) if n in known else len(known))


def headline_ratio(framework: str) -> str:
    """One framework's headline T(N)/T(1), median of the repeats: for a sentence."""
    h = _headline()[framework]
    emit(num(statistics.median(h["ratio"]), ".2f", "x"))


def headline_table() -> None:
    """Each framework's 1-vs-N comparison, once: training-time medians, the ratio's median and range over the
    repeats (each repeat's T(N) over the same repeat's T(1)), and the test accuracies."""
    h = _headline()
    rows = []
    for name in _order(h):
        f = h[name]
        rows.append([FRAMEWORK_TITLES.get(name, name), f["n"], median_range(f["t1"]), median_range(f["tn"]),
                     f"**{num(statistics.median(f['ratio']), '.2f', 'x')}** ({span(f['ratio'], '.2f', 'x')})",
                     f"{num(statistics.median(f['acc1']), '.4f')}, {num(statistics.median(f['accn']), '.4f')}"])
    emit(table(["framework", "N", "T(1) s", "T(N) s", "T(N)/T(1)", "test accuracy, 1 and N"], rows,
               right=(1, 2, 3)))


def headline_source() -> None:
    """Where the headline comes from: its workload, repeats, machine and the command that reproduces it."""
    h = _headline()
    first = next(iter(h.values()))
    fields = first["fields"]
    repeats = min(f["repeats"] for f in h.values())
    records = [r for f in h.values() for r in f["records"]]
    emit(f"The median of {repeats} repeats, and their range in brackets: {fields['dataset']} "
         f"({fields['samples']:,} images drawn, the seed's 64/16/20 split), the {fields['model'].upper()}, "
         f"{fields['epochs']} epochs, a global batch of {fields['global_batch']} at every N, measured in one run in "
         f"rotated order (`orch experiment run {HEADLINE_FILE}`) on {machine_line(records)}. "
         "T(N)/T(1) is the training-time ratio: the training loop alone, each repeat's N containers against the "
         "same repeat's one.")


def headline_floor_table() -> None:
    """The headline's N-container runs against the floor measured beside each (one rank alone at the per-rank
    batch, plus the transport's all-reduce), and their wall ratio (start-up and teardown included)."""
    h = _headline()
    rows = []
    for name in _order(h):
        f = h[name]
        rows.append([FRAMEWORK_TITLES.get(name, name), f["n"], median_range(f["tn"]),
                     median_range(f["floor"]) if f["floor"] else "—",
                     median_range(f["vs_floor"]) if f["vs_floor"] else "—",
                     f"{num(statistics.median(f['wall_ratio']), '.2f', 'x')} ({span(f['wall_ratio'], '.2f', 'x')})"])
    emit(table(["framework", "N", "T(N) s", "floor(N) s", "T(N)/floor(N)", "wall ratio"], rows, right=(1, 2, 3, 4)))


# -- against the floor (benchmarks/floor.py) --------------------------------------------------------------
def _floor(rel: str = FLOOR) -> dict[str, Any]:
    return data(rel)


def floor_source(rel: str = FLOOR, command: str = "python benchmarks/floor.py") -> None:
    """What floor.py's committed run measured, and when."""
    d = _floor(rel)
    w = d["workload"]
    emit(f"`{command}` ({d['repeats']} repeat of each cell, {d['cores']} cores): "
         f"{w['dataset']}, {w['samples']:,} images drawn, the {w['model'].upper()}, {w['epochs']} epochs, global "
         f"batch {w['global_batch']}.")


def floor_table(workers: Sequence[int] = (2, 3, 4, 8, 16), rel: str = FLOOR) -> None:
    """T(N)/floor(N) per framework and N, beside T(N)/T(1): how far each N is from what this machine allows."""
    d = _floor(rel)
    heads = ["framework", *[f"N = {n}" for n in workers]]
    rows = []
    for name in _order(d["frameworks"]):
        by_n = {r["workers"]: r for r in d["frameworks"][name]["rows"]}
        one = by_n.get(1, {}).get("train_seconds")
        cells = []
        for n in workers:
            r = by_n.get(n)
            if r is None or not r.get("floor"):
                cells.append("—")
                continue
            cells.append(f"**{r['train_seconds'] / r['floor']:.2f}** ({r['train_seconds'] / one:.2f}x)" if one else
                         f"**{r['train_seconds'] / r['floor']:.2f}**")
        rows.append([FRAMEWORK_TITLES.get(name, name), *cells])
    emit(table(heads, rows, right=tuple(range(1, len(heads)))))


def floor_detail_table(rel: str = FLOOR) -> None:
    """Every framework and N of floor.py's run: T(N), the two floors, their ratio and the largest container."""
    d = _floor(rel)
    rows = []
    for name in _order(d["frameworks"]):
        title = FRAMEWORK_TITLES.get(name, name)
        by_n = {r["workers"]: r for r in d["frameworks"][name]["rows"]}
        one = by_n.get(1, {}).get("train_seconds")
        for n, r in sorted(by_n.items()):
            rows.append([title if n == min(by_n) else "", n, num(r["train_seconds"]),
                         num(r["train_seconds"] / one, ".2f", "x") if one else "—", num(r.get("compute_floor")),
                         num(r.get("transport_floor")),
                         f"**{r['train_seconds'] / r['floor']:.2f}**" if r.get("floor") else "—",
                         num(r.get("container_memory_mb"), ".0f")])
    emit(table(["framework", "N", "T(N) s", "T(N)/T(1)", "compute floor s", "transport floor s", "T(N)/floor(N)",
                "largest container MiB"], rows, right=(1, 2, 3, 4, 5, 6, 7)))


def floor_accuracy_table(rel: str = FLOOR) -> None:
    """Each framework's test accuracy at every N of floor.py's run (the mean of its workers', each from its own
    weights), beside its distance from one container's: the same job at every N, the same model within rounding."""
    d = _floor(rel)
    rows = []
    for name in _order(d["frameworks"]):
        by_n = {r["workers"]: r for r in d["frameworks"][name]["rows"]}
        one = by_n.get(1, {}).get("accuracy")
        for n, r in sorted(by_n.items()):
            acc = r.get("accuracy")
            rows.append([FRAMEWORK_TITLES.get(name, name) if n == min(by_n) else "", n, num(acc, ".4f"),
                         num(acc - one, "+.4f") if acc is not None and one is not None else "—"])
    emit(table(["framework", "N", "test accuracy", "against N = 1"], rows, right=(1, 2, 3)))


def start_table(rel: str = FLOOR) -> None:
    """Where the wall time beyond training goes for the 3-container run of each framework (medians over floor.py's
    start repeats), beside the start floor: 3 bare containers that import the framework and exit."""
    d = _floor(rel)
    rows = []
    for name in _order(d["frameworks"]):
        o = d["frameworks"][name].get("overhead")
        if not o:
            continue
        rows.append([FRAMEWORK_TITLES.get(name, name), num(o["create_and_start"]), num(o["import"]),
                     num(o["connect_and_load"]), num(o["results_and_teardown"]), f"**{num(o['beyond_train'])}**",
                     num(o["start_floor"]), num(o["beyond_train"] / o["start_floor"], ".2f", "x")])
    emit(table(["framework", "create and start s", "import s", "connect and load s", "results and teardown s",
                "wall − train s", "start floor s", "against the floor"], rows, right=tuple(range(1, 8))))


# -- the seeds' studies (experiments/results/<name>/cells.json) -----------------------------------------
def _experiment(name: str) -> tuple[list[dict], dict, Any]:
    """A study's rows as its report aggregates them (the file's scaling axis and baseline), its cells and file."""
    from orchestrator.experiments.file import load

    cells = data(f"experiments/results/{name}/cells.json")
    experiment = load(ROOT / "experiments" / f"{name}.yaml")  # the file's axis and baseline: the study, not data
    return metrics.aggregate(cells, experiment.report.scale, experiment.report.baseline), cells, experiment


def _mr(value: Optional[tuple], spec: str = ".2f", scale: float = 1.0) -> str:
    if not value:
        return "—"
    middle, low, high = (v * scale for v in value)
    text = num(middle, spec)
    return text if num(low, spec) == num(high, spec) else f"{text} ({num(low, spec)}–{num(high, spec)})"


def experiment_source(name: str) -> None:
    """Where a study's table comes from: its command, repeats and machine."""
    cells = data(f"experiments/results/{name}/cells.json")
    repeats = 1 + max(int(c.get("repeat", 0)) for c in cells.values())
    emit(f"`orch experiment run experiments/{name}.yaml --out experiments/results`: "
         f"{repeats} repeat{'s' if repeats > 1 else ''} of each cell (the median, with the range in brackets), on "
         f"{machine_line(cells.values())}. Report: "
         f"[experiments/results/{name}/report.md]({link(f'experiments/results/{name}/report.md')}).")


def experiment_table(name: str, columns: Sequence[str], params: Sequence[str] = ()) -> None:
    """A study's rows (a grid point or setup each) with the named ``columns`` of orch's own aggregation; ``params``
    names the fields shown first ("setup": every field of the row not shown on its own)."""
    rows, _cells, experiment = _experiment(name)
    baseline = experiment.report.baseline
    shown: dict[str, tuple[str, Callable[[dict], str]]] = {
        "test_accuracy": ("test accuracy", lambda r: _mr(r["test_accuracy"], ".4f")),
        "val_loss": ("val loss", lambda r: _mr(r["val_loss"], ".4f")),
        "train": ("train s", lambda r: _mr(r["train_seconds"])),
        "epoch": ("s per epoch", lambda r: _mr(r["epoch_seconds"])),
        "ratio": ("T(N)/T(1)" if not baseline else
                  "T/T(" + ", ".join(f"{k} {v}" for k, v in baseline.items()) + ")",
                  lambda r: num(r["time_ratio"], ".2f", "x")),
        "floor": ("floor s", lambda r: _mr(r["floor_seconds"])),
        "vs_floor": ("T(N)/floor(N)", lambda r: num(r["vs_floor"], ".2f")),
        "bound": ("best speedup this machine allows", lambda r: num(metrics.machine_bound(r)[0], ".2f")),
        "speedup": ("speedup", lambda r: num(r["speedup"], ".2f")),
        "cpu": ("CPU % per container", lambda r: _mr(r["cpu_mean_percent"], ".0f")),
        "net": ("network MB per worker", lambda r: _mr(r["net_bytes_per_worker"], ".1f", 1e-6)),
        "samples_per_second": ("samples/s", lambda r: _mr(r["samples_per_second"], ",.0f")),
    }
    def param(r: dict, name: str) -> str:
        if name == "setup":  # every field the row sets, as the report names a setup
            return ", ".join(f"{k} {v}" for k, v in r["params"].items() if k not in params) or "—"
        return str(r["params"].get(name, "—"))

    heads = [*params, *(shown[c][0] for c in columns)]
    emit(table(heads, [[param(r, p) for p in params] + [shown[c][1](r) for c in columns] for r in rows]))


# -- plots -------------------------------------------------------------------------------------------------
def _digest(series: Any) -> str:
    return hashlib.sha256(json.dumps(series, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _plot(rel: str, series: Any, draw: Callable[[Any], None], alt: str) -> None:
    """The plot ``rel`` of ``series``: drawn by ``draw(axes)`` when writing, with the digest of the series in the
    PNG; while checking, the PNG's digest must be the series' (the plot was drawn from this data)."""
    path = ROOT / rel
    digest = _digest(series)
    if TRACE:
        pass
    elif WRITE:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        try:
            draw(ax)
            fig.tight_layout()
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format="png", dpi=110, metadata={"Software": None, "orch-figure-data": digest})
        finally:
            plt.close(fig)
    else:
        from PIL import Image

        if not path.is_file():
            raise FigureError(f"{rel} is missing; run `make figures`")
        with Image.open(path) as image:
            found = image.info.get("orch-figure-data")
        if found != digest:
            raise FigureError(f"{rel} was drawn from other data than {', '.join(READ)} holds; run `make figures`")
    emit(f"![{alt}]({link(rel)})")


def set_page(rel: str) -> None:
    """The page whose blocks run next (links are made relative to it)."""
    global PAGE
    PAGE = rel


def link(rel: str) -> str:
    """``rel`` (from the repository's root) as a link from the page whose block runs now."""
    return os.path.relpath(ROOT / rel, (ROOT / page()).parent)


def page() -> str:
    """The page whose block runs now, from the repository's root (set by tools/docs_check.py)."""
    return PAGE


def headline_plot(rel: str = "docs/img/headline.png") -> None:
    """T(1) and T(N) per framework (medians, with the repeats' range), and the floor measured beside T(N)."""
    h = _headline()
    names = _order(h)
    series = {n: {"t1": h[n]["t1"], "tn": h[n]["tn"], "floor": h[n]["floor"], "n": h[n]["n"]} for n in names}

    def draw(ax: Any) -> None:
        xs = range(len(names))
        for offset, key, label in ((-0.2, "t1", "1 container"), (0.2, "tn", "N containers")):
            med = [statistics.median(series[n][key]) for n in names]
            low = [m - min(series[n][key]) for m, n in zip(med, names)]
            high = [max(series[n][key]) - m for m, n in zip(med, names)]
            ax.bar([x + offset for x in xs], med, width=0.4, yerr=[low, high], capsize=3, label=label)
        floors = [(x + 0.2, statistics.median(series[n]["floor"])) for x, n in zip(xs, names) if series[n]["floor"]]
        if floors:
            ax.hlines([f for _, f in floors], [x - 0.2 for x, _ in floors], [x + 0.2 for x, _ in floors],
                      colors="black", linestyles="dashed", label="floor of N on this machine (measured beside it)")
        ax.set_xticks(list(xs), [f"{FRAMEWORK_TITLES.get(n, n)}\nN = {series[n]['n']}" for n in names], fontsize=8)
        ax.set(ylabel="train time, s (median, range of repeats)", title="One container against N, same work")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")

    _plot(rel, series, draw, "Training time of 1 and N containers per framework, with the floor of N")


# -- what orch's containers add: N containers against N processes of one (benchmarks/processes.py) -------
def processes_table() -> None:
    """Train time of N containers against the same N ranks as processes of one container, side by side."""
    d = data("benchmarks/results/processes.json")
    rows = [[FRAMEWORK_TITLES.get(r["framework"], r["framework"]), r["workers"], num(r["containers"]),
             num(r["processes"]), f"**{num(r['ratio'], '.2f')}**", num(r.get("shared_ratio"), ".2f")]
            for r in d["rows"]]
    emit(table(["framework", "N", "containers s", "processes s", "containers / processes",
                "one network namespace / processes"], rows, right=(1, 2, 3, 4, 5)))


def processes_source() -> None:
    d = data("benchmarks/results/processes.json")
    emit(f"`python benchmarks/processes.py` (median of {d['repeats']} repeats in alternating order; floor.py's "
         "workload).")


# -- all-reduce latency per transport (orch bench allreduce) ----------------------------------------------
ALLREDUCE = "benchmarks/results/allreduce.json"


def allreduce_table(size: int = 81920) -> None:
    """The p50 of one all-reduce of ``size`` bytes per transport and ranks, against the same library on the host."""
    d = data(ALLREDUCE)
    rows: dict[str, dict[int, dict]] = {}
    for r in d["rows"]:
        if r["bytes"] == size:
            rows.setdefault(r["transport"], {})[r["ranks"]] = r
    ranks = sorted({n for by in rows.values() for n in by})
    body = []
    for transport, by in rows.items():
        cells = []
        for n in ranks:
            r = by.get(n)
            cells.append("—" if r is None else num(r["p50_us"] / 1000, ".3f", " ms") +
                         (f" ({num(r['vs_host'], '.1f')}× the host)" if r.get("vs_host") else ""))
        body.append([f"`{transport}`", *cells])
    emit(table(["transport", *[f"{n} ranks" for n in ranks]], body, right=tuple(range(1, len(ranks) + 1))))


# -- images ----------------------------------------------------------------------------------------------
def build_table() -> None:
    """orch's image builds: cold, up to date and after a trainer change, and the image's size, per framework."""
    rows = []
    for title, rel in (("TensorFlow and MPI (`orch build`)", "benchmarks/results/build_times.json"),
                       ("PyTorch (`orch build --framework torch`)", "benchmarks/results/build_times_torch.json")):
        d = data(rel)
        by = {r["case"].split(" (")[0]: r for r in d["results"]}
        rows.append([title, num(by["cold"]["seconds"], ".0f", " s"), num(by["up to date"]["seconds"], ".1f", " s"),
                     num(by["trainer code changed"]["seconds"], ".1f", " s"),
                     num(by["cold"]["size_bytes"] / 1e9, ".2f", " GB")])
    emit(table(["image", "cold build", "up to date", "trainer code changed", "size"], rows, right=(1, 2, 3, 4)))


def naive_table() -> None:
    """orch's TensorFlow image against a naive Dockerfile of the same packages (benchmarks/targets.py)."""
    i = data("benchmarks/results/targets.json")["images"]
    emit(table(["build", "orch", "naive Dockerfile"], [
        ["cold", num(i["orch_cold_seconds"], ".0f", " s"), num(i["naive_cold_seconds"], ".0f", " s")],
        ["after a change to the trainer code", num(i["orch_warm_seconds"], ".1f", " s"),
         num(i["naive_warm_seconds"], ".1f", " s")],
        ["image size", num(i["orch_size_bytes"] / 1e9, ".2f", " GB"), num(i["naive_size_bytes"] / 1e9, ".2f", " GB")],
    ], right=(1, 2)))


# -- orch's own costs --------------------------------------------------------------------------------------
def sampler_table() -> None:
    """The stats sampler's CPU and the samples it keeps up with, against the docker CLI's own `stats` call."""
    d = data("benchmarks/results/sampler_overhead.json")
    emit(table(["containers", "sampler CPU % of one core", "samples per second (asked)", "one `docker stats` call"],
               [[r["containers"], num(r["sampler_cpu_percent"], ".2f"),
                 f"{num(r['samples_per_second'], '.1f')} ({r['asked_per_second']})",
                 num(r["docker_stats_cli_seconds_per_call"], ".2f", " s")] for r in d["results"]], right=(0, 1, 2, 3)))


def input_limits_table() -> None:
    """How fast the worst experiment files orch accepts or refuses are read (CPU seconds, median)."""
    d = data("benchmarks/results/input_limits.json")
    emit(table(["input", "CPU s (median)", "outcome"],
               [[r["input"], num(r["cpu_s_median"], ".4f"), r["outcome"].split(";")[0]] for r in d["rows"]],
               right=(1,)))


def swarm_nodes_table() -> None:
    """Each step of a 3-worker job across a two-node swarm on this machine (benchmarks/swarm_nodes.py)."""
    d = data("benchmarks/results/swarm-nodes.json")
    emit(table(["step", "seconds"], [[step, num(seconds, ".1f")] for step, seconds in d["steps"]], right=(1,)))


# -- what `make demo` prints (benchmarks/demo.py) ------------------------------------------------------------
DEMO = "benchmarks/results/demo.json"


def demo_table(framework: str = "tensorflow", width: int = 120) -> None:
    """The comparison `orch collect` prints for the demo's 1-vs-3 pair of ``framework``, rendered by orch's own table
    from the committed `orch collect --format json` of a `make demo` run."""
    from rich.console import Console

    from orchestrator.cli.tables import comparison_table

    d = data(DEMO)
    console = Console(width=width, record=True, color_system=None, force_terminal=False, file=open("/dev/null", "w"))
    console.print(comparison_table(d["comparisons"][framework]["comparison"]))
    emit("```\n" + console.export_text().rstrip() + "\n```")


def demo_source() -> None:
    """How long the demo took, and where."""
    d = data(DEMO)
    steps = dict(d["steps"])
    sweep = next(s for name, s in steps.items() if name.startswith("orch experiment"))
    emit(f"On {machines.describe(d['machine'])}, once the images existed, the demo took "
         f"{d['seconds']:.0f} s ({sweep:.0f} s of it the quick sweep; `python benchmarks/demo.py` runs "
         "its steps and times each).")


# -- the benchmarks' index (benchmarks/README.md) --------------------------------------------------------------
def bench_index() -> None:
    """Every entry of benchmarks/suite.py: the question it answers, its command, its result files, and the figures of
    README.md and docs/ drawn from them (found by running every figure's block and noting what it reads)."""
    import docs_check
    import suite

    fed: dict[str, list[str]] = {}
    here, read = PAGE, list(READ)
    found = docs_check.sources()
    set_page(here)
    READ[:] = read
    for page_rel, section, code, files in found:
        for rel in files:
            bench = suite.writer_of(rel)
            if bench is not None:
                anchor = f"[{page_rel}]({link(page_rel)})" + (f" § {section}" if section else "")
                entry = f"{anchor}: `{code.removeprefix('figures.')}`"
                if entry not in fed.setdefault(bench.name, []):
                    fed[bench.name].append(entry)
    for b in suite.SUITE:
        emit(f"### {b.name}\n")
        emit(f"{b.question}\n")
        emit(f"- **Command:** `{b.shown()}` (about {b.minutes} min on 2 cores{'; needs root' if b.root else ''})")
        emit("- **Writes:** " + ", ".join(f"[{w}]({link(w.rstrip('/'))})" for w in b.writes))
        figures_fed = fed.get(b.name, [])
        emit("- **Feeds:**" + (" none of the docs' figures (a reference result)" if not figures_fed else ""))
        for entry in figures_fed:
            emit(f"  - {entry}")
        emit("")


# -- the disk limit (benchmarks/disk_limit.py) -----------------------------------------------------------------
def disk_limit_table() -> None:
    """What writers at several speeds leave under --disk-limit, and which kernel limits this engine offers."""
    d = data("benchmarks/results/disk_limit.json")
    limit = d["limit_mib"]
    rows = [["as fast as the disk takes it" if not r["speed_mb_s"] else f"{r['speed_mb_s']:g} MB/s",
             f"{r['shape']} ({r['replicas']} replica{'s' if r['replicas'] > 1 else ''})",
             f"{statistics.median(r['written_mib']):.0f} ({max(r['written_mib']):.0f})",
             f"{100 * max(r['over_share']):.0f}%", r["containers_left"]] for r in d["rows"]]
    emit(table(["each replica writes", "shape", f"MiB left under a {limit} MiB limit, median (max)",
                "over the limit, at most", "containers left"], rows, right=(2, 3, 4)))
    emit("")
    emit(table(["a limit the kernel enforces", "here", "what it costs"],
               [[p["limit"], "works" if p["works"] else "not available", p["cost"]] for p in d["probes"]]))


# -- collect against a hostile worker (benchmarks/collect_bounds.py) --------------------------------------------
def collect_bounds_table() -> None:
    """`orch collect`'s wall time, CPU and peak memory against how much one worker wrote."""
    d = data("benchmarks/results/collect_bounds.json")
    rows = [[f"{r['hostile_mib']:g} MiB" if r["hostile_mib"] else "none (every worker normal)",
             f"{num(r['wall_s_median'], '.1f')} ({num(r['wall_s_max'], '.1f')})", num(r["cpu_s_median"], ".1f"),
             f"{num(r['peak_rss_mb_median'], '.0f')} ({num(r['peak_rss_mb_max'], '.0f')})"] for r in d["rows"]]
    emit(table(["records one worker wrote", "wall s, median (max)", "CPU s", "peak memory MB, median (max)"], rows,
               right=(1, 2, 3)))
    emit(f"\n{d['repeats']} repeats of each, a whole `orch collect` process each time, on "
         f"{machines.describe(d['machine']) if isinstance(d.get('machine'), dict) else d.get('machine')}.")


# -- how long the tests take (benchmarks/ci_time.py) ---------------------------------------------------------
CI = "benchmarks/results/ci.json"


def test_times_table() -> None:
    """make test-fast (a clean clone's first run and the next) and .ci/run from a clean clone, as measured."""
    d = data(CI)
    rows = [[f"`make test-fast`, {f['run']}", f"{f['seconds']:.0f} s", f["pytest"] or "—"] for f in d["fast"]]
    ci = d.get("ci", {})
    if ci:
        stages = "; ".join(f"{s['stage']} {s['seconds']:.0f} s" for s in ci.get("stages", []))
        if "live_cpu" in ci:
            cpu = ci["live_cpu"]
            stages += (f"; the live tier kept {cpu['cores_busy']:.2f} of {cpu['cores']} cores busy, "
                       f"{cpu['cpu_seconds']} CPU-seconds in {cpu['seconds']} s")
        rows.append([f"`bash .ci/run`, a clean clone{' with nothing cached' if ci.get('cold') else ''}",
                     f"{ci['seconds'] / 60:.1f} min", f"{ci['pytest']}" + (f" ({stages})" if stages else "")])
    emit(table(["what", "took", "pytest"], rows, right=(1,)))
    ci_commit, ci_machine = ci.get("commit", d["commit"]), ci.get("machine", d["machine"])
    command = "`python benchmarks/ci_time.py --cold` (with `--skip-ci`, `make test-fast` alone)"
    if ci_machine != d["machine"]:  # measured at different times on different machines: each names its own
        emit(f"\nMeasured with {command}: `make test-fast` at commit {d['commit']} on "
             f"{machines.describe(d['machine'])}; `.ci/run` at commit {ci_commit} on {machines.describe(ci_machine)}.")
        return
    commits = (f"commit {d['commit']}" if ci_commit == d["commit"] else
               f"`make test-fast` at commit {d['commit']}, `.ci/run` at commit {ci_commit}")
    emit(f"\nOn {machines.describe(d['machine'])}, {commits}: {command}.")


def live_tier_floor() -> None:
    """The least time the measured live tier's CPU work allows on its machine's cores, however its tests are
    scheduled, and the least .ci/run then takes with the images built before it."""
    ci = data(CI).get("ci", {})
    if "live_cpu" not in ci:
        raise FigureError(f"{CI}: its .ci/run has no live tier CPU line; run benchmarks/ci_time.py again")
    stages = {s["stage"]: s["seconds"] for s in ci.get("stages", [])}
    if "the images were ready" not in stages:
        raise FigureError(f"{CI}: its .ci/run has no time for the images; run benchmarks/ci_time.py again")
    cpu, ready = ci["live_cpu"], stages["the images were ready"]
    floor = cpu["cpu_seconds"] / cpu["cores"]
    emit(f"{cpu['cpu_seconds']} CPU-seconds on {cpu['cores']} cores take at least {floor:.0f} s ({floor / 60:.1f} min) for "
         f"the live tier with every core busy all the time, where it took {cpu['seconds']} s; after the images, ready "
         f"{ready:.0f} s in, at least {(ready + floor) / 60:.1f} min in all.")


def slowest_tests_table(which: str = "ci") -> None:
    """The ten slowest test phases of a measured run, from pytest's own durations."""
    d = data(CI)
    rows = d["ci"]["slowest"] if which == "ci" else d["fast"][0]["slowest"]
    emit(table(["seconds", "phase", "test"], [[f"{r['seconds']:.1f}", r["phase"], f"`{r['test']}`"] for r in rows],
               right=(0,)))


# -- tests that can fail (benchmarks/mutation.py) -------------------------------------------------------------
def mutation_table() -> None:
    """Per module of the pure core: mutmut's mutants, how many the tests killed, how many survived, and how many of
    those are explained as equivalent (benchmarks/mutation_equivalent.json); and which modules were mutated in part."""
    d = data("benchmarks/results/mutation.json")
    rows = [[f"`{m['path']}`" + (" (part)" if m["functions"] else ""), m["mutants"], m["killed"],
             m["survived"] + m.get("timeout", 0), m["equivalent"]] for m in d["modules"]]
    rows.append(["all", *[sum(r[i] for r in rows) for i in range(1, 5)]])
    emit(table(["module", "mutants", "killed", "survived", "explained as equivalent"], rows, right=(1, 2, 3, 4)))
    emit("")
    for m in d["modules"]:
        if m["functions"]:
            emit(f"- `{m['path']}` in part: {m['why_functions']} ({', '.join(f'`{f}`' for f in m['functions'])}).")
    if d.get("not_run"):
        emit(f"- Not run yet: {', '.join(f'`{path}`' for path in d['not_run'])}.")
    emit(f"\n{d['tool']}, each module against its own tests: `python benchmarks/mutation.py`.")


# -- orch against its peers on the tutorials (benchmarks/peers.py) ----------------------------------------------
PEERS = "benchmarks/results/peers.json"
PEER_NAMES = {"orch": "orch", "torchx": "TorchX `local_docker`", "kubeflow": "Kubeflow SDK, container backend"}
PEER_SHORT = {"orch": "orch", "torchx": "TorchX", "kubeflow": "Kubeflow SDK"}  # in sentences and versions
SCRIPT_NAMES = {"ddp": "torchrun DDP tutorial", "keras": "Keras MWMS tutorial"}


def _left(counts: dict[str, int]) -> str:
    """What a tool left in the engine, in words."""
    shown = [f"{v} {k[:-1] if v == 1 else k}" for k, v in counts.items() if v and k not in ("running", "caches")]
    return ", ".join(shown) + (f" ({counts['running']} running)" if counts.get("running") else "") if shown \
        else "nothing"


def peers_table() -> None:
    """Each tool's wall time, time beyond training and peak memory per container on the two tutorials, by N."""
    d = data(PEERS)
    order = {name: i for i, name in enumerate(PEER_NAMES)}
    entries = []
    for r in d["rows"]:
        if not r["succeeded"]:
            cells = [f"failed in {r['runs']} of {r['runs']}", "", "", ""]
        else:
            cells = [median_range(r["wall_seconds"], ".1f"), median_range(r["beyond_seconds"], ".1f"),
                     num(statistics.median(r["peak_mib"]), ".0f"), _left(r["left"])]
        entries.append((r["script"], r["workers"], r["tool"], cells))
    for u in d["unsupported"]:
        entries.append((u["script"], u["workers"], u["tool"], ["cannot run it (below)", "", "", ""]))
    entries.sort(key=lambda e: (list(SCRIPT_NAMES).index(e[0]), e[1], order[e[2]]))
    rows = [[f"{SCRIPT_NAMES[s]}, N = {n}", PEER_NAMES[t], *cells] for s, n, t, cells in entries]
    emit(table(["script, containers", "tool", "wall s, median (range)", "beyond training s, median (range)",
                "peak MiB per container, median", "left in the engine after the run"], rows, right=(2, 3, 4)))
    versions = ", ".join(f"{PEER_SHORT[k]} {v}" for k, v in d["versions"].items())
    emit(f"\n{d['repeats']} repeats in rotated order, on {machines.describe(d['machine'])}; {versions}. "
         f"Command: `{d['command'].strip()}`.")


def peers_kill_table() -> None:
    """What each tool does when one of 3 containers is killed mid-run."""
    d = data(PEERS)
    rows = [[PEER_NAMES[k["tool"]],
             f"after {k['seconds_after_kill']:.1f} s" if k["returned"] else f"not within {d['kill_wait_seconds']:.0f} s",
             k["exit_code"] if k["returned"] else "—", k["left"]["running"], _left(k["left"])] for k in d["kills"]]
    emit(table(["tool", "its command returned", "exit code", "containers still running then", "left in the engine"],
               rows, right=(3,)))


def peers_behind() -> None:
    """The cells where a peer's median time beyond training is below orch's, each with both medians; or none."""
    d = data(PEERS)
    cells: dict[tuple[str, int], dict[str, float]] = {}
    for r in d["rows"]:
        if r["succeeded"]:
            cells.setdefault((r["script"], r["workers"]), {})[r["tool"]] = statistics.median(r["beyond_seconds"])
    behind = [f"{SCRIPT_NAMES[s]} on {n} (orch {m['orch']:.1f} s, {PEER_SHORT[t]} "
              f"{v:.1f} s)" for (s, n), m in sorted(cells.items()) if "orch" in m
              for t, v in sorted(m.items()) if t != "orch" and v < m["orch"]]
    emit("Where a peer's median time beyond training is below orch's: " + ("; ".join(behind) if behind else "none")
         + ".")


def peers_summary_table() -> None:
    """The peer comparison in one row per script and tool: time beyond training at each N, peak memory, what a run
    and a killed container leave; and the cells where a peer is ahead of orch."""
    d = data(PEERS)
    kills = {k["tool"]: k for k in d["kills"]}
    ns = sorted({r["workers"] for r in d["rows"]})
    rows = []
    for script in SCRIPT_NAMES:
        for tool in PEER_NAMES:
            mine = {r["workers"]: r for r in d["rows"] if r["script"] == script and r["tool"] == tool}
            if not mine:
                continue
            beyond = " / ".join(num(statistics.median(mine[n]["beyond_seconds"]), ".1f")
                                if n in mine and mine[n]["succeeded"] else "cannot" for n in ns)
            peaks = [p for r in mine.values() for p in r["peak_mib"]]
            left = {k: max(r["left"][k] for r in mine.values()) for k in next(iter(mine.values()))["left"]}
            k = kills.get(tool) if script == "ddp" else None
            killed = "—" if k is None else (
                f"returned after {k['seconds_after_kill']:.1f} s; left {_left(k['left'])}" if k["returned"]
                else f"had not returned after {d['kill_wait_seconds']:.0f} s; left {_left(k['left'])}")
            rows.append([SCRIPT_NAMES[script], PEER_NAMES[tool], beyond, num(statistics.median(peaks), ".0f"),
                         _left(left), killed])
    emit(table(["script", "tool", f"beyond training s at N = {' / '.join(map(str, ns))}, median",
                "peak MiB per container, median", "left after a run, at most", "one of 3 containers killed"], rows,
               right=(2, 3)))
    emit("")
    peers_behind()
