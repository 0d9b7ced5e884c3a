"""The tiers' rule: in CI a live test that skips fails the run, and outside CI it stays a skip. Pure."""
import subprocess
import sys

from tests.conftest import ROOT

LIVE = """
import pytest

@pytest.mark.docker
def test_needs_the_engine():
    pytest.skip("no engine here")

@pytest.fixture
def image():
    pytest.skip("no image here")

@pytest.mark.docker
def test_needs_an_image(image):
    pass

@pytest.mark.network
def test_downloads():
    pytest.skip("no index here")

def test_fast():
    pytest.skip("a fast test may skip")
"""


def _run(tmp_path, ci):
    (tmp_path / "test_live.py").write_text(LIVE)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **({"CI": "true"} if ci else {})}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.tiers", "-p", "no:cacheprovider", "-q",
                           "-o", "markers=docker\nnetwork", "--rootdir", str(tmp_path), str(tmp_path)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)


def test_a_live_test_that_skips_in_ci_fails_the_run(tmp_path):
    proc = _run(tmp_path, ci=True)
    assert proc.returncode == 1, proc.stdout
    assert "2 failed, 1 skipped, 1 error" in proc.stdout  # a skip in a fixture fails its setup
    assert "a live test skipped in CI, which fails the run: Skipped: no engine here" in proc.stdout
    assert "no image here" in proc.stdout
    assert "a live test skipped in CI, which fails the run: Skipped: no index here" in proc.stdout


def test_outside_ci_a_skip_stays_a_skip(tmp_path):
    proc = _run(tmp_path, ci=False)
    assert proc.returncode == 0 and "4 skipped" in proc.stdout, proc.stdout
