"""Start an MPI job's ranks, one per container, with MPICH's Hydra and no ssh (orchestrator/frameworks/mpi_ranks.py): the
ranks of --framework mpi, and of PyTorch's and JAX's trainers under --transport shm.

    python3 -m orch_trainer.mpi_launch RANK-COMMAND...

Replica 0 runs ``mpiexec -launcher manual``, which prints the command of one Hydra proxy per host and waits for
the proxies to call back. Replica 0 runs the first itself and hands each other replica its own over a TCP port;
each replica runs it in place of this process, and the proxy starts the rank. Replica 0 starts mpiexec only once
every other replica has called (``_gather``): mpiexec looks up every host's name, and on the job's internal network
a name whose container does not exist yet takes 5 seconds per try to fail. The container's exit status is the
proxy's (mpiexec's on replica 0), so a dead rank, which makes Hydra end the job, fails the containers.

Hydra forwards every rank's output to mpiexec, which would put every rank's lines in replica 0's log. Each proxy
is therefore given this container's own output streams as spare descriptors (ORCH_MPI_STDOUT_FD and _STDERR_FD),
and each rank starts through ``--rank``, which writes there (``adopt_stdout``): each replica's log holds its own
rank's output, as with any other framework.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Optional

ENV_HOSTS = "ORCH_MPI_HOSTS"
ENV_LAUNCH_PORT = "ORCH_MPI_LAUNCH_PORT"
ENV_PROCS = "ORCH_MPI_PROCS_PER_HOST"
ENV_STDOUT_FD = "ORCH_MPI_STDOUT_FD"
ENV_STDERR_FD = "ORCH_MPI_STDERR_FD"
PROXY = "hydra_pmi_proxy"
LAUNCH_LINE = "HYDRA_LAUNCH: "
LAUNCH_END = "HYDRA_LAUNCH_END"
LINE_LIMIT = 4096  # bytes of one proxy command: Hydra's are a few hundred


def adopt_stdout() -> None:
    """In a rank: write to this container's own output streams rather than through Hydra (see above)."""
    sys.stdout.flush()
    sys.stderr.flush()
    for name, target in ((ENV_STDOUT_FD, 1), (ENV_STDERR_FD, 2)):
        fd = os.environ.get(name, "")
        if fd.isdigit():
            try:
                os.dup2(int(fd), target)
            except OSError:
                pass  # not inherited: the rank's output goes through Hydra instead


def _spare_streams() -> tuple[int, int]:
    """This container's standard output and error as inheritable descriptors, named in the environment."""
    spare = []
    for name, fd in ((ENV_STDOUT_FD, 1), (ENV_STDERR_FD, 2)):
        copy = os.dup(fd)
        os.set_inheritable(copy, True)
        os.environ[name] = str(copy)
        spare.append(copy)
    return spare[0], spare[1]


def proxy_argv(line: str, index: int, leader: str) -> list[str]:
    """The proxy command for replica ``index`` out of a launch line; ValueError unless it is exactly that: Hydra's
    proxy, for this replica, calling back to replica 0 (the proxy takes its program from whoever it calls)."""
    if len(line) > LINE_LIMIT or "\x00" in line:
        raise ValueError("launch line too long or not text")
    argv = shlex.split(line)
    expected = shutil.which(PROXY)
    if not argv or argv[0] != expected:
        raise ValueError(f"launch line runs {argv[0] if argv else 'nothing'!r}, not {expected}")
    ids = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--proxy-id"]
    if ids != [str(index)]:
        raise ValueError(f"launch line is for proxy {ids}, not {index}")
    if any(not re.fullmatch(r"[A-Za-z0-9_.:,/=+-]+", a) for a in argv):
        raise ValueError("launch line has an argument that is not a plain word")
    ports = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--control-port"]
    if len(ports) != 1 or ports[0].rsplit(":", 1)[0] != leader:
        raise ValueError(f"launch line calls back to {ports}, not to {leader}")
    return argv


