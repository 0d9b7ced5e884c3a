"""mutmut's hook for benchmarks/mutation.py: in a large module, mutate only the lines of the functions it names.

ORCH_MUTATE_LINES holds their spans (``a-b,c-d``, 1-based); empty: every line. A mutant elsewhere is skipped (mutmut
counts it as skipped, and mutation.py leaves it out of the figures).
"""
import os


def _spans():
    raw = os.environ.get("ORCH_MUTATE_LINES", "")
    return [tuple(int(n) for n in part.split("-")) for part in raw.split(",") if part]


SPANS = _spans()


def pre_mutation(context):
    line = context.current_line_index + 1
    if SPANS and not any(first <= line <= last for first, last in SPANS):
        context.skip = True
