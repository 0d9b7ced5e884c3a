"""The toy's trainer: each replica starts from its rank, and for every round writes its number into the job's shared
folder, waits for every peer's, and takes their mean. Its "test accuracy" is the share of the last round's numbers
that already were that mean (1.0 once they agree). Standard library only."""
from __future__ import annotations

import json
import os
import time
from typing import Any

from . import contract
from .reporter import Reporter
from .worker import leave


def run(reporter: Reporter, job: dict[str, Any], worker: int, num_workers: int, data_dir: str) -> None:
    rank, peers = int(os.environ["GOSSIP_RANK"]), os.environ["GOSSIP_PEERS"].split(",")
    folder = os.path.join(reporter.out_dir, contract.SHARED_DIR, "gossip")
    os.makedirs(folder, exist_ok=True)
    reporter.event(contract.EVENT_START, stage="training")
    began, value = time.perf_counter(), float(rank)
    for round_ in range(job["rounds"]):
        mine = os.path.join(folder, f"{round_}-{rank}")
        with open(mine + ".tmp", "w") as f:
            json.dump(value, f)
        os.replace(mine + ".tmp", mine)
        heard: list[float] = []
        while len(heard) < len(peers):
            names = [os.path.join(folder, f"{round_}-{i}") for i in range(len(peers))]
            if all(os.path.exists(n) for n in names):
                heard = [float(json.load(open(n))) for n in names]
            else:
                time.sleep(0.05)
                reporter.heartbeat(time.time())
        value = sum(heard) / len(heard)
    agreed = sum(h == value for h in heard) / len(heard)
    leave(reporter, {"v": contract.CONTRACT_VERSION, "worker": worker, "num_workers": num_workers,
                     "train_seconds": time.perf_counter() - began, "test_accuracy": agreed, "value": value, "rounds": job["rounds"],
                     "peers": len(peers)}, num_workers)
