"""`orch up`: launch a training job and watch it."""
from __future__ import annotations

from typing import Any, Optional

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import (
    GroupedCommand,
    flag_message,
    format_option,
    script_options,
    spec_from,
    spec_options,
    track_options,
    tracked_targets,
)
from orchestrator.cli.tables import fmt, plan_table, runs_table, workers_table
from orchestrator.errors import InvalidSpec, OrchError
from orchestrator.jobspec import JobSpec
from orchestrator.safetext import printable


PREFIX_STYLES = ("cyan", "yellow", "green", "magenta", "blue", "bright_cyan", "bright_yellow", "bright_green")


class Watcher:
    """Shows each replica's progress and output on stderr while a run goes: bars on a terminal, lines otherwise.

    Called with the replica (role, index) and each event model (orchestrator.run.records) it writes; ``line`` gets
    each line a replica prints (``worker-0 | ...``, as ``docker compose up`` shows them), and ``state`` each replica
    whose status changed. For orch's trainer the bars count epochs; for a script, which may report none, they show
    what orch knows (starting, running, its exit) and the time, until the script reports epochs of its own. Worker
    text is never markup: a message such as ``[/job:worker/replica:0]`` is printed as it is, and its control
    characters visibly (``printable``).
    """

    def __init__(self, env: Environment, keys: list[tuple[str, int]], epochs: Optional[int],
                 replicas: Optional[list[tuple[str, int]]] = None, quiet: bool = False) -> None:
        self.env, self.quiet = env, quiet
        self.progress: Optional[Progress] = None
        self.tasks: dict[tuple[str, int], Any] = {}
        self.first = keys[0] if keys else None
        names = [f"{role}-{i}" for role, i in (replicas or keys)]
        self.width = max(map(len, names), default=0)
        self.styles = {name: PREFIX_STYLES[n % len(PREFIX_STYLES)] for n, name in enumerate(names)}
        if env.stderr_isatty:
            self.progress = Progress(
                TextColumn("{task.description}", markup=False), BarColumn(),
                TextColumn("{task.fields[count]}", markup=False), TextColumn("{task.fields[metrics]}", markup=False),
                TimeElapsedColumn(), console=env.err, transient=False,
            )
            for role, i in keys:
                self.tasks[(role, i)] = self.progress.add_task(
                    f"{role}-{i} starting", total=epochs, metrics="",
                    count=f"0/{epochs} epochs" if epochs else "")

    def __enter__(self) -> "Watcher":
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress:
            self.progress.stop()

    def _describe(self, key: tuple[str, int], description: str, **fields: Any) -> None:
        if self.progress and key in self.tasks:
            self.progress.update(self.tasks[key], description=description, **fields)

    def line(self, record: Any) -> None:
        """One line a replica printed, prefixed with the replica as `docker compose up` does."""
        if self.quiet:
            return
        name = record.replica
        text = Text.assemble((f"{name:<{self.width}} |", self.styles.get(name, "cyan")), " ", printable(record.line))
        (self.progress.console if self.progress else self.env.err).print(text, soft_wrap=True)

    def state(self, replica: Any) -> None:
        """A replica whose status changed: what orch knows of it, beside its epochs (or in their place)."""
        key, name = replica.key, replica.label
        status = replica.status.value
        if replica.status.is_terminal:
            what = f"{name} exited {replica.exit_code}" if replica.exit_code is not None else f"{name} {status}"
            self._describe(key, what)
            if self.progress and key in self.tasks and self.progress.tasks[self.tasks[key]].total is None:
                self.progress.update(self.tasks[key], total=1, completed=1)  # a script's bar ends with it
        elif status == "running":
            self._describe(key, f"{name} running")

    def __call__(self, key: tuple[str, int], event: Any) -> None:
        kind, worker = event.event, f"{key[0]}-{key[1]}"
        if kind == "epoch":
            metrics = (f"loss {fmt(event.loss, '.4f')} acc {fmt(event.accuracy, '.4f')} "
                       f"val_acc {fmt(event.val_accuracy, '.4f')} ({event.samples} samples)")
            if self.progress:
                total = event.epochs or None
                self._describe(key, f"{worker} training", completed=event.epoch, total=total, metrics=metrics,
                               count=f"{event.epoch}/{total or '?'} epochs")
            else:
                self.env.say(f"{worker} epoch {event.epoch}/{event.epochs or '?'} {metrics} {fmt(event.seconds, '.1f')}s")
        elif kind == "start":
            if self.progress:
                self._describe(key, f"{worker} {event.stage}")
            elif event.stage == "training" and key == self.first:
                self.env.say(f"workers connected; training ({event.steps_per_epoch} steps per epoch)")
        elif kind == "resumed":
            self.env.say(f"{worker} resumed from its checkpoint at epoch {event.epoch}")
        elif kind == "done":
            self._describe(key, f"{worker} done")
        elif kind == "error":
            self.env.err.print(Text.assemble(("orch:", "dim"), " ", (f"{worker} error:", "red"), " ",
                                             printable(str(event.message))), soft_wrap=True)


class UpCommand(GroupedCommand):
    """`orch up`'s help: its own flags (detach, dry run, output) first, then the job's."""

    other_heading = "Running"
    other_first = True


@click.command(cls=UpCommand)
@spec_options
@script_options
@click.option("--detach", "-d", is_flag=True,
              help="Start the run and return once its replicas are launched; its supervisor keeps every guard (the "
                   "timeouts, restarts, the disk limit, the stats). Follow it with `orch attach`, stop it with "
                   "`orch down`.")
