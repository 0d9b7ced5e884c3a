"""MLflow runs of orch's runs, logged by the host with MLflow's own client.

One MLflow run per orch run, in the experiment ``orch`` (or, for a sweep, one experiment named after it, with a
parent run and a child run per cell). Each carries the spec as parameters, per-epoch metrics for the job and
each worker, the run's figures, per-container CPU, memory and network by second, tags (framework, strategy,
backend, run id, machine) and the results folder's files, the rendered Compose file, stack or manifests, and
the replicas' logs as artifacts.

Exactly once: a run is tagged ``orch.run_id``, and ``orch.complete`` once everything is logged. A run already
complete is skipped; one left half-logged (the server died mid-way) is deleted and logged again.

Never a stall: MLflow's HTTP client retries for minutes by default; orch's calls are limited to one attempt of
MLFLOW_TIMEOUT seconds each (unless the user set MLflow's own variables).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from orchestrator.errors import OrchError
from orchestrator.tracking.figures import RunFigures

DEFAULT_EXPERIMENT = "orch"
MLFLOW_TIMEOUT = 10  # seconds per request to a tracking server
BATCH = 900  # metrics per log_batch call (MLflow's limit is 1,000)


def default_uri(results: Path) -> str:
    """The embedded store: SQLite in the results folder, so tracking works with no server."""
    return f"sqlite:///{(results / 'mlflow' / 'mlflow.db').resolve()}"


def tracking_uri(uri: Optional[str], results: Path) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri(results)


def _client(uri: str) -> Any:
    import logging

    for name in ("mlflow", "alembic"):  # their INFO lines (creating tables, ...) are not orch's progress
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(MLFLOW_TIMEOUT))
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise OrchError("MLflow is not installed; `pip install 'orch[mlflow]'` (or `pip install mlflow-skinny "
                        "sqlalchemy alembic`)") from None
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=uri)


def _experiment(client: Any, name: str, uri: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    location = None
    if uri.startswith("sqlite:///"):  # the embedded store keeps its artifacts beside its database
        location = (Path(uri.removeprefix("sqlite:///")).parent / "artifacts" / name).resolve().as_uri()
    return str(client.create_experiment(name, artifact_location=location))


def _existing(client: Any, experiment_id: str, run_id: str) -> Optional[Any]:
    found = client.search_runs([experiment_id], filter_string=f"tags.`orch.run_id` = '{run_id}'", max_results=5)
    for run in found:
        if run.data.tags.get("orch.complete") == "yes":
            return run
        client.delete_run(run.info.run_id)  # half-logged: the server died mid-way; logged again below
    return None


def log_run(figures: RunFigures, uri: str, experiment: str = DEFAULT_EXPERIMENT, parent: Optional[str] = None,
            run_dir: Optional[Path] = None) -> tuple[str, bool]:
    """Log one orch run; (the MLflow run id, whether it was logged now rather than found complete)."""
    client = _client(uri)  # first: it says how to install MLflow where it is missing
    from mlflow.entities import Metric, Param, RunTag

    experiment_id = _experiment(client, experiment, uri)
    done = _existing(client, experiment_id, figures.run_id)
    if done is not None:
        return done.info.run_id, False
    tags = {**figures.tags, "mlflow.runName": figures.run_id, "orch.complete": "no"}
    if parent:
        tags["mlflow.parentRunId"] = parent
    start_ms = int((figures.wall_start or 0) * 1000) or None
    run = client.create_run(experiment_id, start_time=start_ms, tags=tags)
    rid = run.info.run_id
    params = [Param(k, v) for k, v in figures.params.items()]
    for i in range(0, len(params), 100):
        client.log_batch(rid, params=params[i:i + 100])
    stamp = start_ms or 0
    metrics = [Metric(k, v, stamp, 0) for k, v in figures.scalars.items()]
    metrics += [Metric(p.name, p.value, stamp + p.step * 1000, p.step) for p in figures.series]
    for i in range(0, len(metrics), BATCH):
        client.log_batch(rid, metrics=metrics[i:i + BATCH])
    for path in figures.artifacts:
        client.log_artifact(rid, str(path), artifact_path="results")
    if run_dir is not None and run_dir.is_dir():
        from orchestrator.run.rundir import RunDir

        rendered = RunDir(run_dir).artifact()  # the Compose file, stack file or manifests apply ran
        if rendered is not None:
            client.log_artifact(rid, str(rendered), artifact_path="rendered")
        logs = run_dir / "logs"
        if logs.is_dir():
            for path in sorted(logs.glob("*.log")):
                if path.is_file() and not path.is_symlink():
                    client.log_artifact(rid, str(path), artifact_path="logs")
    state = "FINISHED" if figures.summary.get("state") == "succeeded" else "FAILED"
    client.set_terminated(rid, status=state)
    client.log_batch(rid, tags=[RunTag("orch.complete", "yes")])  # last: only a whole run is complete
    return rid, True


def log_parent(uri: str, experiment: str, name: str, tags: dict[str, str], params: dict[str, str]) -> str:
    """The parent run of a sweep, found by its tag or made; its MLflow run id."""
    client = _client(uri)
    from mlflow.entities import Param, RunTag

    experiment_id = _experiment(client, experiment, uri)
    found = client.search_runs([experiment_id], filter_string=f"tags.`orch.sweep` = '{name}'", max_results=1)
    if found:
        return str(found[0].info.run_id)
    run = client.create_run(experiment_id, tags={**tags, "orch.sweep": name, "mlflow.runName": name})
    client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in list(params.items())[:100]],
                     tags=[RunTag("orch.complete", "yes")])
    client.set_terminated(run.info.run_id)
    return str(run.info.run_id)
