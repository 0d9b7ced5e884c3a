"""The `orch` command: parse, call one library function, print.

Results go to stdout (tables, or JSON with --format json); progress and errors go to stderr. Each verb
lives in its own ``cmd_*`` module; ``main`` is the one error boundary. Library modules are imported
inside the verbs, so `orch --help` and every verb work while another module is broken.
"""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from typing import Any, Iterator, Optional

import click

from orchestrator import __version__
from orchestrator.cli.cmd_attach import attach
from orchestrator.cli.cmd_bench import bench
from orchestrator.cli.cmd_build import build
from orchestrator.cli.cmd_collect import collect
from orchestrator.cli.cmd_doctor import doctor
from orchestrator.cli.cmd_down import down
from orchestrator.cli.cmd_experiment import experiment
from orchestrator.cli.cmd_logs import logs
from orchestrator.cli.cmd_ps import ps
from orchestrator.cli.cmd_push import push
from orchestrator.cli.cmd_render import render
from orchestrator.cli.cmd_stats import stats
from orchestrator.cli.cmd_track import track
from orchestrator.cli.cmd_up import up
from orchestrator.cli.env import Environment
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, OrchError

__all__ = ["cli", "main", "Environment"]


# The verbs as `orch --help` lists them: by task, in the order a session uses them.
SECTIONS = (("Run a job", ("up", "attach", "ps", "logs", "stats", "down")),
            ("Look before running", ("render", "doctor")),
            ("Compare and record", ("collect", "experiment", "bench", "track")),
            ("Images", ("build", "push")))


class SectionedGroup(click.Group):
    """A group whose help lists its verbs by task (SECTIONS), each with its whole first sentence."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listed: set[str] = set()
        for title, names in SECTIONS:
            rows = [(n, self.commands[n].get_short_help_str(limit=200)) for n in names if n in self.commands]
            listed.update(n for n, _ in rows)
            with formatter.section(title):
                formatter.write_dl(rows)
        rest = [(n, c.get_short_help_str(limit=200)) for n, c in sorted(self.commands.items()) if n not in listed]
        if rest:
            with formatter.section("Other"):
                formatter.write_dl(rest)


@click.group(cls=SectionedGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="orch")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.option("--runs-dir", type=click.Path(file_okay=False), envvar="ORCH_RUNS_DIR", show_envvar=True,
              help="Where runs are kept, one folder each. [default: ./runs]")
@click.option("--results-dir", type=click.Path(file_okay=False), envvar="ORCH_RESULTS_DIR", show_envvar=True,
              help="Where collect, experiments and bench write. [default: ./results]")
@click.pass_context
def cli(ctx: click.Context, debug: bool, runs_dir: Optional[str], results_dir: Optional[str]) -> None:
    """orch: run and measure distributed training in containers.

    \b
    Typical session:
      orch doctor --fix          check the host, link Compose v2, fetch MNIST
      orch build --bootstrap-base   build the trainer images offline
      orch up --workers 3        train on 3 containers and wait for the result
      orch ps                    list runs and their results
    """
    env = ctx.ensure_object(Environment)
    env.debug = env.debug or debug
    # The folders reach every verb (and the orch processes it starts) the way the environment variables do.
    for name, value in (("ORCH_RUNS_DIR", runs_dir), ("ORCH_RESULTS_DIR", results_dir)):
        if value:
            os.environ[name] = os.path.abspath(value)


for _command in (build, render, up, attach, ps, down, stats, collect, track, experiment, logs, doctor, push, bench):
    cli.add_command(_command)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: handled like Ctrl-C (stop, save, remove), reported as "terminated" with exit 143."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextlib.contextmanager
def _termination_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into Terminated while the command runs; restore the handlers after."""
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        try:
            previous[signum] = signal.signal(signum, _raise_terminated)
        except ValueError:  # not the main thread: signals are not ours to change
            pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(argv: Optional[list[str]], env: Environment) -> int:
    """Run the command; its exit code, or an exception for the boundary."""
    # click prints --help, --version and its Ctrl-C newline with click.echo to sys.stdout / sys.stderr:
    # point those at the environment's streams, so every byte of output goes where env says.
    with contextlib.redirect_stdout(env.stdout), contextlib.redirect_stderr(env.stderr):
        rv = cli.main(args=argv, prog_name="orch", standalone_mode=False, obj=env)
    return rv if isinstance(rv, int) else 0  # an int: click's exit code (ctx.exit, --help)


