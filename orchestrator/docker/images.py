"""Images on the engine: inspect, import, build, and the one-layer and run-then-commit images orch makes."""
from __future__ import annotations

import re
from typing import IO, Any, Callable, Iterator, Optional

from orchestrator.docker.base import IMAGE_RUN_TIMEOUT, EngineBase, lines
from orchestrator.errors import BuildError, DockerError, ImageMissing


class ImageOps(EngineBase):
    """Image operations of ``Engine``."""

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
        return str(self._call("inspect image", lambda: self.client.images.get(ref)).id)

    def image_config(self, ref: str) -> dict[str, Any]:
        """Image ``ref``'s configuration (Env, Entrypoint, Cmd, WorkingDir, User); ImageMissing if absent."""
        return dict(self._call("inspect image", lambda: self.client.api.inspect_image(ref)).get("Config") or {})

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

    def push_image(self, ref: str, remote: str) -> None:
        """Tag image ``ref`` as ``remote`` (HOST/PATH/NAME:TAG) and push it, with the Docker CLI's credentials for
        that registry; DockerError with the registry's own words if it refuses."""
        repository, _, tag = remote.rpartition(":")
        self._call("tag image", lambda: self.client.api.tag(ref, repository, tag))
        api, quick = self.client.api, self.client.api.timeout
        api.timeout = IMAGE_RUN_TIMEOUT  # a first push of a base image's layers takes minutes
        try:
            records = self._call("push image", lambda: list(api.push(repository, tag=tag, stream=True, decode=True)))
        finally:
            api.timeout = quick
        errors = [str(r.get("error") or r.get("errorDetail", {}).get("message")) for r in records
                  if isinstance(r, dict) and (r.get("error") or r.get("errorDetail"))]
        if errors:
            raise DockerError(f"pushing {remote} failed: {errors[-1][:300]}")

    def import_image(self, stream: IO[bytes], repository: str, tag: str) -> None:
        """Create an image from a root filesystem tar stream (`docker import`), then tag it by the id in the
        engine's answer: Podman's service (4.3) would tag it ``repository:latest``, whatever tag it was given."""
        answer = self._call("import image", lambda: self.client.api.import_image_from_stream(stream))
        made = re.findall(r"sha256:[0-9a-f]{64}", str(answer))
        if not made:
            raise DockerError(f"importing {repository}:{tag} gave no image id: {str(answer)[:300]}")
        self._call("tag image", lambda: self.client.api.tag(made[-1], repository, tag))

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
                for line in lines(self.client.api.logs(container, stream=True, follow=True)):
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
