#!/bin/sh
# orch's PyTorch runtime, installed by `orch build --framework torch` in a container of the base image with no
# network: the wheelhouse the host downloaded is mounted read-only at /wheels and this folder at /recipe. orch
# commits the container as the runtime image: one layer, where a Dockerfile would first copy 3 GB of wheels
# into the build context and a layer of their own.
set -eu
python3 -m venv /opt/venv
# The lock is the whole closure, each wheel's sha256 checked again; nothing is resolved (--no-deps).
/opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels --no-compile --require-hashes --no-deps \
    -r /recipe/requirements.lock
/opt/venv/bin/pip uninstall -y -q pip setuptools wheel
site=$(echo /opt/venv/lib/python3*/site-packages)
# What no CPU run loads, each removed by name (see the README's PyTorch section for the sizes):
# - cuDNN's kernel libraries: libcudnn.so.9, which torch links, opens them only when a GPU runs a layer;
# - torch's GPU linear algebra (it links cuSOLVER, which the image leaves out), opened only on a GPU;
# - C++ headers and CMake files, for building extensions against torch, and every test folder and cache.
rm -f "$site"/nvidia/cudnn/lib/libcudnn_*.so.9 "$site"/torch/lib/libtorch_cuda_linalg.so
rm -rf "$site"/torch/include "$site"/torch/share/cmake "$site"/nvidia/*/include
find /opt/venv -depth \( -name __pycache__ -o -name tests -o -name '*.pyc' \) -exec rm -rf {} +
# Compiled once here: the containers run with a read-only root and write no bytecode.
/opt/venv/bin/python -m compileall -q -j0 --invalidation-mode unchecked-hash /opt/venv/lib
# The image must import what the trainer uses, with no GPU: fail the build here rather than the first run.
/opt/venv/bin/python -c "import torch, torch.distributed, torch.nn; assert torch.distributed.is_gloo_available()"
# and MPI's library, which --transport shm loads (loaded, not initialised: no ranks here).
/opt/venv/bin/python -c "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; MPI.Get_library_version()"
test -x /opt/venv/bin/mpiexec
