"""What orch's containers add to synchronised training: N containers against the same N ranks as processes of one.

Usage: python benchmarks/processes.py [--cells mpi:2,3,4,8 mwms:2,3,4 torch:2,3,4] [--repeats 2] [--one-cpu-group]
       python benchmarks/processes.py --tiny   (CI: tiny synthetic data, MPI and TensorFlow at N = 2; checks it runs)

floor.py puts each T(N) beside a floor: one rank alone times the ranks that share a core, plus the framework's
all-reduce times the steps. Where T(N) stays above that floor, the question is whether orch's containers put it
there or the host does. This runs, side by side and in alternating order, floor.py's workload (the MLP, 60,000
MNIST images, 5 epochs, global batch 96) three ways at each N:

  containers  an orch run of N containers, as `orch up` makes it (floor.run), on its own bridge network;
  shared      the same with `--network shared`: the containers in one network namespace, on loopback;
  processes   the same plan's N replicas as N processes of one container of the same image: each with the
              environment orch planned for its replica (its rank, its cores to pin itself to, the job), its
              peers' addresses made loopback ones, the same data and Python environment mounted, and orch's own
              trainer (benchmarks/probes/ranks.py); MPI's ranks started by mpiexec's fork launcher.

With --one-cpu-group, a fourth arm runs the containers (on one shared network where orch allows it) with every
process of theirs moved, while they run, into one cgroup of the cpu controller (OneCpuGroup: root, cgroup v1 and
Docker's cgroupfs driver), to tell the kernel's scheduling of each container as a group from the rest.

So the processes share one network namespace (loopback, not the bridge), one IPC and PID namespace, one cgroup
and one memory limit (N times a replica's), and the trainer, its pinning, its transport and its figures are
orch's. The one container is not locked down as orch's are (its root filesystem is writable, no process limit)
and MPI's ranks start without orch's launcher; none of that runs during the training steps. Each arm's T(N) is its
slowest worker's train seconds, as the trainer measured them; with PyTorch and MPI, also each step's compute and
wait for the all-reduce, as the trainer measures them in place. Writes benchmarks/results/processes.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import floor  # noqa: E402 - its workload, run() and markdown conventions
import floor_split  # noqa: E402 - in_place(), the trainer's own split of a step

from orchestrator import backends  # noqa: E402
from orchestrator.errors import InvalidSpec  # noqa: E402
from orchestrator.jobspec import make_spec  # noqa: E402
from orchestrator.paths import Paths, default_paths  # noqa: E402
from orchestrator.plan import plan  # noqa: E402
from orchestrator.run.rundir import RunDir  # noqa: E402
from orchestrator.run.runner import container_user  # noqa: E402
from orchestrator.safetext import printable  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PROBE = ROOT / "benchmarks" / "probes" / "ranks.py"
RUN_TIMEOUT = 900  # seconds for the one container's run
ARMS = ("containers", "shared", "grouped", "processes")
CPU_GROUPS = Path("/sys/fs/cgroup/cpu/docker")  # cgroup v1's cpu hierarchy under Docker's cgroupfs driver
CELLS = ("mpi:2,3,4,8", "mwms:2,3,4", "torch:2,3,4")


def _loopback(env: dict[str, str]) -> dict[str, str]:
    """A replica's environment with its peers on loopback: one network namespace holds them all."""
    env = dict(env)
    if "MASTER_ADDR" in env:  # PyTorch: the TCP store and gloo's pairs
        env["MASTER_ADDR"] = "127.0.0.1"
    if "TF_CONFIG" in env:  # TensorFlow: one port each, where each container had the same port on its own address
        config = json.loads(env["TF_CONFIG"])
        seen = 0
        for role, addresses in config["cluster"].items():
            moved = []
            for address in addresses:
                port = int(address.rsplit(":", 1)[1])
                moved.append(f"127.0.0.1:{port + seen}")
                seen += 1
            config["cluster"][role] = moved
        env["TF_CONFIG"] = json.dumps(config)
    return env


