"""report.html opened in Debian's headless Chromium, as a reader opens it: from a file URL, with no network. Marked
`docker` as the other browser test (tests/test_tracking.py) is: the live tier, where `make test-deps` installs
Chromium; the page itself needs no engine, and is the two-axis sweep of tests/test_report_html.py."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.test_report_html import swept  # noqa: F401 - the fixture

pytestmark = pytest.mark.docker


def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("headless Chromium is needed: `make test-deps` installs Debian's chromium package")
    return found


def test_the_report_draws_every_chart_with_plotly_and_no_script_error(swept, tmp_path):  # noqa: F811
    out, _cells, _text, data = swept
    page = out / "report.html"
    flags = [browser(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--window-size=1400,2400", f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=10000"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180).stdout
    assert 'data-rendered="yes"' in dom, dom[:2000]
    assert "data-errors" not in dom, dom[:2000]
    charts = sum(len(s["figures"]) for s in data["sections"]) + len(data["containers"][0]["figures"])
    assert dom.count('class="chart js-plotly-plot"') == charts  # every chart drawn, the first run's per-container ones shown
    assert dom.count('class="main-svg"') >= 2 * charts  # Plotly's own SVG: the plot and its layer of labels
    legend = set(re.findall(r'class="legendtext"[^>]*>([^<]*)<', dom))
    assert {"samples 3000", "samples 6000", f"core limit: min(N, {data['cores']} cores)"} <= legend, legend
    assert len(re.findall(r"<option [^>]*>", dom)) == len(data["containers"])  # every run can be chosen
    shot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=180)
    assert shot.stat().st_size > 50_000
