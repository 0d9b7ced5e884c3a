"""The CLI's verbs as typed functions of keyword arguments (the package's index, orchestrator/api/__init__.py, names
them).

The CLI calls these same functions, so a script and `orch` given the same fields make the same plan::

    import orchestrator as orch

    one = orch.up(workers=1, dataset="synthetic", samples=6000, epochs=2)
    three = orch.up(workers=3, dataset="synthetic", samples=6000, epochs=2)
    print(orch.collect(one.run_id, three.run_id).comparison)

A job's fields are keyword arguments named as the flags and experiment files name them (``batch_size`` for
``--batch-size``, ``memory="2g"`` for ``--memory 2g``), typed by ``SpecFields`` so that mypy refuses a name or a
type the spec does not have; ``help(orchestrator.up)`` lists them with their defaults. Every function raises
``OrchError`` (with the CLI's exit code in ``exit_code``) on bad input or a failed run, and leaves nothing running.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Optional, Sequence, Union

from orchestrator import frameworks
from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import JobSpec, SpecFields, spec_from
from orchestrator.jobspec.signature import with_spec_keywords
from orchestrator.paths import Paths, default_paths
from orchestrator.plan import Plan
from orchestrator.api.collected import Collected, collect
from orchestrator.api.handle import Run, RunResult
from orchestrator.run.rundir import RunInfo

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ExperimentRun", "down", "dry_run", "experiment", "job_spec", "ps", "render", "run", "up"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class ExperimentRun:
    """A finished sweep: its folder, its report, and each cell's record by cell key."""

    folder: Path
    report: Path
    cells: dict[str, Any]

    @property
    def failed(self) -> list[str]:
        """The keys of the cells that did not succeed."""
        return [key for key, cell in self.cells.items() if cell.get("state") != "succeeded"]

    def _rows(self) -> list[dict[str, Any]]:
        return [{"cell": key, **{k: v for k, v in cell.items() if not isinstance(v, (dict, list))}}
                for key, cell in self.cells.items()]

    def _repr_html_(self) -> str:
        from orchestrator.display import block

        return block(f"experiment {self.folder.name}", [("report", str(self.report)),
                                                         ("failed", ", ".join(self.failed) or None)], self._rows())

    def to_pandas(self) -> Any:
        """The cells, one row each, with their scalar fields (state, seconds, accuracy, ...)."""
        from orchestrator.display import dataframe

        return dataframe(self._rows())


@with_spec_keywords
def job_spec(*, requirements: Union[str, Path, None] = None, cwd: Union[str, Path, None] = None,
             **fields: Unpack[SpecFields]) -> JobSpec:
    """A validated spec from the job's fields, as `orch up` makes one from its flags.

    A relative ``script`` is made absolute against ``cwd`` (default: the working folder); ``script_args`` go to
    it; ``requirements`` picks the image `orch build --requirements FILE` made, for the script. A field the job
    would ignore (``epochs`` for a script) is refused. InvalidSpec otherwise, naming each field.
    """
    from orchestrator.run.scripts import absolute

    given: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
    for name in ("script", "source"):
        if given.get(name) is not None:
            given[name] = absolute(str(given[name]), Path(cwd) if cwd is not None else Path.cwd())
    if "script_args" in given:
        given["script_args"] = tuple(given["script_args"])
    if requirements is not None:
        from orchestrator.images.user import image_for, read_requirements

        if given.get("script") is None:
            raise InvalidSpec("requirements: --requirements adds packages for a --script; orch's own trainer "
                              "imports none of them; pass --script, or leave --requirements out")
        if "image" in given:
            raise InvalidSpec("requirements: --requirements picks the image built with your packages; leave out "
                              "--image, or add the packages to your own image")
        framework = frameworks.get(given.get("framework") or frameworks.DEFAULT)
        if not framework.takes_requirements:
            raise InvalidSpec(f"requirements: --framework {framework.name} takes no --requirements; build an image "
                              f"FROM {framework.main_image()} with the packages and pass --image")
        given["image"] = image_for(read_requirements(Path(requirements)), framework.name)
    return spec_from(given)


def _spec(spec: Optional[JobSpec], fields: Mapping[str, Any]) -> JobSpec:
    if spec is not None and fields:
        raise TypeError("pass either a JobSpec or fields, not both")
    return spec if spec is not None else job_spec(**fields)


