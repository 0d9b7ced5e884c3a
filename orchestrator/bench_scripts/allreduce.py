"""One all-reduce, timed, in each rank of an `orch bench allreduce` job (or of its bare host processes).

Run by orch as a user's script would be (`--script`), so the ranks are placed exactly as orch places a job's
replicas. Rank 0 writes what it measured as JSON to --out (default: allreduce.json in ORCH_OUTPUT_DIR).

- mpi: mpi4py's Allreduce, sum of float32, in place. Every rank waits at a barrier before each call, so a
  sample is the collective alone, not the ranks' skew; the sample is the slowest rank's time for that call.
- gloo: torch.distributed's all_reduce over gloo (what DistributedDataParallel uses on CPUs), sum of float32,
  met through the environment (MASTER_ADDR, RANK, WORLD_SIZE); a barrier before each call, as for mpi.
- tensorflow: MultiWorkerMirroredStrategy's ring all-reduce, as orch's trainer configures it (32 MiB packs).
  Ten all-reduces run to one tf.function call and a sample is the call's time over ten: Python's dispatch,
  which a training step pays once per many all-reduces, stays out of the figure.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

TF_CHUNK = 10


def _mpi(sizes: list[int], iterations: int, warmup: int) -> dict | None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rows = []
    for size in sizes:
        buffer = np.ones(max(1, size // 4), dtype=np.float32)
        times = np.empty(iterations)
        for i in range(warmup + iterations):
            comm.Barrier()
            started = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
            if i >= warmup:
                times[i - warmup] = time.perf_counter() - started
        slowest = np.empty_like(times)
        comm.Reduce(times, slowest, op=MPI.MAX, root=0)
        rows.append({"bytes": int(buffer.nbytes), "samples": slowest.tolist()})
    library = MPI.Get_library_version().splitlines()[0]
    return {"api": "mpi", "ranks": comm.size, "library": library, "rows": rows} if comm.rank == 0 else None


def _gloo(sizes: list[int], iterations: int, warmup: int) -> dict | None:
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


def _tensorflow(sizes: list[int], iterations: int, warmup: int) -> dict | None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=32 << 20, implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    rows = []
    for size in sizes:
        tensor = tf.ones([max(1, size // 4)], dtype=tf.float32)

        @tf.function
        def chunk():
            def body(i, acc):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", choices=("mpi", "tensorflow", "gloo"), required=True)
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="message sizes in bytes")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", help="where rank 0 writes its JSON")
    args = parser.parse_args()
    measured = {"mpi": _mpi, "gloo": _gloo, "tensorflow": _tensorflow}[args.api](args.sizes, args.iterations, args.warmup)
    if measured is not None:
        out = args.out or os.path.join(os.environ.get("ORCH_OUTPUT_DIR", "."), "allreduce.json")
        with open(out + ".tmp", "w") as f:
            json.dump(measured, f)
        os.replace(out + ".tmp", out)
    if args.api == "mpi":  # only once rank 0's file is written: MPI may end the other ranks' processes after this
        from mpi4py import MPI

        MPI.COMM_WORLD.Barrier()
        MPI.Finalize()
        return  # a normal exit: after Finalize, os._exit made Hydra SIGKILL the job now and then (3 in 12 runs)
    os._exit(0)  # TensorFlow's collective runtime can idle at exit; the measurement is written


if __name__ == "__main__":
    main()
