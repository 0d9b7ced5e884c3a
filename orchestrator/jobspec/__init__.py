"""The job spec: one frozen, validated description of a training job, typed from the CLI to the run record.

Generic fields (replicas, data, model, training, resources, engine, timeouts) sit on ``JobSpec``; each
framework's own options sit in ``JobSpec.framework``: the options model its framework registered
(``frameworks/<name>/options.py``), picked by ``name``; each backend's in ``JobSpec.backend_options``, the model
of ``backends/options.py`` that ``backend`` picks.
Field metadata is the one source of the CLI's flags (name, type, choices, default, help); patterns and flag
metadata live in ``fields``, error lines in ``messages``; the model in ``model``, its making in ``make``."""
from __future__ import annotations

from orchestrator.jobspec.fields import (DEFAULT_ROLE, NO_FLAG, ROLE_PATTERN, RUN_ID_PATTERN, SCRIPT_PATTERN, Role, flag,
                                         new_run_id)
from orchestrator.jobspec.keywords import SpecFields
from orchestrator.jobspec.make import load_spec, make_spec, script_fields
from orchestrator.jobspec.messages import shown
from orchestrator.jobspec.model import JobSpec, flat_field_names, spec_from

__all__ = ["DEFAULT_ROLE", "NO_FLAG", "ROLE_PATTERN", "RUN_ID_PATTERN", "SCRIPT_PATTERN", "JobSpec", "Role", "SpecFields",
           "flag", "flat_field_names", "load_spec", "make_spec", "new_run_id", "script_fields", "shown", "spec_from"]
