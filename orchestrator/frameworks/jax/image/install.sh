#!/bin/sh
# orch's JAX runtime, installed by `orch build --framework jax` in a container of the base image with no network:
# the wheelhouse the host downloaded is mounted read-only at /wheels and this folder at /recipe. orch commits the
# container as the runtime image, one layer.
set -eu
python3 -m venv /opt/venv
# The lock is the whole closure, each wheel's sha256 checked again; nothing is resolved (--no-deps).
/opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels --no-compile --require-hashes --no-deps \
    -r /recipe/requirements.lock
/opt/venv/bin/pip uninstall -y -q pip setuptools wheel
find /opt/venv -depth \( -name __pycache__ -o -name tests -o -name '*.pyc' \) -exec rm -rf {} +
# Compiled once here: the containers run with a read-only root and write no bytecode.
/opt/venv/bin/python -m compileall -q -j0 --invalidation-mode unchecked-hash /opt/venv/lib
# The image must import what the trainer uses, and run its collectives on gloo: fail the build here, not the first run.
/opt/venv/bin/python -c "import jax, optax, flax.linen; from jax.experimental import multihost_utils; \
assert jax.config.jax_cpu_collectives_implementation == 'gloo', jax.config.jax_cpu_collectives_implementation"
# and MPI's library, which --transport shm loads (loaded, not initialised: no ranks here).
/opt/venv/bin/python -c "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; MPI.Get_library_version()"
test -x /opt/venv/bin/mpiexec
