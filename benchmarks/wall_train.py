"""What the side-by-side benchmarks of a backend or an engine share: one timed `orch up`, and the medians of its
repeats (wall, train, wall − train and its range, accuracy)."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def up(env: dict[str, str], run_id: str, flags: list[str]) -> dict:
    """`orch up FLAGS` as run ``run_id``: its wall time, the slowest worker's train time and every accuracy."""
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "up", "--run-id", run_id, "--format", "json", *flags],
                          env=env, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{run_id} failed: {proc.stderr[-2000:]}")
    info = json.loads(proc.stdout)
    return {"wall_seconds": info["wall_seconds"], "train_seconds": max(w["train_seconds"] for w in info["workers"]),
            "test_accuracy": [w["test_accuracy"] for w in info["workers"]]}


def summary(rows: list[dict]) -> dict:
    """The medians of one setup's repeats, and the range of wall − train."""
    overhead = [r["wall_seconds"] - r["train_seconds"] for r in rows]
    return {"wall_p50": statistics.median(r["wall_seconds"] for r in rows),
            "train_p50": statistics.median(r["train_seconds"] for r in rows),
            "overhead_p50": statistics.median(overhead), "overhead_min": min(overhead), "overhead_max": max(overhead),
            "accuracy": statistics.median(statistics.mean(r["test_accuracy"]) for r in rows)}


def write(name: str, report: dict, text: str) -> None:
    """benchmarks/results/NAME.json and NAME.md, and the table on stdout."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(text)
    print(text)