def _fail(env: Environment, code: int, message: str, details: str = "") -> int:
    env.error(message)
    if details:
        env.error("\n".join("  " + line for line in details.rstrip("\n").split("\n")))
    return code


def _boundary(argv: Optional[list[str]], env: Environment) -> int:
    """The exit code of running ``argv``; every failure becomes a one-line message on stderr."""
    try:
        return _run(argv, env)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        return _fail(env, EXIT_USAGE, f"orch: error: {exc.format_message()}")
    except click.ClickException as exc:
        return _fail(env, exc.exit_code, f"orch: error: {exc.format_message()}")
    except click.Abort as exc:  # click turns KeyboardInterrupt (and so Terminated) into Abort
        if isinstance(exc.__cause__, Terminated):
            return _fail(env, EXIT_TERMINATED, "orch: terminated")
        return _fail(env, EXIT_INTERRUPTED, "orch: interrupted")
    except Terminated:
        return _fail(env, EXIT_TERMINATED, "orch: terminated")
    except KeyboardInterrupt:
        return _fail(env, EXIT_INTERRUPTED, "orch: interrupted")
    except OrchError as exc:
        if env.debug:
            env.err.print_exception()
        return _fail(env, exc.exit_code, f"orch: error: {exc.message}", exc.details)
    except OSError as exc:
        if env.debug:
            env.err.print_exception()
        if exc.errno == errno.ENOSPC:
            return _fail(env, EXIT_USAGE, f"orch: error: no space left on device writing {exc.filename or 'results'}; "
                                          "free some space (what was written before is kept)")
        # A file orch cannot read or write (a missing asset, a folder without permission) is the environment's.
        return _fail(env, EXIT_USAGE, f"orch: error: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    except Exception as exc:  # noqa: BLE001 - the boundary: nothing escapes as a bare traceback
        if env.debug:
            raise
        return _fail(env, 1, f"orch: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)")


GLOBAL_FLAGS = ("--debug",)
GLOBAL_VALUES = ("--runs-dir", "--results-dir")


def global_options_first(args: list[str]) -> list[str]:
    """``args`` with the global options (--debug, --runs-dir DIR, --results-dir DIR) moved before the verb, so they
    work in any position before a script's `--`, as people type them."""
    end = args.index("--") if "--" in args else len(args)
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < end:
        arg = args[i]
        if arg in GLOBAL_FLAGS or arg.split("=", 1)[0] in GLOBAL_VALUES and "=" in arg:
            front.append(arg)
        elif arg in GLOBAL_VALUES and i + 1 < end:
            front += [arg, args[i + 1]]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest + args[end:]


def main(argv: Optional[list[str]] = None, env: Optional[Environment] = None) -> None:
    """The error boundary of `orch`: run ``argv`` (default: sys.argv[1:]) and exit with its code.

    ``env`` gives the consoles to write to (default: the process's stdout and stderr). Exit codes:
    0 success; an OrchError's own code (1 failed, 2 bad input or host); 2 a usage error or a file orch cannot
    read or write; 130 Ctrl-C; 143 SIGTERM or SIGHUP; 1 an internal error (a bug). Always ends with SystemExit.
    """
    env = env or Environment()
    args = global_options_first(list(sys.argv[1:] if argv is None else argv))
    with _termination_signals():
        code = _boundary(args, env)
    sys.exit(code)
