"""orch's images: run at every interpreter's start (it is on PYTHONPATH), it does nothing unless orch asked.

In a user's script's container (`orch up --script`), ``ORCH_KERAS_MNIST`` is set and Keras' MNIST loader is served
from orch's verified copy; where the frameworks' caches come in the image rather than mounted, ``ORCH_LOADERS_DIR``
names them and they are linked where the loaders look (orch_trainer/loaders.py). This file shadows Debian's
sitecustomize, which only installs apport's hook, and apport is not in the images.
"""
import os

if os.environ.get("ORCH_KERAS_MNIST") or os.environ.get("ORCH_LOADERS_DIR"):
    try:
        from orch_trainer import loaders

        loaders.link()
        loaders.install()
    except Exception as exc:  # an interpreter must start whatever happens here
        import sys

        print(f"orch: the frameworks' data caches are not served offline: {exc}", file=sys.stderr)
