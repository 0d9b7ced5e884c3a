"""MNIST with Keras on one container or many: a plain training script, as the seed authors wrote theirs.

It reads TF_CONFIG like any MultiWorkerMirroredStrategy script; orch sets it, and mounts the data:

    orch up --script examples/mnist_keras.py --workers 3 -- --epochs 3

The lines marked `orch:` report epochs and test accuracy to `orch collect`; take them out (or pass
--no-report) and the script still runs, and orch still records its wall time, exit status, logs and
resource use. `--table` prints the result with tabulate, an extra package:

    orch build --requirements examples/requirements.txt
    orch up --script examples/mnist_keras.py --requirements examples/requirements.txt -- --table
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=96, help="the global batch, over every worker")
parser.add_argument("--samples", type=int, default=60_000, help="images used, 80%% to train and 20%% to test")
parser.add_argument("--no-report", action="store_true", help="do not report to orch")
parser.add_argument("--table", action="store_true", help="print the result as a table (needs tabulate)")
args = parser.parse_args()

# TF_CONFIG names the cluster when there is one; without it this is a one-process baseline.
strategy = tf.distribute.MultiWorkerMirroredStrategy() if "TF_CONFIG" in os.environ else tf.distribute.get_strategy()
workers = strategy.num_replicas_in_sync

with np.load(os.path.join(os.environ.get("ORCH_DATA_DIR", "."), "mnist-train-60k.npz")) as data:
    x = data["x"][:args.samples].reshape(-1, 784).astype("float32") / 255.0
    y = data["y"][:args.samples].astype("int64")
cut = int(len(x) * 0.8)
x_train, y_train, x_test, y_test = x[:cut], y[:cut], x[cut:], y[cut:]

# The global batch; under the strategy each worker takes its shard of the data and its share of the batch.
train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(cut, seed=1).batch(args.batch_size)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(784,)),
        tf.keras.layers.Dense(25, activation="relu"),
        tf.keras.layers.Dense(15, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

callbacks = []
if not args.no_report:
    from orch_trainer import report  # orch:

    callbacks.append(report.keras_callback(batch_size=args.batch_size // workers))  # orch:
model.fit(train, epochs=args.epochs, callbacks=callbacks, verbose=2)

# Test accuracy from this worker's own weights, on the whole test set: no collective involved.
own = tf.keras.models.clone_model(model)
own.set_weights(model.get_weights())
accuracy = float((own(x_test, training=False).numpy().argmax(axis=1) == y_test).mean())
if not args.no_report:
    report.result(test_accuracy=accuracy)  # orch:

# The working folder is this worker's own output folder (ORCH_OUTPUT_DIR); orch keeps it with the run.
with open("summary.json", "w") as f:
    json.dump({"workers": workers, "test_accuracy": accuracy}, f)
if args.table:
    from tabulate import tabulate

    print(tabulate([[workers, args.epochs, args.batch_size, f"{accuracy:.4f}"]],
                   headers=["workers", "epochs", "global batch", "test accuracy"]))
print(f"test accuracy {accuracy:.4f}")
