"""Every performance target of orch, measured in one run next to the naive setup, as one table.

Usage: python benchmarks/targets.py [--skip-cold-build] [--compose-repeats 3]
       python benchmarks/targets.py --tiny     (CI: tiny data, no builds; checks that it runs)

Needs root (the cold build runs debootstrap) and about 25 minutes on 2 cores. In order:

1. Images. orch: a cold offline build with everything removed first (its images, the base, the
   wheelhouse and pip's cache), an up-to-date check, and a rebuild after a trainer code change.
   Naive: benchmarks/naive/Dockerfile, one stage with pip's defaults and COPY + LABEL for the trainer,
   built from the same base and wheelhouse (so its cold figure has no debootstrap or download in it),
   then rebuilt after the same trainer change. Sizes of both.
2. T(1) and T(3) at global batch 96 and 1026 (learning rate scaled from 96), naive settings
   (TensorFlow's defaults everywhere) against orch's defaults, each through the `orch up` command as a
   user runs it; the per-step synchronisation cost, (T(3) - T(1)) / steps; and orchestration overhead,
   the command's wall time minus the slowest worker's train time.
3. orch's own time over a bare `docker compose up` of the same rendered file
   (investigations/compose_overhead.py).
4. What bounds the step: one all-reduce of the model's gradients alone (investigations/allreduce_latency.py).

Writes benchmarks/results/targets.json and targets.md (skipped with --tiny).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
# The investigations that measured these figures first; their functions are reused here, not copied.
sys.path.insert(0, str(ROOT / "benchmarks" / "investigations"))

import allreduce_latency  # noqa: E402
import compose_overhead  # noqa: E402
from build_times import clear_for_cold_build, trainer_edited  # noqa: E402
from scaling import NAIVE  # noqa: E402

from orchestrator import (
    contract,  # noqa: E402
    frameworks,  # noqa: E402
)
from orchestrator.frameworks.tensorflow import IMAGE_KINDS, image_ref  # noqa: E402
from orchestrator.images.builder import _requirements, trainer_files, wheelhouse  # noqa: E402
from orchestrator.paths import default_paths, recipe_dir  # noqa: E402

RESULTS = ROOT / "benchmarks/results"
NAIVE_DOCKERFILE = ROOT / "benchmarks/naive/Dockerfile"
NAIVE_TAG = "orch-naive:bench"
FLAGS = {"workers": "--workers", "dataset": "--dataset", "samples": "--samples", "epochs": "--epochs",
         "global_batch": "--batch-size", "learning_rate": "--learning-rate",
         "steps_per_execution": "--steps-per-execution", "collective": "--collective",
         "bytes_per_pack": "--bytes-per-pack", "network": "--network", "threads": "--threads",
         "log_reduction": "--log-reduction"}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def stopwatch(fn, *args, **kwargs) -> tuple[float, object]:
    started = time.monotonic()
    value = fn(*args, **kwargs)
    return time.monotonic() - started, value


# -- 1. images ----------------------------------------------------------------------------------
def _image_size(ref: str) -> int:
    out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", ref], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip())


def _naive_build(wheels: Path) -> float:
    """Build the naive image's two kinds from a context of the same inputs; return the seconds."""
    images = recipe_dir("tensorflow")
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        shutil.copy(NAIVE_DOCKERFILE, context / "Dockerfile")
        for req in _requirements(images):
            shutil.copy(req, context / req.name)
        (context / "wheelhouse").mkdir()
        for wheel in wheels.glob("*.whl"):
            try:
                os.link(wheel, context / "wheelhouse" / wheel.name)
            except OSError:  # another file system
                shutil.copy(wheel, context / "wheelhouse" / wheel.name)
        for name, data in trainer_files(frameworks.get("tensorflow").image_recipe()):
            target = context / "trainer" / Path(name).relative_to("orch/trainer")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        started = time.monotonic()
        for kind in IMAGE_KINDS:
            subprocess.run(["docker", "build", "-q", "--build-arg", f"KIND={kind}", "-t", f"{NAIVE_TAG}-{kind}",
                            str(context)], check=True, capture_output=True)
        return time.monotonic() - started


def build(bootstrap: bool = False, say=None) -> list:
    """orch's TensorFlow images, as `orch build` makes them."""
    return frameworks.get("tensorflow").build(frameworks.BuildOptions(bootstrap=bootstrap), None, None, say)


