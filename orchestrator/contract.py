"""The versioned contract shared by the host-side orchestrator and the trainer inside the images.

This file is copied verbatim into the image as ``orch_trainer/contract.py``; it must import nothing
outside the standard library.
"""
from __future__ import annotations

import math
from typing import Any, Optional

CONTRACT_VERSION = 2

# Environment variables the orchestrator sets in every worker container.
ENV_RUN_ID = "ORCH_RUN_ID"
ENV_ROLE = "ORCH_ROLE"  # the replica's role: worker, or chief and ps under ParameterServerStrategy
ENV_WORKER_INDEX = "ORCH_WORKER_INDEX"  # the replica's index within its role
ENV_NUM_WORKERS = "ORCH_NUM_WORKERS"  # the replicas of its role
ENV_JOB = "ORCH_JOB"  # JSON object of the training fields of the job spec (see TRAINING_FIELDS)
ENV_DATA_DIR = "ORCH_DATA_DIR"
IMAGE_WORKDIR = "/tmp"  # the trainer images' working folder (a tmpfs in the locked-down containers)
TRAINER_COMMAND = ("python3", "-m", "orch_trainer")  # the trainer images' entry point
ENV_OUT_DIR = "ORCH_OUT_DIR"
# Cores (cpuset list syntax, e.g. "0" or "0-3") the trainer pins itself to once TensorFlow is imported,
# before TensorFlow sizes its thread pools: the imports of all workers still share every core.
ENV_CPUS = "ORCH_CPUS"

# Where one pod template serves every replica (Kubernetes), each replica derives its own rendezvous at start-up
# (rendezvous.py, shared with the host) from ENV_CLUSTER, a JSON list of [role, [host:port, ...]] pairs in role order,
# and from the completion index Kubernetes gives it in ENV_COMPLETION_INDEX. ENV_ROLE, when set, names the
# pod's role and the index counts within it (one Job per role); unset, the index counts across the roles.
# ENV_RENDEZVOUS names what else the framework needs derived: "tf_config", "rank" or nothing.
ENV_CLUSTER = "ORCH_CLUSTER"
ENV_RENDEZVOUS = "ORCH_RENDEZVOUS"
ENV_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"  # set by Kubernetes in every pod of an Indexed Job
# The variables a replica derives from those, which a shared pod template therefore leaves out.
DERIVED_FROM_INDEX = (ENV_ROLE, ENV_WORKER_INDEX, ENV_NUM_WORKERS, "TF_CONFIG", "RANK")

# How a replica reports: "files" (the default) into its folder under ENV_OUT_DIR; "stdout" as lines on its
# standard output, for engines with no folder shared with orch: each record is STDOUT_PREFIX, the name of the
# file it belongs in, "<part>/<parts>", and a slice of the record's compact JSON (or the heartbeat's time),
# so that no line exceeds STDOUT_LINE_LIMIT bytes (container runtimes split longer lines).
ENV_REPORT = "ORCH_REPORT"
REPORT_FILES = "files"
REPORT_STDOUT = "stdout"
STDOUT_PREFIX = "@orch"
STDOUT_LINE_LIMIT = 8192

# Where the orchestrator mounts things inside a container.
DATA_MOUNT = "/orch/data"
OUT_MOUNT = "/orch/run"
SCRIPT_MOUNT = "/orch/script"  # a user's script's folder (--script), read-only
# The frameworks' own data caches, read-only, where a user's script's loaders look (data/loaders.py): Keras'
# cache folder (its fallback when ~/.keras is not writable; the images' HOME is /tmp) and the torchvision roots
# "../data" and "./data" of a script run from its own folder; ENV_KERAS_MNIST names the file the images'
# loader hook hands Keras for MNIST.
KERAS_CACHE_MOUNT = "/tmp/.keras"
TORCHVISION_ROOT = "data"
ENV_KERAS_MNIST = "ORCH_KERAS_MNIST"
# Where no host folder can be mounted (Swarm, Kubernetes), the caches are in the script's image at
# IMAGE_LOADERS_DIR; ENV_LOADERS_DIR names it, and the images' sitecustomize links those three places to it.
IMAGE_LOADERS_DIR = "/orch-loaders"
ENV_LOADERS_DIR = "ORCH_LOADERS_DIR"
IMAGE_DATA_DIR = "/orch-data"  # where a data image holds the prepared data set (engines with no host folder)
# Set for a user's script: its own output folder (also its working directory) and the job's shared folder.
ENV_OUTPUT_DIR = "ORCH_OUTPUT_DIR"
ENV_SHARED_DIR = "ORCH_SHARED_DIR"

