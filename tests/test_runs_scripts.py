"""Users' own scripts in real containers: with and without orch's report helper, failing, restarted, and with
extra packages from `orch build --requirements`. Each test removes what it started, even on failure."""
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, orch_containers, orch_networks, replica_events, run_orch, start_orch, wait_for

pytestmark = pytest.mark.docker

EXAMPLE = str(ROOT / "examples" / "mnist_keras.py")
SMALL = ["--", "--epochs", "2", "--samples", "6000"]


def test_a_script_with_the_report_helper_gets_epochs_and_test_accuracy(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-script")
    proc = run_orch(["up", "--script", EXAMPLE, "--workers", "2", "--run-id", "live-script", "--format", "json",
                     *SMALL], orch_env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert [w["samples_per_epoch"] for w in info["workers"]] == [[2400, 2400]] * 2  # 80% of 6,000, halved
    accuracies = {w["test_accuracy"] for w in info["workers"]}
    assert len(accuracies) == 1 and accuracies.pop() > 0.5  # each from its own weights, and they agree
    run = tmp_path / "runs" / "live-script"
    assert json.loads((run / "worker-1" / "summary.json").read_text())["workers"] == 2  # its own output folder
    collected = run_orch(["collect", "live-script", "--format", "json", "--out", str(tmp_path / "out")], orch_env)
    assert collected.returncode == 0, collected.stderr
    summary = json.loads(collected.stdout)
    assert summary["epochs_completed"] == 2 and summary["test_accuracy"] > 0.5
    assert orch_containers("live-script") == [] and orch_networks("live-script") == []


def test_a_script_without_orch_code_still_gets_its_exits_wall_time_and_logs(images, orch_env, tmp_path, cleanup):
    cleanup.append("live-script-plain")
    proc = run_orch(["up", "--script", EXAMPLE, "--workers", "2", "--run-id", "live-script-plain", "--format",
                     "json", *SMALL, "--no-report"], orch_env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["state"] == "succeeded" and info["wall_seconds"] > 0
    assert [(w["exit_code"], w["test_accuracy"]) for w in info["workers"]] == [(0, None), (0, None)]
    logs = run_orch(["logs", "live-script-plain"], orch_env)
    assert logs.returncode == 0 and "test accuracy" in logs.stdout
    collected = run_orch(["collect", "live-script-plain", "--format", "json", "--out", str(tmp_path / "out")],
                         orch_env)
    assert collected.returncode == 0, collected.stderr
    summary = json.loads(collected.stdout)
    assert summary["wall_seconds"] > 0 and summary["workers"][0]["stats_samples"] > 0


def test_a_scripts_printed_lines_reach_the_terminal_while_it_runs(images, orch_env, tmp_path, cleanup):
    """`orch up` shows each replica's lines as it prints them, prefixed with the replica: the first tick arrives
    while the script still runs, and the last before orch's table."""
    cleanup.append("live-script-lines")
    (tmp_path / "src").mkdir()
    script = tmp_path / "src" / "ticks.py"
    script.write_text("import os, sys, time\n"
                      "for i in range(1, 5):\n"
                      "    print(f'tick {i} of rank {os.environ[\"ORCH_WORKER_INDEX\"]}', flush=True)\n"
                      "    time.sleep(1.5)\n"
                      "print('ticked \\x1b[2J', file=sys.stderr, flush=True)\n")
    proc = start_orch(["up", "--script", str(script), "--workers", "2", "--run-id", "live-script-lines"], orch_env)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "tick 1 of rank" in line:
                assert proc.poll() is None, "the line came only after the run ended"
                break
        rest_err, out = proc.stderr.read(), proc.stdout.read()
        assert proc.wait(timeout=120) == 0, "".join(seen) + rest_err
    finally:
        proc.kill()
    text = "".join(seen) + rest_err
    for rank in (0, 1):
        for i in range(1, 5):
            assert f"worker-{rank} | tick {i} of rank {rank}" in text
        assert f"worker-{rank} | ticked \\x1b[2J" in text  # a container's bytes reach the terminal inert
    assert "\x1b[2J" not in text and "succeeded" in out
    cleanup.append("live-script-quiet")
    quiet = run_orch(["up", "--script", str(script), "--workers", "1", "--quiet", "--run-id", "live-script-quiet"],
                     orch_env)
    assert quiet.returncode == 0 and "tick" not in quiet.stderr, quiet.stderr
    assert orch_containers("live-script-lines") == [] and orch_networks("live-script-lines") == []
    assert orch_containers("live-script-quiet") == []


def test_a_failing_script_fails_the_run_with_its_exit_code(images, orch_env, cleanup):
    cleanup.append("live-script-bad")
    proc = run_orch(["up", "--script", EXAMPLE, "--workers", "2", "--run-id", "live-script-bad", "--",
                     "--no-such-flag"], orch_env)
    assert proc.returncode == 1
    assert "exited with code 2" in proc.stderr and "unrecognized arguments: --no-such-flag" in proc.stderr
    assert orch_containers("live-script-bad") == [] and orch_networks("live-script-bad") == []


def test_a_killed_script_worker_restarts_the_group(images, orch_env, tmp_path, cleanup):
    run_id = "live-script-restart"
    cleanup.append(run_id)
    proc = start_orch(["up", "--script", EXAMPLE, "--workers", "2", "--max-restarts", "1", "--run-id", run_id, "--",
                       "--epochs", "5", "--samples", "6000"], orch_env)
    try:
        run_dir = tmp_path / "runs" / run_id
        wait_for(lambda: any(e["event"] == "epoch" for e in replica_events(run_dir, 1)), 240, "worker-1's first epoch")
        ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=orch.run={run_id}", "--filter",
                              "label=orch.index=1"], capture_output=True, text=True).stdout.split()
        subprocess.run(["docker", "kill", *ids], check=True, capture_output=True)
        _, stderr = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "worker-1 was killed by signal 9" in stderr and "(restart 1 of 1)" in stderr
    record = json.loads((tmp_path / "runs" / run_id / "run.json").read_text())
    assert record["state"] == "succeeded" and len(record["restarts"]) == 1


def test_extra_packages_come_from_orch_build_requirements(images, orch_env, cleanup):
    requirements = str(ROOT / "examples" / "requirements.txt")
    built = run_orch(["build", "--requirements", requirements, "--format", "json"], orch_env, timeout=900)
    assert built.returncode == 0, built.stderr
    assert any("-user-" in image["tag"] for image in json.loads(built.stdout))
    cleanup.append("live-script-packages")
    proc = run_orch(["up", "--script", EXAMPLE, "--requirements", requirements, "--run-id", "live-script-packages",
                     *SMALL, "--table"], orch_env)
    assert proc.returncode == 0, proc.stderr
    logs = run_orch(["logs", "live-script-packages"], orch_env).stdout
    assert "global batch    test accuracy" in logs  # tabulate's header, from the added package


def test_a_script_in_a_private_folder_runs_from_its_copy_and_sees_nothing_beside_it(images, orch_env, cleanup):
    """As `mktemp -d` makes it: a folder only its owner may enter (root, when orch runs as root, while the
    replicas run as uid 1000). The replicas see a copy of it, with its sibling module, and nothing around it."""
    cleanup.append("live-script-private")
    outer = Path(tempfile.mkdtemp())
    try:
        folder = Path(tempfile.mkdtemp(dir=outer))
        (outer / "secret.txt").write_text("a key\n")
        (folder / "helper.py").write_text("VALUE = 41\n")
        (folder / "train.py").write_text(
            "import os, sys\nimport helper\n"
            "print('sees', sorted(os.listdir('/orch/script')), helper.VALUE + 1)\n"
            "print('secret visible:', os.path.exists(sys.argv[1]) or os.path.exists(os.path.dirname(sys.argv[1])))\n")
        proc = run_orch(["up", "--script", str(folder / "train.py"), "--run-id", "live-script-private", "--dataset",
                         "synthetic", "--format", "json", "--", str(outer / "secret.txt")], orch_env)
        assert proc.returncode == 0, proc.stderr
        info = json.loads(proc.stdout)
        assert info["source"]["files"] == 2 and len(info["source"]["sha256"]) == 64
        logs = run_orch(["logs", "live-script-private"], orch_env)
        assert "sees ['helper.py', 'train.py'] 42" in logs.stdout and "secret visible: False" in logs.stdout
    finally:
        shutil.rmtree(outer)


@pytest.mark.engine_alone  # it bounds how far past the limit the writer gets, which another test's load stretches
@pytest.mark.parametrize("shape", ["one file", "file after file"])
def test_a_writer_at_full_speed_is_stopped_at_the_disk_limit(images, orch_env, tmp_path, cleanup, shape):
    """A replica writes as fast as the disk takes it, into one file (the kernel's file size cap stops it at the limit
    exactly) or into file after file (the guard kills it): under --disk-limit 200 it is stopped and nothing keeps
    running. It starts writing a second in, as a script does once its imports are done: by then the guard holds its
    pidfd (security.md: before that, the stop goes through the engine). How far past the limit the guard's writer gets
    is its reaction time at gigabytes a second, which a loaded machine stretches: the bound here (twice the limit)
    says it was stopped, and benchmarks/disk_limit.py measures the overshoot (docs/security.md's table)."""
    run_id = "live-script-disk-" + shape.replace(" ", "-")
    cleanup.append(run_id)
    (tmp_path / "fill").mkdir()
    (tmp_path / "fill" / "fill.py").write_text(
        "import os, time\ntime.sleep(1)\nblock = os.urandom(1 << 20)\nn = 0\n"
        f"one = {shape == 'one file'}\n"
        "while True:\n"
        "    with open('junk.bin' if one else f'junk-{n}.bin', 'ab') as out:\n"
        "        for _ in range(8):\n            out.write(block)\n"
        "    n += 1\n")
    proc = run_orch(["up", "--script", str(tmp_path / "fill" / "fill.py"), "--workers", "1", "--disk-limit", "200M",
                     "--run-id", run_id], orch_env)
    assert proc.returncode == 1, proc.stderr
    # The replica's own lines (worker-0 | ...) may hold its OSError: File too large; orch's own lines hold no traceback.
    own = [line for line in proc.stderr.splitlines() if not line.startswith("worker-")]
    assert "--disk-limit 200" in proc.stderr and not any("Traceback" in line for line in own), proc.stderr
    record = json.loads((tmp_path / "runs" / run_id / "run.json").read_text())
    assert record["state"] == "failed" and "--disk-limit" in record["error"]
    written = sum(f.stat().st_blocks * 512 for f in (tmp_path / "runs" / run_id).glob("worker-*/junk*.bin"))
    print(f"{shape}: {written / 2**20:.0f} MiB left under --disk-limit 200")
    assert written <= (200 if shape == "one file" else 400) << 20, f"{written / 2**20:.0f} MiB written"
    assert orch_containers(run_id) == [] and orch_networks(run_id) == []
