"""Making a spec: from flat fields named as the flags and experiment files name them (``make_spec``, over the model's
``spec_from``), and from a run record (``load_spec``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from pydantic import ValidationError

from orchestrator.errors import InvalidSpec
from orchestrator.jobspec.fields import TRAINER, flag_aliases, metadata, spec_error
from orchestrator.jobspec.model import JobSpec, flat_field_names, spec_from
from orchestrator.jobspec.signature import with_spec_keywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from orchestrator.jobspec.keywords import SpecFields


def make_spec(**fields: Unpack[SpecFields]) -> JobSpec:
    """A validated spec from flat fields, named as the flags and experiment files name them (``batch_size``,
    ``memory``; the spec's own names, such as ``global_batch``, are taken too); a missing ``run_id`` gets a fresh
    one. A field the job would ignore is refused. Raises InvalidSpec, its message one line, each field's problem
    in ``problems``."""
    return spec_from(dict(fields))


def script_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` less those only orch's own trainer reads: the fields of a --script job on the same containers,
    which would refuse them."""
    aliases = flag_aliases(JobSpec)
    return {k: v for k, v in fields.items() if metadata(JobSpec, aliases.get(k, k)).get("jobs") != TRAINER}


def load_spec(record: Any) -> JobSpec:
    """The spec of a run record as JobSpec (nested, as ``model_dump`` wrote it); InvalidSpec if it is not one."""
    if not isinstance(record, dict):
        raise InvalidSpec("spec: not a mapping")
    try:
        return JobSpec.model_validate(record)
    except ValidationError as exc:
        raise spec_error(JobSpec, exc, flat_field_names) from None



make_spec = with_spec_keywords(make_spec)