@with_spec_keywords
def render(spec: Optional[JobSpec] = None, *, paths: Optional[Paths] = None, **fields: Unpack[SpecFields]) -> Plan:
    """The plan `orch up` would apply, started nowhere and checked against nothing but the spec: its replicas, and
    in ``artifact`` the Compose file, stack file or Kubernetes manifests."""
    from orchestrator.run import scripts

    job, paths = _spec(spec, fields), paths or default_paths()
    if job.script is not None:  # what `up` would refuse, render refuses too: the script and its folder
        scripts.check(job, guarded=(paths.runs, paths.results, paths.cache))
    return _plan(job, paths)


def _plan(job: JobSpec, paths: Paths) -> Plan:
    from orchestrator.plan import plan
    from orchestrator.run.runner import container_user

    return plan(job, paths, user=container_user(), host_cpus=os.cpu_count() or 1)


@with_spec_keywords
def dry_run(spec: Optional[JobSpec] = None, *, paths: Optional[Paths] = None, say: Optional[Say] = None,
            **fields: Unpack[SpecFields]) -> Plan:
    """Everything `up` would do but start: the spec, the run id, the script, the disk, the engine, its images and
    the limits it can give are checked, and the plan is returned; nothing is started or written. An engine that
    does not answer costs one line (``say``) instead of the checks that need it."""
    from orchestrator.run.preflight import dry_run as check

    paths = paths or default_paths()
    return check(_plan(_spec(spec, fields), paths), paths=paths, say=say)


@with_spec_keywords
def up(spec: Optional[JobSpec] = None, *, detach: bool = False, paths: Optional[Paths] = None,
       say: Optional[Say] = None, on_event: Optional[Callable[[tuple[str, int], Any], None]] = None,
       stats_interval: Optional[float] = 1.0, **fields: Unpack[SpecFields]) -> RunInfo:
    """Run a job to its end and return its record; ``detach`` returns the record once its replicas have started, as
    `orch up --detach` does (``start`` returns a handle to the run instead).

    ``say`` receives orch's progress lines; ``on_event`` each replica's events. A run that fails raises
    WorkerFailed or JobTimedOut after its record is written and its replicas are removed.
    """
    from orchestrator.run.start import up as run_up

    return run_up(_spec(spec, fields), detach=detach, paths=paths or default_paths(), say=say, on_event=on_event,
                  stats_interval=stats_interval)


@with_spec_keywords
def start(spec: Optional[JobSpec] = None, *, paths: Optional[Paths] = None, say: Optional[Say] = None,
          **fields: Unpack[SpecFields]) -> Run:
    """Start a job and return at once a ``Run`` handle to it (``status``, ``logs``, ``stats``, ``wait``, ``collect``,
    ``cancel``; a context manager that cancels the run on an exception): its supervisor keeps every guard of
    ``up``'s while nothing waits for it."""
    from orchestrator.run.start import up as run_up

    paths = paths or default_paths()
    info = run_up(_spec(spec, fields), detach=True, paths=paths, say=say)
    return Run(info.run_id, paths=paths)


def _function_run(fn: Callable[..., Any], args: Sequence[Any], kwargs: Optional[Mapping[str, Any]],
                  fields: dict[str, Any], paths: Paths, go: Callable[[JobSpec], Any]) -> tuple[JobSpec, Any]:
    """The job of ``fn(*args, **kwargs)`` on every replica, and what ``go`` returned for it; a replica's exception
    raised as FunctionFailed, naming it and carrying its traceback."""
    import shutil
    import tempfile

    from orchestrator.errors import FunctionFailed, WorkerFailed
    from orchestrator.run import function

    for name in ("script", "script_args", "source"):
        if fields.get(name) is not None:
            raise InvalidSpec(f"{name}: run() makes the job's script from the function; use up(script=...) for a file")
    if (fields.get("procs_per_worker") or 1) > 1:
        raise InvalidSpec("procs_per_worker: run() calls the function once per container; use workers=N, or "
                          "up(script=...) for several ranks per container")
    folder = Path(tempfile.mkdtemp(prefix="orch-function-"))
    try:
        entry = function.write_folder(fn, args, kwargs, folder)
        spec = job_spec(**{**fields, "script": str(entry)})
        try:
            return spec, go(spec)
        except WorkerFailed as exc:  # the run is over and its record written: say what the function raised
            raised = function.failure(paths.runs / spec.run_id, spec.replica_keys(), fn.__name__,
                                      first=("worker", exc.worker))
            if raised is None or isinstance(exc, FunctionFailed):
                raise
            raise raised  # its cause is the replica's traceback, which says more than the exit code behind it
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the run has its own copy (runs/<id>/source/)


