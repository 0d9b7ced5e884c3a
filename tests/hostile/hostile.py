"""A hostile worker: what a user's script or another image could do to the host through orch's mounts.

It runs as an orch replica (see tests/test_hostile.py) and attacks every path orch reads or once wrote:
links, FIFOs, a device, endless lines, forged and malformed records, edits of orch's own files, a
planted link in the shared folder, and exit 137 so that orch restarts the group and reads it all again.
It prints what each attempt did, so the test log shows it.
"""
import json
import os
import signal
import sys
import time

run_id = os.environ.get("ORCH_RUN_ID", "")
worker = int(os.environ.get("ORCH_WORKER_INDEX", "0"))
out = os.environ.get("ORCH_OUT_DIR", "/orch/run")
mine = os.path.join(out, f"worker-{worker}")
shared = os.path.join(out, "shared")


def attempt(what, fn):
    try:
        fn()
        print(f"[hostile {worker}] {what}: done", flush=True)
    except OSError as exc:
        print(f"[hostile {worker}] {what}: refused ({exc.strerror})", flush=True)


def replace(name, make):
    path = os.path.join(mine, name)
    if os.path.lexists(path):
        os.unlink(path)
    make(path)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def event(**fields):
    return json.dumps({"v": 2, "time": time.time(), **fields}) + "\n"


# What the replica can see of the run directory: its own folder and the shared one, nothing else.
print(f"[hostile {worker}] sees {sorted(os.listdir(out))}", flush=True)
# orch's own files: not mounted, and the root filesystem is read-only.
for name in ("compose.yml", "run.json", "plan.json", "stats.csv", "run.json.tmp"):
    attempt(f"write /orch/run/{name}", lambda name=name: write(os.path.join(out, name), "services: {x: {privileged: true}}\n"))
attempt("write the image's root filesystem", lambda: write("/etc/orch-was-here", "x"))

if run_id.startswith("hostile-hang"):
    # Never join; make every file orch polls something that blocks a plain open().
    for name in ("events.jsonl", "result.json", "heartbeat"):
        attempt(f"{name} as a FIFO", lambda name=name: replace(name, os.mkfifo))
    time.sleep(3600)

if worker == 0:
    # Links out of the folder: to orch's record, to a device, and where orch once saved logs.
    attempt("events.jsonl -> ../run.json", lambda: replace("events.jsonl", lambda p: os.symlink("../run.json", p)))
    attempt("result.json -> /dev/zero", lambda: replace("result.json", lambda p: os.symlink("/dev/zero", p)))
    attempt("heartbeat -> ../plan.json", lambda: replace("heartbeat", lambda p: os.symlink("../plan.json", p)))
    attempt("container.log -> ../compose.yml", lambda: replace("container.log", lambda p: os.symlink("../compose.yml", p)))
    attempt("predictions.npz -> /dev/zero", lambda: replace("predictions.npz", lambda p: os.symlink("/dev/zero", p)))
    attempt("shared/evil -> ../..", lambda: os.symlink("../..", os.path.join(shared, f"evil-{time.time_ns()}")))
elif worker == 1:
    for name in ("events.jsonl", "result.json", "heartbeat", "predictions.npz"):
        attempt(f"{name} as a FIFO", lambda name=name: replace(name, os.mkfifo))
else:
    # Forged and malformed records, behind a line with no end that orch must not hold in memory.
    def endless(path):
        with open(path, "w") as f:
            chunk = "x" * (1 << 20)
            for _ in range(96):
                f.write(chunk)
            f.write("\n")
            f.write(event(event="start", worker=worker, stage="training"))
            f.write(event(event="start", worker=0, stage="training"))  # claims to be worker 0
            f.write(event(event="done", worker=worker, train_seconds=1.0, test_accuracy=7.0))  # out of range
            f.write(event(event="epoch", worker=worker, epoch=1, loss=float("nan")))
            f.write('{"v": 2, "event": "epoch", "worker": 2, "epoch": ' + "[" * 50000 + "\n")  # deep nesting
            f.write(json.dumps({"v": 99, "event": "epoch"}) + "\n" if run_id.endswith("-v99") else "")
            f.write("z" * (1 << 20))  # and a last line that never ends
    attempt("events.jsonl: a 96 MiB line, forged and malformed events", lambda: replace("events.jsonl", endless))
    attempt("result.json forged", lambda: replace("result.json", lambda p: write(p, json.dumps(
        {"v": 2, "worker": 0, "run_id": "../../../tmp/owned", "test_accuracy": 0.99, "train_seconds": 1.0}))))
    attempt("heartbeat as a directory", lambda: replace("heartbeat", os.mkdir))

sys.stdout.flush()
time.sleep(8)  # long enough for orch to read through the endless line before the restart
os.kill(os.getpid(), signal.SIGKILL)  # exit 137: orch may restart the group, and meets all of the above again
