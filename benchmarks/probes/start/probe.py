"""The start ladder's probe (benchmarks/floor.py): orch runs it as a user's script on every replica, in place of its
trainer, so that the same run, with the same containers, network and volumes, does only what any job of the
framework must do before it can train, and leaves as orch's trainer leaves.

    probe.py import FRAMEWORK MODULES    import MODULES ("a, b, c": what the framework's trainer cannot run
                                         without, floor.py's FRAMEWORKS, as its start floor imports them)
    probe.py connect FRAMEWORK MODULES   that, then join the job's group as the framework does and all-reduce one
                                         number

FRAMEWORK is mpi, mwms, torch or jax. Either way each replica then marks itself done in the run's shared folder and
leaves once every replica has (orch's trainer waits for its peers' results the same way: worker.leave).
"""
import importlib
import os
import sys
import time

mode, framework, modules = sys.argv[1:4]
workers = int(os.environ.get("ORCH_NUM_WORKERS", "1"))
index = int(os.environ.get("ORCH_WORKER_INDEX", "0"))
finish = None

for module in modules.split(", "):
    importlib.import_module(module)
if mode == "connect" and workers > 1:
    if framework == "torch":
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.all_reduce(torch.ones(1))
    elif framework == "mwms":
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.ones(())), axis=None)
    elif framework == "mpi":
        from mpi4py import MPI

        MPI.COMM_WORLD.allreduce(1)
        finish = MPI.Finalize
    elif framework == "jax":
        import jax
        import numpy as np
        from jax.experimental import multihost_utils

        jax.distributed.initialize()  # orch's launcher makes the environment a cluster JAX detects
        multihost_utils.process_allgather(np.ones(1))
    else:
        sys.exit(f"probe.py: unknown framework {framework!r}")

shared = os.environ.get("ORCH_SHARED_DIR", "")
if shared and workers > 1:
    os.makedirs(shared, exist_ok=True)
    open(os.path.join(shared, f"probe-{index}"), "w").close()
    while len([n for n in os.listdir(shared) if n.startswith("probe-")]) < workers:
        time.sleep(0.02)
if finish is not None:
    finish()
sys.stdout.flush()
os._exit(0)