def images_section(cold: bool) -> dict:
    say = lambda msg: log(f"  {msg}")  # noqa: E731
    out: dict = {}
    if cold:
        clear_for_cold_build()
        out["orch_cold_seconds"], _ = stopwatch(build, bootstrap=True, say=say)
        log(f"orch cold build: {out['orch_cold_seconds']:.1f} s")
    else:
        build(bootstrap=True, say=say)
    out["orch_up_to_date_seconds"], _ = stopwatch(build, say=say)
    with trainer_edited():
        out["orch_warm_seconds"], _ = stopwatch(build, say=say)
    build(say=say)  # back to the committed trainer
    out["orch_size_bytes"] = _image_size(image_ref("multi"))
    log(f"orch warm rebuild: {out['orch_warm_seconds']:.1f} s, size {out['orch_size_bytes'] / 1e9:.2f} GB")
    wheels = wheelhouse(default_paths(), say, recipe_dir("tensorflow"))
    try:
        out["naive_cold_seconds"] = _naive_build(wheels)
        with trainer_edited():
            out["naive_warm_seconds"] = _naive_build(wheels)
        out["naive_size_bytes"] = _image_size(f"{NAIVE_TAG}-multi")
    finally:
        subprocess.run(["docker", "rmi", "-f", *[f"{NAIVE_TAG}-{k}" for k in IMAGE_KINDS]], capture_output=True)
        subprocess.run(["docker", "image", "prune", "-f"], capture_output=True)
    log(f"naive: cold {out['naive_cold_seconds']:.1f} s, warm {out['naive_warm_seconds']:.1f} s, "
        f"size {out['naive_size_bytes'] / 1e9:.2f} GB")
    return out


# -- 2. training runs ---------------------------------------------------------------------------
def orch_up(fields: dict, run_id: str) -> dict:
    """One `orch up` command, timed from outside as a user would time it."""
    args = [sys.executable, "-m", "orchestrator", "up", "--format", "json", "--run-id", run_id]
    for key, value in fields.items():
        if key == "pin_cpus":
            args.append("--pin-cpus" if value else "--no-pin-cpus")
        else:
            args += [FLAGS[key], str(value)]
    started = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"`orch up` failed for {run_id}: {proc.stderr.strip().splitlines()[-1:]}")
    info = json.loads(proc.stdout)
    train = max(w["train_seconds"] for w in info["workers"])
    return {"run_id": run_id, "command_seconds": wall, "train_seconds": train, "overhead_seconds": wall - train,
            "test_accuracy": info["test_accuracy"],
            "steps": info["workers"][0]["steps_per_epoch"] * fields["epochs"]}


def training_section(base: dict, batches: list[int], workers: int) -> list[dict]:
    stamp = int(time.time()) % 10**6
    rows = []
    for batch in batches:
        for name, settings in (("naive", NAIVE), ("orch", {})):
            fields = {**base, **settings, "global_batch": batch, "learning_rate": 1e-3 * batch / 96}
            one = orch_up({**fields, "workers": 1}, f"targets-{stamp}-{name}-b{batch}-w1")
            many = orch_up({**fields, "workers": workers}, f"targets-{stamp}-{name}-b{batch}-w{workers}")
            row = {"setup": name, "global_batch": batch, "one": one, "many": many,
                   "ratio": many["train_seconds"] / one["train_seconds"],
                   "sync_ms_per_step": (many["train_seconds"] - one["train_seconds"]) / many["steps"] * 1000}
            rows.append(row)
            log(f"{name}, batch {batch}: T(1) {one['train_seconds']:.2f} s, T({workers}) {many['train_seconds']:.2f} s, "
                f"ratio {row['ratio']:.2f}, overhead {many['overhead_seconds']:.1f} s")
    return rows


