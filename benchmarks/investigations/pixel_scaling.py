"""How TensorFlow's trainers turn a batch of image bytes into float32: which ways give NumPy's values, and what each
costs a training step, side by side in one container.

Usage: python benchmarks/investigations/pixel_scaling.py [--repeats 15]

orch's trainers keep the images as bytes (uint8) and scale each batch as they take it; the values must be, bit for
bit, NumPy's ``x.astype(np.float32) / 255.0``, which every earlier figure was trained on. In orch's TensorFlow
image, pinned to one core, this checks each way on all 256 pixel values, inside a tf.function and inside a
tf.data map, and times seed 000's MLP step (Adam, 2,000 steps' worth of random MNIST-shaped bytes) with its batch
taken each way, in tf.function calls of 50 steps as MPI's trainer makes them, the ways alternating repeat after
repeat. Prints the table and writes benchmarks/investigations/results/pixel_scaling.json and .md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/investigations
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.safetext import one_line, printable  # noqa: E402

RESULTS = HERE / "results"
IMAGE = "orch-trainer:0.1.0-single"
PROBE = r"""
import json, os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras
repeats = int(sys.argv[1])
every_byte = np.tile(np.arange(256, dtype=np.uint8), 32 * 784 // 256).reshape(32, 784)
want = (every_byte.astype(np.float32) / np.float32(255.0)).view(np.uint32)
table = tf.constant(np.arange(256, dtype=np.uint8).astype(np.float32) / np.float32(255.0))
WAYS = {
    "x / 255.0": lambda x: tf.cast(x, tf.float32) / 255.0,
    "divide_no_nan(x, 255.0)": lambda x: tf.math.divide_no_nan(tf.cast(x, tf.float32), tf.constant(255.0)),
    "a table of the 256 values": lambda x: tf.gather(table, tf.cast(x, tf.int32)),
}
exact = {}
for name, way in WAYS.items():
    graph = tf.function(way)(tf.constant(every_byte)).numpy()
    (piped,) = tf.data.Dataset.from_tensors(every_byte).map(way)
    exact[name] = {"tf.function": len(np.unique(every_byte[graph.view(np.uint32) != want])),
                   "tf.data": len(np.unique(every_byte[piped.numpy().view(np.uint32) != want]))}
rng = np.random.default_rng(0)
x_bytes = rng.integers(0, 256, (38400, 784)).astype(np.uint8)
x_floats, labels = tf.constant(x_bytes.astype(np.float32) / np.float32(255.0)), tf.constant(rng.integers(0, 10, 38400))
x_bytes = tf.constant(x_bytes)
inputs = keras.Input(shape=(784,))
hidden = keras.layers.Dense(15, activation="relu")(keras.layers.Dense(25, activation="relu")(inputs))
net = keras.Model(inputs, keras.layers.Dense(10)(hidden))
optimizer = keras.optimizers.Adam()
optimizer.build(net.trainable_variables)
per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
def step(x, y, batch):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(per_example(y, net(x, training=True))) / batch
    optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
def loop(take):
    @tf.function
    def run(batches):
        for k in tf.range(tf.shape(batches)[0]):
            step(take(batches[k]), tf.gather(labels, batches[k]), tf.cast(tf.shape(batches)[1], tf.float32))
    return run
takes = {"float32 rows (as before)": lambda rows: tf.gather(x_floats, rows),
         **{f"bytes, {name}": (lambda way: lambda rows: way(tf.gather(x_bytes, rows)))(way)
            for name, way in WAYS.items() if name != "x / 255.0"}}
steps = {}
for batch in (32, 96):
    rows = tf.constant(rng.integers(0, 38400, (50, batch)))
    runs = {name: loop(take) for name, take in takes.items()}
    for run in runs.values():
        run(rows)
    seconds = {name: [] for name in runs}
    for repeat in range(repeats):
        for name in (list(runs) if repeat % 2 == 0 else list(runs)[::-1]):
            began = time.perf_counter()
            runs[name](rows)
            seconds[name].append((time.perf_counter() - began) / 50)
    steps[batch] = {name: sorted(s)[len(s) // 2] * 1e6 for name, s in seconds.items()}
print(json.dumps({"exact": exact, "steps_us": steps, "tensorflow": tf.__version__}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        raise SystemExit(f"pixel_scaling: {IMAGE} is absent: `orch build` makes it")
    with tempfile.TemporaryDirectory() as folder:  # a file, not -c: AutoGraph reads the loops' source
        (Path(folder) / "probe.py").write_text(PROBE)
        Path(folder).chmod(0o755)
        (Path(folder) / "probe.py").chmod(0o644)
        done = subprocess.run(["docker", "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp",
                               "--cpuset-cpus", "0", "--cap-drop", "ALL", "-v", f"{folder}:/probe:ro",
                               "--entrypoint", "python3", IMAGE, "/probe/probe.py", str(args.repeats)],
                              capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"pixel_scaling: the probe failed: {one_line(done.stderr.strip()[-300:])}")
    report = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "repeats": args.repeats, "image": IMAGE,
              **json.loads(done.stdout.strip().splitlines()[-1])}
    lines = ["# Image bytes to float32 in TensorFlow: exact or not, and the cost in a step", "",
             f"`python benchmarks/investigations/pixel_scaling.py --repeats {args.repeats}`, {report['when']}, "
             f"{IMAGE} (TensorFlow {report['tensorflow']}) pinned to one core.", "",
             "Pixel values of 256 whose float32 differs from NumPy's `x.astype(np.float32) / 255.0`:", "",
             "| way | in a tf.function | in a tf.data map |", "| --- | ---: | ---: |"]
    for name, counts in report["exact"].items():
        lines.append(f"| `{name}` | {counts['tf.function']} | {counts['tf.data']} |")
    lines += ["", "Seed 000's MLP step with its batch taken each way, microseconds (medians of "
              f"{args.repeats} calls of 50 steps, the ways alternating):", "",
              "| batch taken as | " + " | ".join(f"batch {b}" for b in report["steps_us"]) + " |",
              "| --- |" + " ---: |" * len(report["steps_us"])]
    for name in next(iter(report["steps_us"].values())):
        lines.append(f"| {name} | " + " | ".join(f"{by[name]:.1f}" for by in report["steps_us"].values()) + " |")
    text = "\n".join(lines) + "\n"
    print(printable(text))  # the ways' names come back from the container
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "pixel_scaling.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "pixel_scaling.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
