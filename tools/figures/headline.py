"""The headline: one container against N, per framework, at equal work (README.md, docs/results.md)."""
from __future__ import annotations

import statistics
import textwrap
from typing import Any

from figures.core import HEADLINE, HEADLINE_FILE, FRAMEWORK_TITLES, FigureError, data, emit, num, span, median_range, table, machine_line, _plot, order
from orchestrator.analysis import metrics


# -- the headline: one container against N, per framework ------------------------------------------------
def setup_name(fields: dict[str, Any]) -> str:
    """A setup's name in the figures: its framework, and ``-shm`` where its gradients cross MPI's shared memory
    though its framework's own transport is another (``--transport shm`` of PyTorch and JAX)."""
    name = fields["framework"]
    return f"{name}-shm" if fields.get("transport") == "shm" and name != "mpi" else name


def _headline() -> dict[str, Any]:
    """The headline experiment, per framework: each repeat's T(1), T(N), their ratio, the floor and accuracies."""
    cells = data(HEADLINE)
    by: dict[str, dict[str, Any]] = {}
    for record in cells.values():
        if record.get("state") != "succeeded":
            raise FigureError(f"{HEADLINE}: cell {record.get('run_id')} did not succeed; run the headline again")
        fields = record["fields"]
        f = by.setdefault(setup_name(fields), {"runs": {}, "fields": fields, "records": []})
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


def headline_ratio(framework: str) -> str:
    """One framework's headline T(N)/T(1), median of the repeats: for a sentence."""
    h = _headline()[framework]
    emit(num(statistics.median(h["ratio"]), ".2f", "x"))


def headline_table() -> None:
    """Each framework's 1-vs-N comparison, once: training-time medians, the ratio's median and range over the
    repeats (each repeat's T(N) over the same repeat's T(1)), and the test accuracies."""
    h = _headline()
    rows = []
    for name in order(h):
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
    for name in order(h):
        f = h[name]
        rows.append([FRAMEWORK_TITLES.get(name, name), f["n"], median_range(f["tn"]),
                     median_range(f["floor"]) if f["floor"] else "—",
                     median_range(f["vs_floor"]) if f["vs_floor"] else "—",
                     f"{num(statistics.median(f['wall_ratio']), '.2f', 'x')} ({span(f['wall_ratio'], '.2f', 'x')})"])
    emit(table(["framework", "N", "T(N) s", "floor(N) s", "T(N)/floor(N)", "wall ratio"], rows, right=(1, 2, 3, 4)))


def headline_plot(rel: str = "docs/img/headline.png") -> None:
    """T(1) and T(N) per framework (medians, with the repeats' range), and the floor measured beside T(N)."""
    h = _headline()
    names = order(h)
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
        ax.set_xticks(list(xs), [f"{textwrap.fill(FRAMEWORK_TITLES.get(n, n), 16, break_long_words=False)}\nN = {series[n]['n']}"
                                 for n in names], fontsize=7)
        # Log-scaled: the slowest transport's N-container time is tens of times the others'.
        ax.set_yscale("log")
        ax.set(ylabel="train time, s (median, range of repeats; log scale)", title="One container against N, same work")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")

    _plot(rel, series, draw, "Training time of 1 and N containers per framework, with the floor of N")
