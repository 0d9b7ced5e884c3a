"""Seed 002 with orch's rules: PyTorch DistributedDataParallel over gloo, one rank per container, or with one
container the serial baseline, the same loop with no process group.

- **The batch is the global batch**, split among the ranks (``--batch-per-worker`` makes each rank's batch fixed,
  as the seed did, and the global batch grows with N).
- **Data is sharded once**, by DistributedSampler: every epoch one permutation of the training split, the same on
  every rank, rank r taking every N-th sample of it. So rank r's k-th batch holds samples r, r + N, ... of the
  k-th global batch the serial run takes, and DDP's mean of the ranks' mean gradients is the serial run's gradient
  of that batch. Dropout's masks are drawn per global batch from the seed, the epoch and the step, each rank
  taking its samples' rows, so 1 and N ranks make the same updates up to the order of floating-point sums.
- **Per-worker figures are measured**: each rank counts the samples it trained on, and times its steps, what of
  them went to waiting for the gradients' all-reduce (the part backward could not hide) and the all-reduces'
  time in flight (a communication hook times each bucket).
- **Test accuracy comes from each rank's own weights**, on the whole test split, with no collective.

Rank 0 saves a checkpoint (``torch.save``) into the job's shared folder after every epoch; a restarted group
loads it and resumes. gloo's timeout is set a little beyond orch's own startup and stall timeouts, so orch names
a missing or stalled rank first, and a dead peer fails the job rather than hanging it.
"""
from __future__ import annotations

import datetime
import os
import time
from typing import Any

import numpy as np

from . import contract, data
from .reporter import Reporter
from .mpi_wait import crowded
from .worker import cores_of, leave, pin, result_of, threads_left_free, weights_digest, write_predictions

CHECKPOINT_SUBDIR = "torch"
CHECKPOINT_FILE = "checkpoint.pt"
MLP_UNITS = (25, 15, 10)  # seed 000's MLP, as the TensorFlow trainer's
DROPOUT = 0.5
EVAL_CHUNK = 1024  # samples per evaluation call
TIMEOUT_MARGIN = 30  # seconds gloo waits beyond orch's own timeouts