def processes(fields: dict, workers: int, runs: Path) -> dict:
    """One run of the plan `orch up` would make for ``workers`` containers, as that many processes of one
    container. Its slowest worker's train seconds and, where the trainer measures them, its steps in place."""
    spec = make_spec(**fields, workers=workers, run_id=f"procs-{int(time.time() * 1000) % 10**10}-{workers}")
    paths = Paths(runs=runs, cache=default_paths().cache)
    p = plan(spec, paths, user=container_user(), host_cpus=floor.CORES)
    backends.get(p.backend).stage(p, floor.log)  # the Python environment's volume, as the containers mount it
    run = RunDir(p.run_dir)
    run.create(p)
    probe = Path(tempfile.mkdtemp(prefix="orch-processes-", dir=runs))
    (probe / "envs.json").write_text(json.dumps([_loopback(r.env) for r in p.replicas]))
    (probe / "ranks.py").write_bytes(PROBE.read_bytes())
    probe.chmod(0o755)
    mounts = {m.target: m for r in p.replicas for m in r.mounts}  # the common ones and every replica's own folder
    volumes = []
    for m in mounts.values():
        volumes += ["-v", f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}"]
    if fields["framework"] == "mpi":
        # Hydra's fork launcher starts the ranks here; MPICH's single-copy path (CMA) needs ptrace rights, as for
        # several ranks of one container under orch (frameworks/mpi: --procs-per-worker).
        command = ["mpiexec", "-launcher", "fork", "-n", str(workers), "python3", "/probe/ranks.py",
                   "/probe/envs.json"]
        extra = ["-e", "MPIR_CVAR_CH4_CMA_ENABLE=0"]
    else:
        command = ["python3", "/probe/ranks.py", "/probe/envs.json", "spawn", str(workers)]
        extra = []
    shm = max(64, sum(r.shm_mb for r in p.replicas))
    name = f"orch-processes-{spec.run_id}"
    try:
        proc = subprocess.run(["docker", "run", "--rm", "--init", "--name", name, "--network", "none", "--user", p.user,
                               "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                               "--memory", f"{spec.memory_mb * workers}m", "--shm-size", f"{shm}m", *extra, *volumes,
                               "-v", f"{probe}:/probe:ro", "--entrypoint", command[0], p.image, *command[1:]],
                              capture_output=True, text=True, errors="replace", timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{spec.run_id} ({fields}, {workers} processes) did not end in {RUN_TIMEOUT} s; "
                         "its container is removed") from None
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    if proc.returncode:
        why = printable(proc.stderr.strip()[-600:])  # the container's bytes, shown inert
        raise SystemExit(f"{spec.run_id} ({fields}, {workers} processes) failed: {why}")
    results = [run.result(("worker", i)) for i in range(workers)]
    if any(r is None for r in results):
        raise SystemExit(f"{spec.run_id}: a process wrote no result")
    steps = (results[0].steps_per_epoch or 0) * spec.epochs
    return {"train_seconds": max(r.train_seconds for r in results), "steps": steps,
            "in_place": floor_split.in_place(results, steps)}


def _shares_network(fields: dict) -> bool:
    """Whether orch runs this framework with --network shared (MPI refuses it: its ranks meet on the bridge)."""
    try:
        make_spec(**fields, network="shared", workers=2, run_id="check")
    except InvalidSpec:
        return False
    return True


