"""JAX's probe for `orch bench allreduce`: a jitted sum across the processes' CPU devices, which XLA runs as an
all-reduce over gloo (the collective of JAX's data-parallel step).

The harness (``bench_scripts/allreduce.py``) runs it as ``probe.py`` beside itself, in each rank's container or
host process. ``measure`` returns rank 0's result (None on the other ranks); ``leave`` ends the rank and says
whether the harness may then return normally."""
from __future__ import annotations

import os
import time
from typing import Any

API = "jax"


def measure(sizes: list[int], iterations: int, warmup: int) -> dict[str, Any] | None:
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    ranks = int(os.environ["JAX_NUM_PROCESSES"])
    if ranks > 1:  # the variables orch (or the host reference) set, as Kubeflow Trainer's JAX runtime does
        jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"], ranks, int(os.environ["JAX_PROCESS_ID"]))
    rank = jax.process_index()
    mesh = Mesh(np.array(jax.devices()), ("ranks",))
    summed = jax.jit(lambda x: x.sum(0), out_shardings=NamedSharding(mesh, P()))
    rows = []
    for size in sizes:
        count = max(1, size // 4)
        x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("ranks")), np.ones((1, count), np.float32),
                                                   (ranks, count))
        times = []
        for i in range(warmup + iterations):
            if ranks > 1:
                multihost_utils.sync_global_devices("probe")
            started = time.perf_counter()
            summed(x).block_until_ready()
            if i >= warmup:
                times.append(time.perf_counter() - started)
        slowest = np.asarray(multihost_utils.process_allgather(np.array(times))).reshape(ranks, -1).max(0) \
            if ranks > 1 else np.array(times)
        rows.append({"bytes": count * 4, "samples": slowest.tolist()})
    if ranks > 1:
        multihost_utils.sync_global_devices("probe done")
    return {"api": API, "ranks": ranks, "library": f"JAX {jax.__version__} gloo",
            "rows": rows} if rank == 0 else None


def leave() -> bool:
    return False
