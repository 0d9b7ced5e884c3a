"""What ``collect`` gathers and writes, and the verb itself: for the API's ``collect`` and a ``Run``'s, which both take it
from here."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from orchestrator.paths import Paths, default_paths

if TYPE_CHECKING:
    from orchestrator.analysis.collect import Failure


@dataclass(frozen=True)
class Collected:
    """What ``collect`` wrote: one summary per run (as its summary.json), and the comparison of the runs; and
    the runs it could not collect, each with its one-line reason and exit code."""

    summaries: list[dict[str, Any]]
    comparison: list[dict[str, Any]]
    report: Optional[Path] = None  # the interactive HTML report: the run's own, or the runs' side by side
    failures: list["Failure"] = field(default_factory=list)  # (run, message, exit_code), one per run not collected

    def _repr_html_(self) -> str:
        from orchestrator.display import block

        ids = ", ".join(str(s.get("run_id")) for s in self.summaries)
        facts = [("report", str(self.report) if self.report else None),
                 ("not collected", "; ".join(f"{f[0]}: {f[1]}" for f in self.failures) or None)]
        return block(f"collected {ids}", facts, self.comparison)

    def to_pandas(self) -> Any:
        """The comparison, one row per run: T(N)/T(1), speedup and efficiency beside the run's figures."""
        from orchestrator.display import dataframe

        return dataframe(self.comparison)



def collect(*run_ids: str, out: Union[str, Path, None] = None, paths: Optional[Paths] = None,
            plots: bool = True) -> Collected:
    """Gather runs (default: the newest) into ``out`` (default: the results folder), one folder each, and
    compare them: T(N)/T(1), speedup and efficiency against the 1-worker run of the same work. A run that cannot
    be collected is in ``failures``; the others are collected all the same. ``plots=False`` skips the PNG plots
    (most of collect's time); the figures, CSVs, TensorBoard events and HTML reports are written all the same."""
    from orchestrator.analysis import html
    from orchestrator.analysis.collect import collect as gather
    from orchestrator.analysis.collect import compare

    paths = paths or default_paths()
    root = Path(out) if out else paths.results
    failures: list[Failure] = []
    summaries = gather(list(run_ids) or None, out_root=root, paths=paths, failures=failures, plots=plots)
    report = Path(summaries[0]["results_dir"]) / "report.html" if len(summaries) == 1 else None
    if len(summaries) > 1:
        ids = [s["run_id"] for s in summaries]
        name = f"compare-{ids[0]}-{ids[-1]}" if len(ids) == 2 else f"compare-{ids[0]}-and-{len(ids) - 1}-more"
        try:
            report = html.write(root / f"{name[:120]}.html", f"orch: {', '.join(ids)[:200]}",
                                [(Path(s["results_dir"]), None) for s in summaries])
        except Exception as exc:  # noqa: BLE001 - the results are written; the side-by-side view is extra
            summaries[-1].setdefault("warnings", []).append(f"no comparison report: {type(exc).__name__}: {exc}")
    return Collected(summaries, compare(summaries), report if report is not None and report.is_file() else None,
                     failures)
