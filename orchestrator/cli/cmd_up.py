"""`orch up`: launch a training job and watch it."""
from __future__ import annotations

import json
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


class Watcher:
    """Shows each reporting replica's progress on stderr: bars on a terminal, one line per epoch otherwise.

    Called with the replica (role, index) and each event model (orchestrator.run.records) it writes. Worker
    text is never markup: a message such as ``[/job:worker/replica:0]`` is printed as it is, and its control
    characters visibly (``printable``).
    """

    def __init__(self, env: Environment, keys: list[tuple[str, int]], epochs: int) -> None:
        self.env = env
        self.progress: Optional[Progress] = None
        self.tasks: dict[tuple[str, int], Any] = {}
        self.first = keys[0] if keys else None
        if env.stderr_isatty:
            self.progress = Progress(
                TextColumn("{task.description}", markup=False), BarColumn(),
                TextColumn("{task.completed}/{task.total} epochs"), TextColumn("{task.fields[metrics]}", markup=False),
                TimeElapsedColumn(), console=env.err, transient=False,
            )
            for role, i in keys:
                self.tasks[(role, i)] = self.progress.add_task(f"{role}-{i} starting", total=epochs, metrics="")

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

    def __call__(self, key: tuple[str, int], event: Any) -> None:
        kind, worker = event.event, f"{key[0]}-{key[1]}"
        if kind == "epoch":
            metrics = (f"loss {fmt(event.loss, '.4f')} acc {fmt(event.accuracy, '.4f')} "
                       f"val_acc {fmt(event.val_accuracy, '.4f')} ({event.samples} samples)")
            if self.progress:
                self._describe(key, f"{worker} training", completed=event.epoch, metrics=metrics)
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


@click.command(cls=GroupedCommand)
@spec_options
@script_options
@click.option("--detach", "-d", is_flag=True, help="Start the run and return; see it with `orch ps`, stop it with `orch down`.")
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
def up(env: Environment, /, detach: bool, dry_run: bool, stats_interval: float, fmt: str, script_args: tuple[str, ...],
       requirements: Optional[str], track: Optional[str], tracking_uri: Optional[str], **flags: Any) -> None:
    """Launch a training job on N containers and wait for it.

    Renders the Compose file into runs/<run-id>/, starts it, shows each worker's epochs, and exits
    0 when every worker succeeded, 1 when one failed (the others are stopped, all containers
    removed, and whatever was written kept).

    With --script, every replica runs your script instead of orch's trainer:
    `orch up --script train.py --workers 3 -- --lr 0.01`.
    """
    spec = spec_from(flags, script_args, requirements)
    try:
        if dry_run:
            _dry_run(env, spec, fmt)
        else:
            _up(env, spec, detach, stats_interval, fmt, track, tracking_uri)
    except InvalidSpec as exc:  # found once the flags were read (a run id taken, the engine's CPUs): named by flag too
        raise InvalidSpec(flag_message(exc), details=exc.details) from None


def _up(env: Environment, spec: JobSpec, detach: bool, stats_interval: float, fmt: str, track: Optional[str],
        tracking_uri: Optional[str]) -> None:
    from orchestrator.run.runner import up as run_up

    targets = tracked_targets(track)
    if targets and detach:
        typed = click.get_current_context().get_parameter_source("track") == click.core.ParameterSource.COMMANDLINE
        if typed:
            raise click.UsageError("--track logs a finished run; with --detach, run `orch track RUN` once it has ended")
        env.say("not tracking a detached run ($ORCH_TRACK); `orch track RUN` logs it once it has ended")
        targets = ()
    try:
        with Watcher(env, spec.reporting_keys(), spec.epochs) as watcher:
            info = run_up(spec, detach=detach, say=env.say, on_event=watcher, stats_interval=stats_interval)
    except OrchError:
        _track(env, spec.run_id, targets, tracking_uri)  # a failed run is worth a look too
        raise
    _track(env, spec.run_id, targets, tracking_uri)
    if detach:
        env.say(f"run {info.run_id} started; `orch ps` shows it, `orch down {info.run_id}` removes it")
        env.out.print(Text(info.run_id))
        return
    if fmt == "json":
        env.json(json.dumps(info.to_dict(), default=str))
        return
    env.out.print(runs_table([info]))
    env.out.print(workers_table(info.workers))


def _dry_run(env: Environment, spec: JobSpec, fmt: str) -> None:
    """Check and plan the run, start nothing: the flags that only matter to a started run are refused."""
    from orchestrator.api import dry_run

    ctx = click.get_current_context()
    typed = [f"--{name.replace('_', '-')}" for name in ("detach", "stats_interval", "track", "tracking_uri")
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if typed:
        raise click.UsageError(f"{typed[0]} is for a run that starts; --dry-run starts none, so leave it out")
    plan = dry_run(spec, say=env.say)
    if fmt == "json":
        env.json(json.dumps(plan.to_dict()))
    else:
        env.out.print(plan_table(plan))
    env.say("dry run: nothing was started or written; `orch up` with the same flags, less --dry-run, starts it")


def _track(env: Environment, run_id: str, targets: tuple[str, ...], uri: Optional[str]) -> None:
    from orchestrator.paths import default_paths
    from orchestrator.run.rundir import RunDir
    from orchestrator.tracking import track_run

    if targets and RunDir.of(default_paths(), run_id).exists():
        track_run(run_id, targets, uri=uri, say=env.say)
