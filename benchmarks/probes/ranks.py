"""Runs inside one container: orch's own trainer as N processes of that container, each the replica of orch's plan
that a container of its own would run (benchmarks/processes.py).

    python3 ranks.py ENVS.json spawn N   start N processes of this file, rank i with ORCH_PROBE_RANK=i; wait for
                                         them all (the first to fail ends the others) and exit non-zero if one failed
    python3 ranks.py ENVS.json           become replica PMI_RANK (under mpiexec) or ORCH_PROBE_RANK: take its
                                         environment from ENVS.json and run the trainer's entry point

ENVS.json holds each replica's environment as orch planned it, its peers' addresses made loopback ones.
"""
import json
import os
import runpy
import subprocess
import sys
import time

envs = json.load(open(sys.argv[1]))
if sys.argv[2:3] == ["spawn"]:
    procs = [subprocess.Popen([sys.executable, __file__, sys.argv[1]], env={**os.environ, "ORCH_PROBE_RANK": str(i)})
             for i in range(int(sys.argv[3]))]
    while any(p.poll() is None for p in procs):  # a rank that fails ends the others, which would wait for it
        if any(p.returncode for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)
    sys.exit(next((p.returncode for p in procs if p.returncode), 0))
os.environ.update(envs[int(os.environ.get("PMI_RANK") or os.environ["ORCH_PROBE_RANK"])])
sys.argv = ["orch_trainer"]
runpy.run_module("orch_trainer", run_name="__main__", alter_sys=True)
