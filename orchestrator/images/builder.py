"""`orch build`: each framework's trainer images, built offline from a wheelhouse the host downloads (see wheels.py).

The builder knows no framework: it builds what a framework's folder declares (``images.recipe.ImageRecipe``), the
recipe's runtime and one layer of trainer code on it, and touches no other framework's image."""
from __future__ import annotations

import hashlib
import io
import re
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, IO, Iterable, Optional

from orchestrator import __version__
from orchestrator.docker.engine import Engine
from orchestrator.errors import BuildError, ImageMissing, OrchError
from orchestrator.images.bootstrap import BASE_PACKAGES, BUILD_BASE_PACKAGES, bootstrap_bases
from orchestrator.images.recipe import BuildOptions, ImageRecipe
from orchestrator.images.wheels import LOCK_NAME, REQUIREMENTS, check_fresh, fetch, read_lock, select
from orchestrator.labels import LABEL_INPUTS, LABEL_KIND
from orchestrator.paths import Paths, default_paths, trainer_dir

DEFAULT_BASE = "orch-base:bookworm"
# The base plus a C++ compiler, for a recipe that compiles (its ops/ folder): only its build stage runs on it.
DEFAULT_BUILD_BASE = "orch-build-base:bookworm"
# The trainer lands in /opt/orch/trainer, the image's PYTHONPATH.
TRAINER_PARENT = "/opt"
# A recipe's own C++ sources, which its Dockerfile compiles on the build base (see compiles()).
OPS = "ops"

Say = Callable[[str], None]


@dataclass(frozen=True)
class BuiltImage:
    """One image `orch build` made or found up to date."""

    tag: str
    built: bool
    seconds: float
    size: int


def _requirements(images: Path) -> list[Path]:
    """What the lock is generated from; the image installs the lock alone."""
    return [images / name for name in REQUIREMENTS]


def wheelhouse(paths: Paths, say: Say, recipe: Path) -> Path:
    """The wheels of a recipe's lock (the folder ``recipe``), exactly the lock's: downloaded by
    the host's pip with --require-hashes into a cache folder named by the lock's digest, and checked against the
    lock's hashes at every use."""
    lock = read_lock(recipe / LOCK_NAME)
    target = paths.wheelhouse / lock.digest
    try:
        fetch(target, lock, say)
    except PermissionError as exc:
        raise OrchError(f"cannot write the wheelhouse cache ({exc.filename}), perhaps left by an earlier `sudo orch "
                        f"build`; `sudo chown -R $USER {paths.cache}`, or set ORCH_CACHE_DIR") from None
    return target


# Modules of orch's that the trainer runs as they are, standard library only: one source for host and image.
SHARED_WITH_TRAINER = ("contract.py", "rendezvous.py")
# A recipe is a Dockerfile (built with the lock's wheels as its context) or an install script (run in a container of
# the base, the wheels mounted, and committed: no copy of gigabytes of wheels into a context).
DOCKERFILE, INSTALL = "Dockerfile", "install.sh"


def runtime_tag(recipe: ImageRecipe) -> str:
    """The runtime image of ``recipe``: its interpreter, packages and environment, which its images add a layer to."""
    return f"orch-{recipe.name}-runtime:{__version__}"


def trainer_files(recipe: ImageRecipe) -> list[tuple[str, bytes]]:
    """(name under /opt, content) pairs of ``recipe``'s trainer layer: orch's shared trainer package, the modules
    shared with the host, the recipe's trainer modules (flat, beside the shared ones) and ``entries.py``, which names
    each framework's entry module. No other framework's code."""
    prefix = "orch/trainer/orch_trainer"
    trainer = trainer_dir()
    files = [(f"{prefix}/{p.relative_to(trainer).as_posix()}", p.read_bytes()) for p in sorted(trainer.rglob("*.py"))]
    package = Path(__file__).resolve().parent.parent
    files += [(f"{prefix}/{name}", (package / name).read_bytes()) for name in SHARED_WITH_TRAINER]
    files += [(f"{prefix}/{p.name}", p.read_bytes()) for p in recipe.trainer]
    # Beside the package, on the images' PYTHONPATH: run at every interpreter's start (see the file).
    files.append(("orch/trainer/sitecustomize.py", (package / "images" / "sitecustomize.py").read_bytes()))
    files.append((f"{prefix}/entries.py", ('"""Each framework\'s trainer entry module (written by orch build)."""\n'
                                           f"ENTRIES = {dict(sorted(recipe.entries.items()))!r}\n").encode()))
    taken = [name for name, _ in files]
    if len(taken) != len(set(taken)):
        raise BuildError(f"two trainer modules share a name: {sorted({n for n in taken if taken.count(n) > 1})}")
    return files


def compiles(images: Path) -> bool:
    """Whether a recipe compiles sources of its own (its ops/ folder), so that its build stage needs a build base."""
    return (images / OPS).is_dir()


