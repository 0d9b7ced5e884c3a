"""benchmarks/mutation.py's bookkeeping, without running mutmut: its modules exist with their tests, a survivor's diff
is matched to its explanation, and every explanation still names a line of its module. No engine."""
from __future__ import annotations

import json
import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import mutation  # noqa: E402

DIFF = """--- orchestrator/sizes.py
+++ orchestrator/sizes.py
@@ -63,4 +63,4 @@
     for unit, shift in (("t", 20), ("g", 10)):
-        if megabytes and megabytes % (1 << shift) == 0:
+        if megabytes or megabytes % (1 << shift) == 0:
             return f"{megabytes >> shift}{unit}"
"""


def test_every_module_and_test_file_of_the_mapping_exists():
    for module in mutation.MODULES:
        assert (ROOT / module.path).is_file(), module.path
        files = [t for t in module.tests if t.startswith("tests/") and "::" not in t]
        assert files and all((ROOT / t).is_file() for t in files), module.name
        mutation.spans(ROOT / module.path, module.functions)  # every function named is there


def test_a_survivor_is_matched_to_its_explanation_by_module_line_and_mutation():
    line, mutant = mutation.diff_lines(DIFF)
    assert (line, mutant) == ("if megabytes and megabytes % (1 << shift) == 0:",
                              "if megabytes or megabytes % (1 << shift) == 0:")
    known = [{"module": "sizes", "line": line, "mutant": mutant, "why": "because"}]
    assert mutation.explained("sizes", line, mutant, known) == "because"
    assert mutation.explained("safetext", line, mutant, known) is None
    assert mutation.explained("sizes", line, line, known) is None


def test_every_explanation_of_an_equivalent_mutant_names_a_line_its_module_still_has():
    paths = {m.name: ROOT / m.path for m in mutation.MODULES}
    for entry in json.loads(mutation.EQUIVALENT.read_text())["equivalent"]:
        assert entry["why"] and entry["line"] != entry["mutant"], entry
        lines = {line.strip() for line in paths[entry["module"]].read_text().splitlines()}
        assert entry["line"] in lines, f"{entry['module']}: no line {entry['line']!r}: explain it again"