# Spec fields the trainer reads from ENV_JOB.
TRAINING_FIELDS = (
    "framework",
    "strategy",
    "model",
    "dataset",
    "samples",
    "seed",
    "epochs",
    "global_batch",
    "learning_rate",
    "checkpoint_every",
    "threads",
)
# Each framework's own fields follow these in the job: its options' ``training_fields``.

# What a replica sees under ENV_OUT_DIR: its own folder <role>-<index>/ (no other replica's), and SHARED_DIR,
# the one folder every worker of the job shares. Nothing else of the host's run directory is mounted.
# Files a worker writes into its own folder, which the host reads as untrusted input:
EVENTS_FILE = "events.jsonl"  # one JSON object per line, see EVENT_* below
RESULT_FILE = "result.json"
PREDICTIONS_FILE = "predictions.npz"
HEARTBEAT_FILE = "heartbeat"  # rewritten about once a second while the worker trains or validates
SHARED_DIR = "shared"
# Under SHARED_DIR: the framework's checkpoints, so a restarted group resumes, and one marker per worker
# that has written its result, so every worker knows when all have.
CHECKPOINT_DIR = f"{SHARED_DIR}/checkpoints"
DONE_DIR = f"{SHARED_DIR}/done"

# Event kinds; every event has "v", "event", "worker" and "time" (Unix seconds).
# A worker's start, in this order: "importing" its framework, "loading" its data, "connecting" (meeting the group),
# "training" (joined: the train clock starts).
EVENT_START = "start"  # {"stage": "importing" | "loading" | "connecting" | "training"}
EVENT_RESUMED = "resumed"  # {"epoch": first epoch of this attempt, 1-based} after a restore from checkpoint
EVENT_EPOCH = "epoch"  # {"epoch", "epochs", "loss", "accuracy", "val_loss", "val_accuracy", "seconds", "samples"}
EVENT_DONE = "done"  # {"train_seconds", "test_accuracy"}
EVENT_ERROR = "error"  # {"message"}

# The cached MNIST file the host prepares for the "mnist" dataset: 60,000 training images.
MNIST_FILE = "mnist-train-60k.npz"
# "fashion-mnist": all 70,000 Fashion-MNIST images (training then test), x uint8 [N, 784], y uint8 [N].
FASHION_MNIST_FILE = "fashion-mnist-70k.npz"
# "vader-reviews": tokenized review snippets, x int32 [N, L] token ids (0 padding, 1 unknown), y uint8 [N]
# (1 positive), "train" (rows [0, train) are the part the vocabulary was built from) and "vocabulary_size".
VADER_REVIEWS_FILE = "vader-reviews.npz"
DATASET_SIZES = {"mnist": 60_000, "fashion-mnist": 70_000, "vader-reviews": 13_056, "synthetic": 60_000}
# What each data set holds: images (flat 28 x 28, for mlp and cnn) or tokenized text (for text).
DATASET_KINDS = {"mnist": "image", "fashion-mnist": "image", "vader-reviews": "text", "synthetic": "image"}

# Train/validation/test shares of the drawn samples, as in seed 000 (64/16/20).
SPLIT = (0.64, 0.16, 0.20)


def split_sizes(samples: int) -> tuple[int, int, int]:
    """Return (train, validation, test) sizes for ``samples`` drawn samples."""
    train = int(samples * SPLIT[0])
    val = int(samples * SPLIT[1])
    return train, val, samples - train - val


def replica_dir(role: str, index: int) -> str:
    """Name of the directory of replica ``index`` of ``role`` inside the run directory."""
    return f"{role}-{index}"


# Every JSON either side writes is strict (json.dumps(..., allow_nan=False)): a strict parser (jq, JavaScript,
# json.loads with parse_constant) refuses NaN and Infinity. A number that is not finite is written as null, with
# "<name>_invalid" beside it in the same object saying why; in a list, the list's own name carries the reason.
INVALID_SUFFIX = "_invalid"


def finite(payload: Any) -> Any:
    """``payload`` (dicts, lists, tuples and scalars) with every float that is not finite made None, and the reason
    beside it as ``<key>_invalid``: what json.dumps(..., allow_nan=False) then accepts. Returns a new object."""
    return _finite(payload)[0]


def _finite(value: Any) -> tuple[Any, Optional[str]]:
    """(value made finite, the reason if anything in it was not)."""
    if isinstance(value, float):
        return (value, None) if math.isfinite(value) else (None, f"not finite: {value!r}")
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            clean, reason = _finite(item)
            out[key] = clean
            if reason is not None and isinstance(key, str):
                out[key + INVALID_SUFFIX] = reason
        return out, None
    if isinstance(value, (list, tuple)):
        items, first = [], None
        for item in value:
            clean, reason = _finite(item)
            items.append(clean)
            first = first or reason
        return items, first
    return value, None
