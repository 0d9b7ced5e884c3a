"""A toy framework in one folder outside orch, registered at run time: replicas that average numbers by gossip for
some rounds. Its folder holds what a built-in framework's holds: its options and hooks (here), its image recipe
(image/: install.sh and a lock of one wheel, NumPy, which orch's shared trainer imports) and its trainer (trainer/gossip_loop.py), which orch's generic builder
makes into an image of its own."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from orchestrator import macros
from orchestrator.frameworks import Framework, FrameworkOptions

IMAGE = "gossip:1"


class GossipOptions(FrameworkOptions):
    """A toy: replicas that average numbers by gossip for some rounds."""

    name: Literal["gossip"] = Field("gossip", description="the framework")
    rounds: int = Field(3, ge=1, le=100, description="Rounds of gossip.")

    training_fields: ClassVar[tuple[str, ...]] = ("rounds",)

    def check(self, workers: int, global_batch: int) -> None:
        if self.rounds > 10 and workers > 4:
            raise ValueError("rounds: more than 10 rounds gossip among at most 4 workers")


class Gossip(Framework):
    name = "gossip"
    options = GossipOptions
    port = 4242
    shm_mb = 128
    trainer_entry = "gossip_loop"

    def env(self, spec: Any, role: str, addresses: dict[Any, str]) -> dict[str, str]:
        # The rank differs by replica: a placeholder each backend fills (a value, or the pod's completion index).
        return {"GOSSIP_PEERS": ",".join(addresses.values()), "GOSSIP_RANK": macros.RANK}

    def describe(self, spec: Any, key: Any, addresses: dict[Any, str]) -> dict[str, Any]:
        return {"gossip": {"rank": list(addresses).index(key), "peers": len(addresses)}}

    def image_tags(self) -> dict[str, str]:
        return {self.name: IMAGE}


FRAMEWORK = Gossip()
