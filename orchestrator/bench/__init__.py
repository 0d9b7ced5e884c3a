"""`orch bench allreduce`: one all-reduce between containers placed exactly as orch places a job's replicas, for
every transport orch has, beside the same all-reduce between bare processes on this host.

Each transport's measurement is an orch job: the ranks run ``bench_scripts/allreduce.py`` as a user's script
(``--script``), so they get the network, namespaces, limits and lock-down a training job of that framework gets.
The reference runs the same script as plain processes of a virtual environment on this host, made from the
images' own hash-locked wheelhouse, so both sides run the same libraries. Latencies are per all-reduce: p50 and
p99 over the samples, and the bus bandwidth of the p50 (NCCL's definition: size / time * 2(n-1)/n).
"""
from __future__ import annotations

import functools
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from orchestrator import frameworks
from orchestrator.errors import InvalidSpec, OrchError
from orchestrator.images import wheels
from orchestrator.paths import Paths, default_paths
from orchestrator.safeio import read_json_bounded, waiting_for

if TYPE_CHECKING:
    from orchestrator.jobspec import JobSpec

HARNESS = Path(__file__).resolve().parent.parent / "bench_scripts" / "allreduce.py"
DEFAULT_SIZES = (4 << 10, 80 << 10, 1 << 20, 16 << 20)
DEFAULT_RANKS = (2, 3)
HOST_TIMEOUT = 600  # seconds for one host measurement
RESULT_LIMIT = 8 << 20  # bytes of one rank-0 result file
Say = Callable[[str], None]


@dataclass(frozen=True)
class Transport:
    """One way orch's replicas all-reduce: the framework, the spec fields that place them, and what it is."""

    name: str
    framework: str
    api: str  # the library its probe measures, as the host reference's row names it
    fields: dict[str, Any]
    what: str
    unavailable: str = ""  # why it cannot run here, if it cannot


def known_transports() -> tuple[Transport, ...]:
    """Every transport of every registered framework, in the registry's order."""
    out = []
    for name in frameworks.names():
        framework = frameworks.get(name)
        out += [Transport(t.name, name, framework.bench_api or name, {"framework": name, **t.fields}, t.what)
                for t in framework.bench_transports]
    return tuple(out)


@dataclass
class Row:
    """One transport, placement, rank count and message size, measured."""

    transport: str
    placement: str  # containers, or host (bare processes: the reference)
    ranks: int
    bytes: int
    p50_us: Optional[float] = None
    p99_us: Optional[float] = None
    busbw_gbps: Optional[float] = None
    samples: int = 0
    note: str = ""
    vs_host: Optional[float] = field(default=None)  # p50 over the host's p50 of the same API, ranks and size


def summarize(samples: list[float], size: int, ranks: int) -> tuple[float, float, float]:
    """(p50 µs, p99 µs, bus bandwidth GB/s at the p50) of per-all-reduce times in seconds."""
    seconds = np.asarray(samples, dtype=float)
    p50, p99 = (float(np.percentile(seconds, q)) for q in (50, 99))
    bus = size / p50 * 2 * (ranks - 1) / ranks / 1e9 if p50 > 0 else 0.0
    return p50 * 1e6, p99 * 1e6, bus


def parse_measurement(raw: Any, ranks: int, sizes: list[int]) -> dict[int, list[float]]:
    """Rank 0's file, checked: one list of finite, positive seconds per size asked. A container wrote it."""
    if not isinstance(raw, dict) or raw.get("ranks") != ranks or not isinstance(raw.get("rows"), list):
        raise OrchError("the benchmark's result does not describe this measurement")
    out: dict[int, list[float]] = {}
    for row in raw["rows"][:len(sizes)]:
        samples = row.get("samples") if isinstance(row, dict) else None
        size = row.get("bytes") if isinstance(row, dict) else None
        if (not isinstance(size, int) or isinstance(size, bool) or not isinstance(samples, list) or not samples
                or len(samples) > 1_000_000 or not any(abs(size - asked) < 4 for asked in sizes)):
            raise OrchError("the benchmark's result has a malformed row")
        if not all(isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and 0 < s < 3600
                   for s in samples):
            raise OrchError("the benchmark's result has a time that is not a positive number of seconds")
        out[size] = [float(s) for s in samples]
    return out


def script_args(sizes: list[int], iterations: int, warmup: int) -> list[str]:
    return ["--sizes", *map(str, sizes), "--iterations", str(iterations), "--warmup", str(warmup)]


def probe_script(framework: str, paths: Paths) -> Path:
    """The harness with ``framework``'s probe beside it as probe.py, in a folder of their own (the only folder a
    rank's container sees of this host's files): the harness's path."""
    probe = frameworks.get(framework).allreduce_probe()
    if probe is None:
        raise InvalidSpec(f"transports: {framework} has no all-reduce probe")
    folder = paths.cache / "bench-probe" / framework
    folder.mkdir(parents=True, exist_ok=True)
    for source, name in ((HARNESS, "allreduce.py"), (probe, "probe.py")):
        text = source.read_bytes()
        target = folder / name
        if not target.is_file() or target.read_bytes() != text:
            tmp = folder / f".{name}.{os.getpid()}.tmp"  # two orch processes may stage it at once
            tmp.write_bytes(text)
            tmp.chmod(0o644)
            tmp.replace(target)
    return folder / "allreduce.py"