# -- the table ----------------------------------------------------------------------------------
def table(report: dict) -> str:
    n = report["workload"]["workers"]
    runs = {(r["setup"], r["global_batch"]): r for r in report["training"]}
    lines = ["| figure | condition | target | naive | orch | met? |", "| --- | --- | --- | --- | --- | --- |"]

    def row(figure, condition, target, naive, orch, met):
        lines.append(f"| {figure} | {condition} | {target} | {naive} | {orch} | {met} |")

    for batch, limit in zip(report["workload"]["batches"], (3.0, 1.5)):
        naive, orch = runs[("naive", batch)], runs[("orch", batch)]
        ratio = lambda r: f"{r['ratio']:.2f} ({r['many']['train_seconds']:.2f} / {r['one']['train_seconds']:.2f} s)"  # noqa: E731
        row(f"T({n})/T(1)", f"global batch {batch}", f"<= {limit}", ratio(naive), ratio(orch),
            "yes" if orch["ratio"] <= limit else "no")
    for batch in report["workload"]["batches"]:
        row("sync cost per step", f"{n} workers, batch {batch}", "reported",
            f"{runs[('naive', batch)]['sync_ms_per_step']:.1f} ms", f"{runs[('orch', batch)]['sync_ms_per_step']:.1f} ms",
            "-")
    if report.get("allreduce_ms") is not None:
        row("one all-reduce alone (the bound)", f"{n} workers, 80 KB", "reported", "-",
            f"{report['allreduce_ms']:.2f} ms", "-")
    first = report["workload"]["batches"][0]
    naive_over, orch_over = runs[("naive", first)]["many"]["overhead_seconds"], runs[("orch", first)]["many"]["overhead_seconds"]
    row("orchestration overhead (`orch up` wall - slowest train)", f"{n} workers, batch {first}", "<= 10 s",
        f"{naive_over:.1f} s", f"{orch_over:.1f} s", "yes" if orch_over <= 10 else "no")
    compose = report.get("compose")
    if compose:
        extra = compose["orch_extra_seconds_median"]
        low, high = compose["orch_extra_seconds_range"]
        row("orch over bare `docker compose up`", f"{n} workers, synthetic, median of {len(compose['repeats'])}",
            "<= 1 s", "-", f"{extra:+.1f} s ({low:+.1f} to {high:+.1f})", "yes" if extra <= 1 else "no")
    b = report.get("images")
    if b:
        if "orch_cold_seconds" in b:
            row("cold offline image build", "everything removed first (naive: base and wheels present)", "<= 3 min",
                f"{b['naive_cold_seconds']:.1f} s", f"{b['orch_cold_seconds']:.1f} s",
                "yes" if b["orch_cold_seconds"] <= 180 else "no")
        row("warm rebuild after a trainer code change", "both images", "<= 10 s", f"{b['naive_warm_seconds']:.1f} s",
            f"{b['orch_warm_seconds']:.1f} s", "yes" if b["orch_warm_seconds"] <= 10 else "no")
        row("image size", "", "<= 1.6 GB", f"{b['naive_size_bytes'] / 1e9:.2f} GB", f"{b['orch_size_bytes'] / 1e9:.2f} GB",
            "yes" if b["orch_size_bytes"] <= 1.6e9 else "no")
    m = report["machine"]
    return (f"Measured by `python benchmarks/targets.py` on {report['date']}: {m['cores']} cores, {m['memory_gib']} GiB, "
            f"{m['platform']}.\nWorkload: MLP 784-25-15-10, {report['workload']['dataset']}, "
            f"{report['workload']['train_samples']:,} training samples, {report['workload']['epochs']} epochs; "
            f"naive = TensorFlow's defaults (auto collective, no packing, 1 step per call, logs summed every step, "
            f"no pinning) on orch's image.\n\n" + "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--skip-cold-build", action="store_true", help="keep the images: warm figures only")
    parser.add_argument("--compose-repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="tiny data, 2 workers, no builds or probe: for CI")
    args = parser.parse_args()
    base = {"dataset": "mnist", "samples": 60_000, "epochs": 5}
    batches = [96, 1026]
    if args.tiny:
        base, batches, args.workers = {"dataset": "synthetic", "samples": 1500, "epochs": 1}, [96], 2
    report: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
                    "platform": platform.platform()},
        "workload": {**base, "workers": args.workers, "batches": batches, "model": "mlp 784-25-15-10",
                     "train_samples": contract.split_sizes(base["samples"])[0]},
    }
    if not args.tiny:
        report["images"] = images_section(cold=not args.skip_cold_build)
    report["training"] = training_section(base, batches, args.workers)
    compose_fields = {"workers": args.workers, "dataset": "synthetic", "samples": 1500 if args.tiny else 12_000,
                      "epochs": 1 if args.tiny else 3}
    report["compose"] = compose_overhead.compare(compose_fields, 1 if args.tiny else args.compose_repeats,
                                                 f"targets-{int(time.time()) % 10**6}")
    report["allreduce_ms"] = None if args.tiny else allreduce_latency.measure(args.workers, "bridge", 0, 20)
    text = table(report)
    print(text)
    if not args.tiny:
        (RESULTS / "targets.json").write_text(json.dumps(report, indent=2) + "\n")
        (RESULTS / "targets.md").write_text(text)


if __name__ == "__main__":
    main()
