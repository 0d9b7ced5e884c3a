"""The spec's fields as typed keyword arguments of the API's functions (``make_spec``, ``job_spec``, ``render``,
``up``), made from the spec's models, so that a name or type the spec does not have is an error for mypy and a
notebook shows every field with its default.

Two things come out of the same models: ``keywords.py``, the ``SpecFields`` TypedDict the functions' ``**fields``
are typed with (generated text, committed, and checked against the models by tests/test_typing.py), and, at
import, each function's ``__signature__`` and docstring, which list the fields one by one with their defaults.
Fields are named as the flags and experiment files name them (``batch_size``, ``memory``).
"""
from __future__ import annotations

import inspect
import dataclasses
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, TypeVar, Union

from pydantic.fields import FieldInfo

from orchestrator import frameworks, sizes
from orchestrator.backends import options as backend_options

F = TypeVar("F", bound=Callable[..., Any])
KEYWORDS_FILE = Path(__file__).with_name("keywords.py")
# Spec fields the API does not take: nested models, and the roles, which follow from ``workers``.
_LEFT_OUT = {"backend_options", "roles"}


@dataclass(frozen=True)
class Keyword:
    """One spec field as a keyword argument: its name, its type as Python source, its default and its help."""

    name: str
    annotation: str
    default: Any
    help: str


def _type(info: FieldInfo) -> str:
    """A field's type as the API takes it: a size also as a string (``2g``), a tuple as any sequence."""
    if sizes.SIZE in info.metadata:
        return "Union[int, str]"
    return _source(info.annotation)


def _source(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        kept = [a for a in args if a is not type(None)]
        inner = _source(kept[0]) if len(kept) == 1 else f"Union[{', '.join(_source(a) for a in kept)}]"
        return f"Optional[{inner}]" if len(kept) < len(args) else inner
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"Sequence[{_source(args[0])}]"
    if annotation in (int, float, str, bool):
        return str(annotation.__name__)
    raise TypeError(f"no API type for the spec's annotation {annotation!r}: teach jobspec.signature._source it")


@dataclass(frozen=True)
class Shown:
    """A default as the help says it (``mlp; cnn for torch``, ``2g``), where the value alone would mislead; the
    functions never see it: a field left out is not passed at all."""

    text: str

    def __repr__(self) -> str:
        return f"<{self.text}>"


def _default(info: FieldInfo) -> Any:
    value = None if info.is_required() or info.default_factory is not None else info.default
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    text = extra.get("default_text")
    if isinstance(text, str) and text != "none" and not isinstance(value, bool) and text != str(value):
        return Shown(text)
    return value


def keywords() -> list[Keyword]:
    """Every field the API takes, in the help's order: the spec's, then each framework's and each backend's
    options (an option several share, once). Named as the flags are."""
    from orchestrator.jobspec.fields import flag_aliases
    from orchestrator.jobspec.model import JobSpec

    names = {field: alias for alias, field in flag_aliases(JobSpec).items()}
    out: dict[str, Keyword] = {}
    for name, info in JobSpec.model_fields.items():
        if name == "framework":
            choices = ", ".join(frameworks.names())
            # orch's own frameworks, as the CLI offers them; one registered at run time is a string mypy does not know
            builtin = ", ".join(repr(n) for n in frameworks.BUILTIN)
            out[name] = Keyword(name, f"Literal[{builtin}]", frameworks.DEFAULT,
                                f"The framework the replicas run: {choices}.")
        elif name not in _LEFT_OUT:
            out[name] = Keyword(names.get(name, name), _type(info), _default(info), (info.description or "").strip())
    models = [frameworks.options_model(n) for n in frameworks.names()] + list(backend_options.OPTIONS.values())
    shared: dict[str, list[Any]] = {}  # an option several models have: the choices of all, in their order
    for model in models:
        for name, info in model.model_fields.items():
            if name != "name" and name not in out:
                if typing.get_origin(info.annotation) is Literal:
                    shared[name] = list(typing.get_args(info.annotation))
                out[name] = Keyword(names.get(name, name), _type(info), _default(info),
                                    (info.description or "").strip())
            elif name != "name" and typing.get_origin(info.annotation) is Literal:  # shared: every one's choices
                values = shared.setdefault(name, [])
                values += [a for a in typing.get_args(info.annotation) if a not in values]
                own, known = (info.description or "").strip(), out[name]
                out[name] = dataclasses.replace(known, annotation=f"Literal[{', '.join(map(repr, values))}]",
                                                help=known.help if own in known.help else f"{known.help} {own}")
    return list(out.values())


HEADER = '''"""The spec's fields as the API's keyword arguments: ``SpecFields`` types the ``**fields`` of ``make_spec``,
``job_spec``, ``render`` and ``up``. Generated from the spec's models by jobspec/signature.py (`python
tools/generate.py` writes it; tests/test_typing.py fails when it differs from the models): do not edit."""
from __future__ import annotations

from typing import Literal, Optional, Sequence, TypedDict, Union


class SpecFields(TypedDict, total=False):
    """A job's fields, each optional: a field left out takes the spec's default."""

'''


def keywords_source() -> str:
    """The text of ``keywords.py`` as the spec's models make it now."""
    lines = [HEADER.rstrip("\n"), ""]
    for k in keywords():
        default = k.default.text if isinstance(k.default, Shown) else repr(k.default)
        text = f"{k.help} [default: {default}]".strip()
        lines += [f"    # {line}" for line in textwrap.wrap(text, 112)]
        lines.append(f"    {k.name}: {k.annotation}")
    return "\n".join(lines) + "\n"


def _doc(fn: Callable[..., Any], spec_keywords: list[Keyword]) -> str:
    fields = "\n".join(f"    {k.name} ({k.annotation}, default {k.default!r}): {k.help}" for k in spec_keywords)
    own = inspect.cleandoc(fn.__doc__ or "")
    return f"{own}\n\nSpec fields (keyword arguments; each left out takes its default):\n{fields}\n"


def with_spec_keywords(fn: F) -> F:
    """``fn``, whose ``**fields`` are the spec's, with a signature and a docstring that list them (for help(),
    a notebook's and an editor's hints): its own parameters, then each field with its type and default."""
    signature, spec_keywords = inspect.signature(fn), keywords()
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in own}
    fields = [inspect.Parameter(k.name, inspect.Parameter.KEYWORD_ONLY, default=k.default, annotation=k.annotation)
              for k in spec_keywords if k.name not in taken]
    fn.__signature__ = signature.replace(parameters=[*own, *fields])  # type: ignore[attr-defined]
    fn.__doc__ = _doc(fn, spec_keywords)
    return fn
