"""`orch collect`: a run's results, CSVs and plots, and a comparison of several runs."""
from __future__ import annotations

from typing import Any, Optional

import click

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import complete_run_ids, format_option
from orchestrator.cli.tables import comparison_table, containers_table


@click.command()
@click.argument("runs", nargs=-1, shell_complete=complete_run_ids)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Folder that receives <run>/ folders. [default: $ORCH_RESULTS_DIR, else results]")
@click.option("--no-plots", "no_plots", is_flag=True,
              help="Skip the PNG plots, most of collect's time; the figures, CSVs and reports are written all the same.")
@format_option
@pass_env
def collect(env: Environment, runs: tuple[str, ...], out_dir: Optional[str], no_plots: bool, fmt: str) -> None:
    """Gather RUNS (default: the newest) into results/<run>/: summary.json, CSVs, PNG plots and reports.

    \b
    Per run, in results/<run>/: summary.json (spec, times, accuracy, per-container CPU/memory/network),
    stats.csv, host.csv, epochs.csv, cpu.png, network.png, training.png, predictions-worker-<i>.png,
    report.html (interactive, one file, offline) and tensorboard/ (TensorBoard event files).
    Given several runs it also prints one comparison: time ratio T(N)/T(1), speedup T(1)/T(N) and
    efficiency speedup/N against the 1-worker run with the same data, epochs and batch, and writes
    their side-by-side report, results/compare-<first>-<last>.html (compare-<first>-and-<n>-more.html for more).
    Failed runs are collected too, with what they recorded. A worker whose records fail validation has
    its figures marked invalid, and the run's are the other workers' (partial). A run that cannot be
    collected is said in one line, the others are collected, and the exit code is not 0.
    """
    from orchestrator.api import collect as gather

    got = gather(*runs, out=out_dir, plots=not no_plots)
    summaries, rows = got.summaries, got.comparison
    if fmt == "json":
        failed = [{"run_id": f.run, "error": f.message} for f in got.failures]
        payload: Any = ((summaries[0] if summaries else None) if len(runs) <= 1
                        else {"runs": summaries, "comparison": rows, "failed": failed})
        if payload is not None:
            env.json(payload)
    elif summaries:
        env.out.print(comparison_table(rows))
        if len(summaries) == 1:
            env.out.print(containers_table(summaries[0]))
    for s in summaries:
        env.say(f"{s['run_id']}: wrote {', '.join(s['files'])} to {s['results_dir']}")
        for warning in s.get("warnings") or []:
            env.say(f"{s['run_id']}: {warning}")
    if got.report is not None:
        env.say(f"interactive report: {got.report} ({got.report.stat().st_size // 1024} KB, works offline)")
    for failure in got.failures:
        env.error(f"orch: error: {failure.run}: {failure.message}")
    if got.failures:  # what was collected is written and shown; the exit code says some was not
        raise click.exceptions.Exit(max(f.exit_code for f in got.failures))
