"""Runs inside a trainer container: the latency of one MultiWorkerMirroredStrategy all-reduce alone.

The tensor is the MLP's gradient size (20,175 floats, 80 KB). All-reduces run 50 to a tf.function
call, as orch's training steps do, so Python dispatch is out of the figure.
"""
import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import tensorflow as tf  # noqa: E402

threads = int(os.environ.get("PROBE_THREADS", "0"))
if threads:
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
options = tf.distribute.experimental.CommunicationOptions(
    implementation=tf.distribute.experimental.CommunicationImplementation.RING)
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
grad = tf.ones([20_175])
PER_CALL = 50


@tf.function
def fifty():
    def body(i, acc):
        reduced = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", grad))
        return i + 1, acc + strategy.experimental_local_results(reduced)[0][0]
    return tf.while_loop(lambda i, _: i < PER_CALL, body, (tf.constant(0), tf.constant(0.0)))[1]


fifty()  # trace and connect
calls = int(os.environ.get("PROBE_CALLS", "20"))
started = time.perf_counter()
for _ in range(calls):
    fifty()
seconds = time.perf_counter() - started
print(json.dumps({"ms_per_allreduce": seconds / (calls * PER_CALL) * 1000}), flush=True)
