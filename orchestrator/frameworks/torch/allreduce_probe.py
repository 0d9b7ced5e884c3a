"""PyTorch's probe for `orch bench allreduce`: gloo's all_reduce (DistributedDataParallel's backend).

The harness (``bench_scripts/allreduce.py``) runs it as ``probe.py`` beside itself, in each rank's container or
host process. ``measure`` returns rank 0's result (None on the other ranks); ``leave`` ends the rank and says
whether the harness may then return normally."""
from __future__ import annotations

import time
from typing import Any

API = "gloo"


def measure(sizes: list[int], iterations: int, warmup: int) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env://, from the variables orch (or the host reference) set
    rank, ranks = dist.get_rank(), dist.get_world_size()
    rows = []
    for size in sizes:
        tensor = torch.ones(max(1, size // 4), dtype=torch.float32)
        times = []
        for i in range(warmup + iterations):
            dist.barrier()
            started = time.perf_counter()
            dist.all_reduce(tensor)
            if i >= warmup:
                times.append(time.perf_counter() - started)
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.reduce(slowest, 0, op=dist.ReduceOp.MAX)
        rows.append({"bytes": int(tensor.numel()) * 4, "samples": slowest.tolist()})
    dist.barrier()
    dist.destroy_process_group()
    return {"api": "gloo", "ranks": ranks, "library": f"PyTorch {torch.__version__} gloo",
            "rows": rows} if rank == 0 else None


def leave() -> bool:
    return False
