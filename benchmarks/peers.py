"""orch against its peers on a user's own scripts: the torchrun DDP tutorial and the Keras MultiWorkerMirrored
tutorial (examples/tutorials/), unchanged, on 1, 2 and 3 containers, under orch, TorchX's `local_docker` scheduler
and the Kubeflow SDK's container backend.

Usage: python benchmarks/peers.py [--workers 1 2 3] [--repeats 3] [--scripts ddp keras] [--tools orch torchx kubeflow]
                                  [--no-kill] [--out benchmarks/results/peers.json]

The peers are installed by this script into virtual environments of their own, from the package index, at the
versions in PEERS (under $ORCH_CACHE_DIR/bench-peers, kept between runs). Every tool runs the same image contents:
orch's PyTorch image with torchvision added by `orch build --requirements`, and orch's TensorFlow image; for the
peers, one layer on top holds the two tutorials' folders (under /bench) and the frameworks' data caches orch makes
(the layer orch's Swarm and Kubernetes runs get), since no container here can download MNIST.

Each cell (script, N) runs every tool once per repeat, in an order rotated from cell to cell and repeat to repeat.
For each run: the wall time of the tool's command (for the Kubeflow SDK, a user's script of train, wait, logs and
delete_job), the training time the script itself prints (DDP: the epoch's seconds, the slowest rank; Keras: the
ms/step times the steps of each epoch, worker 0, which Keras times from each epoch's second step on) and the time
beyond it, the peak memory of each container (the
kernel's cgroup high-water mark, page cache included, read every 0.2 s), and what the tool left in the engine
(containers, networks, volumes, images) once its command returned. Then, for each tool, one DDP run on 3 containers
whose rank-1 container is killed 20 s after it starts: how long until the tool's command returned (at most 120 s
are waited), and what was left running and left at all. The bench removes what any tool left before the next run.

Writes benchmarks/results/peers.json and .md. About 50 minutes on 2 cores with the images built.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import __version__, contract  # noqa: E402
from orchestrator.analysis import machine  # noqa: E402
from orchestrator.data.loaders import KERAS_DIR, KERAS_MNIST  # noqa: E402
from orchestrator.data.prepare import LOADERS, prepare  # noqa: E402
from orchestrator.docker.engine import Engine  # noqa: E402
from orchestrator.frameworks import tensorflow as tf_framework  # noqa: E402
from orchestrator.images import script as script_images  # noqa: E402
from orchestrator.images.user import image_for  # noqa: E402
from orchestrator.paths import default_paths  # noqa: E402
from orchestrator.safetext import one_line  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TUTORIALS = ROOT / "examples" / "tutorials"
PEERS = {"torchx": ["torchx==0.7.0", "docker==7.1.0"], "kubeflow": ["kubeflow[docker]==0.5.0"]}
VISION = b"torchvision==0.24.1\n"  # what the DDP tutorial imports beyond torch (the tutorials' test pins the same)
BENCH_DIR = "/bench"  # the tutorials' folders in the peers' layer
LOADER_ENV = {"ORCH_LOADERS_DIR": contract.IMAGE_LOADERS_DIR,  # the image's sitecustomize links the caches
              "ORCH_KERAS_MNIST": f"{contract.IMAGE_LOADERS_DIR}/{KERAS_DIR}/{KERAS_MNIST}"}
MEMORY_MB = 2048  # orch's default --memory, given to TorchX (whose default is 1024); the Kubeflow SDK sets none
KILL_AFTER = 20.0
KILL_WAIT = 120.0
# The peers' layer: the tutorial's folder, and what a peer needs to start a command in orch's image. Both peers run
# their own command (`command`), which orch's image would pass to its trainer (its ENTRYPOINT); and the Kubeflow SDK
# runs it under `bash -lc`, whose login profile on Debian resets PATH to the system's, without the image's venv.
# torchvision's root "../data" is linked to the caches from the folders the scripts run in (TorchX: the image's
# working folder; the Kubeflow function: the tutorial's), as orch mounts them.
PEER_DOCKERFILE = """\
FROM {base}
COPY {folder} {bench}/{folder}
RUN echo 'export PATH=/opt/venv/bin:$PATH' > /etc/profile.d/orch-venv.sh \\
 && ln -s {loaders}/torchvision /data && ln -s {loaders}/torchvision {bench}/data