class OneCpuGroup:
    """While open, moves every process of every container that appears on this engine into one cgroup of the cpu
    controller, so that the kernel schedules a run's containers as one group, as it does the processes of one
    container.
    Only for this benchmark's --one-cpu-group arm: it needs root, cgroup v1 and Docker's cgroupfs driver (the cpu
    hierarchy under CPU_GROUPS), and leaves every other hierarchy (cpuset, memory, and cpuacct where it is mounted
    apart from cpu) as Docker made it. It moves only containers that appear while it is open: run it alone."""

    def __init__(self) -> None:
        self.group = CPU_GROUPS / f"orch-one-group-{os.getpid()}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._move, daemon=True)
        self._before: set[Path] = set()

    def __enter__(self) -> "OneCpuGroup":
        self._before = set(CPU_GROUPS.glob("*/"))  # containers that were there already are not the run's
        self.group.mkdir()
        self._thread.start()
        return self

    def _move(self) -> None:
        while not self._stop.wait(0.1):  # a process forked after its parent moved is in the group already
            for folder in set(CPU_GROUPS.glob("*/")) - self._before - {self.group}:
                try:
                    pids = (folder / "cgroup.procs").read_text().split()
                except OSError:
                    continue  # that container is gone meanwhile
                for pid in pids:
                    try:
                        (self.group / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass  # it ended meanwhile

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()
        for _ in range(100):  # the run's containers are removed: the group empties as their processes go
            try:
                self.group.rmdir()
                return
            except OSError:
                time.sleep(0.1)
        floor.log(f"could not remove {self.group}: a process is still in it; remove it with rmdir once it ends")


def _run(arm: str, fields: dict, n: int, runs: Path, shares: bool) -> dict:
    if arm == "processes":
        return processes(fields, n, runs)
    networked = {**fields, "network": "shared"} if arm == "shared" or (arm == "grouped" and shares) else fields
    if arm != "grouped":
        return floor.run(networked, n, runs)
    with OneCpuGroup():
        return floor.run(networked, n, runs)


def measure(name: str, counts: list[int], repeats: int, runs: Path, workload: dict, grouped: bool) -> list[dict]:
    fields = {**workload, **floor.FRAMEWORKS[name][0]}
    shares = _shares_network(fields)
    ways = tuple(arm for arm in ARMS if (arm != "shared" or shares) and (arm != "grouped" or grouped))
    rows = []
    for n in counts:
        arms: dict[str, list[dict]] = {arm: [] for arm in ways}
        for repeat in range(repeats):
            for arm in (ways if repeat % 2 == 0 else ways[::-1]):
                measured = _run(arm, fields, n, runs, shares)
                arms[arm].append(measured)
                floor.log(f"{name}, {n} {arm}, repeat {repeat + 1}/{repeats}: train {measured['train_seconds']:.2f} s")
        row = {"framework": name, "workers": n}
        for arm, measured in arms.items():
            row[arm] = statistics.median(m["train_seconds"] for m in measured)
            row[f"{arm}_runs"] = [m["train_seconds"] for m in measured]
            row[f"{arm}_in_place"] = floor_split._medians([m["in_place"] for m in measured], floor_split.IN_PLACE)
        row["ratio"] = row["containers"] / row["processes"]
        row["shared_ratio"] = row["shared"] / row["processes"] if "shared" in arms else None
        row["grouped_ratio"] = row["grouped"] / row["processes"] if "grouped" in arms else None
        rows.append(row)
    return rows


TITLES = {"containers": "T(N), N containers (bridge)", "shared": "T(N), N containers (`--network shared`)",
          "grouped": "T(N), N containers in one CPU cgroup (shared network where allowed)",
          "processes": "T(N), N processes of one container"}
RATIOS = {"ratio": "bridge / processes", "shared_ratio": "shared / processes",
          "grouped_ratio": "one cgroup / processes"}


def markdown(report: dict) -> str:
    rows = report["rows"]
    arms = [arm for arm in ARMS if any(arm in r for r in rows)]
    ratios = [k for k in RATIOS if any(r.get(k) is not None for r in rows)]
    lines = ["# N containers against the same N ranks as processes of one container", "",
             f"`python benchmarks/processes.py {' '.join(report['argv'])}`, {report['when']}, {floor.CORES} cores, "
             f"{report['repeats']} repeat(s) in alternating order (medians; each run in brackets). Workload: "
             f"{json.dumps(report['workload'])}.", "",
             "T(N) is the slowest worker's train seconds. The processes run orch's trainer with the environment orch "
             "planned for each replica, pinned as in the containers, in one network, IPC and PID namespace and one "
             "cgroup (benchmarks/probes/ranks.py).", "",
             "| framework | N | " + " | ".join([TITLES[a] for a in arms] + [RATIOS[k] for k in ratios]) + " |",
             "| --- | ---: |" + " ---: |" * (len(arms) + len(ratios))]
    for r in rows:
        cells = [f"{r[arm]:.2f} (" + ", ".join(f"{t:.2f}" for t in r[f"{arm}_runs"]) + ")" if arm in r else "—"
                 for arm in arms]
        cells += ["—" if r.get(k) is None else f"{r[k]:.2f}" for k in ratios]
        lines.append(f"| {r['framework']} | {r['workers']} | " + " | ".join(cells) + " |")
    if any(r["shared_ratio"] is None for r in rows):
        lines += ["", "—: orch refuses `--network shared` for MPI, whose containers already share one IPC and PID "
                  "namespace and all-reduce through shared memory; only Hydra's launch crosses the bridge."]
    placed = [r for r in rows if r["containers_in_place"] and r["processes_in_place"]]
    if placed:
        lines += ["", "Each step as the trainer measures it in place (PyTorch's and MPI's), milliseconds per step, the "
                  "median of the workers: its compute, its wait for the all-reduce, and the all-reduce in flight, "
                  f"each for {', '.join(TITLES[a].split(', ', 1)[1] for a in arms)}:", "",
                  "| framework | N | compute | wait | in flight |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for r in placed:
            lines.append(f"| {r['framework']} | {r['workers']} | " + " | ".join(
                " / ".join(f"{r[f'{arm}_in_place'][k]:.2f}" if r.get(f"{arm}_in_place") else "—" for arm in arms)
                for k in floor.IN_PLACE) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    signal.signal(signal.SIGTERM, floor._interrupted)  # stopped like orch up: no containers left
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", default=list(CELLS), metavar="FRAMEWORK:N,N...",
                        help=f"Each framework ({', '.join(floor.FRAMEWORKS)}) and its N. [default: {' '.join(CELLS)}]")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="CI: tiny synthetic data, mpi:2 and mwms:2, 1 repeat, "
                        "nothing written")
    parser.add_argument("--one-cpu-group", action="store_true",
                        help="Add a fourth arm: the containers moved into one cgroup of the cpu controller while they "
                             "run (root, cgroup v1 and Docker's cgroupfs driver); writes processes-cgroup.json and .md")
    args = parser.parse_args()
    if args.one_cpu_group and not (CPU_GROUPS.is_dir() and os.access(CPU_GROUPS, os.W_OK)):
        parser.error(f"--one-cpu-group: {CPU_GROUPS} is not a cgroup folder this user may write (it needs root, "
                     "cgroup v1 and Docker's cgroupfs driver)")
    if args.tiny:
        args.cells, args.repeats = ["mpi:2", "mwms:2"], 1
    workload = floor.TINY if args.tiny else floor.WORKLOAD
    cells = []
    for cell in args.cells:
        name, _, counts = cell.partition(":")
        try:
            ns = [int(n) for n in counts.split(",")]
        except ValueError:
            ns = []
        if name not in floor.FRAMEWORKS or not ns or min(ns) < 2:
            parser.error(f"--cells: {cell!r} is not FRAMEWORK:N,N... with a framework of {', '.join(floor.FRAMEWORKS)} "
                         "and each N 2 or more (one container has no peers to compare)")
        cells.append((name, ns))
    rows = []
    with tempfile.TemporaryDirectory(prefix="orch-processes-runs-") as runs:
        for name, ns in cells:
            rows += measure(name, ns, args.repeats, Path(runs), workload, args.one_cpu_group)
    report = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "argv": sys.argv[1:],
              "repeats": args.repeats, "workload": workload, "rows": rows}
    text = markdown(report)
    print(text)
    if args.tiny:
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "processes-cgroup" if args.one_cpu_group else "processes"
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
