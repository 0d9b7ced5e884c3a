"""The spec's field vocabulary: value patterns, CLI flag metadata, the Role type, fresh run ids, flat fields nested."""
from __future__ import annotations

import secrets
import time
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from orchestrator import frameworks, sizes
from orchestrator.backends import options as backend_options
from orchestrator.errors import InvalidSpec
from orchestrator.frameworks.base import TRAINER_ONLY
from orchestrator.jobspec.messages import Problem, _unknown_framework, describe_all, say

RUN_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
# An absolute path to a .py file, of printable characters: it becomes a mount source and a command line.
SCRIPT_PATTERN = r"/[^\x00-\x1f\x7f]*[^/\x00-\x1f\x7f]\.py"
ROLE_PATTERN = r"^[a-z][a-z0-9]{0,15}$"
# The choices of what exists, written out so that a type checker sees them: the backends' registry and the data sets
# the contract names (tests/test_typing.py fails when either differs from these).
BackendName = Literal["compose", "swarm", "k8s", "slurm"]
DatasetName = Literal["mnist", "fashion-mnist", "vader-reviews", "synthetic"]
DEFAULT_ROLE = "worker"
# A size in MiB that also takes Docker's units (``2g``, ``512m``): every size field of the spec is one.
MiB = Annotated[int, sizes.SIZE, BeforeValidator(sizes.mib)]

# The kinds of job a field applies to (its ``jobs`` metadata); a field without it applies to every job.
TRAINER = TRAINER_ONLY["jobs"]  # read by orch's own trainer only: a --script replaces that trainer and never sees it
SCRIPT = "script"  # a --script's only (the spec refuses it without one)


def flag(name: Optional[str] = None, short: Optional[str] = None, default_text: Optional[str] = None,
         jobs: Optional[str] = None, needs: Optional[tuple[str, Any]] = None) -> dict[str, Any]:
    """CLI metadata of a spec field: its flag (default ``--field-name``), a short form, the shown default, the kind
    of job it applies to (``jobs``: TRAINER or SCRIPT; every job when None) and the (field, value) without which it
    does nothing (``needs``)."""
    return {"flag": name, "short": short, "default_text": default_text, "jobs": jobs, "needs": needs}


NO_FLAG: dict[str, Any] = {"flag": False}


def defaults(field: str, value: Any) -> str:
    """A generic field's default as its help shows it, with each framework's own (``generic_defaults``)."""
    own = [f"{v} for {name}" for name in frameworks.names()
           if (v := frameworks.options_model(name).generic_defaults.get(field)) is not None]
    return "; ".join([str(value), *own])


class Role(BaseModel):
    """A kind of replica and how many of it a job has (worker × N; chief, ps × K and worker × N under ps)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(..., pattern=ROLE_PATTERN, description="role name")
    replicas: int = Field(..., ge=1, le=64, description="replicas of this role")


def new_run_id(workers: int) -> str:
    """A fresh, sortable run id such as ``20261121-143005-w3-1a2b``."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime()) + f"-w{workers}-{secrets.token_hex(2)}"


def flag_aliases(spec_model: Any) -> dict[str, str]:
    """The flags' own names (``batch_size``) of fields named otherwise (``global_batch``), in the spec, each
    framework's and each backend's options: experiment files and the API may use either."""
    out = {}
    for model in _models(spec_model):
        for name, info in model.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            flag_name = extra.get("flag")
            if isinstance(flag_name, str) and flag_name.removeprefix("--").replace("-", "_") != name:
                out[flag_name.removeprefix("--").replace("-", "_")] = name
    return out


# Examples of good values for fields whose default is none.
EXAMPLES = {"script": "train.py", "source": "src", "image": "my-trainer:1", "cpus": "1.5", "run_id": "exp-1"}


def _models(spec_model: Any) -> list[Any]:
    return [spec_model, *(frameworks.options_model(n) for n in frameworks.names()), *backend_options.OPTIONS.values()]


def example(spec_model: Any, field: str) -> Optional[str]:
    """A good value of ``field`` for an error's example: its default, or one from EXAMPLES."""
    for model in _models(spec_model):
        info = model.model_fields.get(field)
        if info is not None and isinstance(info.default, (int, float, str)) and not isinstance(info.default, bool):
            return str(info.default)
    return EXAMPLES.get(field)


def metadata(spec_model: Any, field: str) -> dict[str, Any]:
    """The ``json_schema_extra`` of ``field`` in the spec, a framework's or a backend's options ({} for none)."""
    for model in _models(spec_model):
        info = model.model_fields.get(field)
        if info is not None:
            return info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return {}


