"""How fast orch refuses, or reads, the worst experiment files it accepts as input.

Usage: python benchmarks/input_limits.py [--repeats 5]

The tests check only that each of these ends in bounded time (tests/bounds.py); this measures how long each
takes, in CPU seconds of this process (the median of --repeats), so that a change that makes the loader slower
shows here. Results to stdout as a Markdown table, and to benchmarks/results/input_limits.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.errors import InvalidSpec  # noqa: E402
from orchestrator.experiments import model as experiment_model  # noqa: E402
from orchestrator.experiments.cells import expand  # noqa: E402
from orchestrator.experiments.file import parse  # noqa: E402


def _laughs(depth: int, width: int) -> str:
    lines = ["name: laughs", "base:", "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


def _many_cells(setups: int, values: int, repeats: int) -> str:
    return ("name: big\nbase: {dataset: synthetic}\n"
            f"setups: [{', '.join(f'{{seed: {i}}}' for i in range(setups))}]\n"
            f"grid: {{learning_rate: [{', '.join(f'0.{i + 1:04d}' for i in range(values))}], "
            f"prefetch: [{', '.join(str(i) for i in range(1, 11))}]}}\nrepeats: {repeats}\n")


CASES = {
    "a dense flow list at the size limit (64 KiB)":
        ("name: t\nbase: {samples: [" + ",".join(["1"] * (experiment_model.MAX_BYTES // 2)))[:experiment_model.MAX_BYTES],
    "a comment at the size limit": "name: t\n" + "#" * (experiment_model.MAX_BYTES - 9),
    "one byte over the size limit": "name: t\n" + "#" * experiment_model.MAX_BYTES,
    "billion laughs, 30 levels of 2": _laughs(30, 2),
    "nesting 10,000 deep": "name: t\nbase: {workers: " + "[" * 10_000 + "]" * 10_000 + "}\n",
    "500,000 cells in 2 KB": _many_cells(50, 50, 20),
    "400 cells, accepted and expanded":
        "name: t\nbase: {dataset: synthetic}\ngrid: {workers: [1, 2, 3, 4], seed: [1, 2, 3, 4, 5], "
        "learning_rate: [0.001, 0.002, 0.003, 0.004, 0.005], epochs: [1, 2, 3, 4]}\n",
}


def _once(text: str) -> tuple[float, str]:
    started = time.process_time()
    try:
        cells = expand(parse(text, "bench.yaml"))
        outcome = f"{len(cells):,} cells"
    except InvalidSpec as exc:
        outcome = "refused: " + exc.message.split(": ", 1)[-1][:60]
    return time.process_time() - started, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/input_limits.json")
    args = parser.parse_args()
    rows = []
    for name, text in CASES.items():
        times, outcome = zip(*(_once(text) for _ in range(args.repeats)))
        rows.append({"input": name, "bytes": len(text.encode()), "cpu_s_median": round(statistics.median(times), 4),
                     "cpu_s_max": round(max(times), 4), "outcome": outcome[0]})
    print("| input | bytes | CPU s (median) | CPU s (max) | outcome |\n| --- | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r['input']} | {r['bytes']:,} | {r['cpu_s_median']:.3f} | {r['cpu_s_max']:.3f} | {r['outcome']} |")
    args.out.write_text(json.dumps({"python": platform.python_version(), "repeats": args.repeats, "rows": rows},
                                   indent=2) + "\n")


if __name__ == "__main__":
    main()