def _runtime_files(images: Path, lock: Optional[Path] = None) -> list[tuple[str, Path]]:
    """(name in the build context, file) pairs of the runtime image's own inputs: the recipe, its lock (``lock``
    where the wheels come from elsewhere than the committed one) and its ops; the wheels follow from the lock,
    which names each one's sha256."""
    ops = sorted(p for p in (images / OPS).glob("*") if p.is_file()) if compiles(images) else []
    recipe = DOCKERFILE if (images / DOCKERFILE).is_file() else INSTALL
    if not (images / recipe).is_file():
        raise BuildError(f"{images} holds neither a {DOCKERFILE} nor an {INSTALL}")
    return [(recipe, images / recipe), (LOCK_NAME, lock or images / LOCK_NAME), *((f"{OPS}/{p.name}", p) for p in ops)]


def _inputs_digest(images: Path, base_id: str, trainer: Optional[list[tuple[str, bytes]]] = None,
                   build_base_id: str = "", lock: Optional[Path] = None, env: tuple[str, ...] = ()) -> str:
    """Digest of everything an image is built from; without ``trainer``, of the runtime image."""
    h = hashlib.sha256(f"{__version__}\0{base_id}\0{build_base_id}\0{chr(0).join(env)}\0".encode())
    files = [(name, path.read_bytes()) for name, path in _runtime_files(images, lock)]
    for name, data in [*files, *(trainer or [])]:
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def _tar_info(name: str, mode: int, size: int = 0, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode, info.size, info.mtime = mode, size, 0  # content decides, not when a file was touched
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _runtime_context(fileobj: IO[bytes], images: Path, wheels: Path, lock: Path) -> None:
    """A Dockerfile recipe's build context: the Dockerfile, the lock, its ops and the lock's wheels (nothing else)."""
    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        locked = select(wheels, read_lock(lock))
        wheel_files = [(f"wheelhouse/{w.name}", w) for w in locked]
        for name, path in [*_runtime_files(images, lock), *wheel_files]:
            with open(path, "rb") as f:
                tar.addfile(_tar_info(name, 0o644, path.stat().st_size), f)
    fileobj.seek(0)


def trainer_archive(recipe: ImageRecipe) -> bytes:
    """The trainer layer as a tar to unpack under TRAINER_PARENT, readable by any container user."""
    files = trainer_files(recipe)
    dirs = sorted({parent.as_posix() for name, _ in files for parent in Path(name).parents if parent != Path(".")})
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in dirs:
            tar.addfile(_tar_info(name, 0o755, directory=True))
        for name, data in files:
            tar.addfile(_tar_info(name, 0o644, len(data)), io.BytesIO(data))
    return buffer.getvalue()


def _install_runtime(engine: Engine, recipe: ImageRecipe, base_ref: str, wheels: Path, lock: Path, tag: str,
                     labels: dict[str, str], say: Say) -> None:
    """An install.sh recipe's runtime: the script run in a container of the base with no network, the wheels
    mounted read-only at /wheels and the script and lock at /recipe, then the container committed as ``tag``."""
    with tempfile.TemporaryDirectory(prefix=f"orch-{recipe.name}-recipe-") as tmp:
        folder = Path(tmp)
        (folder / INSTALL).write_bytes((recipe.folder / INSTALL).read_bytes())
        (folder / LOCK_NAME).write_bytes(lock.read_bytes())
        folder.chmod(0o755)
        for f in folder.iterdir():
            f.chmod(0o755)
        config = {"Env": list(recipe.env), "Entrypoint": ["python3", "-m", "orch_trainer"], "Cmd": None,
                  "WorkingDir": "/tmp", "Labels": labels}
        engine.run_to_image(base_ref, ["sh", f"/recipe/{INSTALL}"], {str(wheels): "/wheels", tmp: "/recipe"},
                            tag, config, lambda line: say(f"  {line}") if line.strip() else None)


def build_image(recipe: ImageRecipe, options: Optional[BuildOptions] = None, engine: Optional[Engine] = None,
                paths: Optional[Paths] = None, say: Optional[Say] = None,
                wheels: Optional[tuple[Path, Path]] = None) -> list[BuiltImage]:
    """Build the images of one framework's ``recipe``, one per kind of its tags, unless they are up to date; no
    other framework's image is touched.

    Two steps, each skipped when its inputs' digest matches the label of the image it made: the runtime image
    (the recipe from the base and the wheelhouse of its lock), then per image kind one commit that adds the
    trainer code (``trainer_files``) and the labels to it. A recipe that compiles (its ops/ folder) builds its
    deps stage on a build base: by default orch's build base with orch's base, else ``options.base`` itself.
    ``wheels`` (folder, lock) installs another lock's wheels than the committed one (PyTorch's CPU-only index).
    """
    options = options or BuildOptions()
    engine = engine or Engine()
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    images, base = recipe.folder, options.base
    lock = wheels[1] if wheels else images / LOCK_NAME
    if wheels is None:
        check_fresh(read_lock(lock), images)  # requirements edited without `make lock`
    dockerfile = (images / DOCKERFILE).is_file()
    engine.ping()
    base_ref = base or DEFAULT_BASE
    bases: list[tuple[str, bool, tuple[str, ...]]] = [(base_ref, base is None, BASE_PACKAGES)]
    build_args, build_base_id = {"BASE": base_ref}, ""
    if compiles(images):
        build_ref = options.build_base or (DEFAULT_BUILD_BASE if base is None else base)
        bases.append((build_ref, options.build_base is None and base is None, BUILD_BASE_PACKAGES))
        build_args["BUILD_BASE"] = build_ref
    _present(engine, bases, options.bootstrap, options.mirror, say)
    if compiles(images):
        build_base_id = engine.image_id(build_args["BUILD_BASE"])
    base_id = engine.image_id(base_ref)
    env = () if dockerfile else recipe.env
    runtime_digest = _inputs_digest(images, base_id, build_base_id=build_base_id, lock=lock, env=env)
    archive, trainer = trainer_archive(recipe), trainer_files(recipe)
    digest = _inputs_digest(images, base_id, trainer, build_base_id=build_base_id, lock=lock, env=env)
    refs = recipe.tags
    pending = [kind for kind in refs
               if options.force or (engine.image_labels(refs[kind]) or {}).get(LABEL_INPUTS) != digest]
    results = [BuiltImage(refs[k], False, 0.0, engine.image_size(refs[k])) for k in refs if k not in pending]
    for kind in refs:
        if kind not in pending:
            say(f"{refs[kind]} is up to date")
    if not pending:
        return results
    runtime = runtime_tag(recipe)
    replaced_runtime = None
    if options.force or (engine.image_labels(runtime) or {}).get(LABEL_INPUTS) != runtime_digest:
        folder = wheels[0] if wheels else wheelhouse(paths, say, images)
        say(f"building {runtime} (the interpreter and the Python packages) from {base_ref}, offline")
        replaced_runtime = (engine.image_labels(runtime) is not None) and engine.image_id(runtime)
        labels = {LABEL_KIND: f"{recipe.name}-runtime", LABEL_INPUTS: runtime_digest}
        if dockerfile:
            with tempfile.TemporaryFile() as context:
                _runtime_context(context, images, folder, lock)
                _stream_build(engine.build(context, runtime, "runtime", build_args, labels), say)
        else:
            _install_runtime(engine, recipe, base_ref, folder, lock, runtime, labels, say)
    for kind in pending:
        tag = refs[kind]
        say(f"building {tag}: the trainer code on {runtime}")
        started = time.monotonic()
        previous = (engine.image_labels(tag) is not None) and engine.image_id(tag)
        engine.add_layer(runtime, TRAINER_PARENT, archive, tag, {LABEL_INPUTS: digest, LABEL_KIND: kind})
        results.append(BuiltImage(tag, True, time.monotonic() - started, engine.image_size(tag)))
        if previous and previous != engine.image_id(tag):
            engine.remove_image_if_unused(previous)  # the image this tag replaced would linger untagged
    if replaced_runtime and replaced_runtime != engine.image_id(runtime):
        engine.remove_image_if_unused(replaced_runtime)  # only now: the old trainer images sat on it
    return sorted(results, key=lambda r: r.tag)


def _present(engine: Engine, bases: list[tuple[str, bool, tuple[str, ...]]], bootstrap: bool, mirror: str,
             say: Say) -> None:
    """Make sure the base images of ``bases`` (ref, whether it is one of orch's own, its packages) are present: orch's
    own are bootstrapped when asked, together; any other must be pulled or loaded by the user."""
    missing = [(ref, orchs, packages) for ref, orchs, packages in bases if engine.image_labels(ref) is None]
    for ref, orchs, _ in missing:
        if not orchs:
            raise ImageMissing(f"base image {ref} is not present; `docker pull` or `docker load` it first")
        if not bootstrap:
            raise ImageMissing(f"base image {ref} is not present; run `orch build --bootstrap-base` "
                               "(debootstrap, as root through sudo) or `orch build --base IMAGE` with an image "
                               "you have")
    bootstrap_bases(engine, [(ref, packages) for ref, _, packages in missing], mirror, say)


# A recipe's own refusal: a line its RUN step prints, starting "orch: ", to say what to do (e.g. a build base
# without g++); the engine colours a step's stderr. Only whole lines: the step's own echo of its command holds
# the same words whatever failed.
RECIPE_SAYS = re.compile(r"(?:\x1b\[[0-9;]*m)*orch: (.+)")


def _stream_build(records: Iterable[Any], say: Say) -> None:
    tail: list[str] = []
    for record in records:
        if "error" in record:
            said = [m[1].strip() for m in map(RECIPE_SAYS.match, tail[-10:]) if m]
            message = f"image build failed: {said[-1] if said else record['error'].strip()}"
            raise BuildError(message, details="\n".join(tail[-10:]))
        text = (record.get("stream") or "").rstrip()
        if not text:
            continue
        tail.append(text)
        if text.startswith("Step "):
            say(text)
