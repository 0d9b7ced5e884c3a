#!/bin/sh
# The toy's runtime, installed by orch's generic builder in a container of orch's base with no network: the
# wheelhouse mounted read-only at /wheels, this folder at /recipe.
set -eu
python3 -m venv /opt/venv
/opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels --require-hashes --no-deps \
    -r /recipe/requirements.lock
/opt/venv/bin/pip uninstall -y -q pip setuptools wheel
/opt/venv/bin/python -c "import numpy"
