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
import subprocess
import sys
import tempfile
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

from peers_engine import PeakSampler, clean, engine_state, left_behind  # noqa: E402
from peers_report import markdown, summary, training_seconds  # noqa: E402
from peers_tools import KUBEFLOW_DRIVER, TORCHX_KERAS_COMPONENT  # noqa: E402

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
