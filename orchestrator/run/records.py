"""The contract's records as the host reads them: events and results, validated, versioned.

Trainers write them with the standard library only (``contract.py`` names the fields); the host checks
every record against these models when it reads it: every number within its range (``MAX_*``), before any
arithmetic. A record that fails is refused with a one-line reason (``Refused``; ``parse_*`` give None), and a
contract version this orch does not know with ContractMismatch.
"""
from __future__ import annotations

import sys
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from orchestrator import contract
from orchestrator.errors import ContractMismatch
from orchestrator.safetext import one_line

# The range of every number a container reports, checked here before any arithmetic: wide enough for any real
# run, narrow enough that collect's sums, means, ratios and plots of them stay finite (an integer of 400 digits
# would overflow float(); a float of 1e300 would make a sum infinite).
MAX_WORKERS = 100_000  # a worker's index, the workers and replicas of a job
MAX_EPOCHS = 1_000_000
MAX_COUNT = 10**12  # samples, steps and batch sizes
MAX_SECONDS = 10**8  # a duration: about three years
MAX_TIME = 10**11  # a Unix time, in the year 5138
MAX_METRIC = 1e15  # the size of a loss or another figure
MAX_FIGURES = 64  # figures of one epoch in a result



def _normal(value: float) -> float:
    """A time must be 0 or a normal float: a denormal one (below 2.2e-308) is no measurement, and dividing by it
    overflows."""
    if value and abs(value) < sys.float_info.min:
        raise ValueError("a denormal number is not a time")
    return value


Index = Annotated[int, Field(ge=0, le=MAX_WORKERS)]
Workers = Annotated[int, Field(ge=0, le=MAX_WORKERS)]
Epoch = Annotated[int, Field(ge=1, le=MAX_EPOCHS)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS), AfterValidator(_normal)]
Time = Annotated[float, Field(ge=0, le=MAX_TIME), AfterValidator(_normal)]
Metric = Annotated[float, Field(ge=-MAX_METRIC, le=MAX_METRIC)]
Accuracy = Annotated[float, Field(ge=0, le=100)]  # a fraction, or a user's script's percent
Figure = Union[Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)], Metric, None]
FigureName = Annotated[str, StringConstraints(max_length=64)]


class Refused(ValueError):
    """A record that is not valid: its one-line reason."""


class _Record(BaseModel):
    # Unknown fields are ignored: a newer trainer of the same contract version may add figures. Every
    # number must be finite and within its range: a container's NaN, infinity or 400-digit integer never
    # reaches a table, a ratio or a plot.
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    v: int
    worker: Index
    time: Time = 0.0


class StartEvent(_Record):
    event: Literal["start"]
    stage: Literal["importing", "loading", "connecting", "training"]
    steps_per_epoch: Optional[Count] = None
    cpu_seconds: Optional[Seconds] = None  # the CPU the worker's process had used when the stage began


class ResumedEvent(_Record):
    event: Literal["resumed"]
    epoch: Epoch


class EpochEvent(_Record):
    event: Literal["epoch"]
    epoch: Epoch
    epochs: Optional[Epoch] = None
    loss: Optional[Metric] = None
    accuracy: Optional[Accuracy] = None
    val_loss: Optional[Metric] = None
    val_accuracy: Optional[Accuracy] = None
    seconds: Optional[Seconds] = None
    samples: Optional[Count] = None
    # Of ``seconds``, where Keras' fit() reports them: validation, reading the metrics across workers, the checkpoint.
    validation_seconds: Optional[Seconds] = None
    reduction_seconds: Optional[Seconds] = None
    checkpoint_seconds: Optional[Seconds] = None
    # Of the training steps' time, where the trainer measures them (PyTorch, MPI): the steps' own work, and the wait
    # for the gradients' all-reduce (PyTorch's backward hides part of it; MPI's blocking call hides none).
    compute_seconds: Optional[Seconds] = None
    allreduce_wait_seconds: Optional[Seconds] = None


class DoneEvent(_Record):
    event: Literal["done"]
    train_seconds: Seconds
    cpu_seconds: Optional[Seconds] = None
    test_accuracy: float = Field(ge=0, le=1)


class ErrorEvent(_Record):
    event: Literal["error"]
    message: str = Field(max_length=10_000)


Event = Annotated[Union[StartEvent, ResumedEvent, EpochEvent, DoneEvent, ErrorEvent], Field(discriminator="event")]


_EVENT = TypeAdapter(Event)


class Result(BaseModel):
    """A worker's result.json: what it trained, how long, and its own test accuracy."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    v: int
    worker: Index
    num_workers: Optional[Workers] = None
    replicas: Optional[Workers] = None
    global_batch: Optional[Count] = None
    per_worker_batch: Optional[Count] = None
    steps_per_epoch: Optional[Count] = None
    train_samples: Optional[Count] = None
    validation_samples: Optional[Count] = None
    test_samples: Optional[Count] = None
    epochs: list[Annotated[dict[FigureName, Figure], Field(max_length=MAX_FIGURES)]] = Field(
        default_factory=list, max_length=10_000)
    samples_per_epoch: list[Count] = Field(default_factory=list, max_length=10_000)
    resumed_from_epoch: Optional[Epoch] = None
    train_seconds: Optional[Seconds] = None
    test_accuracy: Optional[float] = Field(default=None, ge=0, le=1)


def _shown(value: Any, limit: int = 40) -> str:
    """A value a container chose, for a message: its repr (control characters escaped), at most ``limit`` long."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**limit else "a number too long to show"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _check_version(raw: dict[str, Any], what: str) -> None:
    version = raw.get("v")
    if version != contract.CONTRACT_VERSION:
        raise ContractMismatch(
            f"{what} is of contract version {_shown(version)}, and this orch reads version "
            f"{contract.CONTRACT_VERSION}; rebuild the images with `orch build` (or run the orch that built them)"
        )


def _refused(exc: ValidationError, what: str) -> Refused:
    """The first problem of a record, in one line: the field and what is wrong, without the value."""
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "record") or "the record"
    return Refused(one_line(f"{what} is refused: {where}: {first.get('msg', 'invalid')}", 240))


def event_of(raw: Any, what: str = "an event") -> Any:
    """The event in ``raw`` (a decoded JSON line); Refused (one line) if it is not a valid event, ContractMismatch
    if it is of another contract version."""
    if not isinstance(raw, dict):
        raise Refused(f"{what} is refused: not a JSON object")
    _check_version(raw, what)
    try:
        return _EVENT.validate_python(raw)
    except ValidationError as exc:
        raise _refused(exc, what) from None


def result_of(raw: Any, what: str = "a result") -> Result:
    """The result in ``raw``; Refused (one line) if it is not a valid result, ContractMismatch for another version."""
    if not isinstance(raw, dict):
        raise Refused(f"{what} is refused: not a JSON object")
    _check_version(raw, what)
    try:
        return Result.model_validate(raw)
    except ValidationError as exc:
        raise _refused(exc, what) from None


def parse_event(raw: Any, what: str = "an event") -> Optional[Any]:
    """The event in ``raw`` (a decoded JSON line), None if it is not a valid event; ContractMismatch if it
    is of another contract version."""
    try:
        return event_of(raw, what)
    except Refused:
        return None


def parse_result(raw: Any, what: str = "a result") -> Optional[Result]:
    """The result in ``raw``, None if it is not a valid result; ContractMismatch for another version."""
    try:
        return result_of(raw, what)
    except Refused:
        return None