@with_spec_keywords
def run(fn: Callable[..., Any], *, args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
        paths: Optional[Paths] = None, say: Optional[Say] = None, **fields: Unpack[SpecFields]) -> RunResult:
    """Run ``fn(*args, **kwargs)`` on every replica as the job, and return the run's record with ``returns``, what
    each replica returned (worker-0 first); ``submit`` starts it and returns a handle instead.

    ``fn`` travels as source, as a ``--script`` does (its snapshot is hashed into run.json), so it must stand alone:
    a def, no closure or decorator, its imports inside it. ``args``, ``kwargs`` and the return value travel as JSON
    (an array is returned as its list). Each replica gets what its framework's launcher would give (TF_CONFIG, RANK,
    ...) and its own folder as ``ORCH_OUTPUT_DIR``. If the function raised on a replica, FunctionFailed names it and
    carries its traceback; InvalidSpec (one line) for a function or arguments that cannot travel.
    """
    from orchestrator.run import function

    paths = paths or default_paths()
    spec, info = _function_run(fn, args, kwargs, dict(fields), paths, lambda job: up(job, paths=paths, say=say))
    return RunResult.of(info, function.returns(Path(info.run_dir or paths.runs / spec.run_id), spec.replica_keys(),
                                               fn.__name__))


@with_spec_keywords
def submit(fn: Callable[..., Any], *, args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
           paths: Optional[Paths] = None, say: Optional[Say] = None, **fields: Unpack[SpecFields]) -> Run:
    """Start ``fn(*args, **kwargs)`` on every replica as ``run`` does, and return at once a ``Run`` whose ``wait()``
    gives what ``run`` returns."""
    paths = paths or default_paths()
    _job, handle = _function_run(fn, args, kwargs, dict(fields), paths, lambda job: start(job, paths=paths, say=say))
    assert isinstance(handle, Run)
    return handle


def experiment(file: Union[str, Path], *, quick: bool = False, force: bool = False,
               out: Union[str, Path, None] = None, paths: Optional[Paths] = None, say: Optional[Say] = None,
               on_progress: Optional[Callable[[Any], None]] = None,
               engine: Optional[Literal["docker", "podman"]] = None) -> ExperimentRun:
    """Run every cell of the experiment in ``file`` not already done on this machine (all of them with
    ``force``) and write its report; ``quick`` is the file's small form. ``engine`` runs the Compose cells whose
    file names no engine on Docker or Podman (default: $ORCH_ENGINE, else Docker); a cell measured on the other
    engine is run again."""
    from orchestrator.experiments import file as experiment_file
    from orchestrator.experiments import sweep

    paths = paths or default_paths()
    folder, cells = sweep.run(experiment_file.load(Path(file)), quick=quick, force=force,
                              root=Path(out) if out else paths.results, on_progress=on_progress, say=say,
                              paths=paths, engine=engine)
    return ExperimentRun(folder, folder / "report.md", cells)


def experiment_report(file: Union[str, Path], *, quick: bool = False, out: Union[str, Path, None] = None,
                      paths: Optional[Paths] = None, say: Optional[Say] = None) -> ExperimentRun:
    """Write the report of the experiment in ``file`` again from its recorded cells, running none."""
    from orchestrator.experiments import file as experiment_file
    from orchestrator.experiments import sweep

    paths = paths or default_paths()
    folder, cells = sweep.rewrite_report(experiment_file.load(Path(file)), quick=quick,
                                         root=Path(out) if out else paths.results, say=say, paths=paths)
    return ExperimentRun(folder, folder / "report.md", cells)


def ps(*run_ids: str, paths: Optional[Paths] = None, say: Optional[Say] = None) -> list[RunInfo]:
    """The records of runs (default: every run), read from their folders, with the state their replicas are in
    now; when the engine does not answer, ``say`` is told so once and each run is as its record left it."""
    from orchestrator.run.runs import ps as list_runs

    return list_runs(list(run_ids) or None, paths=paths, say=say)


def down(*run_ids: str, all_runs: bool = False, paths: Optional[Paths] = None) -> list[str]:
    """Remove the replicas and networks of runs (their results stay); return the runs taken down."""
    from orchestrator.run.runs import down as take_down

    return take_down(list(run_ids) or None, all_runs=all_runs, paths=paths)
