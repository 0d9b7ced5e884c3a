"""MkDocs hooks of orch's manual.

- The CLI reference is generated from the click commands at build time (``<!-- orch-cli-reference -->``).
- Pages link to committed results outside docs/ (``../benchmarks/results/allreduce.md``), so that the links also
  work when the Markdown is read in the repository. The build copies those folders into the site under ``repo/``
  and points the links there; a link to a file that does not exist stays broken and fails the strict build.
- The copied Markdown (the benchmarks' notes) links back into the manual the same way (``../../docs/images.md``):
  those links are pointed at the manual's pages. Its links to what exists in the repository but not in the site (a
  result folder, the repository's README.md) keep their text and lose the link; a link to nothing stays and fails.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

REPO = Path(__file__).resolve().parent.parent
OUTSIDE = ("benchmarks", "experiments/results", "examples")  # folders the manual may link into
MARKER = "<!-- orch-cli-reference -->"
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?\)")
FULL_LINK = re.compile(r"\[([^\]]*)(\]\()([^)\s#]+)(#[^)\s]*)?\)")  # [text](target#anchor)


def on_files(files, config):
    for folder in OUTSIDE:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                rel = path.relative_to(REPO).as_posix()
                file = File.generated(config, f"repo/{rel}", abs_src_path=str(path),
                                      inclusion=InclusionLevel.NOT_IN_NAV)  # reached by links, not the menu
                files.append(file)
    return files


def _outside(page_uri: str, target: str) -> str | None:
    """The repository path a page's relative link points to, when it leaves docs/ into OUTSIDE."""
    if "://" in target or target.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_uri), target))
    return joined if joined.startswith(OUTSIDE) else None


def _into_docs(page_uri: str, target: str) -> str | None:
    """The manual page (relative to docs/) a relative link of a copied page points to, when it enters docs/."""
    if "://" in target or target.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(page_uri.removeprefix("repo/")), target))
    return joined.removeprefix("docs/") if joined.startswith("docs/") else None


def _outside_site(page_uri: str, target: str, site: set[str]) -> bool:
    """Whether a copied page's relative link names a repository path that exists but that the site does not hold."""
    if "://" in target or target.startswith(("/", "mailto:")):
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(page_uri), target))
    if joined in site or not joined.startswith("repo/"):
        return False
    return (REPO / joined.removeprefix("repo/")).exists()


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        from orchestrator.cli.reference import markdown as reference

        markdown = markdown.replace(MARKER, reference())
    uri = page.file.src_uri
    if uri.startswith("repo/"):
        site = {f.src_uri for f in files}

        def back(match: re.Match) -> str:
            text, opening, target, anchor = match.groups()
            path = _into_docs(uri, target)
            if path is not None:
                return f"[{text}{opening}{posixpath.relpath(path, posixpath.dirname(uri))}{anchor or ''})"
            return text if _outside_site(uri, target, site) else match.group(0)

        return FULL_LINK.sub(back, markdown)

    def relink(match: re.Match) -> str:
        path = _outside(uri, match.group(2))
        if path is None:
            return match.group(0)
        here = posixpath.dirname(uri)
        return f"{match.group(1)}{posixpath.relpath('repo/' + path, here or '.')}{match.group(3) or ''})"

    return LINK.sub(relink, markdown)
