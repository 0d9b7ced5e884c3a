"""The contract's records as the host reads them: events and results, validated, versioned.

Trainers write them with the standard library only (``contract.py`` names the fields); the host checks
every record against these models when it reads it, and refuses a contract version it does not know.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator import contract
from orchestrator.errors import ContractMismatch


class _Record(BaseModel):
    # Unknown fields are ignored: a newer trainer of the same contract version may add figures. Every
    # number must be finite: a container's NaN or infinity never reaches a table or a ratio.
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    v: int
    worker: int = Field(ge=0)
    time: float = 0.0


class StartEvent(_Record):
    event: Literal["start"]
    stage: Literal["importing", "connecting", "training"]
    steps_per_epoch: Optional[int] = None


class ResumedEvent(_Record):
    event: Literal["resumed"]
    epoch: int = Field(ge=1)


class EpochEvent(_Record):
    event: Literal["epoch"]
    epoch: int = Field(ge=1)
    epochs: Optional[int] = None
    loss: Optional[float] = None
    accuracy: Optional[float] = None
    val_loss: Optional[float] = None
    val_accuracy: Optional[float] = None
    seconds: Optional[float] = None
    samples: Optional[int] = None
    # Of ``seconds``, where Keras' fit() reports them: validation, reading the metrics across workers, the checkpoint.
    validation_seconds: Optional[float] = Field(None, ge=0)
    reduction_seconds: Optional[float] = Field(None, ge=0)
    checkpoint_seconds: Optional[float] = Field(None, ge=0)
    # Of the training steps' time, where the trainer measures them (PyTorch): the steps' own work, and the wait
    # for the gradients' all-reduce that backward could not hide.
    compute_seconds: Optional[float] = Field(None, ge=0)
    allreduce_wait_seconds: Optional[float] = Field(None, ge=0)


class DoneEvent(_Record):
    event: Literal["done"]
    train_seconds: float = Field(ge=0)
    test_accuracy: float = Field(ge=0, le=1)


class ErrorEvent(_Record):
    event: Literal["error"]
    message: str = Field(max_length=10_000)


Event = Annotated[Union[StartEvent, ResumedEvent, EpochEvent, DoneEvent, ErrorEvent], Field(discriminator="event")]


class _EventAdapter(BaseModel):
    record: Event


class Result(BaseModel):
    """A worker's result.json: what it trained, how long, and its own test accuracy."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    v: int
    worker: int = Field(ge=0)
    num_workers: Optional[int] = None
    replicas: Optional[int] = None
    global_batch: Optional[int] = None
    per_worker_batch: Optional[int] = None
    steps_per_epoch: Optional[int] = None
    train_samples: Optional[int] = None
    validation_samples: Optional[int] = None
    test_samples: Optional[int] = None
    epochs: list[dict[str, Union[int, float, None]]] = Field(default_factory=list, max_length=10_000)
    samples_per_epoch: list[int] = Field(default_factory=list, max_length=10_000)
    resumed_from_epoch: Optional[int] = None
    train_seconds: Optional[float] = Field(None, ge=0)
    test_accuracy: Optional[float] = Field(None, ge=0, le=1)


def _check_version(raw: dict[str, Any], what: str) -> None:
    version = raw.get("v")
    if version != contract.CONTRACT_VERSION:
        raise ContractMismatch(
            f"{what} is of contract version {version!r}, and this orch reads version {contract.CONTRACT_VERSION}; "
            "rebuild the images with `orch build` (or run the orch that built them)"
        )


def parse_event(raw: Any, what: str = "an event") -> Optional[Any]:
    """The event in ``raw`` (a decoded JSON line), None if it is not a valid event; ContractMismatch if it
    is of another contract version."""
    if not isinstance(raw, dict):
        return None
    _check_version(raw, what)
    try:
        return _EventAdapter(record=raw).record
    except ValidationError:
        return None


def parse_result(raw: Any, what: str = "a result") -> Optional[Result]:
    """The result in ``raw``, None if it is not a valid result; ContractMismatch for another version."""
    if not isinstance(raw, dict):
        return None
    _check_version(raw, what)
    try:
        return Result.model_validate(raw)
    except ValidationError:
        return None