def job_spec(transport: Transport, ranks: int, sizes: list[int], iterations: int, warmup: int,
             script: Optional[Path] = None, engine: Optional[str] = None) -> JobSpec:
    """The orch job that measures ``transport`` with ``ranks`` replicas (validated: InvalidSpec if it cannot run);
    ``script`` is the staged harness (``probe_script``); ``engine`` the container engine (None: $ORCH_ENGINE, else
    Docker)."""
    from orchestrator.jobspec import make_spec

    run_id = f"bench-{transport.name}-{ranks}-{int(time.time() * 1000) % 10**9}"
    fields = {**transport.fields, **({"engine": engine} if engine else {})}
    return make_spec(**fields, workers=ranks, dataset="synthetic",
                     run_id=run_id, script=str(script or HARNESS),
                     script_args=tuple(script_args(sizes, iterations, warmup)), time_limit=HOST_TIMEOUT)


def in_containers(transport: Transport, ranks: int, sizes: list[int], iterations: int, warmup: int,
                  paths: Paths, say: Say, engine: Optional[str] = None) -> dict[int, list[float]]:
    """Run the all-reduce as an orch job of ``ranks`` replicas on ``engine``; rank 0's samples per size."""
    from orchestrator.run.start import up

    spec = job_spec(transport, ranks, sizes, iterations, warmup, probe_script(transport.framework, paths), engine)
    run_id = spec.run_id
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as runs:
        scratch = Paths(runs=Path(runs), cache=paths.cache, results=paths.results)
        up(spec, paths=scratch, stats_interval=None, say=lambda line: say(f"  {line}"))
        raw = read_json_bounded(Path(runs) / run_id / "worker-0" / "allreduce.json", RESULT_LIMIT)
    return parse_measurement(raw, ranks, sizes)


def host_env(framework: str, paths: Paths, say: Say) -> Path:
    """A virtual environment on this host with the images' own wheels for ``framework``'s probe (made once, then
    reused)."""
    unit = frameworks.get(framework)
    recipe = unit.recipe()
    if recipe is None:
        raise OrchError(f"{framework} has no image recipe to make a host environment from")
    lock = wheels.read_lock(recipe / "requirements.lock")
    wanted = unit.bench_host_packages
    api = unit.bench_api or framework
    venv = paths.cache / "bench-venv" / f"{lock.digest}-{api}"
    if (venv / "ready").is_file():
        return venv
    with waiting_for(venv.parent):  # one orch process makes it; another waits, then finds it ready
        if not (venv / "ready").is_file():
            _make_host_env(venv, recipe, lock, wanted, api, paths, say)
    return venv