ENTRYPOINT []
"""
SCRIPTS = {"ddp": ("torch_ddp", "main.py", "torch"), "keras": ("keras_mwms", "main.py", "tensorflow")}

# TorchX has no TensorFlow component: a user writes one. This one sets TF_CONFIG from TorchX's own macros (each
# replica's host name is <app id>-<role>-<replica id> on local_docker), and is the whole of what a user adds.
TORCHX_KERAS_COMPONENT = '''\
import json

import torchx.specs as specs


def mwms(*script_args: str, script: str, image: str, j: int = 1, memMB: int = 2048, port: int = 2222,
         env: str = "") -> specs.AppDef:
    """One TensorFlow worker per replica, TF_CONFIG set for MultiWorkerMirroredStrategy."""
    workers = [f"{specs.macros.app_id}-worker-{i}:{port}" for i in range(j)]
    cluster = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}})
    tf_config = cluster.replace('"index": 0', '"index": ' + specs.macros.replica_id)
    extra = dict(kv.split("=", 1) for kv in env.split(",") if kv)
    return specs.AppDef(name="keras", roles=[specs.Role(
        name="worker", image=image, entrypoint="python", args=[script, *script_args], num_replicas=j,
        env={"TF_CONFIG": tf_config, **extra}, resource=specs.Resource(cpu=2, gpu=0, memMB=memMB),
        port_map={"tf": port})])
'''

# The Kubeflow SDK runs a function: the user's function runs the tutorial's file as its launcher would.
KUBEFLOW_DRIVER = '''\
import json, sys
from kubeflow.trainer import ContainerBackendConfig, CustomTrainer, TrainerClient

spec = json.loads(sys.argv[1])


def tutorial(folder, script):
    import os, runpy, sys
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")


client = TrainerClient(backend_config=ContainerBackendConfig())
job = client.train(runtime=client.get_runtime("torch-distributed"),
                   trainer=CustomTrainer(func=tutorial, func_args={"folder": spec["folder"], "script": spec["script"]},
                                         image=spec["image"], num_nodes=spec["workers"], env=spec["env"]))
print("job", job, flush=True)
status = "Complete"
try:
    client.wait_for_job_status(job, timeout=spec["timeout"])
except Exception as exc:
    status = f"{type(exc).__name__}: {exc}"
for line in client.get_job_logs(job):  # every node's, node-0 first
    print(line, end="" if line.endswith("\\n") else "\\n", flush=True)
print("status", status, flush=True)
if status == "Complete":
    client.delete_job(job)
sys.exit(0 if status == "Complete" else 1)
'''


# -- the engine: its state before and after, each container's peak memory ---------------------------------------
def engine_state(client: Any) -> dict[str, set[str]]:
    return {"containers": {c.id for c in client.containers.list(all=True)},
            "networks": {n.id for n in client.networks.list()},
            "volumes": {v.name for v in client.volumes.list()},
            "images": {i.id for i in client.images.list(all=True)}}


def left_behind(client: Any, before: dict[str, set[str]]) -> dict[str, Any]:
    """What appeared in the engine since ``before``. orch's cache volumes (label orch.cache: each image's Python
    environment, made by a tool's first run of that image and reused by every later one) are counted apart as
    caches, and kept."""
    now = engine_state(client)
    new = {kind: sorted(now[kind] - before[kind]) for kind in now}
    caches = [v for v in new["volumes"] if "orch.cache" in (client.volumes.get(v).attrs.get("Labels") or {})]
    new["volumes"] = [v for v in new["volumes"] if v not in caches]
    running = [c.id for c in client.containers.list() if c.id in new["containers"]]
    return {**{kind: len(ids) for kind, ids in new.items()}, "running": len(running), "caches": len(caches),
            "ids": new}


def clean(client: Any, left: dict[str, Any]) -> None:
    """Remove what a tool left, so the next run starts from the same engine."""
    import docker.errors

    for cid in left["ids"]["containers"]:
        try:
            client.containers.get(cid).remove(force=True)
        except docker.errors.NotFound:
            pass
    for nid in left["ids"]["networks"]:
        try:
            client.networks.get(nid).remove()
        except docker.errors.NotFound:
            pass
    for name in left["ids"]["volumes"]:
        try:
            client.volumes.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass


CGROUP_PEAKS = ("/sys/fs/cgroup/memory/docker/{}/memory.max_usage_in_bytes",  # v1, cgroupfs
                "/sys/fs/cgroup/system.slice/docker-{}.scope/memory.peak",  # v2, systemd
                "/sys/fs/cgroup/docker/{}/memory.peak")  # v2, cgroupfs
CGROUP_DIRS = ("/sys/fs/cgroup/memory/docker", "/sys/fs/cgroup/system.slice", "/sys/fs/cgroup/docker")


class PeakSampler(threading.Thread):
    """Each new container's cgroup memory high-water mark, read every 0.2 s while it exists."""

    def __init__(self, known: set[str]) -> None:
        super().__init__(daemon=True)
        self.known, self.peaks, self.stop = known, {}, threading.Event()

    def _ids(self) -> list[str]:
        found = []
        for folder in CGROUP_DIRS:
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                cid = name.removeprefix("docker-").removesuffix(".scope")
                if len(cid) == 64 and cid not in self.known:
                    found.append(cid)
        return found

    def run(self) -> None:
        while not self.stop.is_set():
            for cid in self._ids():
                for pattern in CGROUP_PEAKS:
                    try:
                        with open(pattern.format(cid)) as f:
                            value = int(f.read())
                    except (OSError, ValueError):
                        continue
                    self.peaks[cid] = max(self.peaks.get(cid, 0), value)
                    break
            self.stop.wait(0.2)

    def finish(self) -> dict[str, int]:
        self.stop.set()
        self.join()
        return dict(self.peaks)