def _lead(hosts: list[str], port: int, command: list[str]) -> int:
    """Replica 0: run mpiexec, serve each other replica its proxy command, run proxy 0, return mpiexec's status."""
    # -genvnone: each rank keeps its own container's environment (its index, its folders), not replica 0's.
    # The rank starts in /tmp, which every replica has, and ``--rank`` then moves it to its own folder.
    per = int(os.environ.get(ENV_PROCS, "1"))
    server = socket.create_server(("", port), reuse_port=False)
    waiting = _gather(server, len(hosts))
    argv = ["mpiexec", "-launcher", "manual", "-localhost", hosts[0], "-hosts", ",".join(hosts), "-n",
            str(len(hosts) * per), "-ppn", str(per), "-genvnone", "-wdir", "/tmp", sys.executable, "-m", "orch_trainer.mpi_launch",
            "--rank", *command]
    mpiexec = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, bufsize=1)
    lines: dict[int, str] = {}
    assert mpiexec.stdout is not None
    for line in mpiexec.stdout:
        if line.startswith(LAUNCH_LINE):
            found = re.search(r"--proxy-id (\d+)", line)
            if found:
                lines[int(found.group(1))] = line[len(LAUNCH_LINE):].strip()
        elif line.strip() == LAUNCH_END:
            break
        else:
            sys.stdout.write(line)
    try:
        if sorted(lines) != list(range(len(hosts))):
            print(f"[orch] mpiexec printed no launch line for every host: {sorted(lines)}", file=sys.stderr)
            return 1
        for index, conn in waiting.items():  # each replica that called is waiting on its connection for its line
            with conn:
                _answer(conn, lines[index])  # if this fails, it asks again (``_follow``) and ``_serve`` answers
        threading.Thread(target=_serve, args=(server, lines), daemon=True).start()
        proxy = subprocess.Popen(proxy_argv(lines[0], 0, hosts[0]), pass_fds=_spare_streams())
        threading.Thread(target=_end_with, args=(proxy, mpiexec), daemon=True).start()
        for line in mpiexec.stdout:  # what the ranks print through Hydra (little: they write to their own stdout)
            sys.stdout.write(line)
        status = mpiexec.wait()
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
        _wait_for_other_proxies()
        return status
    finally:
        if mpiexec.poll() is None:
            mpiexec.kill()


def _end_with(proxy: subprocess.Popen[bytes], mpiexec: subprocess.Popen[bytes]) -> None:
    """End mpiexec if proxy 0 fails first: mpiexec would wait for its call forever."""
    if proxy.wait() != 0 and mpiexec.poll() is None:
        time.sleep(1.0)  # Hydra ends the job itself when a rank fails; this is for a proxy that never called
        if mpiexec.poll() is None:
            mpiexec.kill()


def _wait_for_other_proxies(timeout: float = 10.0) -> None:
    """With shared memory the other replicas live in this container's PID namespace, which ends with it; mpiexec
    returns once their ranks ended, perhaps before their proxies exit. Wait (a little) until they have."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = False
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        running = running or PROXY.encode() in f.read()
                except OSError:
                    continue
        if not running:
            return
        time.sleep(0.05)


def _asked(conn: socket.socket) -> Optional[int]:
    """The replica index a caller asks for (one line), or None."""
    conn.settimeout(5)
    try:
        asked = conn.recv(16).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(asked) if asked.isdigit() else None


def _answer(conn: socket.socket, line: str) -> None:
    """Send a replica its proxy command, one line; a replica that has gone asks again or never needed it."""
    try:
        conn.sendall((line + "\n").encode())
    except OSError:
        pass


def _gather(server: socket.socket, replicas: int) -> dict[int, socket.socket]:
    """Replica 0, before mpiexec: accept until every other replica has called, and keep each one's connection (the
    latest, if it called twice) to send it its line. A replica that never calls never started; orch's startup timeout
    ends the job, as it would while mpiexec waited for its proxy."""
    waiting: dict[int, socket.socket] = {}
    while len(waiting) < replicas - 1:
        conn, _ = server.accept()
        index = _asked(conn)
        if index is None or not 0 < index < replicas:
            conn.close()
            continue
        if index in waiting:
            waiting[index].close()
        conn.settimeout(None)
        waiting[index] = conn
    return waiting


def _serve(server: socket.socket, lines: dict[int, str]) -> None:
    """Answer each replica that asks (its index, one line) with its proxy command."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError as exc:  # without this server no replica can start: end the job, orch names why
            print(f"[orch] the launch server failed: {exc}", file=sys.stderr, flush=True)
            os._exit(1)
        with conn:
            index = _asked(conn)
            if index is not None and 0 < index in lines:
                _answer(conn, lines[index])


