"""Regenerate the images' locks: `make lock`, or `python -m orchestrator.images.lock [FRAMEWORK ...]`.

For each framework's own image recipe (``frameworks/<name>/image/``; a framework that runs another's image, as
MPI runs TensorFlow's, has none of its own): resolves its requirements.txt (with its dependencies) and requirements-nodeps.txt (without) with the host's
pip for the image's interpreter (CPython 3.11, manylinux x86_64 up to glibc 2.36: the same target
`orch build` downloads for), downloads every wheel (about 320 MB for TensorFlow, 3.2 GB for PyTorch)
into a temporary folder, and writes
each package's exact version and sha256. The wheels then seed orch's wheelhouse cache under the new
lock's digest, so the next `orch build` does not download them again. Review the lock's diff and commit it.
"""
from __future__ import annotations

import sys
from pathlib import Path

from orchestrator import frameworks
from orchestrator.errors import OrchError
from orchestrator.images.pins import generate_lock
from orchestrator.paths import default_paths


def main() -> int:
    folders: dict[str, Path] = {}
    for name in frameworks.names():
        recipe = frameworks.get(name).recipe()
        if recipe is not None and recipe not in folders.values():
            folders[name] = recipe
    wanted = sys.argv[1:] or list(folders)
    for name in wanted:
        if name not in folders:
            print(f"lock: error: {name!r} is not a recipe; choose from {', '.join(folders)}", file=sys.stderr)
            return 2
        try:
            lock = generate_lock(folders[name], default_paths().wheelhouse, lambda msg: print(msg, file=sys.stderr))
        except OrchError as exc:
            print(f"lock: error: {exc.message}", file=sys.stderr)
            if exc.details:
                print(exc.details, file=sys.stderr)
            return 1
        print(f"wrote {lock.path} ({len(lock.packages)} packages, digest {lock.digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
