"""What a user of each peer adds to run the tutorials (benchmarks/peers.py): TorchX's TensorFlow component, which
TorchX lacks, and the Kubeflow SDK's driver of a function; written into the peers' folders as they are."""
from __future__ import annotations

# TorchX has no TensorFlow component: a user writes one. This one sets TF_CONFIG from TorchX's own macros (each
# replica's host name is <app id>-<role>-<replica id> on local_docker), and is the whole of what a user adds.
TORCHX_KERAS_COMPONENT = '''\
import json

import torchx.specs as specs


def mwms(*script_args: str, script: str, image: str, j: int = 1, memMB: int = 2048, port: int = 2222,
         env: str = "") -> specs.AppDef:
    """One TensorFlow worker per replica, TF_CONFIG set for MultiWorkerMirroredStrategy."""
    workers = [f"{specs.macros.app_id}-worker-{i}:{port}" for i in range(j)]
    cluster = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}})
    tf_config = cluster.replace('"index": 0', '"index": ' + specs.macros.replica_id)
    extra = dict(kv.split("=", 1) for kv in env.split(",") if kv)
    return specs.AppDef(name="keras", roles=[specs.Role(
        name="worker", image=image, entrypoint="python", args=[script, *script_args], num_replicas=j,
        env={"TF_CONFIG": tf_config, **extra}, resource=specs.Resource(cpu=2, gpu=0, memMB=memMB),
        port_map={"tf": port})])
'''

# The Kubeflow SDK runs a function: the user's function runs the tutorial's file as its launcher would.
KUBEFLOW_DRIVER = '''\
import json, sys
from kubeflow.trainer import ContainerBackendConfig, CustomTrainer, TrainerClient

spec = json.loads(sys.argv[1])


def tutorial(folder, script):
    import os, runpy, sys
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")


client = TrainerClient(backend_config=ContainerBackendConfig())
job = client.train(runtime=client.get_runtime("torch-distributed"),
                   trainer=CustomTrainer(func=tutorial, func_args={"folder": spec["folder"], "script": spec["script"]},
                                         image=spec["image"], num_nodes=spec["workers"], env=spec["env"]))
print("job", job, flush=True)
status = "Complete"
try:
    client.wait_for_job_status(job, timeout=spec["timeout"])
except Exception as exc:
    status = f"{type(exc).__name__}: {exc}"
for line in client.get_job_logs(job):  # every node's, node-0 first
    print(line, end="" if line.endswith("\\n") else "\\n", flush=True)
print("status", status, flush=True)
if status == "Complete":
    client.delete_job(job)
sys.exit(0 if status == "Complete" else 1)
'''
