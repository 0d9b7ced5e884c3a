"""Where a JAX step across processes goes: bare processes on this host, no containers, no orch.

Usage: python benchmarks/investigations/jax_steps.py [--python VENV/bin/python] [--ranks 1 2 3] [--calls 200]

The interpreter given must have the JAX image's lock installed:
    python -m venv v && v/bin/pip install --require-hashes --no-deps -r orchestrator/frameworks/jax/image/requirements.lock

For each N it starts N processes of itself on 127.0.0.1 and times, per call, after 20 untimed ones:
  step        orch's trainer's step: the MLP's forward, backward and Adam, jitted over a global batch of 96 sharded
              across the processes, the parameters replicated (XLA all-reduces each gradient);
  flat        the same step with the gradients, the loss and the correct count flattened into one vector and
              summed by one psum (shard_map): one all-reduce per step, as DDP's buckets do;
  allreduce   one all-reduce of 80 KB (the MLP's gradients) alone, every process in lockstep;
  gap         the same all-reduce with about 4 ms of NumPy work (one BLAS thread) between calls, as a step's compute
              sits between its collectives.
Prints one line per mode and N. Notes: jax-steps.md beside this file.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

MODES = ("step", "flat", "allreduce", "gap")


def worker(rank: int, ranks: int, port: int, calls: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import linen as nn
    from jax.flatten_util import ravel_pytree
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    if ranks > 1:
        jax.distributed.initialize(f"127.0.0.1:{port}", ranks, rank)
    mesh = Mesh(np.array(jax.devices()), ("w",))
    rep, sh = NamedSharding(mesh, P()), NamedSharding(mesh, P("w"))

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.relu(nn.Dense(15)(nn.relu(nn.Dense(25)(x)))))

    model, tx, batch = MLP(), optax.adam(1e-3), 96
    with jax.default_device(jax.local_devices()[0]):
        params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 784)))
        state = tx.init(params)
    put = lambda tree: jax.tree.map(lambda a: jax.make_array_from_process_local_data(rep, np.asarray(a)), tree)  # noqa: E731

    def step(p, o, x, y):
        def loss_of(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits
        (loss, logits), g = jax.value_and_grad(loss_of, has_aux=True)(p)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o, loss, (logits.argmax(-1) == y).sum()

    def flat(p, o, x, y):
        def loss_of(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).sum() / batch, logits
        (loss, logits), g = jax.value_and_grad(loss_of, has_aux=True)(p)
        vector, unravel = ravel_pytree(g)
        correct = (logits.argmax(-1) == y).sum().astype(vector.dtype)
        v = jax.lax.psum(jnp.concatenate([vector, jnp.stack([loss, correct])]), "w")
        u, o = tx.update(unravel(v[:-2]), o, p)
        return optax.apply_updates(p, u), o, v[-2], v[-1]

    x_local = np.random.default_rng(rank).random((batch // ranks, 784), np.float32)
    y_local = np.zeros(batch // ranks, np.int32)
    x = jax.make_array_from_process_local_data(sh, x_local, (batch, 784))
    y = jax.make_array_from_process_local_data(sh, y_local, (batch,))
    gradients = jax.make_array_from_process_local_data(sh, np.ones((1, 20_000), np.float32), (ranks, 20_000))
    summed = jax.jit(lambda a: a.sum(0), out_shardings=rep)
    fns = {"step": jax.jit(step, donate_argnums=(0, 1), out_shardings=(rep,) * 4),
           "flat": jax.jit(jax.shard_map(flat, mesh=mesh, in_specs=(P(), P(), P("w"), P("w")), out_specs=(P(),) * 4),
                           donate_argnums=(0, 1))}
    w = np.random.default_rng(0).random((300, 300))
    for mode in MODES:
        p, o = put(params), put(state)
        times = []
        for i in range(20 + calls):
            if mode == "gap":
                for _ in range(3):
                    w = w @ w / 300
            began = time.perf_counter()
            if mode in fns:
                p, o, _, _ = fns[mode](p, o, x, y)
                jax.block_until_ready(p)
            else:
                summed(gradients).block_until_ready()
            if i >= 20:
                times.append(time.perf_counter() - began)
        if rank == 0:
            print(f"{mode:10s} N={ranks}  median {1e3 * sorted(times)[len(times) // 2]:.3f} ms per call", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--worker", type=int, nargs=3, help=argparse.SUPPRESS)  # rank, ranks, port
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker, args.calls)
        return 0
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    for ranks in args.ranks:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen([args.python, __file__, "--calls", str(args.calls), "--worker", str(r), str(ranks),
                                   str(port)], env=env, stderr=subprocess.DEVNULL) for r in range(ranks)]
        if any(p.wait() != 0 for p in procs):
            print(f"N={ranks}: a process failed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
