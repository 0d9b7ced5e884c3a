"""numbers.sig: the one format of a measured number in report.md, report.html and the docs' tables."""
from __future__ import annotations

import pytest

from orchestrator.analysis.numbers import median_range, sig, with_unit


@pytest.mark.parametrize("value, text", [
    (72.9, "72.9"), (58.48, "58.5"), (1.0, "1.00"), (1.0029, "1.00"), (1, "1"), (3, "3"), (0.8770, "0.877"),
    (13.95123, "14.0"), (1234.5, "1234"), (20345.6, "20,346"), (60000, "60,000"), (0.0012345, "0.00123"),
    (0.0, "0"), (-2.5, "-2.50"), (9.996, "10.0"), (0.9996, "1.00"), (99.96, "100"), (1e-12, "1.00e-12"),
    (None, "-"), (float("nan"), "-"), (float("inf"), "-"), (True, "True"), ("ring", "ring")])
def test_a_number_has_three_significant_digits_and_keeps_its_whole_digits(value, text):
    assert sig(value) == text


def test_a_range_is_left_out_where_its_ends_read_the_same():
    assert median_range((4.93, 4.75, 4.98)) == "4.93 (4.75–4.98)"
    assert median_range((1.2, 1.199, 1.201)) == "1.20"
    assert median_range((327.7e6, 262.2e6, 327.7e6), 1e-6) == "328 (262–328)"
    assert median_range(None) == "-" and median_range(None, none="—") == "—"
    assert with_unit(1.9, "x") == "1.90x" and with_unit(None, "x") == "-"
