"""A Slurm cluster of two nodes on this one machine, for the live tests and the Slurm benchmark.

munge, slurmctld and a slurmd run here (the first node); the second node is a slurmd in a network namespace of its own
with a host name of its own, joined to the first over a veth pair. Both nodes see this machine's folders, as a
cluster's nodes see its shared storage. Every file (configuration, munge's key and socket, Slurm's state and logs)
sits in one temporary folder, the daemons listen on ports of their own, and the clients find the cluster through
SLURM_CONF (``env``): nothing of the machine's own configuration is read or changed. Leaving the ``with`` block stops
the daemons and removes the namespace and the folder, even when the block failed.

    with Cluster() as cluster:
        subprocess.run(["sinfo"], env={**os.environ, **cluster.env})
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

CTLD_PORT, SLURMD_PORT = 16817, 16818  # not Slurm's own 6817 and 6818: a real cluster's daemons may hold them
SUBNET = "10.232.71"
NODE2 = "orchslurm2"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "ch-run", "ip", "nsenter", "unshare")


def run(*argv: str, check: bool = True, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=120, env=env)


class Cluster:
    """munge, slurmctld and two slurmds (``nodes``: 1 or 2), each node with ``cpus`` CPUs and ``memory_mb``."""

    def __init__(self, nodes: int = 2, cpus: int = 2, memory_mb: int = 8192, prefix: str = "orch-slurm") -> None:
        self.nodes, self.cpus, self.memory_mb = nodes, cpus, memory_mb
        self.netns = f"{prefix}-2"
        self.folder = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
        os.chmod(self.folder, 0o755)  # munge's socket must be reachable through it
        self.head = socket.gethostname().split(".")[0]
        self.conf = self.folder / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf)}
        self._daemons: list[subprocess.Popen] = []

    @staticmethod
    def available() -> str:
        """Why this machine cannot make the cluster, or "" if it can."""
        missing = [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
        if os.geteuid() != 0:
            return "a Slurm cluster of test nodes needs root (its daemons and a network namespace)"
        if missing:
            return f"a Slurm cluster needs {', '.join(missing)} (Debian: slurm-wlm munge charliecloud)"
        return ""

    @property
    def node_names(self) -> list[str]:
        return [self.head, NODE2][:self.nodes]

    def _address(self, n: int) -> str:
        return f"{SUBNET}.{n}" if self.nodes > 1 else "127.0.0.1"

    def _config(self) -> str:
        f = self.folder
        nodes = "\n".join(f"NodeName={name} NodeAddr={self._address(i + 1)} CPUs={self.cpus} "
                          f"RealMemory={self.memory_mb} State=UNKNOWN" for i, name in enumerate(self.node_names))
        return f"""ClusterName=orchtest
SlurmctldHost={self.head}({self._address(1)})
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={f}/munge/munge.sock
CredType=cred/munge
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
StateSaveLocation={f}/state
SlurmdSpoolDir={f}/spool-%n
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd-%n.pid
SlurmctldLogFile={f}/slurmctld.log
SlurmdLogFile={f}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=300
{nodes}
PartitionName=debug Nodes={','.join(self.node_names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
PartitionName=head Nodes={self.head} MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
"""

    def __enter__(self) -> "Cluster":
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _spawn(self, argv: list[str], log: str) -> None:
        self._daemons.append(subprocess.Popen(argv, stdout=open(self.folder / log, "w"), stderr=subprocess.STDOUT,
                                              env={**os.environ, **self.env}, start_new_session=True))

    def _start(self) -> None:
        f = self.folder
        (f / "munge").mkdir(mode=0o700)
        os.chmod(f / "munge", 0o755)
        (f / "state").mkdir()
        key = f / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        os.chmod(key, 0o600)
        self.conf.write_text(self._config())
        self._spawn(["munged", "-F", "-f", f"--socket={f}/munge/munge.sock", f"--key-file={key}",
                     f"--log-file={f}/munged.log", f"--pid-file={f}/munge/munged.pid", f"--seed-file={f}/munge/seed"],
                    "munged.out")
        self._wait(lambda: (f / "munge" / "munge.sock").exists(), "munged")
        if self.nodes > 1:
            self._namespace()
        self._spawn(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld.out")
        self._wait(lambda: "UP" in run("scontrol", "ping", check=False, env={**os.environ, **self.env}).stdout,
                   "slurmctld")
        self._spawn(["slurmd", "-D", "-N", self.head, "-f", str(self.conf)], "slurmd-1.out")
        if self.nodes > 1:
            # nsenter, not `ip netns exec`, which remounts /sys without its cgroup file systems (slurmd then fails):
            # /sys is mounted again in a mount namespace of the node's own, for its network devices (which MPI's UCX
            # reads), with this machine's cgroups bound back in.
            cg = self.folder / "cgroup"
            cg.mkdir()
            self._spawn(["nsenter", f"--net=/var/run/netns/{self.netns}", "unshare", "--uts", "--mount",
                         "--propagation", "private", "sh", "-c",
                         f'mount --rbind /sys/fs/cgroup {cg} && mount -t sysfs sysfs /sys && '
                         f'mount --rbind {cg} /sys/fs/cgroup && hostname {NODE2} && '
                         f'exec slurmd -D -N {NODE2} -f "$0"', str(self.conf)], "slurmd-2.out")
        self._wait(self._idle, "the nodes")

    def _namespace(self) -> None:
        host_if, node_if = "orchsl2a", "orchsl2b"
        run("ip", "netns", "add", self.netns)
        run("ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if)
        run("ip", "link", "set", node_if, "netns", self.netns)
        run("ip", "addr", "add", f"{SUBNET}.1/24", "dev", host_if)
        run("ip", "link", "set", host_if, "up")
        for args in (("addr", "add", f"{SUBNET}.2/24", "dev", node_if), ("link", "set", node_if, "up"),
                     ("link", "set", "lo", "up")):
            run("ip", "netns", "exec", self.netns, "ip", *args)

    def _idle(self) -> bool:
        out = run("sinfo", "--noheader", "--format=%n %t", check=False, env={**os.environ, **self.env}).stdout
        states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        return all(states.get(name, "").startswith(("idle", "mix", "alloc")) for name in self.node_names)

    def _wait(self, ready, what: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            dead = [d for d in self._daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"{p.name}: {p.read_text()[-800:]}" for p in sorted(self.folder.glob("*.log")))
                raise RuntimeError(f"{what} did not start within {seconds:.0f} s\n{logs}")
            time.sleep(0.3)

    def __exit__(self, *exc: object) -> None:
        for job in run("squeue", "--noheader", "--format=%i", check=False,
                       env={**os.environ, **self.env}).stdout.split():
            run("scancel", job, check=False, env={**os.environ, **self.env})
        for daemon in reversed(self._daemons):
            try:
                os.killpg(daemon.pid, 15)
            except ProcessLookupError:
                continue
        for daemon in reversed(self._daemons):
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, 9)
                daemon.wait(timeout=10)
        if self.nodes > 1:
            run("ip", "netns", "del", self.netns, check=False)  # and with it the veth pair
            run("ip", "link", "del", "orchsl2a", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)
