"""The frameworks' data caches for a user's script, offline: linked where the loaders look, and Keras' MNIST.

Where the caches come in the image (Swarm, Kubernetes: ``ORCH_LOADERS_DIR``), ``link()`` makes the places the
loaders look (Keras' ``/tmp/.keras``, torchvision's ``../data`` and ``./data``) links to them, at the start of every
interpreter of the container (the image's ``sitecustomize``); on Compose they are mounted there instead.

Keras' MNIST is the one loader whose cache orch cannot fill with the file it expects.

``tf.keras.datasets.mnist.load_data()`` (tf-keras 2 and Keras 3 alike) asks ``get_file`` for ``mnist.npz``
with the sha256 of Keras' own copy. orch's copy (data/loaders.py on the host) holds the same four arrays, made
from MNIST's verified pickle, but is a different file, and no registry orch can reach ships Keras' one; so
``get_file`` would try to download it, which fails in a container with no network.

When ``ORCH_KERAS_MNIST`` names orch's copy (`orch up --script` sets it), the image's ``sitecustomize`` calls
``install()``: once Keras' ``get_file`` module is imported, its ``get_file`` is wrapped so that a request for
exactly that sha256 gets orch's copy, after its own sha256 is checked against the one orch recorded beside it
(``mnist.npz.sha256``). Every other request goes to Keras' ``get_file`` unchanged. Standard library only.
"""
from __future__ import annotations

import functools
import hashlib
from typing import Any
import importlib.abc
import importlib.machinery
import os
import sys

ENV_KERAS_MNIST = "ORCH_KERAS_MNIST"
ENV_LOADERS_DIR = "ORCH_LOADERS_DIR"
# The sha256 of Keras' mnist.npz, which both Keras' loaders pass to get_file.
KERAS_MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
# The modules that define get_file, in tf-keras and in Keras 3.
GET_FILE_MODULES = ("tf_keras.src.utils.data_utils", "keras.src.utils.file_utils")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def served(path: str) -> str:
    """``path`` once its sha256 is the one recorded beside it; otherwise an error that says why."""
    try:
        with open(path + ".sha256", encoding="ascii") as f:
            expected = f.read().strip()
        actual = _sha256(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise RuntimeError(f"orch: cannot serve Keras' MNIST from {path}: {exc}") from None
    if actual != expected:
        raise RuntimeError(f"orch: the MNIST served to Keras at {path} has sha256 {actual[:16]}…, recorded "
                           f"{expected[:16]}…; it is not orch's file")
    return path


def wrap(get_file: Any, path: str) -> Any:
    """``get_file`` that hands over ``path`` for Keras' MNIST and defers everything else."""
    @functools.wraps(get_file)
    def orch_get_file(*args: Any, **kwargs: Any) -> Any:
        wanted = kwargs.get("file_hash") or kwargs.get("md5_hash")
        if wanted == KERAS_MNIST_SHA256:
            path_served = served(path)
            print(f"orch: Keras' mnist.npz served from orch's copy of MNIST ({path_served}, its sha256 checked)",
                  file=sys.stderr, flush=True)
            return path_served
        return get_file(*args, **kwargs)
    setattr(orch_get_file, "__orch_served__", path)  # noqa: B010 - a function's own attribute, which types lack
    return orch_get_file


class _Loader(importlib.abc.Loader):
    """The module's own loader, and then get_file wrapped."""

    def __init__(self, inner: Any, path: str) -> None:
        self.inner, self.path = inner, path

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        get_file = getattr(module, "get_file", None)
        if callable(get_file):
            module.get_file = wrap(get_file, self.path)

    def __getattr__(self, name: Any) -> Any:  # get_source, get_code, ... as the module's own loader answers them
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, path: str) -> None:
        self.path = path

    def find_spec(self, name: Any, path: Any = None, target: Any = None) -> Any:
        if name not in GET_FILE_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.path)
        return spec


def links(environ: Any = os.environ) -> list[tuple[str, str]]:
    """(link, target) of each place a loader looks, where the caches come in the image at ``ORCH_LOADERS_DIR``:
    Keras' cache (``/tmp/.keras``, where it falls back when ``~/.keras`` is not writable) and torchvision's roots
    ``../data`` and ``./data`` of a script run from its own folder (``ORCH_OUTPUT_DIR``)."""
    folder = environ.get(ENV_LOADERS_DIR, "")
    if not folder:
        return []
    out = [("/tmp/.keras", f"{folder}/keras")]
    own = environ.get("ORCH_OUTPUT_DIR", "").rstrip("/")
    if own:
        out += [(f"{os.path.dirname(own)}/data", f"{folder}/torchvision"), (f"{own}/data", f"{folder}/torchvision")]
    return out


def link(environ: Any = os.environ) -> None:
    """Make each of ``links``, unless something is there already (another rank's link, or the user's folder)."""
    for path, target in links(environ):
        if not os.path.lexists(path):
            try:
                os.symlink(target, path)
            except OSError:  # another process of the container made it first, or the place is not writable
                pass


def install(environ: Any = os.environ) -> bool:
    """Serve Keras' MNIST from the file ``ORCH_KERAS_MNIST`` names, if it names one; say whether it did."""
    path = environ.get(ENV_KERAS_MNIST, "")
    if not path or any(isinstance(f, _Finder) for f in sys.meta_path):
        return False
    sys.meta_path.insert(0, _Finder(path))
    return True
