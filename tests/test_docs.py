"""The figures of README.md and docs/: each is what its committed result file gives, and a figure changed by hand, a
number typed into a page or a plot drawn from other data fails the check with one line naming the page. Pure."""
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

CHECK = ["tools/docs_check.py"]


def _check(root, *args):
    return subprocess.run([sys.executable, str(root / "tools" / "docs_check.py"), *args], cwd=root,
                          capture_output=True, text=True, timeout=300)


def test_every_figure_of_the_docs_is_what_its_data_gives():
    proc = _check(ROOT)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def copy(tmp_path):
    """The pages, the figures' code and the result files, in a folder of their own."""
    for name in ("README.md", "docs", "tools", "benchmarks", "experiments"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("runs", "__pycache__", "*.html"))
        else:
            shutil.copy2(source, tmp_path / name)
    return tmp_path


def _generated_line(text):
    """The number of a line inside a generated block that holds a decimal figure, and that line."""
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if "[[[cog" in line:
            inside = True
        elif "[[[end]]]" in line:
            inside = False
        elif inside and re.search(r"\d\.\d\d", line):
            return number, line
    raise AssertionError("no generated figure found")


@pytest.mark.early
@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_a_figure_changed_by_hand_fails_naming_the_page_and_the_figure(copy, page):
    path = copy / page
    text = path.read_text()
    number, line = _generated_line(text)
    changed = re.sub(r"(\d)\.(\d)(\d)", lambda m: f"{m[1]}.{m[2]}{(int(m[3]) + 1) % 10}", line, count=1)
    path.write_text(text.replace(line, changed, 1))
    proc = _check(copy)
    assert proc.returncode == 1
    (problem,) = proc.stderr.strip().splitlines()
    assert problem.startswith(f"{page}:") and "figures." in problem and "run `make figures`" in problem
    assert _check(copy, "--write").returncode == 0 and path.read_text() == text  # written back from the data


def test_a_figure_typed_into_a_page_outside_a_block_fails(copy):
    path = copy / "docs" / "watching.md"
    path.write_text(path.read_text() + "\nA run of three containers took 12.34 s here.\n")
    proc = _check(copy)
    assert proc.returncode == 1
    assert "docs/watching.md:" in proc.stderr and "12.34 s is typed by hand" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_changed_data_fails_the_figure_drawn_from_it_and_its_plot(copy):
    cells = copy / "experiments" / "results" / "headline" / "cells.json"
    cells.write_text(re.sub(r'"train_seconds": (\d)', lambda m: f'"train_seconds": {int(m[1]) + 1}', cells.read_text(),
                            count=1))
    proc = _check(copy)
    assert proc.returncode == 1
    problems = proc.stderr.strip().splitlines()
    assert any(p.startswith("README.md:") and "headline_table" in p and "experiments/results/headline/cells.json" in p
               for p in problems)
    assert any("headline_plot" in p and "was drawn from other data" in p for p in problems)


def test_a_figure_whose_file_no_benchmark_writes_is_refused(copy):
    orphan = copy / "benchmarks" / "results" / "orphan.json"
    orphan.write_text('{"rows": []}\n')
    page = copy / "docs" / "watching.md"
    page.write_text(page.read_text() + '\n<!-- [[[cog figures.data("benchmarks/results/orphan.json") ]]] -->\n'
                    "<!-- [[[end]]] -->\n")
    proc = _check(copy)
    assert proc.returncode == 1
    assert "reads benchmarks/results/orphan.json, which no benchmark of benchmarks/suite.py writes" in proc.stderr


def test_the_readme_and_the_results_page_stay_short_and_undated():
    readme, results = (ROOT / "README.md").read_text(), (ROOT / "docs" / "results.md").read_text()
    assert len(readme.splitlines()) <= 200 and len(results.splitlines()) <= 400
    months = r"\b\d{1,2} (January|February|March|April|May|June|July|August|September|October|November|December)\b"
    assert not re.search(months, readme) and not re.search(months, results)


def test_make_demo_installs_orch_and_its_tracking_extra_and_no_test_or_docs_tools(tmp_path):
    """`make demo` on a clean clone (a venv that does not exist yet): what it would run installs '.[mlflow]' alone."""
    dry = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    installs = [line for line in dry.stdout.splitlines() if "pip install" in line and " -e " in line]
    assert installs and all("'.[mlflow]'" in line for line in installs), installs
    assert "doctor; exit 2" in dry.stdout  # a host that is not ready stops the demo with orch doctor's own table
