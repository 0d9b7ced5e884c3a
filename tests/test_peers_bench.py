"""benchmarks/peers.py's reading of what the scripts print and of what a tool left, without running a tool: the
training time each tutorial prints, worker 0's Keras epochs first whatever the order TorchX interleaves them in, and
a summary row per cell. No engine."""
from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import peers  # noqa: E402

DDP = """\
2026-11-29T10:28:45.825374Z stdout rank 0 of 2 (local rank 0), master worker-0
2026-11-29T10:29:20.240878Z stdout epoch 1: 30000 samples on this rank, loss 0.1145, 34.3s
main/1 [0]:epoch 1: 30000 samples on this rank, loss 0.2001, 35.9s
2026-11-29T10:29:24.362885Z stdout rank 0: test accuracy 0.9774 on 10000 images
main/1 [0]:rank 1: test accuracy 0.9768 on 10000 images
"""


def keras(worker: int, ms: int, accuracy: float) -> str:
    return f"worker/{worker} 70/70 [==============================] - 5s {ms}ms/step - loss: 1.9 - accuracy: {accuracy}"


def test_the_ddp_training_time_is_the_slowest_ranks_epoch_and_every_rank_is_read():
    seconds, seen = peers.training_seconds("ddp", DDP)
    assert seconds == 35.9
    assert seen == {"ranks": 2, "samples_per_rank": [30000], "accuracy": 0.9768}


def test_a_ddp_run_that_printed_no_epoch_has_no_training_time():
    assert peers.training_seconds("ddp", "Traceback (most recent call last):\n")[0] is None


def test_keras_training_is_worker_0s_three_epochs_of_steps_times_ms_per_step():
    text = "\n".join([keras(0, 60, 0.3), keras(0, 50, 0.4), keras(0, 40, 0.5)])
    seconds, seen = peers.training_seconds("keras", text)
    assert seconds == pytest.approx(70 * (60 + 50 + 40) / 1000)
    assert seen == {"epochs": 3, "accuracy": 0.5}


def test_torchx_interleaved_keras_lines_are_read_worker_0_first():
    lines = [keras(1, 99, 0.1), keras(0, 60, 0.3), keras(1, 99, 0.1), keras(0, 50, 0.4), keras(0, 40, 0.5),
             keras(1, 99, 0.1)]
    job = peers.Job("keras", 2, "r", {}, ROOT)
    text = peers.output_of("torchx", job, "\n".join(lines))
    assert peers.training_seconds("keras", text)[0] == pytest.approx(70 * 150 / 1000)


def test_a_keras_run_cut_short_has_no_training_time():
    assert peers.training_seconds("keras", keras(0, 60, 0.3))[0] is None


def test_the_summary_keeps_failed_runs_out_of_the_figures_but_counts_what_they_left():
    def run(tool: str, code: int, wall: float, left: int) -> dict:
        return {"tool": tool, "script": "ddp", "workers": 2, "exit_code": code, "wall_seconds": wall,
                "training_seconds": 10.0 if code == 0 else None, "beyond_seconds": wall - 10 if code == 0 else None,
                "peak_mib": [800, 810], "accuracy": 0.97,
                "left": {"containers": left, "networks": 0, "volumes": 0, "images": 0, "running": 0, "caches": 1}}
    rows = peers.summary([run("torchx", 0, 30.0, 2), run("torchx", 1, 5.0, 3), run("orch", 0, 25.0, 0)])
    by = {r["tool"]: r for r in rows}
    assert by["torchx"]["succeeded"] == 1 and by["torchx"]["runs"] == 2
    assert by["torchx"]["wall_seconds"] == [30.0] and by["torchx"]["beyond_seconds"] == [20.0]
    assert by["torchx"]["left"]["containers"] == 3 and by["orch"]["left"]["containers"] == 0
    assert by["orch"]["peak_mib"] == [800, 810]