# -- what the scripts print -------------------------------------------------------------------------------------
DDP_EPOCH = re.compile(r"epoch 1: (\d+) samples on this rank, loss [0-9.]+, ([0-9.]+)s")
DDP_ACCURACY = re.compile(r"rank (\d+): test accuracy ([0-9.]+) on 10000")
KERAS_EPOCH = re.compile(r"(\d+)/\1 \[=+\] - \S+ (\d+)(ms|s)/step - loss: [0-9.]+ - accuracy: ([0-9.]+)")


def training_seconds(script: str, text: str) -> tuple[Optional[float], dict[str, Any]]:
    """The training time the script printed, and what else it printed that shows it ran right."""
    if script == "ddp":
        epochs = DDP_EPOCH.findall(text)
        accuracies = [float(a) for _r, a in DDP_ACCURACY.findall(text)]
        seconds = max((float(s) for _n, s in epochs), default=None)
        return seconds, {"ranks": len(epochs), "samples_per_rank": sorted({int(n) for n, _s in epochs}),
                         "accuracy": min(accuracies, default=None)}
    epochs = KERAS_EPOCH.findall(text)[:3]  # worker 0's three epochs come first in each tool's output
    seconds = sum(int(steps) * int(t) / (1000 if unit == "ms" else 1) for steps, t, unit, _a in epochs)
    return (seconds if len(epochs) == 3 else None), {"epochs": len(epochs),
                                                     "accuracy": float(epochs[-1][3]) if epochs else None}


# -- the tools --------------------------------------------------------------------------------------------------
@dataclass
class Job:
    script: str
    workers: int
    run_id: str
    images: dict[str, str]
    work: Path