@click.option("--quiet", "-q", is_flag=True,
              help="Do not show the replicas' output as they print it (`orch logs -f RUN` still does).")
@click.option("--dry-run", is_flag=True,
              help="Check everything `up` checks before it starts (the spec, the run id, the script and its folder, "
                   "the disk, the engine, the images and the CPUs it can give), print what would run, and start and "
                   "write nothing: exit 0, or 2 with the reason. With no engine answering, one line says the images "
                   "were not checked, and the rest decides.")
@click.option("--stats-interval", type=click.FloatRange(min=1.0), default=1.0, show_default=True,
              help="Seconds between resource samples of each container (written to runs/<id>/stats.csv).")
@track_options
@format_option
@pass_env
def up(env: Environment, /, detach: bool, quiet: bool, dry_run: bool, stats_interval: float, fmt: str,
       script_args: tuple[str, ...],
       requirements: Optional[str], track: Optional[str], tracking_uri: Optional[str], **flags: Any) -> None:
    """Launch a training job on N containers and wait for it.

    \b
    Examples:
      orch up --workers 3                        orch's trainer on 3 containers, MNIST, global batch 96
      orch up --framework mpi --workers 3        the same job over MPI's shared memory
      orch up --workers 1 --run-id base          the 1-container baseline, to compare with `orch collect`
      orch up --script train.py -n 2 -- --lr 0.01   your script on 2 containers, its arguments after --
      orch up -n 3 --detach; orch attach         start and return, then follow it from any terminal

    Renders the Compose file into runs/<run-id>/, starts it under a supervisor process of its own, shows each
    worker's epochs and each replica's output as it prints it (prefixed with the replica, on stderr; --quiet for
    none), and exits 0 when every worker succeeded, 1 when one failed (the others are stopped, all containers
    removed, and whatever was written kept). Ctrl-C stops the run; if this command dies or its terminal closes, the
    supervisor carries the run to its end, and `orch attach RUN` follows it again.

    With --script, every replica runs your script instead of orch's trainer.
    """
    spec = spec_from(flags, script_args, requirements)
    try:
        if dry_run:
            _dry_run(env, spec, fmt)
        else:
            _up(env, spec, detach, quiet, stats_interval, fmt, track, tracking_uri)
    except InvalidSpec as exc:  # found once the flags were read (a run id taken, the engine's CPUs): named by flag too
        raise InvalidSpec(flag_message(exc), details=exc.details) from None


def _up(env: Environment, spec: JobSpec, detach: bool, quiet: bool, stats_interval: float, fmt: str,
        track: Optional[str], tracking_uri: Optional[str]) -> None:
    from orchestrator.run.start import up as run_up

    targets = tracked_targets(track)
    if targets and detach:
        typed = click.get_current_context().get_parameter_source("track") == click.core.ParameterSource.COMMANDLINE
        if typed:
            raise click.UsageError("--track logs a finished run; with --detach, run `orch track RUN` once it has ended")
        env.say("not tracking a detached run ($ORCH_TRACK); `orch track RUN` logs it once it has ended")
        targets = ()
    try:
        # A script may count no epochs of orch's: its bars show what orch knows until it reports epochs itself.
        with Watcher(env, spec.reporting_keys(), None if spec.script else spec.epochs, spec.replica_keys(),
                     quiet=quiet) as watcher:
            info = run_up(spec, detach=detach, say=env.say, on_event=watcher, stats_interval=stats_interval,
                          on_line=None if quiet else watcher.line, on_state=watcher.state)
    except OrchError:
        _track(env, spec.run_id, targets, tracking_uri)  # a failed run is worth a look too
        raise
    _track(env, spec.run_id, targets, tracking_uri)
    if detach:
        env.say(f"run {info.run_id} started under its supervisor; `orch attach {info.run_id}` follows it, "
                f"`orch ps` shows it, `orch down {info.run_id}` stops it")
        env.out.print(Text(info.run_id))
        return
    show_result(env, info, fmt)


def show_result(env: Environment, info: Any, fmt: str) -> None:
    """A finished run on stdout: its row and its workers' table, or its record as JSON."""
    if fmt == "json":
        env.json(info.to_dict())
        return
    env.out.print(runs_table([info]))
    env.out.print(workers_table(info.workers))


def _dry_run(env: Environment, spec: JobSpec, fmt: str) -> None:
    """Check and plan the run, start nothing: the flags that only matter to a started run are refused."""
    from orchestrator.api import dry_run

    ctx = click.get_current_context()
    typed = [f"--{name.replace('_', '-')}" for name in ("detach", "quiet", "stats_interval", "track", "tracking_uri")
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if typed:
        raise click.UsageError(f"{typed[0]} is for a run that starts; --dry-run starts none, so leave it out")
    plan = dry_run(spec, say=env.say)
    if fmt == "json":
        env.json(plan.to_dict())
    else:
        env.out.print(plan_table(plan))
    env.say("dry run: nothing was started or written; `orch up` with the same flags, less --dry-run, starts it")


def _track(env: Environment, run_id: str, targets: tuple[str, ...], uri: Optional[str]) -> None:
    from orchestrator.paths import default_paths
    from orchestrator.run.rundir import RunDir
    from orchestrator.tracking import track_run

    if targets and RunDir.of(default_paths(), run_id).exists():
        track_run(run_id, targets, uri=uri, say=env.say)
