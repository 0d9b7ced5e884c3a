"""`orch bench allreduce`: one all-reduce between containers, for every transport, beside bare host processes."""
from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Optional

import click
from rich.table import Table

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import Verbs, engine_option, format_option
from orchestrator.cli.tables import _cells

TINY = ("4K", "2", 30, 5)  # --tiny: the sizes, ranks, iterations and warm-up
def parse_sizes(text: str) -> list[int]:
    """``4K,80K,1M`` as bytes, in Docker's units as every size orch reads (a number alone is bytes here);
    click.BadParameter for anything else."""
    from orchestrator.sizes import size_bytes

    out = []
    for part in text.split(","):
        try:
            out.append(size_bytes(part))
        except ValueError:
            raise click.BadParameter(f"{part.strip()!r} is not a size such as 4K, 80K, 1M or 16M",
                                     param_hint="--sizes") from None
    return out


def parse_ints(text: str, name: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of whole numbers", param_hint=name) from None


@click.group(cls=Verbs)
@engine_option
def bench() -> None:
    """Measure what bounds distributed training on this machine."""


@bench.command()
@click.option("--sizes", default="4K,80K,1M,16M", show_default=True,
              help="Message sizes, comma-separated (80K is the MLP's gradients).")
@click.option("--ranks", default="2,3", show_default=True, help="Rank counts, comma-separated (2 to 16).")
@click.option("--transports", default=None,
              help="Comma-separated; default every one of every framework (`orch bench allreduce --help` lists "
                   "them below).")
@click.option("--iterations", type=click.IntRange(5, 100_000), default=500, show_default=True,
              help="Timed all-reduces per size (TensorFlow's are timed ten to a call).")
@click.option("--warmup", type=click.IntRange(0, 100_000), default=50, show_default=True,
              help="Untimed all-reduces per size first.")
@click.option("--host/--no-host", default=True, show_default=True,
              help="Also measure bare processes on this host, the reference (a virtual environment made once "
                   "from the images' wheelhouse).")
@click.option("--tiny", is_flag=True, help="4 KB, 2 ranks, 30 iterations: a quick check that every transport runs.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for allreduce.json, allreduce.md and allreduce-latency.png. [default: bench/ under the "
                   "results folder]")
@format_option
@pass_env
def allreduce(env: Environment, sizes: str, ranks: str, transports: Optional[str], iterations: int, warmup: int,
              host: bool, tiny: bool, out: Path, fmt: str) -> None:
    """One all-reduce between containers placed exactly as orch places a job's replicas.

    For each transport (TensorFlow's ring on the bridge and on shared loopback, MPI over TCP and over shared
    memory, PyTorch's gloo over TCP, which needs `orch build --framework torch`), each rank count and each
    message size: p50 and p99 latency and bus bandwidth, beside the same all-reduce between bare host processes
    (a virtual environment of the images' own wheels, made once). Writes a table, JSON and a plot of latency
    against size to --out. Each measurement is a short orch job; the whole default sweep takes minutes. A
    transport whose image is not built is skipped in one line that names the command adding it; nothing is
    built.

    \b
    Examples:
      orch bench allreduce --tiny
      orch bench allreduce --ranks 3 --sizes 80K --out results/allreduce
    """
    from orchestrator.bench import known_transports, run, to_json
    from orchestrator.bench.report import markdown, plot
    from orchestrator.paths import default_paths
    from orchestrator.safeio import atomic_write, write_json

    out = out or default_paths().results / "bench"

    if tiny:
        sizes, ranks, iterations, warmup = TINY
    names = [t.strip() for t in transports.split(",")] if transports else [t.name for t in known_transports()]
    started = time.time()
    rows = run(parse_sizes(sizes), parse_ints(ranks, "--ranks"), names, iterations, warmup, host=host, say=env.say)
    out.mkdir(parents=True, exist_ok=True)
    header = (f"# One all-reduce, `orch bench allreduce{' --tiny' if tiny else ''}`\n\n"
              f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}, {platform.machine()}, "
              f"{len(__import__('os').sched_getaffinity(0))} cores; {iterations} timed all-reduces per size after "
              f"{warmup} untimed. p50 and p99 are per all-reduce; bus bandwidth is size / p50 × 2(n−1)/n.")
    write_json(out / "allreduce.json", {"started": started, "iterations": iterations, "warmup": warmup,
                                         "rows": to_json(rows)})
    atomic_write(out / "allreduce.md", markdown(rows, header))
    plot(rows, out / "allreduce-latency.png")
    env.say(f"wrote {out}/allreduce.md, allreduce.json and allreduce-latency.png")
    if fmt == "json":
        env.json(to_json(rows))
        return
    table = Table("transport", "placement", "ranks", "size", "p50 µs", "p99 µs", "bus GB/s", "vs host")
    for r in rows:
        if r.p50_us is None:
            table.add_row(*_cells(r.transport, r.placement, str(r.ranks), str(r.bytes), "-", "-", "-", r.note[:60]))
        else:
            table.add_row(*_cells(r.transport, r.placement, str(r.ranks), str(r.bytes), f"{r.p50_us:.0f}",
                                  f"{r.p99_us:.0f}", f"{r.busbw_gbps:.3f}",
                                  f"{r.vs_host:.2f}x" if r.vs_host else "-"))
    env.out.print(table)
