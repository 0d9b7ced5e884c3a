"""Each framework's own spec options: one frozen model per framework, told apart by ``name``.

They live apart from the frameworks' planning code (``frameworks/``), which imports the spec, so that
``spec.py`` can build its union from them with no import cycle. A new framework adds its model here,
to ``FrameworkOptions`` and to ``OPTION_MODELS``.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class TensorFlowOptions(BaseModel):
    """TensorFlow MultiWorkerMirroredStrategy: the step loop, the tf.data pipeline and the all-reduce."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["tensorflow"] = Field("tensorflow", description="the framework")
    steps_per_execution: int = Field(50, ge=1, le=10_000, description="Training steps per tf.function call.")
    log_reduction: Literal["epoch", "first", "sum"] = Field(
        "epoch",
        description="Per-step metrics: none, read across workers once per epoch (epoch); Keras' steps, which read "
                    "them across workers every step, logs kept local (first) or also all-reduced (sum).",
    )
    cache: bool = Field(True, description="Keep each worker's shard in memory after the first pass (tf.data cache).",
                        json_schema_extra={"default_text": "cache"})
    prefetch: int = Field(-1, ge=-1, le=1024, description="Batches tf.data prepares ahead; -1 = AUTOTUNE, 0 = none.")
    shuffle_buffer: int = Field(
        0, ge=0, le=10_000_000, description="tf.data shuffle buffer in samples; 0 = the whole shard, a full shuffle."
    )
    collective: Literal["ring", "auto"] = Field("ring", description="All-reduce implementation.")
    bytes_per_pack: int = Field(32 * 2**20, ge=0, le=2**31, description="All-reduce packing in bytes.")
    collective_timeout: float = Field(
        0, ge=0, le=86_400,
        description="TensorFlow's own all-reduce timeout (CommunicationOptions); 0 = off. Costs a thread per "
                    "all-reduce for that long, so orch's stall timeout is the default guard.",
    )


# A discriminated union: a spec's ``framework.name`` picks the model that validates the rest.
FrameworkOptions = Annotated[Union[TensorFlowOptions], Field(discriminator="name")]
OPTION_MODELS: dict[str, type[BaseModel]] = {"tensorflow": TensorFlowOptions}