def venv(cache: Path, name: str) -> Path:
    """The peer's own virtual environment, made from the package index once; its bin folder."""
    folder = cache / name
    stamp = folder / "installed.txt"
    want = " ".join(PEERS[name])
    if not stamp.is_file() or stamp.read_text() != want:
        print(f"peers.py: installing {want} into {folder}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        subprocess.run([str(folder / "bin" / "pip"), "install", "-q", *PEERS[name]], check=True)
        stamp.write_text(want)
    return folder / "bin"


def command(tool: str, job: Job, bins: dict[str, Path]) -> tuple[list[str], dict[str, str]]:
    folder, script, framework = SCRIPTS[job.script]
    env = dict(os.environ)
    if tool == "orch":
        argv = [sys.executable, "-m", "orchestrator", "up", "--framework", framework,
                "--script", str(TUTORIALS / folder / script), "--workers", str(job.workers), "--run-id", job.run_id]
        if job.script == "ddp":
            argv += ["--requirements", str(job.work / "vision.txt")]
        return argv, {**env, "ORCH_RUNS_DIR": str(job.work / "runs"), "ORCH_RESULTS_DIR": str(job.work / "results")}
    loader_env = ",".join(f"{k}={v}" for k, v in LOADER_ENV.items())
    if tool == "torchx":
        base = [str(bins["torchx"] / "torchx"), "run", "-s", "local_docker", "--workspace", "", "--wait", "--log"]
        if job.script == "ddp":
            return base + ["dist.ddp", "-j", f"{job.workers}x1", "--image", job.images["ddp"], "--memMB",
                           str(MEMORY_MB), "--env", loader_env, "--script", f"{BENCH_DIR}/{folder}/{script}"], env
        return base + [f"{job.work / 'torchx_keras.py'}:mwms", "--image", job.images["keras"], "-j", str(job.workers),
                       "--memMB", str(MEMORY_MB), "--env", loader_env, "--script",
                       f"{BENCH_DIR}/{folder}/{script}"], env
    spec = {"folder": f"{BENCH_DIR}/{folder}", "script": script, "image": job.images[job.script],
            "workers": job.workers, "env": dict(LOADER_ENV), "timeout": 900}
    if job.script == "keras":  # no torchrun in TensorFlow's image: the one-worker TF_CONFIG is the user's to give
        spec["env"]["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["localhost:2222"]},
                                               "task": {"type": "worker", "index": 0}})
    return [str(bins["kubeflow"] / "python"), str(job.work / "kubeflow_driver.py"), json.dumps(spec)], env


def supported(tool: str, script: str, workers: int) -> Optional[str]:
    """Why a tool cannot run this cell as it ships, or None."""
    if tool == "kubeflow" and script == "keras" and workers > 1:
        return ("the container backend gives a script its rank only through torchrun, which TensorFlow's image "
                "does not have: every container would be worker 0")
    return None


def output_of(tool: str, job: Job, proc_out: str) -> str:
    """What the script printed, worker 0's first."""
    if tool == "torchx" and job.script == "keras":  # replicas' lines interleave: worker 0's, then the rest
        lines = proc_out.splitlines()
        return "\n".join([x for x in lines if x.startswith("worker/0")] + [x for x in lines if not x.startswith("worker/0")])
    if tool == "orch":
        logs = job.work / "runs" / job.run_id / "logs"
        return "\n".join((logs / f"worker-{i}.log").read_text(errors="replace")
                         for i in range(job.workers) if (logs / f"worker-{i}.log").is_file())
    return proc_out


def rank_one(client: Any, before: set[str]) -> Optional[Any]:
    """The container of rank 1 among the run's, once it runs."""
    for c in client.containers.list():
        if c.id not in before and re.search(r"(worker|node|main)-1(-1)?$", c.name):
            return c
    return None


def run_once(tool: str, job: Job, bins: dict[str, Path], client: Any, kill: bool = False) -> dict[str, Any]:
    import docker.errors

    argv, env = command(tool, job, bins)
    before = engine_state(client)
    sampler = PeakSampler(before["containers"])
    sampler.start()
    started = time.monotonic()
    out = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=job.work, text=True)
    killed_at = None
    if kill:
        while proc.poll() is None and time.monotonic() - started < 600:
            target = rank_one(client, before["containers"])
            if target is not None:
                time.sleep(KILL_AFTER)
                try:
                    target.kill()
                    killed_at = time.monotonic()
                except docker.errors.APIError:  # it ended on its own first: nothing was killed
                    pass
                break
            time.sleep(0.2)
    try:
        proc.wait(timeout=KILL_WAIT if kill else 1800)
        returned = True
    except subprocess.TimeoutExpired:
        returned = False
    wall = time.monotonic() - started
    left = left_behind(client, before)  # what the tool left, read the moment it returned (or gave up waiting)
    if not returned:
        proc.kill()
        proc.wait()
    peaks = sampler.finish()
    out.seek(0)
    text = output_of(tool, job, out.read())
    clean(client, left)
    row: dict[str, Any] = {"tool": tool, "script": job.script, "workers": job.workers, "run_id": job.run_id,
                           "exit_code": proc.returncode if returned else None, "wall_seconds": wall,
                           "peak_mib": sorted(round(v / 2**20) for v in peaks.values()),
                           "left": {k: v for k, v in left.items() if k != "ids"}}
    if kill:
        row.update({"returned": returned, "seconds_after_kill": (time.monotonic() if not returned else started + wall)
                    - killed_at if killed_at else None, "killed": killed_at is not None})
        return row
    trained, seen = training_seconds(job.script, text)
    row.update({"training_seconds": trained, "beyond_seconds": wall - trained if trained is not None else None,
                **seen})
    if proc.returncode != 0 or trained is None:
        row["tail"] = one_line(text[-800:])
    return row


