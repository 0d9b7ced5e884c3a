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
    got = hooks.on_page_markdown(text, _page(uri), None, None)
    assert got == ("[Images](../../../images.md#the-python-environment-on-the-engines-disk), "
                   "[MPI](../../../frameworks/mpi.md), [run](results/floor-runs/start-fast/floor.md), "
                   "[suite](../results/floor.md), [web](https://example.org/docs/x.md)")
