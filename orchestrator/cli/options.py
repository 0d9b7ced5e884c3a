"""The job-spec flags of `orch render` and `orch up`, generated from the spec's field metadata.

``JobSpec`` and each framework's options model are the one source of truth: a field's
``json_schema_extra`` names its flag (``flag``, default ``--field-name``; ``{"flag": False}`` for none),
its short form (``short``) and the default shown in the help (``default_text``); the field's type gives
the click type (bool fields become ``--x/--no-x``, Literal fields a choice) and its description the help.
Every flag defaults to None, and only the flags a user set reach ``make_spec``, so the spec's own
defaults apply to the rest.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional, TypeVar, Union

import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from orchestrator import frameworks, sizes
from orchestrator.backends import options as backend_options
from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import JobSpec
from orchestrator.cli.layout import GroupedCommand, GroupedOption, Verbs
from orchestrator.jobspec.messages import problem, say

F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["GroupedCommand", "GroupedOption", "Verbs"]  # the help's layout, with the flags

# Fields that are never flags whatever their metadata: the discriminator of the framework options.
_NOT_FLAGS = {"name"}

# The help's headings for the spec's own fields, each with its fields in the order shown. Each framework's and each
# backend's options come between "Data and model" and "Supervision", under their own headings. spec_flags refuses
# a field placed nowhere, so a new field cannot slip into the help unsorted.
GROUPS = {
    "General": ("workers", "procs_per_worker", "framework", "backend", "network", "expose_ports_on_host", "run_id", "image", "script",
                "source"),
    "Data and model": ("dataset", "samples", "model", "epochs", "global_batch", "learning_rate", "seed"),
    "Supervision": ("stall_timeout", "startup_timeout", "time_limit", "max_restarts", "checkpoint_every"),
    "Limits": ("cpus", "gpus", "memory_mb", "shm_size_mb", "disk_limit_mb", "threads", "pin_cpus"),
}


@dataclass(frozen=True)
class SpecFlag:
    """One generated flag: the spec field it sets and how click parses it."""

    field: str
    flag: str  # the long form, e.g. --batch-size
    short: Optional[str]
    type: Any  # a click type, or bool for an on/off flag
    choices: tuple[str, ...]
    default_text: Optional[str]  # what the help shows as the default, None for nothing
    help: str
    group: str = "Options"  # the help's heading
    metavar: Optional[str] = None  # what the help calls its value; None: the type's name

    @property
    def decls(self) -> list[str]:
        if self.type is bool:
            return [f"{self.flag}/--no-{self.flag[2:]}", self.field]
        return [self.flag, *([self.short] if self.short else []), self.field]

    def option(self) -> Callable[[F], F]:
        if self.type is bool:
            return click.option(*self.decls, cls=GroupedOption, group=self.group, default=None, help=self.help)
        return click.option(*self.decls, cls=GroupedOption, group=self.group, type=self.type, default=None,
                            metavar=self.metavar, help=self.help)


def _unwrap_optional(annotation: Any) -> Any:
    """``X`` for ``Optional[X]``; the annotation itself otherwise."""
    origin = typing.get_origin(annotation)
    if origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _click_type(name: str, annotation: Any) -> tuple[Any, tuple[str, ...]]:
    """The click type of a field (bool for an on/off flag) and its choices."""
    annotation = _unwrap_optional(annotation)
    if typing.get_origin(annotation) is Literal:
        choices = tuple(str(v) for v in typing.get_args(annotation))
        return click.Choice(choices), choices
    simple = {bool: bool, int: click.INT, float: click.FLOAT, str: click.STRING}
    if annotation in simple:
        return simple[annotation], ()
    raise TypeError(f"spec field {name}: no CLI flag for type {annotation!r}; give it json_schema_extra "
                    "{'flag': False} or a supported type (int, float, str, bool, Literal)")


def _shown_default(info: FieldInfo, default_text: Optional[str]) -> Optional[str]:
    if default_text is not None:
        return default_text
    if info.default is PydanticUndefined or info.default is None:  # required, a factory, or Optional unset
        return None
    if isinstance(info.default, bool):
        return "yes" if info.default else "no"
    return str(info.default)


def _flag(name: str, info: FieldInfo) -> Optional[SpecFlag]:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if extra.get("flag") is False or name in _NOT_FLAGS:
        return None
    # A size is read as text (2g, 512m) by the spec's own parser, which names the flag when it is wrong.
    click_type, choices = (click.STRING, ()) if sizes.SIZE in info.metadata else _click_type(name, info.annotation)
    shown = _shown_default(info, extra.get("default_text"))  # type: ignore[arg-type]
    description = (info.description or "").strip()
    help_text = f"{description} [default: {shown}]" if shown is not None else description
    flag = extra.get("flag") or "--" + name.replace("_", "-")
    return SpecFlag(field=name, flag=str(flag), short=extra.get("short") or None,  # type: ignore[arg-type]
                    type=click_type, choices=choices, default_text=shown, help=help_text,
                    metavar="SIZE" if sizes.SIZE in info.metadata else None)


def _model_flags(model: type[BaseModel]) -> list[SpecFlag]:
    return [f for name, info in model.model_fields.items() if (f := _flag(name, info)) is not None]


def _heading(titles: list[str], selector: str, names: list[str]) -> str:
    """``PyTorch (--framework torch)``; ``MPI and PyTorch (--framework mpi or torch)`` for a shared option."""
    return f"{' and '.join(titles)} ({selector} {' or '.join(names)})"


def _grouped(flags: list[SpecFlag]) -> list[SpecFlag]:
    """The flags with their headings, in the help's order: GROUPS' first two, the frameworks', the backends', the
    rest of GROUPS."""
    fws = {n: frameworks.options_model(n).model_fields for n in frameworks.names()}
    owners = backend_options.option_names()
    placed = {field: heading for heading, fields in GROUPS.items() for field in fields}
    out: list[tuple[int, int, SpecFlag]] = []
    for f in flags:
        if f.field in placed:
            heading = placed[f.field]
            rank = list(GROUPS).index(heading)
            rank, order = (rank if rank < 2 else rank + 2), GROUPS[heading].index(f.field)
        elif f.field in owners:
            names = owners[f.field]
            heading = _heading([backend_options.TITLES[n] for n in names], "--backend", names)
            rank, order = 3, len(out)
        elif any(f.field in fields for fields in fws.values()):
            names = [n for n, fields in fws.items() if f.field in fields]
            heading = _heading([frameworks.get(n).title or n for n in names], "--framework", names)
            rank, order = 2, len(out)
        else:
            raise ValueError(f"spec field {f.field} has no heading in the help: add it to cli.options.GROUPS")
        out.append((rank, order, dataclasses.replace(f, group=heading)))
    return [f for _, _, f in sorted(out, key=lambda t: (t[0], t[1]))]


def _shared(first: SpecFlag, other: SpecFlag, models: list[type[BaseModel]]) -> SpecFlag:
    """One flag for an option several frameworks have, each with its choices: all the choices, and each one's
    description (each names its framework)."""
    choices = (*first.choices, *(c for c in other.choices if c not in first.choices))
    helps = list(dict.fromkeys((m.model_fields[first.field].description or "").strip() for m in models))
    shown = first.help.rsplit(" [default: ", 1)
    return dataclasses.replace(first, type=click.Choice(choices), choices=choices,
                               help=" ".join(helps) + (f" [default: {shown[1]}" if len(shown) == 2 else ""))


@functools.lru_cache(maxsize=None)
def spec_flags() -> tuple[SpecFlag, ...]:
    """Every spec flag: the generic fields in JobSpec's order, then each framework's and each backend's own
    options."""
    flags = _model_flags(JobSpec)
    # The framework is the discriminator of the options union, so not a field with a plain type: its flag picks
    # the options model that the framework's own flags below go to (``spec._nest``).
    names = frameworks.names()
    flags.insert(1, SpecFlag(field="framework", flag="--framework", short=None, type=click.Choice(names),
                             choices=names, default_text=frameworks.DEFAULT,
                             help=f"The framework the replicas run: {', '.join(names)}; each has its own options "
                                  f"below. [default: {frameworks.DEFAULT}]"))
    models = [frameworks.options_model(name) for name in names] + list(backend_options.OPTIONS.values())
    for model in models:
        for f in _model_flags(model):
            known = next((i for i, g in enumerate(flags) if g.field == f.field), None)
            if known is None:
                flags.append(f)
            elif f.choices:  # frameworks (and backends) may share an option name, each with its own choices
                flags[known] = _shared(flags[known], f, [m for m in models if f.field in m.model_fields])
    flags = _grouped(flags)
    seen: dict[str, str] = {}
    for f in flags:
        for decl in (f.flag, f.short):
            if decl and seen.setdefault(decl, f.field) != f.field:
                raise ValueError(f"spec fields {seen[decl]} and {f.field} both want the flag {decl}")
    return tuple(flags)


def spec_options(fn: F) -> F:
    """Decorate a command with every spec flag; unset flags take the spec's defaults."""
    return functools.reduce(lambda f, flag: flag.option()(f), reversed(spec_flags()), fn)


