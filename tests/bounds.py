"""How long a test lets a refusal take.

Tests check that hostile input is refused without blocking (a FIFO, a held lock, a hung engine) and without
unbounded work (YAML bombs, a size-limit document, a million cells). Either failure takes forever or orders of
magnitude longer than a refusal, so the tests bound it generously: a busy CI machine must not fail them. How
fast each refusal is goes in a benchmark (benchmarks/input_limits.py), not in a timed test.
"""
HANG_S = 20.0
