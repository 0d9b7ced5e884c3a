"""Models the trainer can build, and their predictions from one worker's own weights, with no collective."""
from __future__ import annotations

from typing import Any

import numpy as np

MLP_UNITS = (25, 15, 10)
TEXT_EMBEDDING = 32
TEXT_HIDDEN = 32
LOCAL_LOG = "local_batch"  # the only step log of the default steps: this worker's batch size


def _mlp(keras: Any, inputs: Any) -> Any:
    """Seed 000's MLP 784-25-15-10 (ReLU, ReLU, logits)."""
    x = keras.layers.Dense(MLP_UNITS[0], activation="relu")(inputs)
    x = keras.layers.Dense(MLP_UNITS[1], activation="relu")(x)
    return keras.layers.Dense(MLP_UNITS[2], name="logits")(x)


def _cnn(keras: Any, inputs: Any) -> Any:
    """Seed 002's CNN: Conv 32 3x3, ReLU, max-pool 2; Conv 64 3x3, ReLU, max-pool 2; Dense 128, ReLU,
    dropout; Dense 10 (logits). Its images come flat (784) and are seen as 28 x 28 x 1. The convolutions
    keep the size ("same" padding), so 7 x 7 x 64 = 3,136 features reach Dense 128, as the seed's
    Linear(3136, 128) says."""
    x = keras.layers.Reshape((28, 28, 1))(inputs)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    x = keras.layers.Dropout(0.5)(x)
    return keras.layers.Dense(10, name="logits")(x)


def _text(keras: Any, inputs: Any, vocabulary: int) -> Any:
    """A small review-sentiment classifier: a token embedding averaged over the review (padding masked),
    one hidden layer, two logits. Pooling rather than a 1-D convolution: a review's sentiment is mostly
    in which words it uses, and pooling keeps a step cheap, so the all-reduce stays what is measured."""
    x = keras.layers.Embedding(vocabulary, TEXT_EMBEDDING, mask_zero=True)(inputs)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(TEXT_HIDDEN, activation="relu")(x)
    return keras.layers.Dense(2, name="logits")(x)


def architecture(name: str, keras: Any, x_example: np.ndarray, vocabulary: int = 0) -> tuple[Any, Any]:
    """(inputs, logits) of model ``name`` for inputs shaped like ``x_example``'s rows."""
    if name == "text":
        inputs = keras.Input(shape=(x_example.shape[1],), dtype="int32", name="tokens")
        return inputs, _text(keras, inputs, vocabulary)
    inputs = keras.Input(shape=(x_example.shape[1],), name="pixels")
    if name == "cnn":
        return inputs, _cnn(keras, inputs)
    if name == "mlp":
        return inputs, _mlp(keras, inputs)
    raise ValueError(f"unknown model {name!r}")


def build(name: str, keras: Any, tf: Any, x_example: np.ndarray, vocabulary: int = 0, step_logs: bool = False) -> Any:
    """Model ``name`` (mlp, cnn or text), counting the samples each replica trains on.

    ``step_logs``: use Keras' own steps, which return the metrics' results every step.
    """

    class CountingModel(keras.Model):
        """A functional model whose steps keep every figure local: Keras' own steps, plus a sample count.

        Keras' train_step and test_step end with the metrics' result(), and under
        MultiWorkerMirroredStrategy that reads each metric's variables across workers: small
        all-reduces after every step, on top of the gradients' one. On 3 workers on 2 cores they cost
        about 7 ms of a 14 ms step (benchmarks/investigations/step_cost.py). These steps update the same
        metrics and return no logs; the trainer reads the metrics across workers once per epoch instead.
        """

        def train_step(self, data: Any) -> Any:
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

        def test_step(self, data: Any) -> Any:
            if step_logs:
                return super().test_step(data)
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            y_pred = self(x, training=False)
            self.compute_loss(x, y, y_pred, sample_weight)
            self.compiled_metrics.update_state(y, y_pred, sample_weight)
            return {LOCAL_LOG: tf.shape(x)[0]}

    inputs, outputs = architecture(name, keras, x_example, vocabulary)
    model = CountingModel(inputs=inputs, outputs=outputs, name=name)
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


def local_logits(name: str, keras: Any, weights: list[np.ndarray], x: np.ndarray, vocabulary: int = 0,
                 batch: int = 1024) -> np.ndarray:
    """Logits for ``x`` from ``weights`` on this process alone.

    The MLP runs in NumPy. Other models are rebuilt outside any strategy's scope, so the copy's
    variables are plain local ones and the forward pass runs no collective: each worker's figure is its own.
    Images kept as bytes are scaled as they are taken (``data.floats``): the MLP's at once, as it always took
    them, the others' a batch at a time.
    """
    from .data import floats  # in the image's package: the host imports this module for its constants alone

    if name == "mlp":
        return mlp_logits(weights, floats(x))
    inputs, outputs = architecture(name, keras, x, vocabulary)
    copy = keras.Model(inputs=inputs, outputs=outputs)
    copy.set_weights(weights)
    if not len(x):
        return np.zeros((0, copy.output_shape[-1]), dtype=np.float32)
    return np.concatenate([copy(floats(x[i:i + batch]), training=False).numpy() for i in range(0, len(x), batch)])


def local_predictions(name: str, keras: Any, weights: list[np.ndarray], x: np.ndarray,
                      vocabulary: int = 0) -> np.ndarray:
    """Class predictions for ``x`` from ``weights`` on this process alone (``local_logits``)."""
    predictions: np.ndarray = local_logits(name, keras, weights, x, vocabulary).argmax(axis=1)
    return predictions


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    """Mean softmax cross-entropy of integer labels ``y``, computed stably in NumPy."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(y)), y].mean()) if len(y) else 0.0