def set_spec_fields(params: dict[str, Any]) -> dict[str, Any]:
    """The spec fields among a command's ``params`` that the user set (the flat names make_spec takes)."""
    names = {f.field for f in spec_flags()}
    return {k: v for k, v in params.items() if k in names and v is not None}


def spec_from(params: dict[str, Any], script_args: tuple[str, ...] = (),
              requirements: Optional[str] = None) -> "JobSpec":
    """A validated spec from the flags the user set, the arguments after `--` and --requirements, made as
    the library makes one (``api.job_spec``); InvalidSpec otherwise."""
    from orchestrator.api import job_spec

    fields = {**set_spec_fields(params), **_shape(params.get("shape"), set_spec_fields(params))}
    try:
        return job_spec(script_args=script_args, requirements=requirements, **fields)
    except InvalidSpec as exc:
        raise InvalidSpec(flag_message(exc), details=exc.details) from None


def flag_message(exc: InvalidSpec) -> str:
    """A spec error as the command line says it: each field named by the flag that sets it, with an example."""
    flags = {f.field: f.flag for f in spec_flags()}
    flags.update({"script_args": "arguments after --", "requirements": "--requirements"})
    return say(exc.problems or [problem(exc.message)], flags.get, flags=True)


def _shape(value: Optional[str], given: dict[str, Any]) -> dict[str, int]:
    """-j NxP (TorchX's form) as --workers N --procs-per-worker P; -j N is N containers of one rank."""
    if value is None:
        return {}
    found = re.fullmatch(r"([0-9]{1,3})(?:x([0-9]{1,3}))?", value.strip())
    if not found:
        raise click.BadParameter(f"{value!r} is not NxP, e.g. 2x2 (2 containers of 2 ranks each) or 3", param_hint="-j")
    clash = [f"--{name.replace('_', '-')}" for name in ("workers", "procs_per_worker") if name in given]
    if clash:
        raise click.UsageError(f"-j {value} sets the containers and the ranks in each; leave out {' and '.join(clash)}")
    return {"workers": int(found.group(1)), "procs_per_worker": int(found.group(2) or 1)}


