"""Experiment files read from disk: bounded, alias-free YAML, paths made absolute, and every cell checked as a spec.

An experiment file is YAML of at most MAX_BYTES, without anchors or aliases, at most MAX_DEPTH deep; each
problem in it is a one-line InvalidSpec. Cell keys map grid points into the run-id alphabet without
collisions; ``cell_run_id`` alone makes a run id of one, and ``cells.expand`` (so --dry-run) validates that shape.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import ValidationError

from orchestrator.errors import InvalidSpec
from orchestrator.experiments.cells import expand
from orchestrator.experiments.model import EXAMPLES, MAX_BYTES, MAX_DEPTH, SPEC_ONLY, Experiment
from orchestrator.experiments.model import message_line as _line
from orchestrator.jobspec import shown
from orchestrator.jobspec.messages import describe_all, say
from orchestrator.run.scripts import absolute
from orchestrator.safeio import Unsafe, read_bounded


class _Loader(yaml.SafeLoader):
    """SafeLoader refusing anchors and aliases (a few hundred bytes of nested aliases expand to gigabytes)
    and nesting deeper than MAX_DEPTH, where the parser meets them."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's parser is untyped
        problem = ("anchors and aliases (& and *) are not allowed" if getattr(event, "anchor", None) is not None
                   else f"nested deeper than {MAX_DEPTH} levels" if self.depth >= MAX_DEPTH else None)
        if problem:
            raise yaml.composer.ComposerError(None, None, problem, event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1



def load(path: Path) -> Experiment:
    """Read and validate an experiment file; every problem is a one-line InvalidSpec naming the field.

    A bounded read: a FIFO, device, folder or file over MAX_BYTES is refused, never waited on."""
    try:
        data = read_bounded(Path(os.path.realpath(path)), MAX_BYTES)
    except (Unsafe, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidSpec(_line(f"cannot read experiment file {path}: {why}")) from None
    if data is None:
        raise InvalidSpec(_line(f"cannot read experiment file {path}: no such file"))
    try:
        return parse(data.decode("utf-8"), str(path), Path(os.path.realpath(path)).parent)
    except UnicodeDecodeError:
        raise InvalidSpec(_line(f"{path}: not UTF-8 text")) from None


def _scripts_from(doc: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """``doc`` with its path fields (`script`, `source`; in base, setups and grid) made absolute against the
    file's folder."""
    doc = dict(doc)
    for name in ("script", "source"):
        if isinstance(doc.get("base"), dict) and name in doc["base"]:
            doc["base"] = {**doc["base"], name: absolute(doc["base"][name], base_dir)}
        if isinstance(doc.get("setups"), list):
            doc["setups"] = [{**s, name: absolute(s[name], base_dir)} if isinstance(s, dict) and name in s
                             else s for s in doc["setups"]]
        if isinstance(doc.get("grid"), dict) and isinstance(doc["grid"].get(name), list):
            doc["grid"] = {**doc["grid"], name: [absolute(s, base_dir) for s in doc["grid"][name]]}
    return doc


def parse(text: str, source: str = "experiment", base_dir: Optional[Path] = None) -> Experiment:
    """Validate experiment YAML text, and every cell of it (also in quick mode) as a spec; a relative
    `script` is relative to ``base_dir``, the experiment file's folder."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise InvalidSpec(_line(f"{source}: larger than {MAX_BYTES // 1024} KiB; an experiment file is a few KiB"))
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
        raise InvalidSpec(_line(f"{source}: not valid YAML" + (f" at line {mark.line + 1}" if mark else "")
                                + (f": {problem[:100]}" if problem else ""))) from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a 5,000-digit number, a 30 February
        raise InvalidSpec(_line(f"{source}: not valid YAML: {str(exc)[:100]}")) from None
    if not isinstance(doc, dict):
        raise InvalidSpec(f"{source}: must be a mapping with name, base, grid, repeats, quick and report")
    if base_dir is not None:
        doc = _scripts_from(doc, base_dir)
    try:
        experiment = Experiment(**{str(k): v for k, v in doc.items()})
    except ValidationError as exc:
        problems = describe_all(exc, lambda: sorted(Experiment.model_fields), lambda field: EXAMPLES.get(field))
        raise InvalidSpec(_line(f"{source}: {say(problems[:1], SPEC_ONLY.get)}")) from None
    except TypeError as exc:
        raise InvalidSpec(_line(f"{source}: {exc}")) from None
    try:  # every cell must be a valid spec before anything runs
        cells = expand(experiment)
        expand(experiment, quick=True)
    except InvalidSpec as exc:
        raise InvalidSpec(_line(f"{source}: {exc.message}")) from None
    baseline = experiment.report.baseline
    if baseline and not any(all(c.fields.get(k) == v for k, v in baseline.items()) for c in cells):
        shown_baseline = ", ".join(f"{SPEC_ONLY.get(k, k)}: {shown(v)}" for k, v in baseline.items())
        raise InvalidSpec(_line(f"{source}: report.baseline: {{{shown_baseline}}} is no cell of the grid; name one "
                                "that is, e.g. the first setup or the smallest grid value"))
    return experiment
