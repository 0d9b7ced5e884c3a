"""The container engine as orch sees it: the lazily made SDK client of the chosen engine (Docker's daemon or
Podman's service, ``docker/engines.py``), its errors in orch's terms, the time limits and the helpers every part of
the boundary shares. The parts are mixed into ``Engine`` (``docker/engine.py``)."""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

from orchestrator.docker import engines
from orchestrator.docker.engines import EngineKind
from orchestrator.errors import DockerError, EngineUnreachable, ImageMissing

ENGINE_TIMEOUT = 120  # seconds for one Engine API call (streams excepted)
COMPOSE_UP_TIMEOUT = 300  # creating and starting a project: seconds even for dozens of replicas
COMPOSE_DOWN_TIMEOUT = 120  # on top of the stop grace period
COMPOSE_QUICK = 30
STACK_DEPLOY_TIMEOUT = 300  # creating a stack's services and network; the tasks start in the background
STACK_RM_TIMEOUT = 120  # the services' removal is asked for; the tasks stop in the background
IMAGE_RUN_TIMEOUT = 3600  # an image's install step in a container, and the commit of its layer (gigabytes)
COPY_TIMEOUT = 1800  # `docker save` and `docker load` of a trainer image (1.4 GB) to another engine
ENGINE_HINT = engines.DOCKER.hint


def engine_address(name: Optional[str] = None) -> str:
    """The socket of the engine called ``name`` (as ``engines.get`` chooses it): for Docker, DOCKER_HOST, else the
    local socket."""
    return engines.get(name).address()


class EngineBase:
    """The SDK client, injectable, and the calls every part shares. ``kind``: the engine's name (docker, podman);
    None chooses as ``engines.get`` does ($ORCH_ENGINE, else Docker)."""

    def __init__(self, client: Any = None, kind: Optional[str] = None) -> None:
        self._client = client
        self.kind: EngineKind = engines.get(kind)

    def unreachable(self) -> EngineUnreachable:
        """The error for an engine that does not answer, saying where orch looked and what to do."""
        return EngineUnreachable(self.kind.unreachable())

    # -- clients -------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            import docker

            try:
                if self.kind is engines.DOCKER:  # DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, as docker reads
                    self._client = docker.from_env(timeout=ENGINE_TIMEOUT)
                else:
                    self._client = docker.DockerClient(base_url=self.kind.address(), timeout=ENGINE_TIMEOUT)
            except docker.errors.DockerException:
                raise self.unreachable() from None
        return self._client

    def _call(self, what: str, fn: Callable[[], Any], absent_ok: bool = False) -> Any:
        """What ``fn`` returns, with the SDK's errors in orch's terms; with ``absent_ok``, None where the engine has
        no such object (a removal of one already gone, an inspection of one never made)."""
        import docker
        import requests

        try:
            return fn()
        except docker.errors.ImageNotFound as exc:
            if absent_ok:
                return None
            raise ImageMissing(f"{what}: image not found ({first_line(exc)}); run `orch build`") from None
        except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
            if absent_ok and isinstance(exc, docker.errors.NotFound):
                return None
            if isinstance(exc, docker.errors.APIError):
                raise DockerError(f"{what}: {exc.explanation or first_line(exc)}") from None
            raise self.unreachable() from None

    # -- engine --------------------------------------------------------------------------------
    def ping(self) -> None:
        """Raise EngineUnreachable unless the engine answers."""
        self._call("ping", self.client.ping)

    def info(self) -> dict[str, Any]:
        """The engine's `docker info` (Podman's service answers the same call)."""
        info: dict[str, Any] = self._call("info", self.client.info)
        return info

    def remove_container(self, container_id: str) -> None:
        """Force-remove a container, ignoring one that is already gone. Here, not with the containers' part: the
        images' and volumes' parts remove their helper containers too."""
        self._call(f"remove container {container_id[:12]}",
                   lambda: self.client.api.remove_container(container_id, force=True), absent_ok=True)


def lines(chunks: Iterator[bytes], continued: Optional[Callable[[bytes], bytes]] = None) -> Iterator[str]:
    """The lines of a stream of byte chunks, decoded; a last line without its newline too. ``continued`` takes a
    chunk that goes on with a line begun before it, and gives what of it belongs to the line."""
    buffered = b""
    for chunk in chunks:
        if buffered and continued is not None:
            chunk = continued(chunk)
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace")
    if buffered:
        yield buffered.decode("utf-8", "replace")


def stamped_lines(frames: Iterator[bytes]) -> Iterator[str]:
    """The lines of a log stream read with the engine's timestamps, each line with its first record's timestamp.
    Every record begins with its time; a line written in parts (a print's text, flushed, then its newline) is
    several records where the engine stores each write apart, as Podman does: the later parts lose their timestamp,
    so that the line reads as it was written."""
    return lines(frames, _unstamped)


def _unstamped(frame: bytes) -> bytes:
    """A record without its leading timestamp, if it has one."""
    stamp, sep, rest = frame.partition(b" ")
    return rest if sep and _is_stamp(stamp) else frame


def _is_stamp(word: bytes) -> bool:
    from orchestrator.timestamps import parse_timestamp

    try:
        parse_timestamp(word.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return False
    return True


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1][:300]