def script_options(fn: F) -> F:
    """The script's arguments (everything after `--`), --requirements and -j, for `up` and `render`."""
    fn = click.option("-j", "shape", metavar="NxP", cls=GroupedOption, group="General",
                      help="N containers of P ranks each, as TorchX's -j: --workers N --procs-per-worker P.")(fn)
    fn = click.option("--requirements", metavar="FILE", cls=GroupedOption, group="General",
                      help="A requirements file of extra packages for --script: runs the image `orch build "
                           "--requirements FILE` made from it.")(fn)
    return click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SCRIPT ARGS]")(fn)


def complete_run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a RUN argument: the runs in the runs folder (--runs-dir or $ORCH_RUNS_DIR)."""
    import os

    from click.shell_completion import CompletionItem

    from orchestrator.paths import default_paths

    root = ctx.find_root().params.get("runs_dir")
    runs = Path(os.path.abspath(root)) if root else default_paths().runs
    try:
        names = sorted((p.name for p in runs.iterdir() if p.is_dir() and p.name.startswith(incomplete)), reverse=True)
    except OSError:
        return []
    return [CompletionItem(name) for name in names[:200]]


def complete_experiment_files(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of an experiment FILE: folders, and .yaml and .yml files."""
    from click.shell_completion import CompletionItem

    folder, _, stem = incomplete.rpartition("/")
    base = Path(folder or ".")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    prefix = f"{folder}/" if folder else ""
    out = []
    for p in entries:
        if p.name.startswith(stem) and not p.name.startswith("."):
            if p.is_dir():
                out.append(CompletionItem(prefix + p.name + "/", type="plain"))
            elif p.suffix in (".yaml", ".yml"):
                out.append(CompletionItem(prefix + p.name))
    return out


def engine_option(fn: F) -> F:
    """--engine: the container engine of this host a command talks to. Like --runs-dir, it reaches the command and
    every orch process it starts as $ORCH_ENGINE does; a run's own verbs (logs, stats, down RUN, collect) follow the
    engine the run was started on, whatever this says."""
    from orchestrator.docker.engines import ENGINES

    def remember(_ctx: click.Context, _param: click.Parameter, value: Optional[str]) -> Optional[str]:
        if value:
            os.environ["ORCH_ENGINE"] = value
        return value

    return click.option("--engine", type=click.Choice(ENGINES), envvar="ORCH_ENGINE", show_envvar=True,
                        expose_value=False, is_eager=True, callback=remember,
                        help="The container engine: docker (the Docker daemon) or podman (Podman's API service). "
                             "[default: docker]")(fn)


def track_options(fn: F) -> F:
    """--track and --tracking-uri: where a finished run (or sweep) is logged besides orch's own folders."""
    fn = click.option("--tracking-uri", metavar="URI", envvar="MLFLOW_TRACKING_URI", show_envvar=True,
                      cls=GroupedOption, group="Tracking",
                      help="The MLflow tracking server or store, e.g. http://127.0.0.1:5000. [default: SQLite in the "
                           "results folder, results/mlflow/mlflow.db]")(fn)
    return click.option("--track", "track", metavar="mlflow,tensorboard", envvar="ORCH_TRACK", show_envvar=True,
                        cls=GroupedOption, group="Tracking",
                        help="Log the finished run to MLflow and/or TensorBoard event files (comma-separated). "
                             "A tracker that is down costs one line, never the run; `orch track` logs it later. "
                             "[default: none]")(fn)


def tracked_targets(value: Optional[str], flag: str = "--track") -> tuple[str, ...]:
    """The --track (or --to) value as trackers; a usage error names the flag."""
    from orchestrator.tracking import targets_from

    try:
        return targets_from(value or "")
    except ValueError as exc:
        raise click.BadParameter(str(exc).replace("--track", flag), param_hint=f"'{flag}'") from None


format_option = click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                             show_default=True, help="Output format on stdout.")
