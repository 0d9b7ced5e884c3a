"""Runs inside PyTorch trainer containers: where a DistributedDataParallel step's time goes.

Every arm runs the trainer's own MLP (orch_trainer.torch_loop) at the per-rank batch, PROBE_GLOBAL (96) / N, on
random data, with the trainer's step (forward, loss, backward, SGD with momentum), one thread per core of the
rank's share. Each arm runs twice over: as orch's trainer used to pin a rank (every thread, gloo's among them,
on the rank's cores), and as it pins one now, the rank's own threads there and gloo's threads (those
init_process_group started) free on every core (keys ending in _step_pinned). The containers run unpinned;
the probe places its threads itself. The arms:
  compute: the step without any all-reduce (each rank steps on its own gradients);
  reduce:  the gradients' all-reduce alone, one flat tensor, back to back in the step's own thread;
  aligned: the same after a barrier, timing the all-reduce alone: what `orch bench allreduce` takes as its p50;
  manual:  the step, then its gradients' all-reduce flattened into one tensor in the step's own thread (no DDP);
  ddp:     DistributedDataParallel with its built-in all-reduce (C++), as a user's script runs it;
  view:    the same with gradient_as_bucket_view (the bucket is the gradients: no copy into it and back);
  orch:    DDP with orch's communication hook, which times each bucket in Python (the trainer as it runs).
Each arm runs PROBE_STEPS steps after PROBE_WARMUP, in PROBE_ROUNDS rounds whose order alternates; the ranks meet
at a barrier before each. Rank 0 prints one JSON line: each arm's ms per step (per all-reduce for reduce and
aligned), the median of its rounds. The ranks come from TF_CONFIG, as the benchmarks' probe runner sets it.
"""
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from orch_trainer.torch_env import set_interface
from orch_trainer.torch_loop import _models, _Timing
from orch_trainer.worker import place, threads_left_free
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

config = json.loads(os.environ["TF_CONFIG"])
hosts, rank = config["cluster"]["worker"], config["task"]["index"]
world = len(hosts)
master, _, _ = hosts[0].rpartition(":")
os.environ.update(MASTER_ADDR=master, MASTER_PORT="29500", RANK=str(rank), WORLD_SIZE=str(world))
GLOBAL = int(os.environ.get("PROBE_GLOBAL", "96"))
STEPS, WARMUP = int(os.environ.get("PROBE_STEPS", "500")), int(os.environ.get("PROBE_WARMUP", "50"))
ROUNDS = int(os.environ.get("PROBE_ROUNDS", "3"))
per = GLOBAL // world

FREE = os.sched_getaffinity(0)  # the container's cores: it runs unpinned
CORES = os.cpu_count() or 1
EACH = max(1, CORES // world)
MINE = ({rank % CORES} if world >= CORES else set(range(rank * EACH, (rank + 1) * EACH))) & FREE or FREE  # cpuset()
torch.set_num_threads(len(MINE))  # as the trainer: one thread per core of the rank's share
set_interface()
with threads_left_free(FREE) as GLOO:  # gloo's threads: its store, device loop and workers, as the trainer frees them
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)


def arrange(pinning: str) -> None:
    """"all": every thread on the rank's cores, as orch's trainer pinned a rank before gloo started its threads;
    "step": gloo's threads free on every core, the rank's other threads on its cores, as the trainer does now."""
    place(os.listdir("/proc/self/task"), MINE)
    if pinning == "step":
        place(GLOO, FREE)


torch.manual_seed(0)
x = torch.rand(per * 64, 784)
y = torch.randint(0, 10, (per * 64,))
loss_fn = torch.nn.CrossEntropyLoss()
MLP = _models(torch)["mlp"]


def stepper(kind: str):
    """One step of arm ``kind`` as a function of the step's index."""
    model = MLP()
    params = list(model.parameters())
    net = model
    if kind in ("ddp", "view", "orch"):
        net = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=kind == "view")
        if kind == "orch":
            net.register_comm_hook(None, _Timing(dist, world).hook)
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def step(i: int) -> None:
        first = (i % 64) * per
        loss = loss_fn(net(x[first:first + per]), y[first:first + per])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if kind == "manual":
            grads = [p.grad for p in params]
            flat = _flatten_dense_tensors(grads).div_(world)
            dist.all_reduce(flat)
            for grad, reduced in zip(grads, _unflatten_dense_tensors(flat, grads)):
                grad.copy_(reduced)
        optimizer.step()
    return step


flat = torch.ones(sum(p.numel() for p in MLP().parameters()))


def reduce_only(_i: int) -> None:
    dist.all_reduce(flat)


def timed(step) -> float:
    """ms per step of ``step``: STEPS of them after WARMUP, from a barrier."""
    for i in range(WARMUP):
        step(i)
    dist.barrier()
    started = time.perf_counter()
    for i in range(STEPS):
        step(i)
    return (time.perf_counter() - started) / STEPS * 1000


def aligned() -> float:
    """The median all-reduce, each after a barrier (the bench's p50; the slowest rank's as the bench reports it)."""
    times = []
    for i in range(WARMUP + STEPS):
        dist.barrier()
        began = time.perf_counter()
        dist.all_reduce(flat)
        if i >= WARMUP:
            times.append(time.perf_counter() - began)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return statistics.median(slowest.tolist()) * 1000


ARMS = ("compute", "reduce", "aligned", "manual", "ddp", "view", "orch")
PINNINGS = ("all", "step") if world > 1 else ("all",)
samples: dict[str, list[float]] = {f"{arm}{'' if p == 'all' else '_step_pinned'}": []
                                   for p in PINNINGS for arm in ARMS}
runs = [(p, arm) for p in PINNINGS for arm in ARMS]
for r in range(ROUNDS):
    for pinning, arm in runs if r % 2 == 0 else reversed(runs):
        arrange(pinning)
        dist.barrier()
        ms = aligned() if arm == "aligned" else timed(reduce_only if arm == "reduce" else stepper(arm))
        samples[f"{arm}{'' if pinning == 'all' else '_step_pinned'}"].append(ms)
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print(json.dumps({"workers": world, "global_batch": GLOBAL, "rounds": samples,
                      **{f"{key}_ms_per_step": statistics.median(v) for key, v in samples.items()}}), flush=True)
