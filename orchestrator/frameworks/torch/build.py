"""`orch build --framework torch`: the PyTorch trainer image, offline like the TensorFlow one, built only on demand.

The wheels come from a wheelhouse the host downloads with --require-hashes against ``images/torch/requirements.lock``
(PyPI's torch and the CUDA libraries it links: about 3.2 GB), or, with ``--torch-index URL`` (or ORCH_TORCH_INDEX),
torch from a CPU-only index the host can reach and the rest from the host's own index, locked with hashes at the
first build (resolved, locked, then downloaded with --require-hashes, each package from its one index).
``image/install.sh`` installs them in a container of the base image with no network, the wheelhouse mounted
read-only, and the generic builder commits that container as the runtime image: one layer, and no copy of the wheels
into a build context. The trainer code is then one more layer, so a trainer-only change rebuilds in seconds.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Callable, Optional

from orchestrator.docker.engine import Engine
from orchestrator.errors import BuildError, InvalidSpec
from orchestrator.images.recipe import BuildOptions
from orchestrator.images import pins, wheels
from orchestrator.images.builder import BuiltImage, build_image
from orchestrator.images.wheels import LOCK_NAME, read_lock, redact, verify, wheel_id
from orchestrator.paths import Paths, default_paths, recipe_dir

ENV_INDEX = "ORCH_TORCH_INDEX"  # the setting behind --torch-index, for a shell profile or CI
URL_PATTERN = r"https?://[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+"
# What the index given must provide; everything else (torch's dependencies, NumPy) comes from the host's own index,
# so that no package of the same name on the other index can stand in for it (dependency confusion).
FROM_INDEX = ("torch",)
Say = Callable[[str], None]


def recipe() -> Path:
    return recipe_dir("torch")


def pinned(name: str) -> str:
    """``name==version`` as the committed lock pins it (torch and NumPy keep their versions on any index)."""
    package = read_lock(recipe() / LOCK_NAME).packages[name]
    return f"{package.name}=={package.version}"


def index_download_args(url: str) -> list[str]:
    """pip's arguments to resolve, on the CPU-only index ``url`` alone, what it must provide: torch at the committed
    lock's version, without its dependencies (a CPU build, ``2.9.1+cpu``, which links no CUDA library).

    InvalidSpec (one line) for what is not an https URL (plain http needs --allow-insecure-index)."""
    if not re.fullmatch(URL_PATTERN, url):
        raise InvalidSpec(f"--torch-index (or ORCH_TORCH_INDEX): {redact(url)[:80]!r} is not an http(s) URL of a "
                          "package index, e.g. https://download.pytorch.org/whl/cpu")
    wheels.check_secure(url, "--torch-index (or ORCH_TORCH_INDEX)")
    return [*wheels.index_args(url), "--no-deps", *map(pinned, FROM_INDEX)]


def _index_key(url: str) -> str:
    """Names the wheelhouse of ``url``'s torch: the URL without its credentials, the pins, the lock's way."""
    key = f"pinned-by-index\0{redact(url)}\0{pinned('torch')}\0{pinned('numpy')}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _index_wheelhouse(url: str, paths: Paths, say: Say) -> Path:
    """The wheels of ``url``'s torch and of its dependencies on the host's index, in a cache folder named by the URL.

    At the first build: torch is resolved on ``url`` alone and downloaded with the hash it gave; the rest is resolved
    on the host's index alone with that very wheel; the lock (each package's version, sha256 and index) is written,
    and the rest downloaded with --require-hashes. Every later build checks the wheels against that lock."""
    folder = paths.wheelhouse / f"torch-index-{_index_key(url)}"
    lock_path = folder / LOCK_NAME
    if not (folder / ".complete").is_file():
        host, env = wheels.host_index()
        wheels.check_secure(host, "the host's package index (pip's index-url)")
        say(f"resolving torch on {redact(url)} and its dependencies on {redact(host)} (host pip, for CPython "
            f"{wheels.IMAGE_PYTHON} manylinux, wheels only)")
        folder.mkdir(parents=True, exist_ok=True)
        own = pins.resolve(index_download_args(url), url, env, "torch")
        if sorted(p.name for p in own) != sorted(FROM_INDEX):
            raise BuildError(f"{redact(url)} resolved {', '.join(p.name for p in own)}, not {', '.join(FROM_INDEX)}")
        pins.download_pins(folder, own, [url], env, "torch")
        local = [w for w in folder.glob("*.whl") if wheel_id(w.name) in {(p.name, p.version) for p in own}]
        if len(local) != len(own):
            raise BuildError(f"the wheels {redact(url)} serves are not named by the versions it lists; delete {folder}")
        rest = pins.resolve([*wheels.index_args(host), *(f"{wheel_id(w.name)[0]} @ {w.as_uri()}" for w in local),
                               pinned("numpy")], host, env, "torch's dependencies")
        rest = [p for p in rest if p.name not in FROM_INDEX]
        lock = pins.write_lock(lock_path, pins.render_pins(own + rest, [
            f"torch from {url} and its dependencies from {host}, for CPython {wheels.IMAGE_PYTHON} manylinux",
            "x86_64, resolved and locked by `orch build --framework torch --torch-index` at its first build."]))
        say(f"downloading the {len(rest)} wheels torch needs from {redact(host)} (hashes checked)")
        pins.download_pins(folder, rest, [host], env, "torch's dependencies")
        verify(folder, lock)
        (folder / ".complete").write_text("ok\n")
    verify(folder, read_lock(lock_path))
    return folder


def build(options: BuildOptions, engine: Optional[Engine] = None, paths: Optional[Paths] = None,
          say: Optional[Say] = None) -> list[BuiltImage]:
    """Build orch's PyTorch trainer image unless it is up to date: the framework's recipe through the generic
    builder, with the wheels of PyPI's lock or of ``options.index``'s."""
    from orchestrator.frameworks.torch import FRAMEWORK

    engine = engine or Engine()
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    if options.index:
        index_download_args(options.index)  # a bad URL is refused before anything else
        engine.ping()  # and a missing engine before anything is resolved or downloaded
    recipe = FRAMEWORK.image_recipe()
    assert recipe is not None  # the folder's image/ and its tag
    wheels = _index_wheelhouse(options.index, paths, say) if options.index else None
    return build_image(recipe, options, engine=engine, paths=paths, say=say,
                       wheels=(wheels, wheels / LOCK_NAME) if wheels else None)
