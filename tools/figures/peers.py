"""orch against its peers on the tutorials (benchmarks/peers.py)."""
from __future__ import annotations

import statistics

from figures.core import data, emit, num, median_range, table, machines


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
