"""Models the trainer can build. Each also has a NumPy forward pass for local, strategy-free prediction."""
from __future__ import annotations

import numpy as np

MLP_UNITS = (25, 15, 10)
LOCAL_LOG = "local_batch"  # the only step log of the default steps: this worker's batch size


def build_mlp(keras, tf, step_logs: bool = False):
    """Seed 000's MLP 784-25-15-10 (ReLU, ReLU, logits), counting the samples each replica trains on.

    ``step_logs``: use Keras' own steps, which return the metrics' results every step.
    """

    class CountingModel(keras.Model):
        """A functional model whose steps keep every figure local: Keras' own steps, plus a sample count.

        Keras' train_step and test_step end with the metrics' result(), and under
        MultiWorkerMirroredStrategy that reads each metric's variables across workers: small
        all-reduces after every step, on top of the gradients' one. On 3 workers on 2 cores they cost
        about 7 ms of a 14 ms step (benchmarks/step_cost.py). These steps update the same metrics
        and return no logs; the trainer reads the metrics across workers once per epoch instead.
        """

        def train_step(self, data):
            if step_logs:
                logs = super().train_step(data)
                self.samples_seen.assign_add(tf.cast(tf.shape(data[0])[0], tf.int64))
                return logs
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x, y, y_pred, sample_weight)
            self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
            self.compiled_metrics.update_state(y, y_pred, sample_weight)
            self.samples_seen.assign_add(tf.cast(tf.shape(x)[0], tf.int64))
            return {LOCAL_LOG: tf.shape(x)[0]}  # Keras' step loop needs some output; this one is local

        def test_step(self, data):
            if step_logs:
                return super().test_step(data)
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            y_pred = self(x, training=False)
            self.compute_loss(x, y, y_pred, sample_weight)
            self.compiled_metrics.update_state(y, y_pred, sample_weight)
            return {LOCAL_LOG: tf.shape(x)[0]}

    inputs = keras.Input(shape=(784,), name="pixels")
    x = keras.layers.Dense(MLP_UNITS[0], activation="relu")(inputs)
    x = keras.layers.Dense(MLP_UNITS[1], activation="relu")(x)
    outputs = keras.layers.Dense(MLP_UNITS[2], name="logits")(x)
    model = CountingModel(inputs=inputs, outputs=outputs, name="mlp")
    # ON_READ: each replica keeps its own count, so reading it locally gives this worker's samples.
    # Set past Keras' attribute tracking: the counter is a measurement, not model state, and must stay
    # out of checkpoints (saving an ON_READ variable reduces it across workers).
    object.__setattr__(model, "samples_seen", tf.Variable(
        0,
        dtype=tf.int64,
        trainable=False,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.SUM,
        name="samples_seen",
    ))
    return model


def mlp_logits(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """Forward pass of the MLP from its weights, on this process only (no collectives)."""
    kernels, biases = weights[0::2], weights[1::2]
    for i, (w, b) in enumerate(zip(kernels, biases)):
        x = x @ w + b
        if i < len(kernels) - 1:
            x = np.maximum(x, 0.0)
    return x
