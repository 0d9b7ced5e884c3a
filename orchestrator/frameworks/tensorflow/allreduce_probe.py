"""TensorFlow's probe for `orch bench allreduce`: the collective ring of MultiWorkerMirroredStrategy.

The harness (``bench_scripts/allreduce.py``) runs it as ``probe.py`` beside itself, in each rank's container or
host process. ``measure`` returns rank 0's result (None on the other ranks); ``leave`` ends the rank and says
whether the harness may then return normally."""
from __future__ import annotations

import os
import time
from typing import Any

API = "tensorflow"

TF_CHUNK = 10


def measure(sizes: list[int], iterations: int, warmup: int) -> dict[str, Any] | None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=32 << 20, implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    rows = []
    for size in sizes:
        tensor = tf.ones([max(1, size // 4)], dtype=tf.float32)

        @tf.function  # type: ignore[untyped-decorator]  # TensorFlow is Any on the host: none is installed there
        def chunk() -> Any:
            def body(i: Any, acc: Any) -> tuple[Any, Any]:
                reduced = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tensor))
                return i + 1, acc + strategy.experimental_local_results(reduced)[0][0]
            return tf.while_loop(lambda i, _: i < TF_CHUNK, body, (tf.constant(0), tf.constant(0.0)))[1]

        calls = max(1, -(-iterations // TF_CHUNK))
        for _ in range(max(1, warmup // TF_CHUNK)):
            chunk().numpy()  # the first traces and connects
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            chunk().numpy()
            times.append((time.perf_counter() - started) / TF_CHUNK)
        rows.append({"bytes": int(tensor.shape[0]) * 4, "samples": times})
    resolver = strategy.cluster_resolver
    rank = resolver.task_id if resolver is not None and resolver.task_type else 0
    _leave_together(rank, strategy.num_replicas_in_sync)
    first = rank == 0
    return {"api": "tensorflow", "ranks": strategy.num_replicas_in_sync, "library": f"TensorFlow {tf.__version__}",
            "rows": rows} if first else None


def _leave_together(rank: int, ranks: int, timeout: float = 60.0) -> None:
    """Wait until every rank is done: a peer may still be reading this rank's last all-reduce buffer."""
    folder = os.environ.get("ORCH_SHARED_DIR") or os.environ.get("BENCH_SHARED_DIR")
    if not folder or ranks == 1:
        return
    mine = os.path.join(folder, f"allreduce-done-{rank}")
    with open(mine, "w") as f:
        f.write("done\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(folder, f"allreduce-done-{r}")) for r in range(ranks)):
            return
        time.sleep(0.05)


def leave() -> bool:
    return False  # TensorFlow's collective runtime can idle at exit; the measurement is written