def _models(torch: Any) -> Any:
    nn, F = torch.nn, torch.nn.functional

    class CNN(nn.Module):  # type: ignore[name-defined]  # torch's own, imported at run time
        """Seed 002's CNN: Conv 32 3x3, ReLU, max-pool 2; Conv 64 3x3, ReLU, max-pool 2; Linear 3136 -> 128, ReLU,
        dropout; Linear 128 -> 10. Padding keeps 28 x 28, so 7 x 7 x 64 = 3,136 features reach the first Linear."""

        hidden = 128

        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
            self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
            self.fc1 = nn.Linear(3136, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x: Any, mask: Any = None) -> Any:
            x = F.max_pool2d(F.relu(self.conv1(x.view(-1, 1, 28, 28))), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            h = F.relu(self.fc1(x.flatten(1)))
            return self.fc2(h * mask if mask is not None else h)

    class MLP(nn.Module):  # type: ignore[name-defined]  # torch's own, imported at run time
        """Seed 000's MLP: 784 -> 25 -> 15 -> 10, ReLU."""

        hidden = 0

        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2, self.fc3 = nn.Linear(784, 25), nn.Linear(25, 15), nn.Linear(15, 10)

        def forward(self, x: Any, mask: Any = None) -> Any:
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    return {"cnn": CNN, "mlp": MLP}


class _Timing:
    """The gradients' all-reduce per bucket, timed by DDP's communication hook (it runs gloo's all-reduce as
    DDP's default hook does: the bucket divided by the world size, summed over the ranks)."""

    def __init__(self, dist: Any, world: int) -> None:
        self.dist, self.world = dist, world
        self.calls: list[float] = []  # when each bucket of this step was handed over
        self.in_flight: list[float] = []  # each bucket's all-reduce, handed over to done

    # Unannotated on purpose: DDP inspects a hook's signature and refuses any annotation of its bucket or its return
    # but torch's own classes, and with postponed annotations every annotation here would be a string.
    def hook(self, _state, bucket):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        self.calls.append(began)
        tensor = bucket.buffer().div_(self.world)
        future = self.dist.all_reduce(tensor, async_op=True).get_future()

        def done(fut: Any) -> Any:
            self.in_flight.append(time.perf_counter() - began)
            return fut.value()[0]

        return future.then(done)


def _mask(torch: Any, seed: int, epoch: int, step: int, rows: int, hidden: int, rank: int, world: int) -> Any:
    """Dropout's mask of this rank's rows of global batch ``step`` (scaled to keep the expectation)."""
    if not hidden:
        return None
    generator = torch.Generator().manual_seed(((seed * 1_000_003 + epoch) * 1_000_003 + step) % (2**63))
    keep = torch.rand(rows * world, hidden, generator=generator) >= DROPOUT
    return keep[rank::world].float() / (1.0 - DROPOUT)


def _floats(torch: Any, x: Any) -> Any:
    """A batch as the model takes it: images kept as bytes scaled to float32 in [0, 1], bit for bit what
    ``data.floats`` gives in NumPy (both divide in float32); any other tensor as it is."""
    return x.float().div_(data.PIXEL_SCALE) if x.dtype == torch.uint8 else x


def _evaluate(torch: Any, net: Any, x: Any, y: Any, loss_fn: Any) -> tuple[float, int, int, np.ndarray]:
    """(summed loss, correct, count, predictions) of ``net`` on (x, y), in bounded pieces."""
    net.eval()
    total, correct, predictions = 0.0, 0, []
    with torch.no_grad():
        for first in range(0, len(x), EVAL_CHUNK):
            out = net(_floats(torch, x[first:first + EVAL_CHUNK]))
            total += float(loss_fn(out, y[first:first + EVAL_CHUNK]))
            guess = out.argmax(1)
            correct += int((guess == y[first:first + EVAL_CHUNK]).sum())
            predictions.append(guess.numpy())
    net.train()
    return total, correct, len(x), np.concatenate(predictions) if predictions else np.zeros(0, np.int64)


def run(reporter: Reporter, job: dict[str, Any], rank: int, world: int, data_dir: str) -> None:
    """Train, write this rank's result from its own weights, wait for the others and leave (never returns)."""
    reporter.event(contract.EVENT_START, stage="importing")
    if world > 1 and (int(os.environ.get("RANK", "-1")) != rank or int(os.environ.get("WORLD_SIZE", "0")) != world):
        raise RuntimeError(f"RANK/WORLD_SIZE {os.environ.get('RANK')}/{os.environ.get('WORLD_SIZE')} do not "
                           f"match replica {rank} of {world}")
    over_shm = world > 1 and job["transport"] == "shm"
    if over_shm:  # MPI first, as its ranks were started, before torch's threads
        from .torch_mpi import MpiHook, communicator

        comm, mpi = communicator(rank, world)
    import torch
    import torch.distributed as dist

    from .torch_env import set_interface

    if world > 1:
        # DDP's constructor reads torch._dynamo.utils.get_optimize_ddp_mode(), which imports torch._dynamo: about
        # 0.8 s of CPU. Here, before the ranks meet, a rank that is early imports it while a later one still
        # imports torch, instead of every rank importing it after they have all met.
        import torch._dynamo  # noqa: F401

    # A rank's own work comes before it meets the others and before it is pinned: the data, which ranks that
    # share a core under the pinning (3 on 2 cores) would otherwise load in turn on that core while another
    # core idles. pin() moves the threads already running; those the rank starts later inherit its share.
    reporter.event(contract.EVENT_START, stage="loading")
    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = data.load(job["dataset"], data_dir, job["samples"], job["seed"])
    container_cores = os.sched_getaffinity(0)
    cpus = pin(os.environ.get(contract.ENV_CPUS))
    torch.set_num_threads(job["threads"] or len(cpus))
    timeout = datetime.timedelta(seconds=max(job["startup_timeout"], job["stall_timeout"]) + TIMEOUT_MARGIN)
    interface, gloo_threads = None, []
    reporter.event(contract.EVENT_START, stage="connecting")
    if world > 1:
        interface = set_interface()
        # The rank's steps run on its share of the cores; gloo's threads (its TCP store, its device loop and its
        # workers, all started here, eagerly: not under TORCH_GLOO_LAZY_INIT) run on every core the container
        # has. Pinned beside the steps, the gradients' all-reduce at 2 ranks took 3.3-3.6 ms in place against
        # 1.0-1.3 ms with gloo's threads free (benchmarks/investigations/step_cost.py --framework torch). The
        # result names the cores they had at the end.
        with threads_left_free(container_cores) as gloo_threads:
            dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world, timeout=timeout)
    torch.manual_seed(job["seed"])  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    x_tr, y_tr = torch.from_numpy(x_tr), torch.from_numpy(y_tr.astype(np.int64))
    x_va, y_va = torch.from_numpy(x_va[rank::world]), torch.from_numpy(y_va[rank::world].astype(np.int64))
    x_te_t, y_te_t = torch.from_numpy(x_te), torch.from_numpy(y_te.astype(np.int64))
    model = _models(torch)[job["model"]]()
    timing: Any = (MpiHook(torch, comm, mpi, crowded(world, len(container_cores))) if over_shm else
                   _Timing(dist, world))
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model)
        net.register_comm_hook(None, timing.hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=job["learning_rate"], momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    summed_loss = torch.nn.CrossEntropyLoss(reduction="sum")

    global_batch = job["global_batch"]
    per = global_batch // world
    sampler = torch.utils.data.DistributedSampler(range(len(x_tr)), num_replicas=world, rank=rank, shuffle=True,
                                                  seed=job["seed"], drop_last=True)
    steps = len(sampler) // per
    if steps < 1:
        raise RuntimeError(f"a shard of {len(sampler)} samples holds no batch of {per}")

    shared = os.path.join(reporter.out_dir, contract.CHECKPOINT_DIR, CHECKPOINT_SUBDIR)
    path = os.path.join(shared, CHECKPOINT_FILE)
    first, before, epochs_log = 0, 0.0, []
    if os.path.isfile(path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first = int(state["epoch"])
        # The epochs before the checkpoint and their training time: the result covers the whole run, not only
        # this attempt (an attempt that resumes after the last epoch trains nothing itself).
        before, epochs_log = float(state.get("train_seconds", 0.0)), list(state.get("epochs_log", []))
    if world > 1:
        seen = torch.tensor([first, -first], dtype=torch.int64)
        dist.all_reduce(seen, op=dist.ReduceOp.MAX)
        if int(seen[0]) != -int(seen[1]):  # e.g. a shared volume that showed one rank an older checkpoint
            raise RuntimeError(f"the ranks restored different epochs ({-int(seen[1])} to {int(seen[0])})")

    reporter.event(contract.EVENT_START, stage="training", steps_per_epoch=steps)
    how = "serial" if world == 1 else "DDP over MPI's shared memory" if over_shm else f"DDP over gloo on {interface}"
    reporter.say(f"worker {rank}/{world}: {len(x_tr)} train samples, shard of {len(sampler)}, global batch "
                 f"{global_batch} ({per} per worker{', fixed by --batch-per-worker' if job['batch_per_worker'] else ''}),"
                 f" {steps} steps per epoch, {how}, "
                 f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    resumed_from = first + 1 if first < job["epochs"] else None
    if first and resumed_from:
        reporter.event(contract.EVENT_RESUMED, epoch=first + 1)
        reporter.say(f"worker {rank} resumed from a checkpoint at epoch {first + 1}")
    if world > 1:
        dist.barrier()  # the clock starts when every rank is ready
    started = time.perf_counter()
    beat = 0.0
    for epoch in range(first, job["epochs"]):
        began = time.perf_counter()
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler))[:steps * per], dtype=torch.int64).view(steps, per)
        loss_sum = correct = samples = 0.0
        waited = 0.0
        timing.in_flight.clear()
        for step in range(steps):
            batch = order[step]
            x, y = _floats(torch, x_tr[batch]), y_tr[batch]
            out = net(x, _mask(torch, job["seed"], epoch, step, per, model.hidden, rank, world))
            loss = loss_fn(out, y)
            optimizer.zero_grad(set_to_none=True)
            timing.calls.clear()
            loss.backward()
            if timing.calls:  # backward returns once every bucket's all-reduce is done: the wait is what it added
                waited += time.perf_counter() - timing.calls[-1]
            optimizer.step()
            with torch.no_grad():
                loss_sum += float(loss) * len(y)
                correct += int((out.argmax(1) == y).sum())
                samples += len(y)
            now = time.time()
            if now - beat >= 1.0:  # progress orch can see; a dead or paused peer stops it on every rank
                beat = now
                reporter.heartbeat(now)
        trained = time.perf_counter() - began
        validation_began = time.perf_counter()
        val_loss, val_correct, val_count, _ = _evaluate(torch, model, x_va, y_va, summed_loss)
        validation_seconds = time.perf_counter() - validation_began
        totals = torch.tensor([loss_sum, correct, samples, val_loss, val_correct, val_count], dtype=torch.float64)
        reduce_began = time.perf_counter()
        if world > 1:
            dist.all_reduce(totals)
        reduction_seconds = time.perf_counter() - reduce_began
        t = totals.tolist()
        record = {"epoch": epoch + 1, "seconds": 0.0, "samples": int(samples),
                  "loss": t[0] / max(t[2], 1), "accuracy": t[1] / max(t[2], 1),
                  "val_loss": t[3] / max(t[5], 1), "val_accuracy": t[4] / max(t[5], 1),
                  "steps": steps, "train_seconds": trained, "allreduce_wait_seconds": waited,
                  "compute_seconds": trained - waited, "allreduce_in_flight_seconds": float(sum(timing.in_flight)),
                  "validation_seconds": validation_seconds, "reduction_seconds": reduction_seconds,
                  "checkpoint_seconds": 0.0}
        checkpoint_began = time.perf_counter()
        record["seconds"] = checkpoint_began - began  # the checkpointed copy: its own saving not yet counted
        if rank == 0:
            os.makedirs(shared, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1,
                        "train_seconds": before + checkpoint_began - started, "epochs_log": [*epochs_log, record]},
                       path + ".tmp")
            os.replace(path + ".tmp", path)  # whole or not at all: a restart never reads half a checkpoint
        if world > 1:
            dist.barrier()  # no rank goes on before rank 0's checkpoint of this epoch is written
        record = {**record, "seconds": time.perf_counter() - began,
                  "checkpoint_seconds": time.perf_counter() - checkpoint_began}
        epochs_log.append(record)
        reporter.event(contract.EVENT_EPOCH, epochs=job["epochs"], **record)
        reporter.say(f"worker {rank} epoch {epoch + 1}/{job['epochs']} loss {record['loss']:.4f} acc "
                     f"{record['accuracy']:.4f} val_acc {record['val_accuracy']:.4f} samples {int(samples)} "
                     f"({record['seconds']:.2f} s, all-reduce wait {waited:.2f} s)")
        reporter.heartbeat(time.time())
    train_seconds = before + time.perf_counter() - started

    _, test_correct, test_count, predictions = _evaluate(torch, model, x_te_t, y_te_t, summed_loss)
    test_accuracy = test_correct / max(test_count, 1)
    write_predictions(reporter, x_te, y_te, predictions)
    result = result_of(job, rank, world, per, steps, len(x_tr), len(x_te), epochs_log, resumed_from, train_seconds,
                       test_accuracy, cpus, batch_per_worker=job["batch_per_worker"], gloo_threads=len(gloo_threads),
                       gloo_threads_cpus=cores_of(gloo_threads), threads=torch.get_num_threads(),
                       torch=torch.__version__, backend="gloo" if world > 1 else None, gloo_interface=interface,
                       transport=("shm" if over_shm else "gloo") if world > 1 else None,
                       allreduce_wait=("yield" if timing.yielding else "poll") if over_shm else None,
                       weights_sha256=weights_digest(p.detach().numpy() for p in model.parameters()))
    leave(reporter, result, world)