def _make_host_env(venv: Path, recipe: Path, lock: wheels.Lock, wanted: Optional[tuple[str, ...]], api: str,
                   paths: Paths, say: Say) -> None:
    from orchestrator.images.builder import wheelhouse

    house = wheelhouse(paths, say, recipe)
    packages = [p for name, p in sorted(lock.packages.items()) if wanted is None or name in wanted]
    say(f"making a host environment for the {api} reference from the wheelhouse ({len(packages)} packages)")
    with tempfile.TemporaryDirectory(dir=venv.parent) as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text("".join(f"{p.name}=={p.version} " + " ".join(f"--hash=sha256:{h}" for h in p.hashes)
                                        + "\n" for p in packages))
        for argv in ([sys.executable, "-m", "venv", str(venv)],
                     [str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", str(house),
                      "--no-deps", "--require-hashes", "-r", str(requirements)]):
            proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
            if proc.returncode != 0:
                raise OrchError(f"could not make the host environment at {venv}: "
                                f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    (venv / "ready").write_text("ok\n")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def on_host(framework: str, ranks: int, sizes: list[int], iterations: int, warmup: int, paths: Paths,
            say: Say) -> dict[int, list[float]]:
    """Run the all-reduce as ``ranks`` bare processes of this host; rank 0's samples per size."""
    venv = host_env(framework, paths, say)
    script = probe_script(framework, paths)
    with tempfile.TemporaryDirectory(prefix="orch-bench-host-") as tmp:
        out = Path(tmp) / "allreduce.json"
        argv = [str(script), *script_args(sizes, iterations, warmup), "--out", str(out)]
        env = {**os.environ, "BENCH_SHARED_DIR": tmp, "TF_CPP_MIN_LOG_LEVEL": "2"}
        log = open(Path(tmp) / "output.log", "wb")  # a file, not pipes: no rank blocks on a full pipe
        procs = [subprocess.Popen(command, env=penv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
                 for command, penv in frameworks.get(framework).host_processes(ranks, argv, env, venv, _free_ports)]
        deadline = time.monotonic() + HOST_TIMEOUT
        try:
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        finally:
            for p in procs:
                p.kill()
                p.wait()
            log.close()
        if any(p.returncode for p in procs) or not out.is_file():
            tail = (Path(tmp) / "output.log").read_bytes()[-4096:].decode("utf-8", "replace").strip().splitlines()[-3:]
            api = frameworks.get(framework).bench_api or framework
            raise OrchError(f"the host reference for {api} with {ranks} ranks failed or ran over {HOST_TIMEOUT} s: "
                            f"{' | '.join(tail)}")
        return parse_measurement(json.loads(out.read_text()), ranks, sizes)


def run(sizes: list[int], ranks: list[int], transports: list[str], iterations: int, warmup: int,
        host: bool = True, paths: Optional[Paths] = None, say: Optional[Say] = None,
        present: Optional[Callable[[str], bool]] = None, engine: Optional[str] = None) -> list[Row]:
    """Measure every transport (and the host reference of each API) for every rank count and size, the containers
    on ``engine`` (None: $ORCH_ENGINE, else Docker). A transport whose framework's image is not on that engine is
    skipped, in one line that says how to add it; nothing is built. ``present`` tells whether an image is on the
    engine (default: ask the engine)."""
    paths = paths or default_paths()
    say = say or (lambda _line: None)
    every = known_transports()
    chosen = [t for t in every if t.name in transports]
    unknown = sorted(set(transports) - {t.name for t in every})
    if unknown:
        raise InvalidSpec(f"--transports: {unknown[0]!r} is not one orch has; choose from "
                          f"{', '.join(t.name for t in every)}")
    if any(r < 2 or r > 16 for r in ranks) or not ranks:
        raise InvalidSpec("--ranks: an all-reduce needs 2 to 16 ranks, e.g. --ranks 2,3")
    if not sizes or any(s < 4 or s > 1 << 30 for s in sizes):
        raise InvalidSpec("--sizes: each message is 4 bytes to 1 GiB, e.g. --sizes 4K,80K")
    for n in ranks:  # every job's spec first: a shape that cannot run is refused before anything is measured
        for t in chosen:
            if not t.unavailable:
                job_spec(t, n, sizes, iterations, warmup, engine=engine)
    chosen = _skip_absent_images(chosen, present or functools.partial(_engine_has, engine=engine), say)
    rows: list[Row] = []
    jobs: list[tuple[str, str, int, Callable[[], dict[int, list[float]]]]] = []
    for n in ranks:
        for t in chosen:
            if t.unavailable:
                rows += [Row(t.name, "containers", n, s, note=t.unavailable) for s in sizes]
                continue
            jobs.append((t.name, "containers", n,
                         functools.partial(in_containers, t, n, sizes, iterations, warmup, paths, say, engine)))
        if host:
            for framework, api in sorted({(t.framework, t.api) for t in chosen if not t.unavailable}):
                jobs.append((f"{api}-host", "host", n, functools.partial(
                    on_host, framework, n, sizes, iterations, warmup, paths, say)))
    for i, (name, placement, n, measure) in enumerate(jobs, 1):
        say(f"[{i}/{len(jobs)}] {name}, {n} ranks, {placement}")
        measured = measure()
        for size in sizes:
            samples = measured.get(size) or measured.get(max(4, size // 4 * 4))
            if not samples:
                rows.append(Row(name, placement, n, size, note="not measured"))
                continue
            p50, p99, bus = summarize(samples, size, n)
            rows.append(Row(name, placement, n, size, p50, p99, bus, len(samples)))
    _compare_to_host(rows, chosen)
    return rows


def _engine_has(ref: str, engine: Optional[str] = None) -> bool:
    from orchestrator.docker.engine import Engine

    return Engine(kind=engine).image_labels(ref) is not None


def _skip_absent_images(chosen: list[Transport], present: Callable[[str], bool], say: Say) -> list[Transport]:
    """The transports of ``chosen`` whose framework's image is on the engine (the unavailable ones kept, for their
    note); one line names the rest and the command that adds them. InvalidSpec if none is left to measure."""
    images = {t.framework: frameworks.get(t.framework).main_image() for t in chosen if not t.unavailable}
    absent = {framework for framework, image in images.items() if not present(image)}  # one query per framework
    if not absent:
        return chosen
    skipped = [t.name for t in chosen if t.framework in absent and not t.unavailable]
    names, one = ", ".join(skipped), len(skipped) == 1
    commands = " and ".join(f"`{frameworks.get(f).build_command()}`" for f in sorted(absent))
    kept = [t for t in chosen if t.framework not in absent]
    if all(t.unavailable for t in kept):
        raise InvalidSpec(f"nothing to measure: {names} need{'s' if one else ''} an image that is not built; run "
                          f"{commands} first")
    say(f"skipping {names}: {'its image is' if one else 'their images are'} not built (add with {commands})")
    return kept


def _compare_to_host(rows: list[Row], transports: list[Transport]) -> None:
    api_of = {t.name: t.api for t in transports}
    host = {(r.transport.removesuffix("-host"), r.ranks, r.bytes): r.p50_us for r in rows if r.placement == "host"}
    for r in rows:
        reference = host.get((api_of.get(r.transport, ""), r.ranks, r.bytes))
        if r.placement == "containers" and r.p50_us and reference:
            r.vs_host = r.p50_us / reference


def to_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]