def default(spec_model: Any, field: str) -> Any:
    """The default of ``field`` (None where it has none of its own)."""
    for model in _models(spec_model):
        info = model.model_fields.get(field)
        if info is not None:
            return None if info.is_required() or info.default_factory is not None else info.default
    return None


def unused(spec_model: Any, fields: dict[str, Any], given: Any) -> list[Problem]:
    """The fields among ``given`` (named as the spec names them) that the job of ``fields`` would ignore, set to
    something other than their default: orch's trainer's own under a --script, and a field that does nothing
    without another one's value (``needs``)."""
    script = fields.get("script") is not None
    framework = fields.get("framework")
    model = frameworks.find_options(framework.get("name") if isinstance(framework, dict) else
                                    framework or frameworks.DEFAULT)
    own = model.generic_defaults if model is not None else {}
    problems: list[Problem] = []
    for name in given:
        value = fields.get(name)
        if value is None or value == own.get(name, default(spec_model, name)):
            continue  # what the job would do anyway: nothing is lost
        extra = metadata(spec_model, name)
        if extra.get("jobs") == TRAINER and script:
            first = not any(p.text == "the same" or p.text.startswith("orch's own trainer") for p in problems)
            problems.append(Problem(name, "orch's own trainer reads it, and --script runs your script instead, "
                                          "which never sees it; give your script its own arguments after `--`"
                                    if first else "the same"))
        needs = extra.get("needs")
        if needs and fields.get(needs[0], default(spec_model, needs[0])) != needs[1]:
            problems.append(Problem(name, f"it does nothing without --{needs[0].replace('_', '-')} {needs[1]}; "
                                          "leave it out"))
    return problems


def spec_error(spec_model: Any, exc: Any, field_names: Any) -> InvalidSpec:
    """A pydantic ValidationError of the spec as InvalidSpec, its fields named as experiment files name them."""
    problems = describe_all(exc, field_names, lambda field: example(spec_model, field))
    return invalid(spec_model, problems)


def invalid(spec_model: Any, problems: list[Problem]) -> InvalidSpec:
    names = {field: alias for alias, field in flag_aliases(spec_model).items()}
    return InvalidSpec(say(problems, names.get), problems=tuple(problems))


def _nest(fields: dict[str, Any], spec_model: Any = None) -> dict[str, Any]:
    """Move flat framework options into ``framework``; ``framework`` may be a name or a mapping. A field given by
    its flag's name (``batch_size``) is taken as the field (``global_batch``)."""
    for alias, name in (flag_aliases(spec_model) if spec_model is not None else {}).items():
        if alias in fields:
            if name in fields:
                raise InvalidSpec(f"{alias}: {alias} and {name} are the same field (--{alias.replace('_', '-')}); "
                                  "give one")
            fields[name] = fields.pop(alias)
    framework = fields.pop("framework", None)
    options = dict(framework) if isinstance(framework, dict) else {"name": framework or frameworks.DEFAULT}
    model = frameworks.find_options(options.get("name"))
    if model is None:
        message = _unknown_framework(options.get("name"))
        raise InvalidSpec(message, problems=(Problem("framework", message.split(": ", 1)[1], frameworks.DEFAULT),))
    for name in set(model.model_fields) - {"name"}:
        if name in fields:
            options[name] = fields.pop(name)
    owners = {n: set(frameworks.options_model(n).model_fields) - {"name"} for n in frameworks.names()}
    stray = sorted(set().union(*owners.values()) & set(fields))
    if stray:
        have = [n for n, names in owners.items() if stray[0] in names]
        raise InvalidSpec(f"{stray[0]}: --{stray[0].replace('_', '-')} is an option of --framework "
                          f"{' or '.join(have)}, not {options['name']}")
    return {**_nest_backend(fields), "framework": options}


def _nest_backend(fields: dict[str, Any]) -> dict[str, Any]:
    """Move flat backend options into ``backend_options``, for the backend ``backend`` names; refuse an option
    that only other backends have. An unknown backend is left to the spec's own error."""
    name = fields.get("backend", backend_options.DEFAULT)
    model = backend_options.OPTIONS.get(name) if isinstance(name, str) else None
    if model is None:
        return fields
    given = fields.pop("backend_options", None)
    if given is not None and not isinstance(given, dict):
        return {**fields, "backend_options": given}  # not a mapping: the spec's own error names it
    options = dict(given or {})
    for option, owners in backend_options.option_names().items():
        if option not in fields:
            continue
        if name not in owners:
            raise InvalidSpec(f"{option}: --{option.replace('_', '-')} is an option of --backend "
                              f"{' or '.join(owners)}, not {name}")
        options[option] = fields.pop(option)
    return {**fields, "backend_options": options}
