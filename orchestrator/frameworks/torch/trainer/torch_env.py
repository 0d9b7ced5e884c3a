"""gloo's interface, for orch's PyTorch trainer and for users' scripts (``python3 -m orch_trainer.torch_env
COMMAND...`` sets it, then runs the command in its place).

gloo advertises the address its host name resolves to, which in a container can be loopback, and then no peer
reaches it. GLOO_SOCKET_IFNAME names the interface instead (one name: not NCCL's ``^lo`` syntax); orch sets it to
the interface whose address routes to MASTER_ADDR, the cluster network, unless the user set it already.
Standard library only.
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct
import sys
import time
from typing import Any

SIOCGIFADDR = 0x8915
WAIT = 300.0  # seconds to wait for MASTER_ADDR to resolve: orch's default startup timeout


def _address_of(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:  # no IPv4 address on it
            return None
    return socket.inet_ntoa(packed[20:24])


def _route(master: str) -> tuple[bool, str | None]:
    """Whether ``master`` resolves, and the name of the interface this host reaches it through (None if none)."""
    try:
        target = socket.gethostbyname(master)
    except OSError:
        return False, None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))  # UDP: no packet is sent, the kernel only picks the route and the source
            local = s.getsockname()[0]
    except OSError:
        return True, None
    for _index, name in socket.if_nameindex():
        if _address_of(name) == local:
            return True, name
    return True, None


def cluster_interface(master: str) -> str | None:
    """The name of the interface this host reaches ``master`` through, or None if none can be found."""
    return _route(master)[1]


def set_interface(env: Any = os.environ, wait: float = WAIT) -> str | None:
    """Set GLOO_SOCKET_IFNAME (unless set) for a job with a MASTER_ADDR; return the interface used. MASTER_ADDR
    may not resolve yet (its container or pod is still starting): try again for up to ``wait`` seconds, then say
    whether the name never resolved or no interface reaches it."""
    if "MASTER_ADDR" not in env:
        return None
    if not env.get("GLOO_SOCKET_IFNAME"):
        master = env["MASTER_ADDR"]
        deadline = time.monotonic() + wait
        resolved, name = _route(master)
        while name is None and time.monotonic() < deadline:
            time.sleep(0.5)
            resolved, name = _route(master)
        if not resolved:
            # On a Docker network a replica's name exists while its container runs: one that never came, or
            # that left before this one looked (a rank 0 whose script ends without meeting the others).
            raise RuntimeError(f"MASTER_ADDR {master} did not resolve within {wait:g} s: no replica of that name "
                               "is on the job's network (not started, or already exited)")
        if name is None:
            raise RuntimeError(f"no interface of this container reaches MASTER_ADDR {master}; set "
                               "GLOO_SOCKET_IFNAME")
        env["GLOO_SOCKET_IFNAME"] = name
    return str(env["GLOO_SOCKET_IFNAME"])


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python3 -m orch_trainer.torch_env COMMAND [ARGS...]", file=sys.stderr)
        return 2
    try:
        set_interface()
    except RuntimeError as exc:
        print(f"orch: {exc}", file=sys.stderr)
        return 1
    os.execvp(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
