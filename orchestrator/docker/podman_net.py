"""Podman's internal networks on a host that also runs Docker.

orch's replicas share an internal network (no route out). Podman's network stack (netavark) gives an internal network
no firewall rules; Docker sets the FORWARD chain's policy to DROP and loads br_netfilter, which sends the frames
between two containers on one bridge through that chain. So on such a host, replicas on a Podman network cannot
reach each other (a TensorFlow cluster never forms), until one rule accepts what goes from a Podman bridge to a Podman
bridge: `iptables -I DOCKER-USER -i podman+ -o podman+ -j ACCEPT` (DOCKER-USER is the chain Docker keeps for its
users' rules). An internal network's bridge does not route (netavark turns its forwarding off), so the rule lets no
replica out, and no run's replica into another run's network. `orch doctor --engine podman` checks, `--fix` adds it.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Optional

RULE = ("-i", "podman+", "-o", "podman+", "-j", "ACCEPT")
BRIDGE_FILTER = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def _iptables(*args: str) -> Optional[str]:
    """`iptables ARGS`' output; None where iptables is missing or refuses (not root)."""
    iptables = shutil.which("iptables") or ("/usr/sbin/iptables" if Path("/usr/sbin/iptables").exists() else None)
    if iptables is None:
        return None
    proc = subprocess.run([iptables, *args], capture_output=True, text=True, timeout=30)
    return proc.stdout if proc.returncode == 0 else None


def _chain() -> str:
    return "DOCKER-USER" if _iptables("-S", "DOCKER-USER") is not None else "FORWARD"


def blocked() -> Optional[str]:
    """Why replicas on one Podman network cannot reach each other here, or None where they can (or this process
    cannot read the firewall: then only a run could tell)."""
    try:
        bridged = BRIDGE_FILTER.read_text().strip() == "1"
    except OSError:
        bridged = False
    forward = _iptables("-S", "FORWARD") if bridged else None
    if forward is None or "-P FORWARD DROP" not in forward:
        return None
    if (_iptables("-C", _chain(), *RULE)) is not None:
        return None
    return ("the FORWARD chain drops what no rule accepts (Docker's policy), and bridged traffic passes through it "
            "(br_netfilter), so replicas on one Podman network cannot reach each other")


def allow() -> str:
    """Add the rule that lets replicas on one Podman network reach each other; what was done, in a line."""
    chain = _chain()
    if _iptables("-I", chain, *RULE) is None:
        raise PermissionError(f"`iptables -I {chain} {' '.join(RULE)}` failed; run it as root")
    return f"added `iptables -I {chain} {' '.join(RULE)}`"


def remove() -> None:
    """Take the rule away again (the tests' clean-up), as often as it was added."""
    chain = _chain()
    while _iptables("-C", chain, *RULE) is not None:
        _iptables("-D", chain, *RULE)