# -- images -----------------------------------------------------------------------------------------------------
def images(engine: Engine, work: Path) -> dict[str, str]:
    """The images every tool runs: orch's, and for the peers the same plus the tutorials and the data caches."""
    (work / "vision.txt").write_bytes(VISION)
    torch = image_for(VISION, "torch")
    subprocess.run([sys.executable, "-m", "orchestrator", "build", "--framework", "torch", "--requirements",
                    str(work / "vision.txt")], cwd=ROOT, check=True)
    subprocess.run([sys.executable, "-m", "orchestrator", "build"], cwd=ROOT, check=True)
    loaders = prepare(default_paths().data, LOADERS, lambda msg: print(f"peers.py: {msg}", file=sys.stderr))
    made = {}
    for name, base in (("ddp", torch), ("keras", tf_framework.image_ref("single"))):
        with_caches = f"orch-bench-peers:{name}-caches"
        script_images.ensure_loaders(engine, base, with_caches, loaders)
        tag = f"orch-bench-peers:{name}"
        folder = SCRIPTS[name][0]
        context = work / f"context-{name}"
        shutil.copytree(TUTORIALS / folder, context / folder)
        (context / "Dockerfile").write_text(PEER_DOCKERFILE.format(base=with_caches, folder=folder, bench=BENCH_DIR,
                                                                    loaders=contract.IMAGE_LOADERS_DIR))
        subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True, stdout=subprocess.DEVNULL)
        made[name] = tag
    made["sizes"] = {name: engine.image_size(tag) for name, tag in made.items() if name != "sizes"}  # type: ignore
    made["bases"] = {"ddp": torch, "keras": tf_framework.image_ref("single")}  # type: ignore
    return made


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for key in sorted({(r["script"], r["workers"], r["tool"]) for r in runs}):
        mine = [r for r in runs if (r["script"], r["workers"], r["tool"]) == key]
        ok = [r for r in mine if r.get("exit_code") == 0 and r.get("training_seconds") is not None]
        rows.append({"script": key[0], "workers": key[1], "tool": key[2], "runs": len(mine), "succeeded": len(ok),
                     "wall_seconds": [r["wall_seconds"] for r in ok],
                     "beyond_seconds": [r["beyond_seconds"] for r in ok],
                     "training_seconds": [r["training_seconds"] for r in ok],
                     "peak_mib": [p for r in ok for p in r["peak_mib"]],
                     "left": {k: max(r["left"][k] for r in mine) for k in mine[0]["left"]},
                     "accuracy": [r.get("accuracy") for r in ok]})
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = ["# orch against its peers on the tutorials", "",
             "| script | N | tool | wall s (median) | beyond training s (median, range) | peak MiB per container "
             "(median) | left after the run |", "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for r in result["rows"]:
        if not r["succeeded"]:
            lines.append(f"| {r['script']} | {r['workers']} | {r['tool']} | failed | | | |")
            continue
        b = r["beyond_seconds"]
        left = ", ".join(f"{v} {k}" for k, v in r["left"].items() if v and k not in ("running", "caches")) \
            or "nothing"
        lines.append(f"| {r['script']} | {r['workers']} | {r['tool']} | {statistics.median(r['wall_seconds']):.1f} | "
                     f"{statistics.median(b):.1f} ({min(b):.1f}-{max(b):.1f}) | "
                     f"{statistics.median(r['peak_mib']):.0f} | {left} |")
    for u in result["unsupported"]:
        lines.append(f"| {u['script']} | {u['workers']} | {u['tool']} | cannot: {u['why']} | | | |")
    lines += ["", "| tool | returned after the kill | s after the kill | left running | left |",
              "| --- | --- | ---: | ---: | --- |"]
    for k in result["kills"]:
        left = ", ".join(f"{v} {n}" for n, v in k["left"].items() if v and n not in ("running", "caches")) \
            or "nothing"
        after = f"{k['seconds_after_kill']:.1f}" if k["seconds_after_kill"] is not None else "-"
        lines.append(f"| {k['tool']} | {'yes' if k['returned'] else 'no'} | {after} | {k['left']['running']} | "
                     f"{left} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scripts", nargs="+", choices=sorted(SCRIPTS), default=["ddp", "keras"])
    parser.add_argument("--tools", nargs="+", choices=["orch", "torchx", "kubeflow"],
                        default=["orch", "torchx", "kubeflow"])
    parser.add_argument("--no-kill", action="store_true", help="skip the killed-container runs")
    parser.add_argument("--out", type=Path, default=RESULTS / "peers.json")
    args = parser.parse_args()
    import docker

    client = docker.from_env()
    engine = Engine()
    cache = default_paths().cache / "bench-peers"
    cache.mkdir(parents=True, exist_ok=True)
    bins = {name: venv(cache, name) for name in PEERS if name in args.tools}
    versions = {"orch": __version__}
    for name, b in bins.items():
        shown = subprocess.run([str(b / "pip"), "show", name], capture_output=True, text=True).stdout
        versions[name] = re.search(r"^Version: (\S+)", shown, re.M)[1]  # type: ignore[index]
    runs: list[dict[str, Any]] = []
    unsupported: list[dict[str, Any]] = []
    kills: list[dict[str, Any]] = []
    made: dict[str, Any] = {}

    def save() -> None:  # after every run: an interrupted bench keeps what it measured
        result = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine.identity(),
                  "versions": versions, "repeats": args.repeats, "memory_mb_torchx": MEMORY_MB,
                  "kill_after_seconds": KILL_AFTER, "kill_wait_seconds": KILL_WAIT,
                  "images": {"bases": made.get("bases"), "peer_sizes": made.get("sizes")},
                  "command": shlex.join(["python", "benchmarks/peers.py", *sys.argv[1:]]),
                  "rows": summary(runs) if runs else [], "unsupported": unsupported, "kills": kills, "runs": runs}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
        args.out.with_suffix(".md").write_text(markdown(result))

    with tempfile.TemporaryDirectory(prefix="orch-peers-") as tmp:
        work = Path(tmp)
        made.update(images(engine, work))
        (work / "torchx_keras.py").write_text(TORCHX_KERAS_COMPONENT)
        (work / "kubeflow_driver.py").write_text(KUBEFLOW_DRIVER)
        cells = [(s, n) for s in args.scripts for n in args.workers]
        for repeat in range(args.repeats):
            for c, (script, workers) in enumerate(cells):
                tools = args.tools[(repeat + c) % len(args.tools):] + args.tools[:(repeat + c) % len(args.tools)]
                for tool in tools:
                    why = supported(tool, script, workers)
                    if why:
                        if repeat == 0:
                            unsupported.append({"tool": tool, "script": script, "workers": workers, "why": why})
                        continue
                    job = Job(script, workers, f"peers-{tool}-{script}-{workers}-r{repeat}-{os.getpid()}", made, work)
                    row = run_once(tool, job, bins, client)
                    runs.append({**row, "repeat": repeat})
                    save()
                    beyond = f"{row['beyond_seconds']:.1f}" if row.get("beyond_seconds") is not None else "?"
                    print(f"peers.py: {script} N={workers} {tool}: exit {row['exit_code']}, wall "
                          f"{row['wall_seconds']:.1f} s, beyond training {beyond} s, peak {row['peak_mib']} MiB, "
                          f"left {row['left']}" + (f"; {row['tail'][-300:]}" if 'tail' in row else ""),
                          file=sys.stderr)
        if not args.no_kill and "ddp" in args.scripts:
            for tool in args.tools:
                job = Job("ddp", 3, f"peers-{tool}-kill-{os.getpid()}", made, work)
                row = run_once(tool, job, bins, client, kill=True)
                kills.append(row)
                save()
                print(f"peers.py: killed rank 1 of 3 under {tool}: returned {row['returned']}, "
                      f"{row['seconds_after_kill']} s after, left {row['left']}", file=sys.stderr)
    save()
    print(f"peers.py: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
