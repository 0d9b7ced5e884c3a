"""The figures of peers.py's runs: the training seconds each tutorial script prints (``training_seconds``), the
runs summed up per script, N and tool (``summary``), and the table (``markdown``)."""
from __future__ import annotations

import re
import statistics
from typing import Any, Optional

# -- what the scripts print -------------------------------------------------------------------------------------
DDP_EPOCH = re.compile(r"epoch 1: (\d+) samples on this rank, loss [0-9.]+, ([0-9.]+)s")
DDP_ACCURACY = re.compile(r"rank (\d+): test accuracy ([0-9.]+) on 10000")
KERAS_EPOCH = re.compile(r"(\d+)/\1 \[=+\] - \S+ (\d+)(ms|s)/step - loss: [0-9.]+ - accuracy: ([0-9.]+)")


def training_seconds(script: str, text: str) -> tuple[Optional[float], dict[str, Any]]:
    """The training time the script printed, and what else it printed that shows it ran right."""
    if script == "ddp":
        epochs = DDP_EPOCH.findall(text)
        accuracies = [float(a) for _r, a in DDP_ACCURACY.findall(text)]
        seconds = max((float(s) for _n, s in epochs), default=None)
        return seconds, {"ranks": len(epochs), "samples_per_rank": sorted({int(n) for n, _s in epochs}),
                         "accuracy": min(accuracies, default=None)}
    epochs = KERAS_EPOCH.findall(text)[:3]  # worker 0's three epochs come first in each tool's output
    seconds = sum(int(steps) * int(t) / (1000 if unit == "ms" else 1) for steps, t, unit, _a in epochs)
    return (seconds if len(epochs) == 3 else None), {"epochs": len(epochs),
                                                     "accuracy": float(epochs[-1][3]) if epochs else None}


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for key in sorted({(r["script"], r["workers"], r["tool"]) for r in runs}):
        mine = [r for r in runs if (r["script"], r["workers"], r["tool"]) == key]
        ok = [r for r in mine if r.get("exit_code") == 0 and r.get("training_seconds") is not None]
        rows.append({"script": key[0], "workers": key[1], "tool": key[2], "runs": len(mine), "succeeded": len(ok),
                     "wall_seconds": [r["wall_seconds"] for r in ok],
                     "beyond_seconds": [r["beyond_seconds"] for r in ok],
                     "training_seconds": [r["training_seconds"] for r in ok],
                     "peak_mib": [p for r in ok for p in r["peak_mib"]],
                     "left": {k: max(r["left"][k] for r in mine) for k in mine[0]["left"]},
                     "accuracy": [r.get("accuracy") for r in ok]})
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = ["# orch against its peers on the tutorials", "",
             "| script | N | tool | wall s (median) | beyond training s (median, range) | peak MiB per container "
             "(median) | left after the run |", "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for r in result["rows"]:
        if not r["succeeded"]:
            lines.append(f"| {r['script']} | {r['workers']} | {r['tool']} | failed | | | |")
            continue
        b = r["beyond_seconds"]
        left = ", ".join(f"{v} {k}" for k, v in r["left"].items() if v and k not in ("running", "caches")) \
            or "nothing"
        lines.append(f"| {r['script']} | {r['workers']} | {r['tool']} | {statistics.median(r['wall_seconds']):.1f} | "
                     f"{statistics.median(b):.1f} ({min(b):.1f}-{max(b):.1f}) | "
                     f"{statistics.median(r['peak_mib']):.0f} | {left} |")
    for u in result["unsupported"]:
        lines.append(f"| {u['script']} | {u['workers']} | {u['tool']} | cannot: {u['why']} | | | |")
    lines += ["", "| tool | returned after the kill | s after the kill | left running | left |",
              "| --- | --- | ---: | ---: | --- |"]
    for k in result["kills"]:
        left = ", ".join(f"{v} {n}" for n, v in k["left"].items() if v and n not in ("running", "caches")) \
            or "nothing"
        after = f"{k['seconds_after_kill']:.1f}" if k["seconds_after_kill"] is not None else "-"
        lines.append(f"| {k['tool']} | {'yes' if k['returned'] else 'no'} | {after} | {k['left']['running']} | "
                     f"{left} |")
    return "\n".join(lines) + "\n"
