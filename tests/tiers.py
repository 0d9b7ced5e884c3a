"""The test tiers' rule for CI, as a pytest plugin (conftest.py loads it; tests/test_tiers.py loads it alone).

The tiers are marks: `docker` for a test that needs the Docker engine (it starts containers, builds images or asks
the engine), `network` for one that downloads a data set from its real source, and nothing for the fast tier, which
runs with no engine and no network at all (`make test-fast`). In CI (the CI variable set, as .ci/run sets it) a live
test that skips fails instead: a missing engine, image, tool or index must not turn the live tier green by skipping
it.

A fast-tier test marked `early` (one that takes seconds, where most take milliseconds) is collected first: pytest-xdist
hands the first tests out in turn, so the two processes start on the long ones together and finish together, instead
of one of them ending the run alone on a long test it took last.
"""
from __future__ import annotations

import os

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") and any(item.get_closest_marker(m) for m in ("docker", "network")):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"a live test skipped in CI, which fails the run: {reason}"


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.get_closest_marker("early") is None)  # stable: the rest keep their order