def _follow(leader: str, port: int, index: int) -> list[str]:
    """Replica ``index``: ask replica 0 for this replica's proxy command until it answers. Replica 0 answers once
    every replica has asked and mpiexec has started, so the answer is waited for without a time limit (orch's
    startup timeout bounds it); a connection replica 0 closes is asked again."""
    while True:
        try:
            with socket.create_connection((leader, port), timeout=5) as conn:
                conn.settimeout(None)
                conn.sendall(f"{index}\n".encode())
                data = b""
                while not data.endswith(b"\n") and len(data) <= LINE_LIMIT:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            if data.endswith(b"\n"):
                return proxy_argv(data.decode("utf-8", "replace").strip(), index, leader)
        except OSError:
            pass  # replica 0 is not listening yet: orch's startup timeout bounds the wait
        time.sleep(0.2)


def rank_env(environ: Any = os.environ) -> dict[str, str]:
    """torchrun's names for this rank's place, from what Hydra gives it (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
    MPI_LOCALNRANKS): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE."""
    names = {"RANK": "PMI_RANK", "WORLD_SIZE": "PMI_SIZE", "LOCAL_RANK": "MPI_LOCALRANKID",
             "LOCAL_WORLD_SIZE": "MPI_LOCALNRANKS"}
    return {ours: environ[hydra] for ours, hydra in names.items() if environ.get(hydra, "").isdigit()}


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _relay(pipes: dict[int, int], rank: str, log: Any) -> None:
    """The prefixer's loop: each line read from a pipe, prefixed, to its container stream (and the rank's log)."""
    import selectors

    selector = selectors.DefaultSelector()
    for target, read in pipes.items():
        selector.register(read, selectors.EVENT_READ, (target, bytearray()))
    prefix = f"[rank{rank}]:".encode()
    while selector.get_map():
        for key, _ in selector.select():
            target, pending = key.data
            chunk = os.read(key.fd, 65536)
            if chunk:
                pending += chunk
                *lines, rest = bytes(pending).split(b"\n")
                pending[:] = rest
            else:  # the rank has ended: its end of the pipe is closed
                lines = [bytes(pending)] if pending else []
                selector.unregister(key.fd)
                os.close(key.fd)
            for line in lines:
                _write_all(target, prefix + line + b"\n")
                if log is not None:
                    log.write(line + b"\n")


def _prefix_lines(rank: str) -> None:
    """With several ranks in a container: this rank's output goes through pipes to a small process that writes
    each line, prefixed with ``[rank<R>]:``, to the container's stream it came for, and to ``ranks/rank-<R>.log``
    in the rank's own folder (a script's). It holds nothing else of the rank's, and ends when the rank's end of
    the pipes closes, that is when the rank ends."""
    pipes = {target: os.pipe() for target in (1, 2)}
    if os.fork() == 0:
        try:
            reads = {target: read for target, (read, _write) in pipes.items()}
            for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
                if fd not in (0, 1, 2, *reads.values()):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            folder, log = os.environ.get("ORCH_OUTPUT_DIR"), None
            if folder:
                try:
                    os.makedirs(os.path.join(folder, "ranks"), exist_ok=True)
                    log = open(os.path.join(folder, "ranks", f"rank-{rank}.log"), "ab", buffering=0)
                except OSError:
                    log = None  # the container's log still has every line
            _relay(reads, rank, log)
        finally:
            os._exit(0)
    for target, (read, write) in pipes.items():
        os.close(read)
        os.dup2(write, target)
        os.close(write)


def _rank(command: list[str]) -> None:
    """In a rank, started by its proxy: this container's own output and working folder, torchrun's names for its
    place, then the rank's command."""
    adopt_stdout()
    places = rank_env()
    os.environ.update(places)
    if places.get("LOCAL_WORLD_SIZE", "1") != "1":
        _prefix_lines(places.get("RANK", "?"))
    os.chdir(os.environ.get("ORCH_OUTPUT_DIR") or "/tmp")  # a script's own folder; the trainer needs none
    os.execvp(command[0], command)


def main(command: list[str]) -> int:
    if command[:1] == ["--rank"]:
        _rank(command[1:])
    hosts = os.environ[ENV_HOSTS].split(",")
    port = int(os.environ[ENV_LAUNCH_PORT])
    index = int(os.environ.get("ORCH_WORKER_INDEX", "0"))
    if not command:
        print("usage: python3 -m orch_trainer.mpi_launch RANK-COMMAND...", file=sys.stderr)
        return 2
    if index == 0:
        return _lead(hosts, port, command)
    argv = _follow(hosts[0], port, index)
    _spare_streams()
    sys.stdout.flush()
    os.execv(argv[0], argv)  # the proxy takes this process's place; its status is the container's


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
