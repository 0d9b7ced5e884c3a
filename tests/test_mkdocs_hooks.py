"""The manual's links into committed results outside docs/, and the copied notes' links back into the manual."""
import importlib.util
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT

pytest.importorskip("mkdocs")


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools" / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(uri: str) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(src_uri=uri))


def test_a_page_of_the_manual_links_into_the_investigations_through_the_sites_copy():
    hooks = _hooks()
    text = "[notes](../benchmarks/investigations/steps.md#what-bounds-it) and [a page](images.md)"
    got = hooks.on_page_markdown(text, _page("results.md"), None, None)
    assert got == "[notes](repo/benchmarks/investigations/steps.md#what-bounds-it) and [a page](images.md)"
    nested = hooks.on_page_markdown("[r](../../benchmarks/investigations/results/create_ab.md)",
                                    _page("frameworks/mpi.md"), None, None)
    assert nested == "[r](../repo/benchmarks/investigations/results/create_ab.md)"


def test_a_copied_note_links_back_into_the_manual_and_keeps_its_other_links():
    hooks = _hooks()
    uri = "repo/benchmarks/investigations/start-up.md"
    text = ("[Images](../../docs/images.md#the-python-environment-on-the-engines-disk), "
            "[MPI](../../docs/frameworks/mpi.md), [run](results/floor-runs/start-fast/floor.md), "
            "[suite](../results/floor.md), [web](https://example.org/docs/x.md)")
    site = [_page(f"repo/benchmarks/{rel}").file for rel in ("investigations/results/floor-runs/start-fast/floor.md",
                                                             "results/floor.md")]
    got = hooks.on_page_markdown(text, _page(uri), None, site)
    assert got == ("[Images](../../../images.md#the-python-environment-on-the-engines-disk), "
                   "[MPI](../../../frameworks/mpi.md), [run](results/floor-runs/start-fast/floor.md), "
                   "[suite](../results/floor.md), [web](https://example.org/docs/x.md)")


def test_a_copied_note_keeps_the_text_of_a_link_to_what_the_site_does_not_hold_and_a_link_to_nothing_stays():
    """benchmarks/README.md links to result folders and to the repository's README.md, which exist but are no pages
    of the site: their text stays, unlinked. A link to a path that does not exist stays, and fails the strict build."""
    hooks = _hooks()
    uri = "repo/benchmarks/README.md"
    site = [_page("repo/benchmarks/suite.md").file]
    text = ("[README.md](../README.md) § x, [headline/](../experiments/results/headline), "
            "[suite](suite.md), [gone](../no-such-file.md)")
    got = hooks.on_page_markdown(text, _page(uri), None, site)
    assert got == "README.md § x, headline/, [suite](suite.md), [gone](../no-such-file.md)"
