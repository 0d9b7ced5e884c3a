"""Models the trainer can build. Each also has a NumPy forward pass for local, strategy-free prediction."""
from __future__ import annotations

import numpy as np

MLP_UNITS = (25, 15, 10)


def build_mlp(keras, tf):
    """Seed 000's MLP 784-25-15-10 (ReLU, ReLU, logits), counting the samples each replica trains on."""

    class CountingModel(keras.Model):
        """A functional model whose train_step adds the local batch size to ``samples_seen``."""

        def train_step(self, data):
            logs = super().train_step(data)
            self.samples_seen.assign_add(tf.cast(tf.shape(data[0])[0], tf.int64))
            return logs

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
