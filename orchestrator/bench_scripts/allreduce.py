"""One all-reduce, timed: `orch bench allreduce`'s harness, run by every rank as a user's script would be.

Beside it, as ``probe.py``, is the probe of the framework measured (``frameworks/<name>/allreduce_probe.py``):
``probe.measure`` runs the all-reduces and returns rank 0's samples; the harness writes them to
``allreduce.json`` in the rank's output folder (or ``--out``), and ``probe.leave`` ends the rank.
"""
from __future__ import annotations

import argparse
import json
import os

import probe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="message sizes in bytes")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", help="where rank 0 writes its JSON")
    args = parser.parse_args()
    measured = probe.measure(args.sizes, args.iterations, args.warmup)
    if measured is not None:
        out = args.out or os.path.join(os.environ.get("ORCH_OUTPUT_DIR", "."), "allreduce.json")
        with open(out + ".tmp", "w") as f:
            json.dump(measured, f, allow_nan=False)  # timings, finite: strict JSON as every file orch writes
        os.replace(out + ".tmp", out)
    if probe.leave():
        return
    os._exit(0)  # the measurement is written; a framework's runtime may idle at exit


if __name__ == "__main__":
    main()
