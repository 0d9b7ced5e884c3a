"""Against the floor (benchmarks/floor.py), what orch's containers add against processes (benchmarks/processes.py),
and the all-reduce latency per transport (`orch bench allreduce`)."""
from __future__ import annotations


from typing import Any, Sequence

from figures.core import FLOOR, FLOOR_TRANSPORT, FRAMEWORK_TITLES, data, emit, num, order, table


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
    for name in order(d["frameworks"]):
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
    for name in order(d["frameworks"]):
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
    for name in order(d["frameworks"]):
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
    for name in order(d["frameworks"]):
        o = d["frameworks"][name].get("overhead")
        if not o:
            continue
        rows.append([FRAMEWORK_TITLES.get(name, name), num(o["create_and_start"]), num(o["import"]),
                     num(o["connect_and_load"]), num(o["results_and_teardown"]), f"**{num(o['beyond_train'])}**",
                     num(o["start_floor"]), num(o["beyond_train"] / o["start_floor"], ".2f", "x")])
    emit(table(["framework", "create and start s", "import s", "connect and load s", "results and teardown s",
                "wall − train s", "start floor s", "against the floor"], rows, right=tuple(range(1, 8))))


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


# -- the transport: each framework's own against MPI's shared memory (floor.py --out .../floor-transport) ----------
def transport_table(workers: Sequence[int] = (2, 3, 4, 8), rel: str = FLOOR_TRANSPORT) -> None:
    """Each framework with its own transport and over MPI's shared memory, measured in one run: T(N) against the
    host's physical floor (the compute floor plus MPI's shared-memory all-reduce at N, times the steps), with
    T(N)/T(1) and T(N) against the framework's own floor in brackets."""
    d = _floor(rel)
    heads = ["framework", *[f"N = {n}" for n in workers]]
    rows = []
    for name in order(d["frameworks"]):
        by_n = {r["workers"]: r for r in d["frameworks"][name]["rows"]}
        one = by_n.get(1, {}).get("train_seconds")
        cells = []
        for n in workers:
            r = by_n.get(n)
            if r is None or not r.get("host_floor") or not one:
                cells.append("—")
                continue
            cells.append(f"**{r['train_seconds'] / r['host_floor']:.2f}** ({r['train_seconds'] / one:.2f}x; "
                         f"{r['train_seconds'] / r['floor']:.2f})")
        rows.append([FRAMEWORK_TITLES.get(name, name), *cells])
    emit(table(heads, rows, right=tuple(range(1, len(heads)))))
