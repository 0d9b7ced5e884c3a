"""The Slurm backend without a cluster: the batch script pinned by a golden file and checked as bash reads it, its
options and their refusals, the tasks' states from squeue's lines and the tasks' own files, and the commands against
a fake (the cluster itself: test_runs_slurm.py)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends import Status
from orchestrator.backends.slurm import SlurmBackend, task_state
from orchestrator.backends.slurm.batch import HOST, job_name, port_base
from orchestrator.backends.slurm.commands import FIELD_SEP, Job, Slurm, parse_jobs
from orchestrator.errors import DockerError, InvalidSpec, SlurmError, SlurmUnreachable
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from tests.test_cli_inprocess import orch
from tests.goldens import golden

PATHS = Paths(runs=Path("/srv/orch/runs"), cache=Path("/srv/orch/cache"))


def slurm_plan(**fields):
    return plan(make_spec(backend="slurm", **{"run_id": "golden", **fields}), PATHS, user="1000:1000")


def test_the_batch_script_matches_golden_and_bash_parses_it():
    p = slurm_plan(workers=3, slurm_nodes=2, slurm_partition="gpu-a", slurm_account="lab1", slurm_time="30",
                   slurm_runtime="docker")
    assert p.artifact == golden("slurm-3-workers.sbatch", p.artifact)
    assert subprocess.run(["bash", "-n"], input=p.artifact, text=True).returncode == 0
    header = re.findall(r"^#SBATCH (\S+)$", p.artifact, re.M)
    assert {"--ntasks=3", "--nodes=2", "--partition=gpu-a", "--account=lab1", "--time=30", "--overcommit",
            "--mem=4096M"} <= set(header), header  # two tasks at most on a node, 2 GiB each
    assert not any(h.startswith("--ntasks-per-node") for h in header)  # 3 tasks do not fill 2 nodes of 2 exactly


def test_charliecloud_runs_the_replicas_as_the_user_who_runs_orch():
    assert slurm_plan().user == f"{os.getuid()}:{os.getgid()}"
    assert slurm_plan(slurm_runtime="docker").user == "1000:1000"


def test_each_task_gets_its_replicas_environment_with_peers_named_by_task_and_a_port_each():
    p = slurm_plan(workers=3, slurm_nodes=2)
    addresses = [f"{HOST.format(i)}:{port_base('golden') + i}" for i in range(3)]
    for i, replica in enumerate(p.replicas):
        assert f"cat > task-{i}.env <<'ORCH_END'\n" in p.artifact
        config = replica.env["TF_CONFIG"]
        assert all(a in config for a in addresses) and f'"index":{i}' in config
    assert "exec srun --kill-on-bad-exit=1 --distribution=block bash task.sh" in p.artifact


def test_tasks_per_node_as_asked_where_they_fill_the_nodes_and_cpus_and_memory_come_from_the_flags():
    p = slurm_plan(workers=4, slurm_nodes=2, slurm_tasks_per_node=2, cpus=1.5, memory_mb=3072)
    header = set(re.findall(r"^#SBATCH (\S+)$", p.artifact, re.M))
    assert {"--ntasks-per-node=2", "--cpus-per-task=2", "--mem=6144M"} <= header
    assert "--overcommit" not in header and "cpus=1.5" in p.artifact


@pytest.mark.parametrize("fields, needle", [
    ({"slurm_time": "soon"}, "is not a Slurm time limit"),
    ({"slurm_partition": "a b"}, "is not a Slurm name"),
    ({"slurm_partition": "x\n#SBATCH --uid=0"}, "is not a Slurm name"),
    ({"workers": 3, "slurm_nodes": 4}, "lower --slurm-nodes"),
    ({"workers": 5, "global_batch": 100, "slurm_nodes": 2, "slurm_tasks_per_node": 2},
     "raise --slurm-tasks-per-node or --slurm-nodes"),
    ({"network": "shared"}, "on Slurm every task uses its node's network"),
    ({"slurm_runtime": "singularity"}, "slurm_runtime"),
])
def test_options_a_cluster_could_not_take_are_refused_naming_the_flag(fields, needle):
    with pytest.raises(InvalidSpec) as exc:
        slurm_plan(**fields)
    assert needle in str(exc.value) or any(needle in str(p) for p in exc.value.problems), exc.value


def test_a_slurm_option_on_another_backend_is_refused_naming_its_backend():
    result = orch("render", "--slurm-nodes", "2")
    assert result.code == 2 and "slurm" in result.err and len(result.err.strip().splitlines()) == 1, result


def test_a_runs_folder_slurm_options_cannot_name_is_refused():
    with pytest.raises(InvalidSpec, match="has a space"):
        plan(make_spec(backend="slurm", run_id="golden"), Paths(runs=Path("/srv/my runs"), cache=Path("/srv/c")))


def test_an_environment_value_with_a_line_break_is_refused():
    with pytest.raises(InvalidSpec, match="line break"):
        slurm_plan(script="/srv/x/train.py", script_args=("a\nORCH_END",))


def test_every_tasks_port_lies_below_the_ephemeral_ports_an_outgoing_connection_may_hold():
    from orchestrator.backends.slurm.batch import PORT_BLOCK

    bases = {port_base(f"run-{i}") for i in range(2000)}
    assert min(bases) >= 20_000 and max(bases) + PORT_BLOCK <= 32_768 and len(bases) > 90


def test_job_names_are_bounded_and_distinct():
    long = "a" * 63
    assert job_name("r1") == "orch-r1" and len(job_name(long)) <= 64 and job_name(long) != job_name(long[:-1] + "b")


# -- squeue and the tasks' files ------------------------------------------------------------------
def _job(state: str = "RUNNING") -> Job:
    return Job(id="42", name="orch-r1", state=state, workdir="/srv/orch/runs/r1/slurm", reason="None")


def test_squeue_lines_parse_and_lines_of_another_shape_are_skipped():
    text = FIELD_SEP.join(["42", "orch-r1", "RUNNING", "/srv/r1/slurm", "None"]) + "\nnoise\n" + \
        FIELD_SEP.join(["x", "orch-r2", "PENDING", "/srv", "None"]) + "\n"
    assert parse_jobs(text) == [Job("42", "orch-r1", "RUNNING", "/srv/r1/slurm", "None")]


def test_a_task_is_pending_then_running_then_ended_as_its_files_say(tmp_path):
    key = ("worker", 1)
    assert task_state(_job("PENDING"), tmp_path, "r1", 1, key).status == Status.PENDING
    assert task_state(_job(), tmp_path, "r1", 1, key).status == Status.PENDING  # not started yet
    (tmp_path / "worker-1.started").write_text("1796218962.2 0\n")
    assert task_state(_job(), tmp_path, "r1", 1, key).status == Status.RUNNING
    (tmp_path / "worker-1.exit").write_text("137 1796218970.5 1\n")
    state = task_state(_job(), tmp_path, "r1", 1, key)
    assert (state.status, state.exit_code, state.oom_killed, state.finished_at) == (Status.FAILED, 137, True, 1796218970.5)
    assert state.id == "42.1" and state.label == "worker-1"


@pytest.mark.parametrize("slurm_state, words", [
    ("TIMEOUT", "time limit (--slurm-time)"), ("NODE_FAIL", "its node failed"), ("CANCELLED", "cancelled"),
    ("OUT_OF_MEMORY", "over the job's memory"),
])
def test_a_task_that_recorded_no_end_fails_in_slurms_words(tmp_path, slurm_state, words):
    state = task_state(_job(slurm_state), tmp_path, "r1", 0, ("worker", 0))
    assert state.status == Status.FAILED and words in state.reason and state.exit_code is None


@pytest.mark.parametrize("content", [b"", b"zero 1 0\n", b"0 " * 200, b"\xff\xfe", b"0 1e309 0\n"])
def test_a_tasks_exit_file_of_any_bytes_is_no_end(tmp_path, content):
    (tmp_path / "worker-0.exit").write_bytes(content)
    assert task_state(_job(), tmp_path, "r1", 0, ("worker", 0)).status == Status.PENDING


def test_an_exit_file_that_is_a_link_is_not_followed(tmp_path):
    (tmp_path / "elsewhere").write_text("0 1 0\n")
    (tmp_path / "worker-0.exit").symlink_to(tmp_path / "elsewhere")
    assert task_state(_job(), tmp_path, "r1", 0, ("worker", 0)).status == Status.PENDING


class FakeSlurm(Slurm):
    def __init__(self, jobs: list[Job]) -> None:
        self.listed, self.calls = jobs, []

    def run(self, argv, what, seconds=30.0, stdin=None):
        self.calls.append(list(argv))
        if argv[:2] == ["scontrol", "ping"]:
            return "Slurmctld(primary) at head is UP\n"
        if argv[0] == "squeue":
            return "".join(FIELD_SEP.join([j.id, j.name, j.state, j.workdir, j.reason]) + "\n" for j in self.listed)
        if argv[0] == "scancel":
            self.listed = [Job(j.id, j.name, "CANCELLED", j.workdir, j.reason) for j in self.listed]
            return ""
        raise AssertionError(argv)


def _job_folder(tmp_path: Path, tasks: str, files: dict[str, str]) -> Path:
    """Run r1's job folder as apply and its tasks leave it: job 42, the tasks' keys, and each task file given."""
    folder = tmp_path / "r1" / "slurm"
    folder.mkdir(parents=True)
    (folder / "job-id").write_text("42\n")
    (folder / "tasks").write_text(tasks)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_states_come_from_the_jobs_folder_and_an_earlier_attempts_job_is_left_out(tmp_path):
    folder = _job_folder(tmp_path, "worker 0\nworker 1\n", {"worker-0.started": "1 0\n"})
    jobs = [Job("41", "orch-r1", "CANCELLED", str(folder), ""), Job("42", "orch-r1", "RUNNING", str(folder), "")]
    states = SlurmBackend(slurm=FakeSlurm(jobs)).states("r1")
    assert [(s.id, s.run, s.label, s.status) for s in states] == [
        ("42.0", "r1", "worker-0", Status.RUNNING), ("42.1", "r1", "worker-1", Status.PENDING)]


def test_cancel_scancels_the_running_job_and_waits_until_it_ended(tmp_path):
    fake = FakeSlurm([Job("42", "orch-r1", "RUNNING", str(tmp_path), "")])
    SlurmBackend(slurm=fake).cancel("r1", None, grace=0)
    assert ["scancel", "--signal=KILL", "--full", "42"] in fake.calls and ["scancel", "42"] in fake.calls


def test_slurms_commands_missing_or_failing_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmUnreachable, match="`sbatch` is not installed here; orch runs Slurm jobs"):
        Slurm().submit("#!/bin/bash\n")
    fake = tmp_path / "scancel"
    fake.write_text("#!/bin/sh\necho 'scancel: error: Kill job error on job id 7: Access/permission denied' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SlurmError, match="Access/permission denied"):
        Slurm().cancel("7")


def test_no_cluster_configuration_is_one_line_saying_where_slurm_looks(tmp_path, monkeypatch):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho 'scontrol: error: fetch_config: DNS SRV lookup failed' >&2\n"
                    "echo 'scontrol: fatal: Could not establish a configuration source' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmUnreachable) as exc:
        Slurm().ping()
    assert "finds no cluster here (no slurm.conf); set SLURM_CONF" in exc.value.message and not exc.value.details


class AccountedSlurm(FakeSlurm):
    """A cluster whose squeue no longer lists the job, and whose accounting (sacct) has it, or is off."""

    def __init__(self, sacct: str) -> None:
        super().__init__([])
        self.sacct = sacct

    def run(self, argv, what, seconds=30.0, stdin=None):
        if argv[0] == "sacct":
            self.calls.append(list(argv))
            if self.sacct == "disabled":
                raise SlurmError("sacct failed: Slurm accounting storage is disabled")
            return self.sacct
        return super().run(argv, what, seconds, stdin)


def test_a_job_squeue_forgot_is_read_from_the_accounting_and_none_without_one(tmp_path):
    folder = _job_folder(tmp_path, "worker 0\n", {"worker-0.exit": "0 1796218970.5 0\n"})
    states = SlurmBackend(slurm=AccountedSlurm(f"42|orch-r1|COMPLETED|{folder}\n")).states("r1")
    assert [(s.label, s.status, s.exit_code) for s in states] == [("worker-0", Status.SUCCEEDED, 0)]
    assert SlurmBackend(slurm=AccountedSlurm("disabled")).states("r1") == []


class ImageEngine:
    """The Docker engine's part images.ensure uses: an image of two files and an environment."""

    def __init__(self) -> None:
        self.exports = self.saves = 0

    def image_id(self, ref):
        return "sha256:" + "ab" * 32

    def image_config(self, ref):
        return {"Env": ["PATH=/opt/venv/bin:/usr/bin", "BAD=a\nb"]}

    def export_image(self, ref, tar):
        import io
        import tarfile

        self.exports += 1
        with tarfile.open(tar, "w") as archive:
            for name, data in (("etc/os-release", b"debian\n"), ("opt/venv/bin/python3", b"#!\n")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            escape = tarfile.TarInfo("../outside")
            escape.size = 0
            archive.addfile(escape, io.BytesIO(b""))

    def save_image(self, ref, tar):
        self.saves += 1
        tar.write_bytes(b"archive")


def test_the_image_reaches_the_shared_cache_once_per_build_for_either_runtime(tmp_path):
    from orchestrator.backends.slurm import images

    engine, said = ImageEngine(), []
    with pytest.raises(DockerError, match="unpacking orch-trainer:x for charliecloud failed"):
        images.ensure(engine, "orch-trainer:x", "charliecloud", tmp_path, ["/orch/run/worker-0"], said.append)
    assert not (tmp_path / "outside").exists() and not list((tmp_path / "slurm-images").glob("*@*"))

    class Contained(ImageEngine):
        def export_image(self, ref, tar):
            super().export_image(ref, tar)
            import tarfile
            kept = tar.with_suffix(".kept")
            with tarfile.open(tar) as src, tarfile.open(kept, "w") as dst:
                for member in src:
                    if not member.name.startswith(".."):
                        dst.addfile(member, src.extractfile(member))
            kept.replace(tar)

    engine = Contained()
    for _ in range(2):
        link = images.ensure(engine, "orch-trainer:x", "charliecloud", tmp_path, ["/orch/run/worker-0"], said.append)
    assert engine.exports == 1 and link.is_symlink() and (link / "orch" / "run" / "worker-0").is_dir()
    assert (link / "ch" / "environment").read_text() == "PATH=/opt/venv/bin:/usr/bin\n"  # a line break is dropped
    assert (link / "etc" / "hosts").is_file() and (link / "etc" / "os-release").read_text() == "debian\n"
    for _ in range(2):
        archive = images.ensure(engine, "orch-trainer:x", "docker", tmp_path, [], said.append)
    assert engine.saves == 1 and archive.read_bytes() == b"archive"
    assert Path(f"{archive}.id").read_text() == "sha256:" + "ab" * 32 + "\n"
