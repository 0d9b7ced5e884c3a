"""Measure orch's image build: cold (nothing cached), up to date, and after a trainer code change.

Usage: python benchmarks/build_times.py [--keep-base] [--framework tensorflow|torch]

Cold removes orch's images, the base image and the build base (unless --keep-base) and the wheelhouse cache,
and purges pip's own cache, so the figure includes both debootstraps and every download. Needs root (debootstrap).
With --framework torch it measures the PyTorch image instead (`orch build --framework torch`): cold removes
that image, its runtime and its wheelhouse (3.2 GB, downloaded again), and keeps the base.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TRAINER_MARKER = ROOT / "orchestrator/trainer/__init__.py"

from orchestrator import frameworks  # noqa: E402
from orchestrator.frameworks.tensorflow import IMAGE_KINDS, image_ref  # noqa: E402
from orchestrator.frameworks.torch import image_ref as torch_image_ref  # noqa: E402
from orchestrator.images.builder import DEFAULT_BASE, DEFAULT_BUILD_BASE, runtime_tag  # noqa: E402
from orchestrator.images.wheels import read_lock  # noqa: E402
from orchestrator.paths import default_paths  # noqa: E402


def timed(label: str, framework: str = "tensorflow", **kwargs) -> dict:
    started = time.monotonic()
    say = lambda msg: print(f"  {msg}", file=sys.stderr)  # noqa: E731
    results = frameworks.get(framework).build(frameworks.BuildOptions(**kwargs), None, None, say)
    seconds = time.monotonic() - started
    print(f"{label}: {seconds:.1f} s", file=sys.stderr)
    return {"case": label, "seconds": round(seconds, 1), "built": [r.tag for r in results if r.built],
            "size_bytes": max(r.size for r in results)}


def clear_for_cold_build(keep_base: bool = False) -> None:
    """Remove orch's images (the bases too, unless ``keep_base``), the build cache, the wheelhouse and
    pip's cache, so the next build starts from nothing."""
    tags = [image_ref(k) for k in IMAGE_KINDS] + [runtime_tag(frameworks.get("tensorflow").image_recipe())] + ([] if keep_base else [DEFAULT_BASE,
                                                                                          DEFAULT_BUILD_BASE])
    subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True)
    subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True)
    subprocess.run(["docker", "image", "prune", "-f"], capture_output=True)
    shutil.rmtree(default_paths().wheelhouse, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "cache", "purge"], capture_output=True)


def clear_torch_for_cold_build() -> None:
    """Remove the PyTorch image, its runtime, its wheelhouse and pip's cache (the base stays)."""
    recipe = frameworks.get("torch").image_recipe()
    subprocess.run(["docker", "rmi", "-f", torch_image_ref(), runtime_tag(recipe)], capture_output=True)
    lock = read_lock(recipe.folder / "requirements.lock")
    shutil.rmtree(default_paths().wheelhouse / lock.digest, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "cache", "purge"], capture_output=True)


@contextlib.contextmanager
def trainer_edited():
    """A change to the trainer code for the duration of the block; the file is restored after."""
    original = TRAINER_MARKER.read_text()
    try:
        TRAINER_MARKER.write_text(original + f"# benchmark edit {time.time()}\n")
        yield
    finally:
        TRAINER_MARKER.write_text(original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-base", action="store_true",
                        help="keep the base images (cold minus debootstrap)")
    parser.add_argument("--framework", choices=("tensorflow", "torch"), default="tensorflow")
    args = parser.parse_args()
    if args.framework == "torch":
        clear_torch_for_cold_build()
        rows = [timed("cold (base kept; 3.2 GB of wheels downloaded)", "torch")]
    else:
        clear_for_cold_build(args.keep_base)
        rows = [timed("cold" if not args.keep_base else "cold (base kept)", bootstrap=True)]
    rows.append(timed("up to date", args.framework))
    with trainer_edited():
        rows.append(timed("trainer code changed", args.framework))
    rows.append(timed("trainer code restored", args.framework))
    report = {"machine": {"cores": os.cpu_count(), "memory_gib": round(os.sysconf("SC_PAGE_SIZE") *
                                                                        os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                          "platform": platform.platform()}, "results": rows}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
